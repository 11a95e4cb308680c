"""Parity of machin's public API with Machin 0.3.4's.

Two halves:

* ``python -m tests.compat.parity --refresh REFERENCE_ROOT`` reads the 0.3.4 source with
  :mod:`ast` (nothing of it is imported or run) and writes the inventory of its public names
  and their signatures to ``reference_api.json`` beside this file. The inventory is checked in,
  so the comparison needs no copy of the reference.
* ``python -m tests.compat.parity`` imports every inventoried name from its 0.3.4 module path
  in machin and compares signatures; it prints one line per finding and the counts. The test
  ``test_parity.py`` runs the same comparison and fails on any finding not in the exceptions
  table of ``docs/migrating.rst``.

Public names are a module's ``__all__`` where it has one, otherwise its top-level classes and
functions whose name does not start with ``_``. For classes, ``__init__`` and the public
methods are compared as well.

A machin signature is *compatible* with 0.3.4's when every call that 0.3.4 accepted binds:
each positional parameter is at the same place under the same name, each named parameter is
accepted by name, nothing 0.3.4 left optional is required, ``*args`` / ``**kwargs`` of 0.3.4
are accepted, and literal defaults are equal.
"""

import argparse
import ast
import importlib
import inspect
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
INVENTORY = HERE / "reference_api.json"
MIGRATING = HERE.parent.parent / "docs" / "migrating.rst"

_NO_DEFAULT = "<required>"
_EXPR_DEFAULT = "<expression>"


# --------------------------------------------------------------------------- extraction
def _literal(node):
    try:
        return repr(ast.literal_eval(node))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _EXPR_DEFAULT


def _ast_signature(fn: ast.FunctionDef, drop_first: bool):
    a = fn.args
    params = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        if drop_first and i == 0:
            continue
        kind = "positional_only" if arg in a.posonlyargs else "positional_or_keyword"
        params.append([arg.arg, kind, _NO_DEFAULT if default is None else _literal(default)])
    if a.vararg is not None:
        params.append([a.vararg.arg, "var_positional", _NO_DEFAULT])
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(
            [arg.arg, "keyword_only", _NO_DEFAULT if default is None else _literal(default)]
        )
    if a.kwarg is not None:
        params.append([a.kwarg.arg, "var_keyword", _NO_DEFAULT])
    return params


def _decorators(fn):
    return {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}


def _module_entries(tree: ast.Module):
    defined = {}
    explicit_all = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            explicit_all = list(ast.literal_eval(node.value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined[node.name] = {"kind": "function", "signature": _ast_signature(node, False)}
        elif isinstance(node, ast.ClassDef):
            methods = {}
            for item in node.body:
                if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if item.name.startswith("_") and item.name not in ("__init__", "__call__"):
                    continue
                decorators = _decorators(item)
                if "property" in decorators:
                    methods[item.name] = {"kind": "property"}
                    continue
                drop = "staticmethod" not in decorators
                methods[item.name] = {"kind": "method", "signature": _ast_signature(item, drop)}
            defined[node.name] = {"kind": "class", "methods": methods}
    names = (
        explicit_all if explicit_all is not None else [n for n in defined if not n.startswith("_")]
    )
    return {name: defined.get(name, {"kind": "name"}) for name in names}


def extract(reference_root: Path) -> dict:
    """Inventory of 0.3.4's public API: {module path: {name: entry}}."""
    package = reference_root / "machin"
    inventory = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(reference_root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        if any(p.startswith("_") for p in parts):
            continue
        entries = _module_entries(ast.parse(path.read_text(), str(path)))
        if entries:
            inventory[module] = entries
    return inventory


# --------------------------------------------------------------------------- comparison
def _machin_params(obj, drop_first: bool):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if drop_first and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return params


def _default_repr(p):
    if p.default is inspect.Parameter.empty:
        return _NO_DEFAULT
    try:
        return repr(ast.literal_eval(repr(p.default)))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _EXPR_DEFAULT


def compare_signature(reference, params):
    """Problems (strings) that stop a 0.3.4 call from binding to ``params``."""
    problems = []
    kinds = {p.kind for p in params}
    has_var_pos = inspect.Parameter.VAR_POSITIONAL in kinds
    has_var_kw = inspect.Parameter.VAR_KEYWORD in kinds
    positional = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    by_name = {p.name: p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    ref_names = set()
    ref_positional = [r for r in reference if r[1] in ("positional_only", "positional_or_keyword")]
    for i, (name, kind, _default) in enumerate(ref_positional):
        ref_names.add(name)
        if i < len(positional):
            # a 0.3.4 name starting with "_" was a placeholder, only ever passed by position
            if (
                positional[i].name != name
                and kind == "positional_or_keyword"
                and not name.startswith("_")
            ):
                problems.append(
                    f"positional argument {i + 1} is {positional[i].name!r}, 0.3.4 had {name!r}"
                )
        elif not has_var_pos:
            problems.append(f"no positional argument {i + 1} ({name!r})")
    for name, kind, default in reference:
        if kind in ("var_positional", "var_keyword"):
            if kind == "var_positional" and not has_var_pos:
                problems.append(f"extra positional arguments (*{name}) are refused")
            if kind == "var_keyword" and not has_var_kw:
                problems.append(f"extra keyword arguments (**{name}) are refused")
            continue
        ref_names.add(name)
        mine = by_name.get(name)
        if mine is None:
            if not has_var_kw and kind != "positional_only" and not name.startswith("_"):
                problems.append(f"argument {name!r} is not accepted by name")
            continue
        if default != _NO_DEFAULT:
            if mine.default is inspect.Parameter.empty:
                problems.append(f"argument {name!r} is required, 0.3.4 defaulted it to {default}")
            elif _EXPR_DEFAULT not in (default, _default_repr(mine)) and default != _default_repr(
                mine
            ):
                problems.append(
                    f"default of {name!r} is {_default_repr(mine)}, 0.3.4 had {default}"
                )
    required_by_position = {i for i, r in enumerate(ref_positional) if r[2] == _NO_DEFAULT}
    for p in params:
        if (
            p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and p.default is inspect.Parameter.empty
            and p.name not in ref_names
            and not (p in positional and positional.index(p) in required_by_position)
        ):
            problems.append(f"new required argument {p.name!r}")
    return problems


def _resolve(module_path: str, name: str):
    module = importlib.import_module(module_path)
    if not hasattr(module, name):
        # a submodule listed in a package's __all__
        return importlib.import_module(f"{module_path}.{name}")
    return getattr(module, name)


def check(inventory: dict):
    """Yield ``(qualified name, problem)``; the problem is None for a compatible name."""
    for module_path, entries in inventory.items():
        for name, entry in entries.items():
            qualified = f"{module_path}.{name}"
            try:
                obj = _resolve(module_path, name)
            except (ImportError, AttributeError) as e:
                yield qualified, f"missing ({type(e).__name__}: {e})"
                continue
            if entry["kind"] == "function":
                params = _machin_params(obj, False)
                problems = (
                    ["not a callable with a signature"]
                    if params is None
                    else compare_signature(entry["signature"], params)
                )
                yield qualified, "; ".join(problems) or None
            elif entry["kind"] == "class":
                if not inspect.isclass(obj):
                    yield qualified, "not a class"
                    continue
                yield qualified, None
                for method, m_entry in entry["methods"].items():
                    m_qualified = f"{qualified}.{method}"
                    raw = inspect.getattr_static(obj, method, None)
                    if raw is None:
                        yield m_qualified, "missing"
                        continue
                    if m_entry["kind"] == "property":
                        yield m_qualified, None
                        continue
                    static = isinstance(raw, staticmethod)
                    if (
                        method == "__init__"
                    ):  # what a call of the class binds to (an algorithm shows its options there)
                        params = _machin_params(obj, False)
                    else:
                        params = _machin_params(
                            getattr(obj, method),
                            not static and not inspect.ismethod(getattr(obj, method)),
                        )
                    if params is None:
                        yield m_qualified, "not a callable with a signature"
                        continue
                    problems = compare_signature(m_entry["signature"], params)
                    yield m_qualified, "; ".join(problems) or None
            else:
                yield qualified, None


def documented_exceptions(path: Path = MIGRATING) -> dict:
    """The exceptions table of the migration page: {qualified name: reason}."""
    table = {}
    if not path.exists():
        return table
    text = path.read_text()
    start = text.find(".. parity-exceptions-start")
    end = text.find(".. parity-exceptions-end")
    if start < 0 or end < 0:
        return table
    rows = re.findall(
        r"^\s*\* - ``([\w.]+)``\s*\n\s*- (.+?)(?=^\s*\* - |\Z)", text[start:end], re.M | re.S
    )
    for name, reason in rows:
        table[name] = " ".join(reason.split())
    return table


def report(inventory: dict, exceptions: dict):
    results = list(check(inventory))
    compatible = [q for q, p in results if p is None]
    excepted = [(q, p) for q, p in results if p is not None and q in exceptions]
    failing = [(q, p) for q, p in results if p is not None and q not in exceptions]
    return results, compatible, excepted, failing


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--refresh",
        metavar="REFERENCE_ROOT",
        type=Path,
        help="re-read the 0.3.4 source at this root and rewrite the inventory",
    )
    args = parser.parse_args(argv)
    if args.refresh is not None:
        inventory = extract(args.refresh)
        INVENTORY.write_text(json.dumps(inventory, indent=1, sort_keys=True) + "\n")
        print(
            f"wrote {INVENTORY} ({sum(map(len, inventory.values()))} names in {len(inventory)} modules)"
        )
        return 0
    inventory = json.loads(INVENTORY.read_text())
    results, compatible, excepted, failing = report(inventory, documented_exceptions())
    for q, p in excepted:
        print(f"EXCEPTED {q}: {p}")
    for q, p in failing:
        print(f"FAIL     {q}: {p}")
    print(
        f"{len(results)} names and methods of 0.3.4: {len(compatible)} compatible, "
        f"{len(excepted)} excepted (docs/migrating.rst), {len(failing)} incompatible"
    )
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())

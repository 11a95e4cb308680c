"""Layering of ``machin.frame``: helpers live below the code that uses them, and imports form no cycle.

The import graph is read from the source with :mod:`ast` (nothing is imported), so it
also sees imports written inside functions, which run later but still tie the modules
together. An edge ``a -> b`` means module ``a`` has an ``import`` statement anywhere
in its file that loads module ``b``; ``from package import name`` loads
``package.name`` when that is a module, else ``package``. Parent packages, which
Python imports implicitly, are not edges: a package's ``__init__`` importing its own
submodules would otherwise make every package a cycle. Nor are imports under
``if TYPE_CHECKING:``, which never run: a callback may name the trainer that calls it
in its annotations without importing it.

Rules checked:

* ``machin.frame.buffers`` never imports ``machin.frame.algorithms``;
* ``machin.frame.returns``, ``machin.frame.transition`` and ``machin.frame.noise``
  never import ``machin.frame.algorithms`` (nor the buffers, for returns and
  transition: they work on transitions handed to them);
* the modules of ``machin.frame`` form no import cycle.

Run as a script (``python tests/test_layering.py``) to print the graph's summary.
"""

import ast
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "machin"


def module_files(package_dir: Path = PACKAGE) -> Dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file of the package."""
    files = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _resolve(module: str, is_package: bool, level: int, target: str) -> str:
    """Absolute name of ``target`` imported with ``level`` leading dots from ``module``."""
    if level == 0:
        return target
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _type_checking_only(tree: ast.AST) -> Set[int]:
    """Ids of the nodes inside ``if TYPE_CHECKING:`` blocks (imports for annotations only)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def imports_of(module: str, path: Path, known: Set[str]) -> Set[str]:
    """The modules of ``known`` that ``module`` imports anywhere in its source (that runs)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    skipped = _type_checking_only(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, is_package, node.level, node.module or "")
            names = []
            for alias in node.names:
                child = f"{source}.{alias.name}"
                names.append(child if child in known else source)
        else:
            continue
        for name in names:
            # ``import a.b.c`` loads a.b.c; keep the longest prefix that is one of ours.
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def import_graph(prefix: str = "machin") -> Dict[str, Set[str]]:
    """``{module: modules it imports}`` restricted to modules under ``prefix``."""
    files = module_files()
    known = set(files)
    graph = {}
    for module, path in files.items():
        if module == prefix or module.startswith(prefix + "."):
            graph[module] = {
                m
                for m in imports_of(module, path, known)
                if m == prefix or m.startswith(prefix + ".")
            }
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    components = []

    def visit(start: str) -> None:
        # Iterative depth-first search: (node, iterator over its successors).
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return components


def violations(graph: Dict[str, Set[str]], lower: str, upper: str) -> Iterator[str]:
    """``"a -> b"`` for every module ``a`` under ``lower`` that imports a module ``b`` under ``upper``."""

    def under(module: str, package: str) -> bool:
        return module == package or module.startswith(package + ".")

    for module in sorted(graph):
        if under(module, lower):
            for imported in sorted(graph[module]):
                if under(imported, upper):
                    yield f"{module} -> {imported}"


def frame_graph() -> Dict[str, Set[str]]:
    """The import graph of ``machin.frame`` without the ``machin.frame`` package module itself.

    Its ``__init__`` imports every child for the user's convenience; a child never
    needs it, so it is left out (``machin.frame.algorithms`` imports its children lazily,
    and the other subpackages are kept: their ``__init__`` is what ``from ..buffers
    import Buffer`` runs).
    """
    graph = import_graph("machin.frame")
    return {m: deps - {"machin.frame"} for m, deps in graph.items() if m != "machin.frame"}


ALGORITHMS = "machin.frame.algorithms"
RULES = [
    ("machin.frame.buffers", ALGORITHMS),
    ("machin.frame.returns", ALGORITHMS),
    ("machin.frame.returns", "machin.frame.buffers"),
    ("machin.frame.transition", ALGORITHMS),
    ("machin.frame.transition", "machin.frame.buffers"),
    ("machin.frame.noise", ALGORITHMS),
]


def test_buffers_never_import_algorithms():
    found = list(violations(import_graph(), "machin.frame.buffers", ALGORITHMS))
    assert not found, "buffers must not import algorithms:\n" + "\n".join(found)


def test_low_level_modules_never_import_upwards():
    graph = import_graph()
    found = [v for lower, upper in RULES for v in violations(graph, lower, upper)]
    assert not found, "\n".join(found)


def test_the_returns_module_is_below_buffers_and_algorithms():
    graph = import_graph()
    assert "machin.frame.returns" in graph
    users = {m for m, deps in graph.items() if "machin.frame.returns" in deps}
    assert "machin.frame.buffers.sequence_buffer" in users
    assert "machin.frame.algorithms.replay" in users


def test_no_import_cycle_in_the_frame_package():
    found = cycles(frame_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_checker_sees_cycles_and_function_level_imports(tmp_path):
    """The checker itself: a cycle closed by an import inside a function is found."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def f():\n    from .a import x\n    return x\n")
    files = module_files(package)
    known = set(files)
    graph = {m: imports_of(m, p, known) for m, p in files.items()}
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]


if __name__ == "__main__":
    full = import_graph()
    frame = frame_graph()
    print(
        f"modules under machin: {len(full)}; under machin.frame: {len(frame)}; "
        f"edges in machin.frame: {sum(len(d) for d in frame.values())}"
    )
    print("cycles in machin.frame:", cycles(frame) or "none")
    print(
        "cycles in machin (whole package, package __init__ re-exports included):",
        cycles(full) or "none",
    )
    bad = [v for lower, upper in RULES for v in violations(full, lower, upper)]
    print("layering violations:", bad or "none")
    sys.exit(1 if bad or cycles(frame) else 0)

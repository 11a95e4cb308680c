"""Every public class, function and method of machin has a docstring that names its parameters.

A parameter counts as documented when its name appears as a word in the docstring of
the object (for a class: the class docstring and ``__init__``'s), or in the docstring
of the same member of a base class, so a subclass may document only what differs.
"""

import importlib
import inspect
import pkgutil
import re
from typing import Any, Iterator, List, Tuple

import machin

SKIPPED_KINDS = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def public_modules() -> Iterator[Any]:
    yield machin
    for info in pkgutil.walk_packages(machin.__path__, "machin."):
        if not any(part.startswith("_") for part in info.name.split(".")[1:]):
            yield importlib.import_module(info.name)


def parameters(function: Any) -> List[str]:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return []
    return [name for name, p in signature.parameters.items()
            if name not in ("self", "cls") and not name.startswith("_") and p.kind not in SKIPPED_KINDS]


def documented(name: str, *docs: str) -> bool:
    return any(doc and re.search(rf"\b{re.escape(name)}\b", doc) for doc in docs)


def member_docs(cls: type, member: str) -> List[str]:
    """Docstrings of ``member`` along the MRO (and of the classes themselves for ``__init__``)."""
    docs = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        value = klass.__dict__.get(member)
        if value is not None:
            docs.append(inspect.getdoc(value.__func__ if isinstance(value, (staticmethod, classmethod)) else value))
        if member == "__init__":
            docs.append(klass.__doc__)
    return docs


def offenders() -> List[Tuple[str, List[str]]]:
    found = []
    for module in public_modules():
        if not module.__doc__:
            found.append((module.__name__, ["<module docstring>"]))
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                missing = [p for p in parameters(obj) if not documented(p, obj.__doc__)]
                if not obj.__doc__:
                    missing.insert(0, "<docstring>")
                if missing:
                    found.append((f"{module.__name__}.{name}", missing))
            elif inspect.isclass(obj):
                found.extend(class_offenders(module.__name__, obj))
    return found


def class_offenders(prefix: str, cls: type) -> List[Tuple[str, List[str]]]:
    found = []
    qualified = f"{prefix}.{cls.__name__}"
    if not cls.__doc__:
        found.append((qualified, ["<docstring>"]))
    if "__init__" in cls.__dict__:
        docs = member_docs(cls, "__init__")
        missing = [p for p in parameters(cls.__dict__["__init__"]) if not documented(p, *docs)]
        if missing:
            found.append((qualified, missing))
    for member, value in cls.__dict__.items():
        if member.startswith("_"):
            continue
        function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if not inspect.isfunction(function):
            continue
        docs = member_docs(cls, member)
        missing = [p for p in parameters(function) if not documented(p, *docs)]
        if not any(docs):
            missing.insert(0, "<docstring>")
        if missing:
            found.append((f"{qualified}.{member}", missing))
    return found


def test_every_public_object_documents_its_parameters():
    found = offenders()
    report = "\n".join(f"  {name}: {', '.join(missing)}" for name, missing in found)
    assert not found, f"{len(found)} public objects lack a docstring or parameter descriptions:\n{report}"

"""Every public class, function and method of machin has a docstring that names its parameters.

What is checked: every module of the ``machin`` package whose dotted name has no part
starting with ``_``, every class and function such a module defines (its
``__module__`` is the module), and every function, staticmethod and classmethod such a
class defines whose name does not start with ``_``.

The rule: the object needs a docstring (a method without one inherits its parent's,
which counts), and each of its parameters (except ``self``/``cls``, ``*args``/
``**kwargs`` and names starting with ``_``) must appear as a whole word in the docs
that describe it. Those docs are:

* the object's own docstring; for a class, the class docstring and its ``__init__``'s;
* the docs of the same member (for a class: the class and ``__init__`` docs) of a
  class in the MRO, when an accepted docstring names that class as a word, e.g.
  "Takes the arguments of :class:`~machin.frame.algorithms.ddpg.DDPG`" or "See
  :meth:`Buffer.sample_batch`". Accepted docs may name a further base in turn;
* for a method that has no docstring of its own, the one it inherits.

So a subclass documents only what it adds, as long as it points the reader to where the
rest is described.
"""

import importlib
import inspect
import pkgutil
import re
from typing import Any, Iterator, List, Optional, Tuple

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
    return [
        name
        for name, p in signature.parameters.items()
        if name not in ("self", "cls") and not name.startswith("_") and p.kind not in SKIPPED_KINDS
    ]


def documented(name: str, *docs: Optional[str]) -> bool:
    return any(doc and re.search(rf"\b{re.escape(name)}\b", doc) for doc in docs)


def unwrap(value: Any) -> Any:
    return value.__func__ if isinstance(value, (staticmethod, classmethod)) else value


def own_docs(klass: type, member: str) -> List[str]:
    """The docstrings ``klass`` itself writes for ``member`` (class and ``__init__`` docs for ``__init__``)."""
    docs = [klass.__doc__] if member == "__init__" else []
    if member in klass.__dict__:
        docs.append(unwrap(klass.__dict__[member]).__doc__)
    return [doc for doc in docs if doc]


def member_docs(cls: type, member: str) -> List[str]:
    """The docs describing ``member`` of ``cls``: its own, plus those of the bases they name."""
    accepted = own_docs(cls, member)
    for base in cls.__mro__[1:]:
        if base is object:
            continue
        docs = own_docs(base, member)
        if docs and (not accepted or documented(base.__name__, *accepted)):
            accepted.extend(docs)
    return accepted


def missing_parameters(function: Any, docs: List[str]) -> List[str]:
    return [p for p in parameters(function) if not documented(p, *docs)]


def class_offenders(prefix: str, cls: type) -> List[Tuple[str, List[str]]]:
    found = []
    qualified = f"{prefix}.{cls.__name__}"
    if not cls.__doc__:
        found.append((qualified, ["<docstring>"]))
    if "__init__" in cls.__dict__:
        missing = missing_parameters(cls.__dict__["__init__"], member_docs(cls, "__init__"))
        if missing:
            found.append((qualified, missing))
    for member, value in cls.__dict__.items():
        function = unwrap(value)
        if member.startswith("_") or not inspect.isfunction(function):
            continue
        docs = member_docs(cls, member)
        missing = (["<docstring>"] if not docs else []) + missing_parameters(function, docs)
        if missing:
            found.append((f"{qualified}.{member}", missing))
    return found


def offenders() -> List[Tuple[str, List[str]]]:
    found = []
    for module in public_modules():
        if not module.__doc__:
            found.append((module.__name__, ["<module docstring>"]))
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                docs = [obj.__doc__] if obj.__doc__ else []
                missing = (["<docstring>"] if not docs else []) + missing_parameters(obj, docs)
                if missing:
                    found.append((f"{module.__name__}.{name}", missing))
            elif inspect.isclass(obj):
                found.extend(class_offenders(module.__name__, obj))
    return found


def test_every_public_object_documents_its_parameters():
    found = offenders()
    report = "\n".join(f"  {name}: {', '.join(missing)}" for name, missing in found)
    assert not found, (
        f"{len(found)} public objects lack a docstring or parameter descriptions:\n{report}"
    )

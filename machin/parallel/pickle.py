"""Serialization for everything that crosses a process boundary in :mod:`machin.parallel`.

It is built on `dill <https://github.com/uqfoundation/dill>`_, which can pickle
lambdas, local functions and closures, and adds the choice of how tensors travel:

* ``copy_tensor=True``: the tensor data is written into the pickle, so the
  receiver gets an independent copy.
* ``copy_tensor=False``: tensors are passed by reference through the reductions
  of :mod:`torch.multiprocessing`. A CPU tensor is moved into shared memory (in
  place, if it is not there already) and only a handle travels, so writes on
  either side are seen by both. CUDA tensors travel as CUDA IPC handles. Such a
  pickle is only meaningful to another process on the same machine.

CPU tensors are shared the way torch's ``"file_system"`` sharing strategy does it,
whatever strategy is set globally: the handle is the name of a shared-memory file,
so the receiver can unpickle it after the sender has exited (Machin 0.3.4 switched
the whole process to that strategy when imported; machin leaves the global setting
alone). The files are reference counted and watched by torch's
``torch_shm_manager`` helper process, which removes any that remain once every
process using them has exited, so nothing is left in ``/dev/shm``. A tensor that
is already in shared memory under torch's default ``"file_descriptor"`` strategy
(``share_memory_()`` before any sending) keeps travelling as a file descriptor, so
that other processes that have it mapped keep seeing the same memory; its sender
must then be alive when the receiver unpickles. Call
``torch.multiprocessing.set_sharing_strategy("file_system")`` before sharing such
tensors to lift that restriction too.
"""

import contextlib
import copyreg
import importlib
import io
import sys
from multiprocessing.reduction import ForkingPickler
from types import FunctionType, ModuleType
from typing import Any, Callable, Dict, List, Set, Tuple

import dill
import torch.multiprocessing  # noqa: F401  (registers torch's reductions with ForkingPickler)
from dill._dill import _locate_function
from torch.multiprocessing import reductions as torch_reductions

from ..utils.torch_internals import share_by_filename, shared_by_descriptor

__all__ = ["Pickler", "dumps", "loads", "mark_static_module"]

_STATIC_MODULES: Set[str] = set()


def _reduce_storage_by_name(storage: Any) -> Tuple[Callable, Tuple[Any, ...]]:
    """Reduce a CPU storage to the name of a shared-memory file (torch's "file_system" path).

    CUDA and meta storages, and CPU storages already shared through a file
    descriptor, are left to torch's own reduction.
    """
    if storage.device.type != "cpu" or shared_by_descriptor(storage):
        return torch_reductions.reduce_storage(storage)
    manager, handle, size = share_by_filename(storage)  # with one reference for the receiver
    torch_reductions.shared_cache[handle] = torch_reductions.StorageWeakRef(storage)
    return torch_reductions.rebuild_storage_filename, (type(storage), manager, handle, size)


def _reducer_tables() -> Tuple[Dict[type, Callable], Dict[type, Callable]]:
    """Split ForkingPickler's extra reducers into (generic ones, torch sharing ones).

    In the sharing ones, CPU storages are reduced by :func:`_reduce_storage_by_name`.
    """
    generic, sharing = {}, {}
    for cls, reducer in ForkingPickler._extra_reducers.items():
        is_torch = getattr(reducer, "__module__", "") == "torch.multiprocessing.reductions"
        if reducer is torch_reductions.reduce_storage:
            reducer = _reduce_storage_by_name
        (sharing if is_torch else generic)[cls] = reducer
    return generic, sharing


class Pickler(dill.Pickler):
    """A dill pickler that can pass tensors by reference.

    ``dispatch`` (the per-type save functions) is a class attribute shared by all
    instances, as in dill. ``dispatch_table`` (copyreg-style reducers) belongs to
    each instance; it always holds the reducers multiprocessing uses for pipes and
    sockets, and with ``copy_tensor=False`` also the reducers of
    :mod:`torch.multiprocessing` for tensors, storages and CUDA events.

    Modules marked with :func:`mark_static_module` are saved as a reference to
    their name.

    Args:
        file: A binary file-like object with a ``write`` method.
        recurse: Save only the globals a function really refers to (needed for
            lambdas and local functions whose module globals are not picklable).
        copy_tensor: ``True`` writes tensor data into the pickle; ``False``
            (the default here) shares tensors by reference, CPU tensors as named
            shared-memory files; see the module notes.
    """

    def __init__(self, file: Any, recurse: bool = False, copy_tensor: bool = False):
        super().__init__(file, recurse=recurse)
        generic, sharing = _reducer_tables()
        table = copyreg.dispatch_table.copy()
        table.update(generic)
        if not copy_tensor:
            table.update(sharing)
        self.dispatch_table = table
        self._patched_classes: List[type] = []

    def dump(self, obj: Any) -> None:
        """Write the pickle of ``obj``.

        Args:
            obj: The object to pickle.
        """
        try:
            super().dump(obj)
        finally:
            for cls in self._patched_classes:
                with contextlib.suppress(AttributeError, TypeError):
                    delattr(cls, "__orig_bases__")
            self._patched_classes.clear()

    def reducer_override(self, obj: Any) -> Any:
        """Save static modules, and classes and functions found in an imported module, by name.

        dill looks a class up through the attributes of its parent package
        (``torch.optim`` for ``torch.optim.adam.Adam``); packages that delete their
        submodule attributes (torch 2.13's ``torch.optim`` does) make that fail, and
        dill then pickles the class by value, which breaks on C handles. Looking the
        module up in ``sys.modules`` instead finds it. Everything else keeps the
        usual rules.

        Args:
            obj: The object being pickled.
        """
        if isinstance(obj, ModuleType):
            if obj.__name__ in _STATIC_MODULES:
                return importlib.import_module, (obj.__name__,)
        elif (
            isinstance(obj, (type, FunctionType))
            and not _locate_function(obj, self)
            and _importable(obj)
        ):
            return _load_global, (obj.__module__, obj.__qualname__)
        elif (
            isinstance(obj, type)
            and "__orig_bases__" not in obj.__dict__
            and hasattr(obj, "__orig_bases__")
        ):
            # A class saved by value (defined in __main__, say) that inherits
            # ``__orig_bases__`` from a generic base (gymnasium.Env derives from
            # Generic[...]): dill would rebuild it from its base's original bases,
            # dropping the real base class. For the time of this dump, the class's own
            # bases are given as its original bases.
            with contextlib.suppress(AttributeError, TypeError):
                type.__setattr__(obj, "__orig_bases__", obj.__bases__)
                self._patched_classes.append(obj)
        return NotImplemented


def _importable(obj: Any) -> bool:
    """Whether ``obj`` is reachable as ``<its module>.<its qualified name>`` in ``sys.modules``."""
    module = sys.modules.get(getattr(obj, "__module__", None) or "__main__")
    if module is None or module.__name__ == "__main__" or "<locals>" in obj.__qualname__:
        return False
    try:
        return _load_global(module.__name__, obj.__qualname__) is obj
    except AttributeError:
        return False


def _load_global(module: str, qualname: str) -> Any:
    """Import ``module`` and return its attribute ``qualname`` (dotted for nested classes)."""
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def dumps(obj: Any, recurse: bool = False, copy_tensor: bool = True) -> bytes:
    """Serialize ``obj`` into bytes with :class:`Pickler`.

    Works for CPU and CUDA tensors. Note that the ``copy_tensor`` default here
    (``True``) differs from the one of :class:`Pickler` (``False``).

    Args:
        obj: The object to serialize.
        recurse: Enable to dump lambdas and local functions defined where the
            module globals are not picklable (``__main__`` of a script, say).
        copy_tensor: ``True`` copies tensor data into the bytes; ``False`` passes
            tensors by reference (CPU tensors are moved to shared memory).

    Returns:
        The pickled bytes; read them back with :func:`loads` (or ``dill.loads``).
    """
    buffer = io.BytesIO()
    try:
        Pickler(buffer, recurse=recurse, copy_tensor=copy_tensor).dump(obj)
    except RecursionError:
        if not recurse:
            raise
        # dill's search of the globals a function refers to (dill.detect.globalvars) never ends
        # when two functions of a script call each other: save the functions with their module's
        # globals instead, as without ``recurse``.
        return dumps(obj, recurse=False, copy_tensor=copy_tensor)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """Rebuild an object from bytes made by :func:`dumps`.

    Args:
        data: The pickled bytes.

    Returns:
        The object.
    """
    return dill.loads(data)


def mark_static_module(module: Any) -> None:
    """Pickle ``module`` as a reference to its name from now on, never by value.

    dill saves the whole namespace of a module that does not look installed
    (outside ``site-packages``, say) whenever a pickled function refers to it.
    That fails for modules holding handles into hand-loaded C libraries (ctypes
    ``CDLL`` objects and pointers), and is wasteful for any stateless module. A
    marked module is imported again by name on the receiving side instead, so it
    must be importable there.

    Args:
        module: The module object to mark.

    Raises:
        TypeError: If ``module`` is not a module.
    """
    if not isinstance(module, ModuleType):
        raise TypeError(
            f"module must be a module object, got {module!r} of type {type(module).__name__}"
        )
    _STATIC_MODULES.add(module.__name__)

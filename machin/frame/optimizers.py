"""Building optimizers: PyTorch's fused Adam where it is the same algorithm, only faster.

Every algorithm builds its optimizers from the class the user passes through
:func:`build_optimizer`, and so do the gradient servers of
:func:`~machin.frame.helpers.servers.grad_server_helper`. ``compile()`` gives the optimizers
fused here the plain step back (:func:`unfuse_default`), since torch.compile does not trace
into the fused kernel. :func:`step` and :func:`clear_grads` are what every update calls
instead of ``optimizer.step()`` and ``optimizer.zero_grad(set_to_none=True)``.
"""

from __future__ import annotations

import functools
import importlib
import weakref
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple

import torch

from ..utils import torch_internals
from ..utils.torch_internals import has_step_hooks

__all__ = [
    "build_optimizer",
    "adopt",
    "is_fused_by_default",
    "unfuse_default",
    "fuse_default",
    "step",
    "clear_grads",
    "raw_step",
    "has_step_hooks",
    "PortableOptimizer",
    "rebuild_optimizer",
]

#: Optimizer classes that machin builds with ``fused=True`` where torch has the fused kernel.
_FUSABLE_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW)
#: The optimizers :func:`build_optimizer` fused without being asked to (``compile()`` unfuses them).
_fused_by_default: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()


def _fusable(optimizer: Callable, params: list, kwargs: Mapping[str, Any]) -> bool:
    """Whether ``optimizer(params, lr=..., **kwargs)`` may be built with ``fused=True`` (see :func:`build_optimizer`)."""
    keywords: Mapping[str, Any] = kwargs
    if isinstance(optimizer, functools.partial):
        if optimizer.args:
            return False
        optimizer, keywords = optimizer.func, {**optimizer.keywords, **kwargs}
    if optimizer not in _FUSABLE_OPTIMIZERS or keywords.keys() & {
        "fused",
        "foreach",
        "differentiable",
    }:
        return False
    devices = torch_internals.fused_kernel_devices()
    return bool(params) and all(
        isinstance(p, torch.Tensor) and torch.is_floating_point(p) and p.device.type in devices
        for p in params
    )


def build_optimizer(
    optimizer: Callable, params: Iterable[Any], learning_rate: float, **kwargs: Any
) -> torch.optim.Optimizer:
    """``optimizer(params, lr=learning_rate, **kwargs)``, fused where that is the same algorithm, only faster.

    ``torch.optim.Adam`` and ``AdamW`` (the classes, or a ``functools.partial`` of them, where
    neither the partial nor ``kwargs`` set ``fused``, ``foreach`` or ``differentiable``) are
    built with ``fused=True`` when every parameter is a floating-point tensor on a device with
    torch's fused kernel (the CPU from torch 2.4 on, CUDA). The fused step does the same arithmetic in one kernel
    per parameter group instead of about a dozen tensor operations per parameter: on the
    small networks of RL it takes a quarter to a fifth of the default step's CPU time, and its
    results differ from the default step's in the last bits of a float only. Pass
    ``functools.partial(torch.optim.Adam, fused=False)`` to keep torch's default step.

    Args:
        optimizer: The optimizer class (or a callable building one as ``optimizer(params, lr=...)``).
        params: The tensors (or parameter groups) to optimize.
        learning_rate: The ``lr`` passed to ``optimizer``.
        kwargs: Further keyword arguments of ``optimizer``.
    """
    params = list(params)
    fused = _fusable(optimizer, params, kwargs)
    built = (
        optimizer(params, lr=learning_rate, fused=True, **kwargs)
        if fused
        else optimizer(params, lr=learning_rate, **kwargs)
    )
    return adopt(built, fused)


def adopt(optimizer: Any, fused_by_default: bool = False) -> Any:
    """Take an optimizer into machin's care; returns it.

    Loading a state dict (a checkpoint) then keeps the optimizer's own ``fused``,
    ``foreach`` and ``capturable`` settings: they choose how this process computes a
    step, not what the step computes, and a checkpoint written by an eager run, a
    compiled one or another torch version must not switch them. (A compiled step would
    otherwise fall back to eager after loading a fused state, and a torch without the
    fused CPU kernel could not step after loading one.)

    Args:
        optimizer: An optimizer (anything else is returned unchanged).
        fused_by_default: Whether machin fused it without being asked to (see
            :func:`build_optimizer`); ``compile()`` gives such optimizers the plain step.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if fused_by_default:
        _fused_by_default.add(optimizer)
    register = getattr(
        optimizer, "register_load_state_dict_pre_hook", None
    )  # where torch has the hook
    if register is not None:
        register(_keep_implementation)
    return optimizer


def is_fused_by_default(optimizer: Any) -> bool:
    """Whether :func:`build_optimizer` fused ``optimizer`` without being asked to (and it still is)."""
    return optimizer in _fused_by_default


#: Parameter-group entries that choose how a step is computed, not what it computes.
_IMPLEMENTATION_KEYS = ("fused", "foreach", "capturable")


def _keep_implementation(
    optimizer: torch.optim.Optimizer, state_dict: Dict[str, Any]
) -> Optional[Dict[str, Any]]:
    """``load_state_dict`` pre-hook: the loaded parameter groups take the optimizer's implementation entries."""
    saved = state_dict.get("param_groups")
    if not isinstance(saved, list) or len(saved) != len(optimizer.param_groups):
        return None  # torch reports the mismatch
    groups = []
    for live, group in zip(optimizer.param_groups, saved):
        group = dict(group)
        group.update((key, live[key]) for key in _IMPLEMENTATION_KEYS if key in live)
        groups.append(group)
    return {**state_dict, "param_groups": groups}


def unfuse_default(optimizer: Any) -> bool:
    """Give an optimizer that :func:`build_optimizer` fused on its own torch's plain step; whether it did.

    torch.compile does not trace into the fused kernel, so a compiled update compiles the
    plain step (and inductor fuses it). Optimizers fused at the user's request stay fused.

    Args:
        optimizer: The optimizer a compiled step is about to step.
    """
    if optimizer not in _fused_by_default:
        return False
    _fused_by_default.discard(optimizer)
    torch_internals.set_fused_flags(optimizer, False)
    return True


def fuse_default(optimizer: Any) -> None:
    """Undo :func:`unfuse_default` (its compiled step could not be built: it steps eagerly, fused).

    Args:
        optimizer: An optimizer that :func:`unfuse_default` gave the plain step.
    """
    torch_internals.set_fused_flags(optimizer, True)
    _fused_by_default.add(optimizer)


# -- stepping ------------------------------------------------------------------------------
# ``Optimizer.step`` of every torch optimizer runs inside a wrapper that opens a profiler range
# (``record_function``) and runs the step hooks, and ``Optimizer.zero_grad`` opens a range of its
# own. With no profiler on and no hook registered they do nothing else, yet each costs about
# as much as a fused Adam step of a small network (tens of microseconds on a CPU), on every
# update. :func:`step` and :func:`clear_grads` call what is inside them then; otherwise (a
# profiler records, a hook is registered, the step of the instance was replaced, e.g. by an LR
# scheduler that counts steps, or the optimizer is not a torch one) they make the usual call.

_ZERO_GRAD = torch.optim.Optimizer.zero_grad


def step(optimizer: Any) -> None:
    """``optimizer.step()``, without torch's profiling wrapper where that wrapper would do nothing.

    The function inside the wrapper is the optimizer's own ``step`` (with its grad-mode
    handling), so the parameters and the optimizer state change exactly as by
    ``optimizer.step()``.

    Args:
        optimizer: The optimizer to step.
    """
    inner = torch_internals.hooked_step_inner(type(optimizer))
    if (
        inner is None
        or not isinstance(optimizer, torch.optim.Optimizer)
        or "step" in vars(optimizer)
        or has_step_hooks(optimizer)
        or torch_internals.profiler_enabled()
    ):
        optimizer.step()
    else:
        inner(optimizer)


def clear_grads(optimizer: Any) -> None:
    """``optimizer.zero_grad(set_to_none=True)``, without torch's profiler range where it records nothing.

    Args:
        optimizer: The optimizer whose parameters' gradients are dropped.
    """
    if type(optimizer).zero_grad is not _ZERO_GRAD or torch_internals.profiler_enabled():
        optimizer.zero_grad(set_to_none=True)
        return
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None


def raw_step(optimizer: Any) -> Optional[Callable]:
    """The undecorated ``step`` of a built-in torch optimizer (``None``: step it eagerly).

    ``Optimizer.step`` is wrapped for profiling, step hooks and grad mode, and those
    wrappers break torch.compile's graph; a compiled step calls the function inside
    them (under ``no_grad``, as the wrapper does). Optimizers of other libraries, and
    ones with ``differentiable=True``, are stepped as they are.

    Args:
        optimizer: The optimizer a compiled step steps.
    """
    if not isinstance(optimizer, torch.optim.Optimizer) or not type(
        optimizer
    ).__module__.startswith("torch.optim"):
        return None
    if optimizer.defaults.get("differentiable", False):
        return None
    return torch_internals.undecorated_step(type(optimizer))


# -- sending an optimizer to another process -------------------------------------------------------
class PortableOptimizer:
    """Pickles as ``optimizer`` rebuilt from its class's import path and ``__getstate__``.

    dill (which machin's pools use) pickles a class by value when it cannot reach it as
    an attribute of its package, and ``torch.optim`` hides its submodules
    (``torch.optim.adam``), so ``torch.optim.Adam`` itself cannot be sent; its import path
    can. The rebuilt optimizer holds the parameters as they were unpickled (shared
    tensors stay shared) and is adopted again (:func:`adopt`).

    Args:
        optimizer: The optimizer to send.
    """

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer

    def __reduce__(self) -> Tuple[Any, ...]:
        cls = type(self.optimizer)
        return rebuild_optimizer, (
            cls.__module__,
            cls.__qualname__,
            self.optimizer.__getstate__(),
            is_fused_by_default(self.optimizer),
        )


def rebuild_optimizer(
    module: str, qualname: str, state: Dict[str, Any], fused_by_default: bool = False
) -> torch.optim.Optimizer:
    """The optimizer of class ``module.qualname`` with ``state`` (what :class:`PortableOptimizer` sends).

    Args:
        module: The module of the optimizer's class.
        qualname: The class's qualified name in it.
        state: The optimizer's ``__getstate__``.
        fused_by_default: Whether :func:`build_optimizer` fused it without being asked to.
    """
    cls: Any = importlib.import_module(module)
    for name in qualname.split("."):
        cls = getattr(cls, name)
    optimizer = cls.__new__(cls)
    optimizer.__setstate__(state)
    return adopt(optimizer, fused_by_default)

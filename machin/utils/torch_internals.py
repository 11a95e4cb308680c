"""Every private PyTorch API that machin uses, in one place.

PyTorch may rename or remove anything whose name starts with an underscore in any
release. machin touches such names only through the functions below; nothing else in
the library imports a private torch module or reads a private attribute of a torch
object. Each function names the private API it uses and what it does on a torch without
it: a fallback where the private API only saves time (same results, slower), a
:class:`TorchInternalsError` naming the missing API where machin cannot do without it.
Where the API's behaviour depends on the release, the function also checks
:data:`TORCH_VERSION` (the fused kernels' devices, tracing ``torch.autograd.grad``). All
of them were checked with torch :data:`CHECKED_WITH`.

``tests/utils/test_torch_internals.py`` checks every entry against the installed torch,
so an upgrade that changes one of them fails there first, by name.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
from torch import nn
from torch.optim import optimizer as _torch_optimizer
from torch.torch_version import TorchVersion

__all__ = [
    "CHECKED_WITH",
    "TORCH_VERSION",
    "TorchInternalsError",
    "fused_kernel_devices",
    "set_fused_flags",
    "profiler_enabled",
    "has_step_hooks",
    "hooked_step_inner",
    "undecorated_step",
    "mark_stepped_for_schedulers",
    "stepped_for_schedulers",
    "can_trace_autograd_ops",
    "tracing_autograd_ops",
    "is_backend_failure",
    "inductor_mode_options",
    "with_own_compile_cache",
    "foreach_lerp_",
    "mode_sensitive_layer_types",
    "parameter_slots",
    "buffer_slots",
    "forward_pre_hooks",
    "shared_by_descriptor",
    "share_by_filename",
    "distribution_checks_off",
]

#: The installed torch version, comparable with strings (``TORCH_VERSION >= "2.4"``).
TORCH_VERSION = TorchVersion(torch.__version__)
#: The torch release every entry below was checked with (the one CI installs).
CHECKED_WITH = "2.13"


class TorchInternalsError(RuntimeError):
    """A private torch API that machin relies on is missing or changed in the installed torch."""


def _missing(what: str) -> TorchInternalsError:
    return TorchInternalsError(
        f"machin relies on {what}, which torch {TORCH_VERSION} does not have (machin/utils/torch_internals.py "
        f"was checked with torch {CHECKED_WITH}); please report this with your torch version"
    )


# -- optimizers ------------------------------------------------------------------------------
def fused_kernel_devices() -> frozenset:
    """Device types with torch's fused optimizer kernels (CUDA from torch 2.1, the CPU from 2.4).

    Private: ``torch.utils._foreach_utils._get_fused_kernels_supported_devices`` (torch 2.2 on).
    Fallback: ``{"cuda"}`` on an older torch, nothing where the query is gone (machin then
    builds the default, unfused step).
    """
    if TORCH_VERSION < "2.2":
        return frozenset({"cuda"})
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    except ImportError:
        return frozenset()
    return frozenset(_get_fused_kernels_supported_devices())


def set_fused_flags(optimizer: torch.optim.Optimizer, fused: bool) -> None:
    """Switch a built Adam or AdamW between its fused and its default step.

    Private: ``optimizer._step_supports_amp_scaling``, which the constructor of a fused
    Adam sets and ``torch.amp.GradScaler`` reads; the ``fused`` entries themselves are public.

    Args:
        optimizer: An Adam or AdamW.
        fused: Whether its step is the fused kernel from now on.
    """
    optimizer.defaults["fused"] = fused
    for group in optimizer.param_groups:
        group["fused"] = fused
    optimizer._step_supports_amp_scaling = fused


def profiler_enabled() -> bool:
    """Whether an autograd profiler records now.

    Private: ``torch._C._autograd._profiler_enabled``. Fallback where it is gone: ``True``
    (machin then opens the optimizers' profiler ranges as torch does, only slower).
    """
    enabled = getattr(torch._C._autograd, "_profiler_enabled", None)
    return True if enabled is None else bool(enabled())


def has_step_hooks(optimizer: Any) -> bool:
    """Whether a step hook is registered on ``optimizer`` or for every optimizer.

    Private: the hook tables ``Optimizer._optimizer_step_pre_hooks`` / ``_post_hooks`` and
    the module's ``_global_optimizer_pre_hooks`` / ``_post_hooks`` (torch 2.0 on). An
    optimizer without the per-instance tables counts as hooked when the global tables are gone.
    """
    if not hasattr(_torch_optimizer, "_global_optimizer_pre_hooks"):
        return True
    return bool(
        getattr(optimizer, "_optimizer_step_pre_hooks", None)
        or getattr(optimizer, "_optimizer_step_post_hooks", None)
        or _torch_optimizer._global_optimizer_pre_hooks
        or _torch_optimizer._global_optimizer_post_hooks
    )


def hooked_step_inner(optimizer_class: type) -> Optional[Callable]:
    """The ``step`` inside the profiling wrapper torch puts around an optimizer class's ``step``.

    torch wraps ``cls.step`` once, at the first instance, and marks the wrapper with
    ``hooked = True`` (``Optimizer._patch_step_function``, private). ``None`` where the
    class's step is not that wrapper (not wrapped yet, replaced, or a torch that wraps
    differently): the caller then calls ``optimizer.step()``.

    Args:
        optimizer_class: The type of an optimizer.
    """
    wrapper = getattr(optimizer_class, "step", None)
    if not getattr(wrapper, "hooked", False):
        return None
    return getattr(wrapper, "__wrapped__", None)


def undecorated_step(optimizer_class: type) -> Callable:
    """``optimizer_class.step`` without any of torch's wrappers (profiling, hooks, grad mode).

    Relies on torch's wrappers setting ``__wrapped__`` (``functools.wraps``), which they
    do from torch 2.0 on; the function returned must be called under ``torch.no_grad()``.

    Args:
        optimizer_class: A ``torch.optim`` optimizer class.
    """
    return inspect.unwrap(optimizer_class.step)


#: What torch's LR schedulers read to tell whether ``optimizer.step()`` ran before their ``step()``.
_STEPPED_FLAG = "_opt_called"


def mark_stepped_for_schedulers(optimizer: Any) -> None:
    """Record on ``optimizer`` that it stepped, as its ``step()`` would have for the LR schedulers.

    For steps that do not go through ``optimizer.step()`` (a compiled step, a step in a
    worker process). Private: ``optimizer._opt_called``, set by the wrapper
    ``torch.optim.lr_scheduler`` puts on ``step`` and read by ``LRScheduler.step``.

    Args:
        optimizer: The optimizer that stepped.
    """
    setattr(optimizer, _STEPPED_FLAG, True)


def stepped_for_schedulers(optimizer: Any) -> bool:
    """Whether ``optimizer`` is recorded as stepped for the LR schedulers (see :func:`mark_stepped_for_schedulers`)."""
    return bool(getattr(optimizer, _STEPPED_FLAG, False))


# -- torch.compile -----------------------------------------------------------------------------
def can_trace_autograd_ops() -> bool:
    """Whether torch.compile can trace ``torch.autograd.grad`` into a graph (a dynamo setting).

    Private: ``torch._dynamo.config.trace_autograd_ops``, used from torch 2.13 on (the
    release it was checked with). ``False`` on older torch: compiled steps then compute
    their gradients with an eager backward pass (same numbers, slower).
    """
    import torch._dynamo

    return TORCH_VERSION >= "2.13" and hasattr(torch._dynamo.config, "trace_autograd_ops")


@contextlib.contextmanager
def tracing_autograd_ops() -> Iterator[None]:
    """Let torch.compile trace ``torch.autograd.grad`` inside this block (see :func:`can_trace_autograd_ops`).

    Raises:
        TorchInternalsError: Where the setting does not exist.
    """
    if not can_trace_autograd_ops():
        raise _missing("torch._dynamo.config.trace_autograd_ops (tracing torch.autograd.grad)")
    config = torch._dynamo.config
    previous = config.trace_autograd_ops
    config.trace_autograd_ops = True
    try:
        yield
    finally:
        config.trace_autograd_ops = previous


def is_backend_failure(error: BaseException) -> bool:
    """Whether ``error`` is torch.compile's "the backend failed" (not a tracing problem of one function).

    Private: ``torch._dynamo.exc.BackendCompilerFailed``. Where it is gone, no error counts
    as one (each failing step then falls back on its own).

    Args:
        error: What a compiled call raised.
    """
    import torch._dynamo

    failed = getattr(torch._dynamo.exc, "BackendCompilerFailed", None)
    return failed is not None and isinstance(error, failed)


def inductor_mode_options(mode: str) -> Dict[str, Any]:
    """The inductor options that ``torch.compile(mode=mode)`` stands for.

    Private: ``torch._inductor.list_mode_options``.

    Args:
        mode: A ``torch.compile`` mode (``"reduce-overhead"``, ``"max-autotune"``, ...).

    Raises:
        TorchInternalsError: Where the function is gone.
    """
    try:
        from torch._inductor import list_mode_options
    except ImportError as error:
        raise _missing(
            "torch._inductor.list_mode_options (the options of a torch.compile mode)"
        ) from error
    return dict(list_mode_options(mode))


def with_own_compile_cache(function: Callable, name: str) -> Callable:
    """A copy of ``function`` named ``name`` whose ``torch.compile`` cache is its own.

    torch.compile (dynamo) keeps its compiled versions, and its limit on recompiling, per
    code object (``torch._dynamo.config.recompile_limit``, 8): every framework compiling
    the same step function would share them, and the ninth would run eagerly. The copy has
    a code object of its own (the same bytecode, renamed, so that its name shows in
    torch.compile's logs and errors). Relies on dynamo's per-code-object cache, an
    implementation detail that the tests pin.

    Args:
        function: A plain Python function (no closure).
        name: The copy's name.
    """
    code = function.__code__.replace(co_name=name)
    if hasattr(code, "co_qualname"):
        code = code.replace(co_qualname=name)
    return types.FunctionType(code, function.__globals__, name, function.__defaults__)


# -- tensors -----------------------------------------------------------------------------------
def foreach_lerp_(targets: List[torch.Tensor], sources: List[torch.Tensor], weight: float) -> None:
    """``target.lerp_(source, weight)`` for every pair, in one call where torch has ``_foreach_lerp_``.

    Private: ``torch._foreach_lerp_``. Fallback where it is gone: one ``lerp_`` per pair
    (same numbers, slower).

    Args:
        targets: Tensors changed in place.
        sources: Tensors they move towards, in the same order.
        weight: The step in ``[0, 1]``.
    """
    lerp = getattr(torch, "_foreach_lerp_", None)
    if lerp is not None:
        lerp(targets, sources, weight)
        return
    for target, source in zip(targets, sources):
        target.lerp_(source, weight)


# -- modules -----------------------------------------------------------------------------------
def mode_sensitive_layer_types() -> tuple:
    """The layer classes whose output depends on ``train()`` / ``eval()`` (dropout and normalisation).

    Private: the base classes ``nn.modules.dropout._DropoutNd`` and
    ``nn.modules.batchnorm._NormBase``. Fallback where one is gone: the public dropout and
    batch-norm classes (a layer deriving only from the private base is then missed).
    """
    dropout = getattr(nn.modules.dropout, "_DropoutNd", None)
    norm = getattr(nn.modules.batchnorm, "_NormBase", None)
    if dropout is not None and norm is not None:
        return (dropout, norm)
    return (
        nn.Dropout,
        nn.Dropout1d,
        nn.Dropout2d,
        nn.Dropout3d,
        nn.AlphaDropout,
        nn.FeatureAlphaDropout,
        nn.BatchNorm1d,
        nn.BatchNorm2d,
        nn.BatchNorm3d,
        nn.InstanceNorm1d,
        nn.InstanceNorm2d,
        nn.InstanceNorm3d,
    )


def _slots(module: nn.Module, attribute: str) -> Dict[str, Any]:
    slots = getattr(module, attribute, None)
    if not isinstance(slots, dict):
        raise _missing(
            f"nn.Module.{attribute}, the dict a module keeps its own tensors in "
            f"({type(module).__name__} has {type(slots).__name__})"
        )
    return slots


def parameter_slots(module: nn.Module) -> Dict[str, Optional[torch.Tensor]]:
    """The live dict in which ``module`` keeps its own parameters (not its children's).

    Writing a plain tensor into it makes ``module`` compute with that tensor until the
    parameter is written back (how parameter-space noise swaps noisy weights in).
    Private: ``nn.Module._parameters``.

    Args:
        module: The module.

    Raises:
        TorchInternalsError: Where ``module`` keeps its parameters otherwise (also a
            TorchScript module, whose table is not a dict).
    """
    return _slots(module, "_parameters")


def buffer_slots(module: nn.Module) -> Dict[str, Optional[torch.Tensor]]:
    """The live dict in which ``module`` keeps its own buffers. Private: ``nn.Module._buffers``.

    Args:
        module: The module.

    Raises:
        TorchInternalsError: Where ``module`` keeps its buffers otherwise.
    """
    return _slots(module, "_buffers")


def forward_pre_hooks(module: nn.Module) -> List[Callable]:
    """The forward pre-hooks registered on ``module``. Private: ``nn.Module._forward_pre_hooks``.

    Args:
        module: The module.

    Raises:
        TorchInternalsError: Where the hook table is gone.
    """
    return list(_slots(module, "_forward_pre_hooks").values())


# -- shared memory -----------------------------------------------------------------------------
def shared_by_descriptor(storage: Any) -> bool:
    """Whether a CPU storage already lives in shared memory reached by a file descriptor.

    Private: ``UntypedStorage._get_shared_fd`` (raises for a storage shared otherwise).

    Args:
        storage: An untyped CPU storage.
    """
    try:
        storage._get_shared_fd()
    except (RuntimeError, AttributeError):
        return False
    return True


def share_by_filename(storage: Any) -> tuple:
    """Move a CPU storage into shared memory reached by a file name; ``(manager, handle, size)``.

    Takes one reference for the receiver, which drops it when it rebuilds the storage
    (torch's "file_system" sharing). Private: ``UntypedStorage._share_filename_cpu_`` and
    ``_shared_incref``.

    Args:
        storage: An untyped CPU storage.

    Raises:
        TorchInternalsError: Where the storage has no such methods.
    """
    share = getattr(storage, "_share_filename_cpu_", None)
    incref = getattr(storage, "_shared_incref", None)
    if share is None or incref is None:
        raise _missing(
            "UntypedStorage._share_filename_cpu_ and _shared_incref (sharing a storage by file name)"
        )
    manager, handle, size = share()
    incref()
    return manager, handle, size


# -- distributions -----------------------------------------------------------------------------
@contextlib.contextmanager
def distribution_checks_off() -> Iterator[None]:
    """Make ``torch.distributions`` objects without their argument checks inside this block,
    then restore the default that was set before.

    Tracing a network that builds a distribution (``torch.export``, ``torch.jit.trace``)
    needs it: the checks branch on the values of tensors. The switch is public
    (``Distribution.set_default_validate_args``); reading the default it sets is not.
    Private: ``torch.distributions.Distribution._validate_args``.

    Raises:
        TorchInternalsError: Where that attribute is missing.
    """
    distribution = torch.distributions.Distribution
    previous = getattr(distribution, "_validate_args", None)
    if not isinstance(previous, bool):
        raise _missing(
            "torch.distributions.Distribution._validate_args (the default of the argument checks)"
        )
    distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        distribution.set_default_validate_args(previous)

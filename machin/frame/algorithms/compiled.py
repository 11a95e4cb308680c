"""Compiled updates: the machinery behind :meth:`TorchFramework.compile`.

An update is a short sequence of *steps*, and the library compiles each step once with
:func:`torch.compile`:

* **Loss steps** are the update hooks marked with :func:`compilable`: the hook that
  computes a loss (e.g. DQN's TD loss, the critics' losses of DDPG, each with the
  Bellman target it regresses onto), or a hook that needs no gradient. A loss
  step that trains networks is compiled *together with its backward pass*: the traced
  function computes the loss and ``torch.autograd.grad`` of it with respect to the
  trained parameters, so forward, loss and backward are one compiled call that returns
  the loss and the gradients, and no autograd graph is built at run time.
* **Optimizer steps**: the step of every ``torch.optim`` optimizer, with the gradient
  clipping before it, is one more compiled call (PyTorch's "compiled optimizer").

What stays eager is what must: sampling the batch, the non-finite check of each loss
(``loss.item()`` in :meth:`TorchFramework._optimize`) and Python bookkeeping (counters,
epsilon). Networks are not wrapped or changed, so checkpoints, target updates and
``act*`` calls see the same modules as before.

Each compiled function is a copy with a compile cache of its own
(:func:`~machin.utils.torch_internals.with_own_compile_cache`), so that two frameworks (or
two steps) never share torch.compile's cache and its recompile limit. When a step
cannot be compiled (a network that torch.compile cannot trace, a backend that fails,
e.g. without a C++ compiler) the step runs eagerly from then on, after one
:class:`CompileFallbackWarning` naming the step and the reason.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
from torch import nn
from torch.utils.weak import WeakTensorKeyDictionary

from ...utils import torch_internals
from ...utils.compat import warn_caller
from .. import optimizers
from . import utils
from .utils import _tensors

__all__ = ["compilable", "CompiledSteps", "CompileFallbackWarning"]

#: What a loss step trains: attribute names of networks, or ``f(framework) -> [network or
#: list of tensors, ...]`` (one entry per loss the step returns, in order).
Trains = Union[None, Sequence[str], Callable[[Any], Sequence[Any]]]


class CompileFallbackWarning(RuntimeWarning):
    """A step of a compiled framework could not be compiled and runs eagerly (same results, slower)."""


def compilable(trains: Trains = None, *, after: Optional[str] = None) -> Callable:
    """Mark an update hook as one step that :meth:`TorchFramework.compile` compiles.

    Without ``compile()`` the hook runs as written. After it, the hook runs as a compiled
    function; overrides of the hooks it calls (``_value_loss``, ``reward_function``, ...)
    are traced too.

    Args:
        trains: For a hook that returns losses: what each loss trains, as attribute names
            of networks or a function ``f(framework)`` returning networks (or lists of
            tensors such as ``[log_alpha]``), one per loss. The gradients of each loss with
            respect to those parameters are computed inside the compiled call and handed to
            :meth:`TorchFramework._optimize`. ``None`` for a hook without gradients.
        after: Name of a method called with the hook's arguments after each compiled call,
            for work that cannot be traced (prioritized replay pushes its new priorities
            there).

    The hook returns a loss tensor, a list of loss tensors, or a tuple whose first element
    is one of those and whose other elements are extra results (returned detached when
    the gradients are computed in the compiled call).
    """

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def step(self, *args: Any, **kwargs: Any) -> Any:
            compiled = getattr(self, "_compiled_steps", None)
            if (
                compiled is None or torch.compiler.is_compiling()
            ):  # not compiled, or traced inside another step
                return method(self, *args, **kwargs)
            return compiled.run(method, trains, after, self, args, kwargs)

        return step

    return decorate


def _put_gradients(framework: Any, loss: torch.Tensor, pending: Optional[tuple]) -> None:
    """Set the gradients a compiled loss step computed for ``loss`` (``pending``: parameters, gradients),
    or run its backward pass."""
    if pending is not None:
        for param, grad in zip(*pending):
            param.grad = grad
    else:
        framework._backward(loss)


# -- the functions that torch.compile traces ------------------------------------------------
# Each compiled step compiles a copy of one of these with a compile cache of its own
# (``torch_internals.with_own_compile_cache``).


def _losses_of(output: Any) -> list:
    head = output[0] if isinstance(output, tuple) else output
    return list(head) if isinstance(head, (list, tuple)) else [head]


def _detached(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, tuple):
        return tuple(_detached(v) for v in value)
    if isinstance(value, list):
        return [_detached(v) for v in value]
    return value


def _step_with_grads(method, framework, params, args, kwargs):
    with torch.enable_grad():
        output = method(framework, *args, **kwargs)
    losses = _losses_of(output)
    last = len(losses) - 1
    grads = []
    for index, (loss, group) in enumerate(zip(losses, params)):
        if group and isinstance(loss, torch.Tensor) and loss.requires_grad:
            grads.append(
                torch.autograd.grad(loss, group, retain_graph=index < last, allow_unused=True)
            )
        else:
            grads.append(None)
    return _detached(output), grads


def _step_plain(method, framework, args, kwargs):
    return method(framework, *args, **kwargs)


def _optimizer_step(optimizer, step, params, max_norm):
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, max_norm)
    step(optimizer)


def _noop() -> None:
    return None


# -- how torch.compile sees safe_call ---------------------------------------------------------
# ``safe_call`` and ``soft_update`` look networks up in weak-keyed caches. Traced as they
# are, those lookups would become guards on the caches' contents, which change whenever
# any network is created or collected (a recompile, or a failure to build the guards).
# While tracing, torch.compile runs these stand-ins instead: the cache lookups happen once,
# at compile time, and the compiled code holds only the result.


def _call_plan(model: nn.Module, keys: tuple, required: tuple) -> tuple:
    """``((key, dict index), ...)`` that ``safe_call`` passes to ``model``, and its input device.

    Run eagerly while tracing (``assume_constant_result``), with safe_call's own rules
    and caches. A call that safe_call would refuse raises here; the step then runs
    eagerly, where safe_call raises its own error.
    """
    signature = utils._signatures.get(model)
    if signature is None:
        signature = utils._signatures[model] = utils._read_signature(model)
    chosen: Dict[str, int] = {}
    for index, dict_keys in enumerate(keys):
        for key in dict_keys or ():
            if signature.accepts_any or key in signature.names:
                chosen[key] = index
    missing = [name for name in (*signature.required, *required) if name not in chosen]
    if missing:
        raise TypeError(f"{signature.class_name} misses forward arguments {missing}")
    return tuple(chosen.items()), utils.get_input_device(model)


def _traced_safe_call(model, *named_args, required_argument=()):
    keys = []
    for arg_dict in named_args:
        if arg_dict is None or (isinstance(arg_dict, (tuple, list)) and not arg_dict):
            keys.append(None)
        elif isinstance(arg_dict, dict):
            keys.append(tuple(arg_dict.keys()))
        else:
            raise TypeError("safe_call takes dictionaries of network inputs")
    picks, device = _constant_call_plan(model, tuple(keys), tuple(required_argument))
    kwargs = {}
    for key, index in picks:
        value = named_args[index][key]
        if device is not None and isinstance(value, torch.Tensor) and value.device != device:
            value = value.to(device)
        kwargs[key] = value
    return model(**kwargs)


def _traced_tensors(module):
    return list(module.parameters()), len(list(module.buffers())) > 0


_constant_call_plan = _call_plan
_stand_ins_installed = False


def _install_stand_ins() -> None:
    """Register the stand-ins with torch.compile (once per process).

    Not before torch 2.13, whose ``assume_constant_result`` is the first to take a module
    argument: older releases trace the originals (more guards, same results).
    """
    global _stand_ins_installed, _constant_call_plan
    if _stand_ins_installed:
        return
    _stand_ins_installed = True
    if torch_internals.TORCH_VERSION < "2.13":
        return
    substitute = getattr(torch.compiler, "substitute_in_graph", None)
    constant = getattr(torch.compiler, "assume_constant_result", None)
    if substitute is None or constant is None:
        return
    try:
        substitute(utils.safe_call)(_traced_safe_call)
        substitute(utils._tensors)(_traced_tensors)
        _constant_call_plan = constant(_call_plan)
    except (
        TypeError,
        ValueError,
    ):  # an API that changed: trace the originals (more guards, same results)
        pass


# -- bookkeeping ----------------------------------------------------------------------------
class _Step:
    """The compiled functions of one loss step (created on first use) and whether it fell back."""

    __slots__ = ("name", "with_grads", "plain", "eager")

    def __init__(self, name: str):
        self.name = name
        self.with_grads: Optional[Callable] = None
        self.plain: Optional[Callable] = None
        self.eager = False


class _OptimizerStep:
    __slots__ = ("name", "compiled", "raw", "eager")

    def __init__(self, name: str, raw: Optional[Callable]):
        self.name = name
        self.raw = raw
        self.compiled: Optional[Callable] = None
        self.eager = raw is None


def _reason(error: BaseException) -> str:
    """A short description of why compiling failed: the error, and where in the user's code."""
    inner = getattr(
        error, "inner_exception", None
    )  # BackendCompilerFailed wraps the backend's error
    shown = inner if isinstance(inner, BaseException) else error
    lines = [line.strip() for line in str(shown).splitlines() if line.strip()]
    text = " ".join(lines[:2])
    if len(text) > 300:
        text = text[:297] + "..."
    where = ""
    message = str(error)
    if (
        "from user code:" in message
    ):  # dynamo lists the frames it was tracing; the last is where it stopped
        frames = [
            line.strip()
            for line in message.split("from user code:", 1)[1].splitlines()
            if line.strip().startswith("File ")
        ]
        if frames:
            where = f" (at {frames[-1]})"
    return f"{type(shown).__name__}: {text}{where}"


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    if isinstance(value, list):
        return [_clone(v) for v in value]
    return value


def _cuda_device(framework: Any) -> Optional[torch.device]:
    """The CUDA device of the framework's networks, or ``None`` when they are not on a GPU."""
    for name in getattr(framework, "_is_top", ()):
        network = getattr(framework, name, None)
        if isinstance(network, nn.Module):
            first = next(network.parameters(), None)
            if first is not None and first.is_cuda:
                return first.device
    return None


def _to_device(value: Any, device: torch.device) -> Any:
    """Move the tensors of a batch (a dataclass, dicts of tensors) to ``device``, in place.

    A CUDA graph cannot contain the copy of a CPU batch to the GPU, so with CUDA graphs
    the batch moves before the compiled call (the hooks' own ``.to(device)`` are then
    no-ops).
    """
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=True) if value.device != device else value
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = _to_device(item, device)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            try:
                setattr(value, field.name, _to_device(getattr(value, field.name), device))
            except dataclasses.FrozenInstanceError:
                break
    return value


class CompiledSteps:
    """The compiled steps of one framework (created by :meth:`TorchFramework.compile`).

    Args:
        framework: The algorithm instance.
        backend: ``torch.compile`` backend (``"inductor"`` generates fused C++ / Triton code;
            ``"aot_eager"`` or ``"eager"`` compile in a second, without speed-up, for tests).
        mode: ``torch.compile`` mode; when the networks are on a GPU and neither ``mode``
            nor ``options`` is given, ``"reduce-overhead"`` (CUDA graphs).
        options: Inductor options, e.g. ``{"fallback_random": True}``.
        dynamic: ``torch.compile``'s ``dynamic`` (``None``: a batch of a new size compiles
            one shape-generic version, then every size reuses it).
        fullgraph: Compile each loss step as one graph (a step that cannot be traced
            whole falls back to eager with a warning); ``False`` lets torch.compile split
            it around what it cannot trace.
    """

    def __init__(
        self,
        framework: Any,
        *,
        backend: Union[str, Callable] = "inductor",
        mode: Optional[str] = None,
        options: Optional[Dict[str, Any]] = None,
        dynamic: Optional[bool] = None,
        fullgraph: bool = True,
    ):
        self.owner = type(framework).__name__
        self.device = _cuda_device(framework)
        if backend == "inductor" and mode is None and options is None and self.device is not None:
            mode = "reduce-overhead"
        if backend == "inductor":
            mode, options = None, _inductor_options(mode, options)
        #: Whether the steps run as CUDA graphs.
        self.cudagraphs = bool(self.device is not None and (options or {}).get("triton.cudagraphs"))
        self.backend = backend
        self._settings = {"backend": backend, "mode": mode, "options": options, "dynamic": dynamic}
        self._fullgraph = fullgraph
        try:
            torch.compile(
                _noop, fullgraph=fullgraph, **self._settings
            )  # reject bad settings now, not mid-training
        except (
            RuntimeError,
            TypeError,
            ValueError,
        ) as error:  # torch.compile's own checks raise RuntimeError
            raise ValueError(
                f"{self.owner}.compile(): torch.compile does not accept these settings "
                f"({self._describe_settings()}): {error}"
            ) from error
        self._grads_in_graph = torch_internals.can_trace_autograd_ops()
        _install_stand_ins()
        self._steps: Dict[Callable, _Step] = {}
        self._optimizer_steps: weakref.WeakKeyDictionary[Any, _OptimizerStep] = (
            weakref.WeakKeyDictionary()
        )
        #: ``loss -> (parameters, gradients)`` computed by a compiled loss step, until _optimize uses them
        #: (an entry goes with its loss tensor).
        self._pending = WeakTensorKeyDictionary()
        #: Why nothing is compiled any more (a backend failure), or ``None``.
        self.disabled: Optional[str] = None

    def _describe_settings(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in self._settings.items() if v is not None)

    def _compile(self, template: Callable, name: str, fullgraph: bool) -> Callable:
        return torch.compile(
            torch_internals.with_own_compile_cache(template, name),
            fullgraph=fullgraph,
            **self._settings,
        )

    # -- loss steps ---------------------------------------------------------------------------
    def run(
        self,
        method: Callable,
        trains: Trains,
        after: Optional[str],
        framework: Any,
        args: tuple,
        kwargs: dict,
    ) -> Any:
        """Run one :func:`compilable` hook compiled (falling back to eager when that fails).

        Args:
            method: The undecorated hook.
            trains: The hook's ``trains`` declaration (see :func:`compilable`).
            after: The hook's ``after`` method name, or ``None``.
            framework: The algorithm instance (the hook's ``self``).
            args: Positional arguments of the hook.
            kwargs: Keyword arguments of the hook.
        """
        step = self._steps.get(method)
        if step is None:
            step = self._steps[method] = _Step(f"{self.owner}.{method.__name__}")
        if step.eager or self.disabled is not None:
            return method(framework, *args, **kwargs)
        if self.cudagraphs:
            args = tuple(_to_device(arg, self.device) for arg in args)
        params = None
        if (
            trains is not None
            and self._grads_in_graph
            and torch.is_grad_enabled()
            and framework._backward is torch.autograd.backward
            and not getattr(framework, "visualize", False)
        ):
            params = self._trained_parameters(framework, trains)
        try:
            if params is None:
                if step.plain is None:
                    step.plain = self._compile(_step_plain, _code_name(step.name), self._fullgraph)
                output = step.plain(method, framework, args, kwargs)
                grads = None
            else:
                if step.with_grads is None:
                    step.with_grads = self._compile(
                        _step_with_grads, _code_name(step.name, "grads"), self._fullgraph
                    )
                # no_grad: nothing leaves the call with a graph (an inference graph)
                with torch_internals.tracing_autograd_ops(), torch.no_grad():
                    output, grads = step.with_grads(method, framework, params, args, kwargs)
        except Exception as error:  # noqa: BLE001 - any failure to compile: rerun eagerly, then decide
            output = method(
                framework, *args, **kwargs
            )  # the user's own errors surface here, as in eager
            self._give_up(step, error)
            return output
        if self.cudagraphs:  # CUDA graph outputs are overwritten by the graph's next replay
            output, grads = _clone(output), _clone(grads)
        if grads is not None:
            losses = _losses_of(output)
            if len(losses) != len(params):
                raise TypeError(
                    f"{step.name} returned {len(losses)} loss(es) but is declared to train "
                    f"{len(params)} network(s)"
                )
            for loss, group, grad in zip(losses, params, grads):
                if grad is not None:
                    self._pending[loss] = (group, grad)
        if after is not None:
            getattr(framework, after)(*args, **kwargs)
        return output

    @staticmethod
    def _trained_parameters(framework: Any, trains: Trains) -> List[tuple]:
        targets = (
            trains(framework) if callable(trains) else [getattr(framework, name) for name in trains]
        )
        groups = []
        for target in targets:
            params = _tensors(target)[0] if isinstance(target, nn.Module) else list(target)
            groups.append(tuple(p for p in params if p.requires_grad))
        return groups

    # -- optimizer steps ----------------------------------------------------------------------
    def optimize(
        self,
        framework: Any,
        loss: torch.Tensor,
        optimizer: Any,
        parameters: Union[nn.Module, Any],
        gradient_max: float,
    ) -> bool:
        """Zero grads, put in the gradients (from the loss step, or by a backward pass), clip, step.

        Called by :meth:`TorchFramework._optimize` for a finite loss; returns ``True``.

        Args:
            framework: The algorithm instance.
            loss: The loss (returned by a compiled loss step, or with an autograd graph).
            optimizer: The optimizer to step.
            parameters: The network (or tensors) whose gradients are clipped.
            gradient_max: The clipping norm (``inf``: none).
        """
        step = self._optimizer_step_of(framework, optimizer)
        pending = self._pending.pop(loss, None)
        optimizers.clear_grads(optimizer)
        _put_gradients(framework, loss, pending)
        self._clip_and_step(step, optimizer, parameters, gradient_max)
        return True

    def _optimizer_step_of(self, framework: Any, optimizer: Any) -> _OptimizerStep:
        step = self._optimizer_steps.get(optimizer)
        if step is None:
            name = next(
                (
                    f"the step of {self.owner}.{k}"
                    for k, v in vars(framework).items()
                    if v is optimizer
                ),
                f"the step of {type(optimizer).__name__}",
            )
            step = self._optimizer_steps[optimizer] = _OptimizerStep(
                name, optimizers.raw_step(optimizer)
            )
        return step

    def step(
        self, framework: Any, optimizer: Any, parameters: Union[nn.Module, Any], gradient_max: float
    ) -> None:
        """Clip the gradients of ``parameters`` and step ``optimizer``: one compiled call where it can be.

        The gradients are in place already (:meth:`optimize` puts them in; a joint step of
        :meth:`TorchFramework._optimize` clips the norm over all its networks first and
        steps each optimizer with ``gradient_max=inf``).

        Args:
            framework: The algorithm instance.
            optimizer: The optimizer to step.
            parameters: The network (or tensors) whose gradients are clipped.
            gradient_max: The clipping norm (``inf``: none).
        """
        self._clip_and_step(
            self._optimizer_step_of(framework, optimizer), optimizer, parameters, gradient_max
        )

    def _clip_and_step(
        self,
        step: _OptimizerStep,
        optimizer: Any,
        parameters: Union[nn.Module, Any],
        gradient_max: float,
    ) -> None:
        max_norm = None if gradient_max == math.inf else gradient_max
        params = (
            []
            if max_norm is None
            else (
                _tensors(parameters)[0] if isinstance(parameters, nn.Module) else list(parameters)
            )
        )
        if step.eager or self.disabled is not None or optimizers.has_step_hooks(optimizer):
            self._eager_step(optimizer, params, max_norm)
            return
        unfused = False
        try:
            if step.compiled is None:
                unfused = optimizers.unfuse_default(
                    optimizer
                )  # inductor fuses the plain step itself
                if self.cudagraphs:
                    _make_capturable(optimizer)
                step.compiled = self._compile(_optimizer_step, _code_name(step.name), True)
            with torch.no_grad():
                step.compiled(optimizer, step.raw, params, max_norm)
        except Exception as error:  # noqa: BLE001 - compiling failed before the step ran: step eagerly
            if unfused:
                optimizers.fuse_default(optimizer)
            self._eager_step(optimizer, params, max_norm)
            self._give_up(step, error)
            return
        torch_internals.mark_stepped_for_schedulers(optimizer)

    def put_gradients(self, framework: Any, loss: torch.Tensor) -> None:
        """Set the gradients that a compiled loss step computed for ``loss``, or run its backward pass.

        For a joint step of :meth:`TorchFramework._optimize` (which then clips and calls :meth:`step`).

        Args:
            framework: The algorithm instance.
            loss: A loss returned by a compiled loss step (or one with an autograd graph).
        """
        _put_gradients(framework, loss, self._pending.pop(loss, None))

    @staticmethod
    def _eager_step(optimizer: Any, params: list, max_norm: Optional[float]) -> None:
        if max_norm is not None:
            nn.utils.clip_grad_norm_(params, max_norm)
        optimizers.step(optimizer)

    # -- failures -----------------------------------------------------------------------------
    def _give_up(self, step: Union[_Step, _OptimizerStep], error: BaseException) -> None:
        reason = _reason(error)
        if torch_internals.is_backend_failure(error):
            self.disabled = reason
            message = (
                f"{self.owner}.compile(): the torch.compile backend {self.backend!r} failed on "
                f"{step.name}: {reason}. {self.owner} keeps training eagerly (same results, no "
                f"speed-up); no step of it is compiled any more."
            )
        else:
            step.eager = True
            message = (
                f"{self.owner}.compile(): {step.name} cannot be compiled: {reason}. That step runs "
                f"eagerly from now on (same results, without its speed-up); the other steps stay "
                f"compiled. Pass fullgraph=False to compile() to let torch.compile split the step "
                f"around what it cannot trace."
            )
        warn_caller(message, CompileFallbackWarning)


def _inductor_options(mode: Optional[str], options: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Inductor's options for ``mode`` plus ``options``, without the per-call size and stride checks.

    The compiled steps are small, so the checks of every input that inductor's code makes
    on each call (which torch.compile's guards have made already) would cost as much as
    the arithmetic. An explicit ``options={"size_asserts": True}`` keeps them.
    """
    merged: Dict[str, Any] = {"size_asserts": False}
    if mode is not None:
        merged.update(torch_internals.inductor_mode_options(mode))
    merged.update(options or {})
    return merged


def _code_name(name: str, suffix: str = "") -> str:
    base = "".join(c if c.isalnum() else "_" for c in name)
    return f"compiled_{base}_{suffix}" if suffix else f"compiled_{base}"


def _make_capturable(optimizer: Any) -> None:
    """Let an optimizer on the GPU run inside a CUDA graph (its step counters on the device)."""
    if not isinstance(optimizer, torch.optim.Optimizer) or "capturable" not in optimizer.defaults:
        return
    for group in optimizer.param_groups:
        if not any(p.is_cuda for p in group["params"]):
            continue
        group["capturable"] = True
        for param in group["params"]:
            state = optimizer.state.get(param)
            if (
                state
                and isinstance(state.get("step"), torch.Tensor)
                and state["step"].device != param.device
            ):
                state["step"] = state["step"].to(param.device)

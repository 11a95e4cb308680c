"""The base class of every algorithm: saving, loading, optimizer steps, schedulers, graphs."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import warnings
import weakref
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import torch
from torch import nn

from ...utils import torch_internals
from ...utils.compat import warn_caller
from ...utils.logging import default_logger
from ...utils.schedules import check_progress
from .. import optimizers as optimizers_module
from ..buffers import Buffer
from ..optimizers import build_optimizer
from .options import Option, constructor_signature, option_specs, positive, warn_extra_arguments
from .utils import _unwrap

__all__ = ["TorchFramework", "Driver", "UpdateResult", "pack_result", "NetworkMismatchError"]


class NetworkMismatchError(ValueError, RuntimeError):
    """A target network whose parameters differ from its online network's.

    A ``ValueError``, and a ``RuntimeError`` (what copying the parameters raised in Machin 0.3.4).
    """


def _is_finite(loss: Any) -> bool:
    """Whether every element of ``loss`` is finite (one scalar read for a scalar loss: a device
    sync on a GPU, which ``update`` does anyway when it returns the loss as a float)."""
    if not isinstance(loss, torch.Tensor):
        return True
    return math.isfinite(loss.item()) if loss.numel() == 1 else bool(torch.isfinite(loss).all())


def _tensors_of(
    part: Union[nn.Module, torch.Tensor, Iterable[torch.Tensor]],
) -> Iterable[torch.Tensor]:
    """The parameters of a network, a tensor itself, or the tensors of an iterable."""
    if isinstance(part, nn.Module):
        return part.parameters()
    return (part,) if isinstance(part, torch.Tensor) else part


#: Optimizer -> whether its steps take a backward pass restricted to the tensors it steps
#: (decided on its first step; see ``TorchFramework._stepped_parameters``).
_restricted_steps: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def _reaches_other_tensors(losses: Sequence[Any], stepped: Iterable[torch.Tensor]) -> bool:
    """Whether a backward pass of ``losses`` would put gradients into leaves outside ``stepped``."""
    inside = set(map(id, stepped))
    seen = set()
    pending = [loss.grad_fn for loss in losses if isinstance(loss, torch.Tensor)]
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)  # the leaf of an AccumulateGrad node
        if leaf is not None and id(leaf) not in inside:
            return True
        pending.extend(next_node for next_node, _ in node.next_functions)
    return False


_MODE_SENSITIVE_LAYERS = torch_internals.mode_sensitive_layer_types()
_mode_sensitivity: weakref.WeakKeyDictionary[nn.Module, bool] = weakref.WeakKeyDictionary()


def _mode_sensitive(network: nn.Module) -> bool:
    """Whether ``train()`` / ``eval()`` changes what ``network`` computes (remembered per network)."""
    known = _mode_sensitivity.get(network)
    if known is None:
        known = _mode_sensitivity[network] = any(
            isinstance(m, _MODE_SENSITIVE_LAYERS) or getattr(m, "mode_sensitive", False)
            for m in network.modules()
        )
    return known


def _modules_in(values: Iterable[Any]) -> List[nn.Module]:
    """The modules among ``values`` and in their lists and tuples (other values left out)."""
    found: List[nn.Module] = []
    for value in values:
        if isinstance(value, nn.Module):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_modules_in(value))
    return found


def pack_result(main: Union[Any, Tuple[Any, ...]], extras: Sequence[Any] = ()) -> Any:
    """Return ``main`` bare when there is nothing else, else a tuple of ``main`` then ``extras``.

    Implements the result-wrapping rule of every ``act*`` method: one result comes
    back bare, several come back as a tuple with the network's extra outputs last.
    """
    main = main if isinstance(main, tuple) else (main,)
    result = main + tuple(extras)
    return result[0] if len(result) == 1 else result


def split_output(output: Any) -> Tuple[Any, Tuple[Any, ...]]:
    """Split a network output into its first value and the extra outputs after it."""
    if isinstance(output, tuple):
        return output[0], output[1:]
    return output, ()


class UpdateResult(NamedTuple):
    """What ``update()`` of an actor-critic algorithm returns.

    A named tuple: it unpacks as Machin 0.3.4's ``(policy value, value loss)`` pair
    (``policy_value, value_loss = ddpg.update()``) and also reads by name:
    ``policy_value`` is the mean value of the policy's objective (minus its loss),
    ``value_loss`` the mean loss of the critic(s).
    """

    policy_value: float
    value_loss: float


@dataclass(frozen=True)
class Driver:
    """How a generic single-process loop (the :class:`~machin.frame.trainer.Trainer`) drives an algorithm.

    Declared by each algorithm family as its ``driver`` class attribute and inherited.

    Attributes:
        act_method: Exploring act method used in training.
        act_kwargs: Keyword arguments of every exploring act call (copied on use).
        eval_act_method: Act method used in evaluation (no exploration noise).
        store: ``"transition"`` (``store_transition`` every step, updates per step) or
            ``"episode"`` (``store_episode`` after each episode, updates per episode).
        needs_hidden: The family's networks are recurrent: the loop feeds the hidden state back.
    """

    act_method: str
    act_kwargs: Mapping[str, Any]
    eval_act_method: str
    store: str
    needs_hidden: bool = False


def _raise_if_not_finite(name: str, value: torch.Tensor) -> None:
    """Raise ``ValueError`` naming ``name`` if ``value`` holds NaN or infinite elements."""
    bad = ~torch.isfinite(value.detach())
    if bad.any():
        rows = sorted({int(i) for i in bad.nonzero()[:, 0].tolist()}) if value.dim() else []
        raise ValueError(
            f"{name} holds {int(bad.sum())} NaN or infinite value(s) (tensor of shape {list(value.shape)}"
            f"{f', in batch rows {rows[:8]}' if rows else ''}); check the observation before acting on it"
        )


class FrameworkType(type):
    """The metaclass of :class:`TorchFramework`, for two things only.

    It presents the constructor: ``inspect.signature`` and ``help()`` read the class's
    ``__signature__`` (see :func:`~machin.frame.algorithms.options.constructor_signature`).
    And it calls ``_after_init`` once the outermost constructor has returned, when every
    subclass's part has made its optimizers.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        algorithm = super().__call__(*args, **kwargs)
        algorithm._after_init()
        return algorithm

    @property
    def __signature__(cls) -> inspect.Signature:
        return constructor_signature(cls)


class TorchFramework(metaclass=FrameworkType):
    """Base class of all algorithms.

    Subclasses list their networks in two class attributes: ``_is_top`` (every
    network the algorithm holds) and ``_is_restorable`` (the networks written by
    :meth:`save` and read by :meth:`load`), and their keyword options as
    :class:`~machin.frame.algorithms.options.Option` class attributes (inherited, so a
    subclass declares only what it adds or changes). A subclass's constructor takes
    ``(self, <networks, optimizer, ...>, *_, **options)`` and first calls
    ``super().__init__(*_, **options)``, which sets the options (see
    :mod:`machin.frame.algorithms.options`). The base class owns the single
    place where a loss becomes an optimizer step (:meth:`_optimize`), the learning-rate
    schedulers, checkpoint files and the optional autograd-graph drawings.
    """

    _is_top: List[str] = []
    _is_restorable: List[str] = []
    #: The compiled steps after :meth:`compile` (see :mod:`machin.frame.algorithms.compiled`).
    _compiled_steps: Optional[Any] = None
    #: How a single-process loop drives the algorithm; ``None`` when it needs a loop of its own.
    driver: Optional[Driver] = None
    #: Why there is no ``driver`` (shown by the trainer).
    driver_unavailable: str = "it declares no driver (the class attribute driver)"

    visualize = Option(False, doc="Draw the autograd graph of each loss on its first update.")
    visualize_dir = Option("", doc="Directory the drawings are written to.")
    gradient_max = Option(
        math.inf, positive, "Maximum gradient norm of each network (``inf``: no clipping)."
    )
    lr_scheduler = Option(
        None,
        doc="Learning-rate scheduler class, called once per optimizer as "
        "``lr_scheduler(optimizer, *lr_scheduler_args[i], **lr_scheduler_kwargs[i])``.",
    )
    lr_scheduler_args = Option(
        None,
        doc="One tuple of positional scheduler arguments per optimizer, e.g. ``((lr_func,),)``.",
    )
    lr_scheduler_kwargs = Option(None, doc="One dict of keyword scheduler arguments per optimizer.")

    #: Training progress of the schedules, in ``[0, 1]`` (see :meth:`set_progress`).
    _progress: float = 0.0

    #: Machin 0.3.4 helpers (``_criticize``, ...) this family still offers but its update does
    #: not call, each with what to override instead. A subclass that overrides one of them
    #: gets a warning when it is created, so that a 0.3.4 subclass is not silently ignored.
    _legacy_hooks: Dict[str, str] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_legacy_hooks" in cls.__dict__:  # a machin class that declares its hooks
            return
        for hook, replacement in cls._legacy_hooks.items():
            if hook in cls.__dict__:
                family = next(k.__name__ for k in cls.__mro__[1:] if "_legacy_hooks" in k.__dict__)
                warnings.warn(
                    f"{cls.__qualname__} overrides {hook}, a Machin 0.3.4 helper that the update of "
                    f"{family} does not call in machin; override {replacement} instead",
                    UserWarning,
                    stacklevel=2,
                )

    def __init__(self, *_: Any, **options: Any):
        """Set every option, the given value or the default, checked (extra arguments warn).

        Args:
            _: Extra positional arguments: ignored with an ``ExtraArgumentsWarning``.
            options: The keyword options; unknown ones are ignored with an ``ExtraArgumentsWarning``.
        """
        self._schedules: Dict[str, Callable[[float], Any]] = {}
        self._visualized: set = set()
        self._lr_schedulers: List[Any] = []
        self._backward: Callable[[torch.Tensor], None] = torch.autograd.backward
        specs = option_specs(type(self))
        warn_extra_arguments(self, _, options, specs)
        for name, spec in specs.items():
            setattr(self, name, options.get(name, spec.default))  # checked by the Option
        self._check_options()

    def _check_options(self) -> None:
        """Check what involves several options, once all are set (before any constructor body runs on)."""

    #: Learning-rate option -> the optimizer attributes it sets (a later change of the
    #: option, by assignment or by a schedule, sets their learning rate).
    _learning_rate_of: Dict[str, Tuple[str, ...]] = {}

    def _option_changed(self, name: str, value: Any) -> None:
        """Called after every (checked) change of an option attribute."""
        for attr in self._learning_rate_of.get(name, ()):
            optimizer = getattr(self, attr, None)
            if optimizer is not None and value is not None:
                for group in optimizer.param_groups:
                    group["lr"] = value

    @property
    def scheduled_options(self) -> List[str]:
        """Names of the options given a schedule, which :meth:`set_progress` moves."""
        return list(self._schedules)

    def set_progress(self, progress: float) -> None:
        """Move every scheduled option to its value at ``progress`` (0: start, 1: end of training).

        Options given a schedule (see :mod:`machin.utils.schedules`; e.g.
        ``DQN(..., epsilon=LinearSchedule(1.0, 0.04, 0.16))``) take the schedule's value,
        checked like any assignment; a scheduled learning rate is written into its
        optimizer. The :class:`~machin.frame.trainer.Trainer` calls this after every step
        of ``run(steps=...)``; a hand-written loop calls it with ``step / total_steps``.

        Args:
            progress: Fraction of training done, in ``[0, 1]``.

        Raises:
            ValueError: When ``progress`` is outside ``[0, 1]``, or a scheduled value fails its check.
        """
        self._progress = progress = check_progress(progress)
        for name, schedule in self._schedules.items():
            getattr(type(self), name).set_scheduled(self, schedule(progress))

    def _optimizers(self) -> List[torch.optim.Optimizer]:
        """Every optimizer, in the order of ``lr_scheduler_args`` / ``lr_scheduler_kwargs``."""
        return []

    def _after_init(self) -> None:
        """Run once after the whole constructor (every subclass's part): creates the schedulers
        and puts the networks in evaluation mode, the mode they act in (an update switches
        the networks it trains to training mode and back)."""
        self._init_lr_schedulers(self._optimizers())
        self._set_mode(False, *_modules_in(getattr(self, name, None) for name in self._is_top))

    # -- class-level descriptions ---------------------------------------------------
    @classmethod
    def get_top(cls) -> List[str]:
        """Names of every network attribute of the algorithm."""
        return list(cls._is_top)

    @classmethod
    def get_restorable(cls) -> List[str]:
        """Names of the networks that :meth:`save` writes and :meth:`load` reads."""
        return list(cls._is_restorable)

    def _networks(self, names: Iterable[str]) -> Dict[str, nn.Module]:
        return {name: getattr(self, name) for name in names}

    # -- construction helpers -------------------------------------------------------
    @staticmethod
    def _check_criterion(criterion: Any) -> None:
        """Raise ``TypeError`` unless ``criterion`` is callable (a loss module or function)."""
        if not callable(criterion):
            raise TypeError(
                f"criterion must be a loss callable as criterion(target, predicted), "
                f"e.g. nn.MSELoss(), got {criterion!r}"
            )

    @staticmethod
    def _check_same_structure(**pairs: Tuple[nn.Module, nn.Module]) -> None:
        """Raise :class:`NetworkMismatchError` unless each ``(online, target)`` pair has the same
        parameter names and shapes (a target must be a copy of its online network)."""
        for name, (online, target) in pairs.items():
            if (
                online is target
                or not isinstance(online, nn.Module)
                or not isinstance(target, nn.Module)
            ):
                continue
            # compare the networks inside DistributedDataParallel / DataParallel / torch.compile
            mine = {k: tuple(v.shape) for k, v in _unwrap(online).named_parameters()}
            theirs = {k: tuple(v.shape) for k, v in _unwrap(target).named_parameters()}
            if mine != theirs:
                diff = sorted(
                    k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)
                )
                raise NetworkMismatchError(
                    f"{name} must have the architecture of its online network (same parameter names "
                    f"and shapes), got {type(target).__name__} differing from {type(online).__name__} "
                    f"(online vs target) in "
                    + ", ".join(
                        f"{k}: {list(mine[k]) if k in mine else 'missing'} vs "
                        f"{list(theirs[k]) if k in theirs else 'missing'}"
                        for k in diff[:4]
                    )
                    + (f" and {len(diff) - 4} more" if len(diff) > 4 else "")
                )

    @staticmethod
    def _check_state(state: Any, name: str = "state") -> None:
        """Raise ``TypeError`` unless ``state`` is a dict of network inputs, ``ValueError`` if a
        floating-point tensor in it holds NaN or infinity (the network would turn it into an
        arbitrary action without a word)."""
        if not isinstance(state, dict):
            got = (
                f"a Tensor of shape {list(state.shape)}"
                if isinstance(state, torch.Tensor)
                else f"{type(state).__name__} {state!r:.80}"
            )
            raise TypeError(
                f"{name} must be a Dict[str, Tensor] of network inputs keyed by forward "
                f'argument names, e.g. {{"state": tensor[B, ...]}}, got {got}'
            )
        for key, value in state.items():
            # one reduction screens the tensor: its sum is finite when every element is
            if (
                isinstance(value, torch.Tensor)
                and value.is_floating_point()
                and not math.isfinite(value.sum())
            ):
                _raise_if_not_finite(f"{name}[{key!r}]", value)

    @staticmethod
    def _make_optimizer(
        optimizer: Callable, network: Union[nn.Module, Iterable], learning_rate: float
    ):
        if isinstance(optimizer, torch.optim.Optimizer) or not callable(optimizer):
            got = (
                f"an instance of {type(optimizer).__name__}"
                if isinstance(optimizer, torch.optim.Optimizer)
                else repr(optimizer)
            )
            raise TypeError(
                f"optimizer must be an optimizer class such as torch.optim.Adam (called as "
                f"optimizer(parameters, lr=learning_rate)), got {got}"
            )
        params = network.parameters() if isinstance(network, nn.Module) else network
        return build_optimizer(optimizer, params, learning_rate)

    def _init_lr_schedulers(self, optimizers: Sequence[Any]) -> None:
        """Create one scheduler per optimizer: ``lr_scheduler(opt_i, *args[i], **kwargs[i])``."""
        lr_scheduler, lr_scheduler_args, lr_scheduler_kwargs = (
            self.lr_scheduler,
            self.lr_scheduler_args,
            self.lr_scheduler_kwargs,
        )
        count = len(optimizers)
        if lr_scheduler is None:
            return
        args = lr_scheduler_args or ((),) * count
        kwargs = lr_scheduler_kwargs or ({},) * count
        if len(args) != count or not all(isinstance(a, (tuple, list)) for a in args):
            raise ValueError(
                f"lr_scheduler_args must hold one tuple of arguments per optimizer ({count} here), "
                f"e.g. ((lr_func,),) for one optimizer; got {lr_scheduler_args!r}"
            )
        if len(kwargs) != count or not all(isinstance(k, dict) for k in kwargs):
            raise ValueError(
                f"lr_scheduler_kwargs must hold one dict per optimizer ({count} here), got {lr_scheduler_kwargs!r}"
            )
        self._lr_schedulers = [
            lr_scheduler(opt, *a, **k) for opt, a, k in zip(optimizers, args, kwargs)
        ]

    def _make_buffer(self, factory: Callable[[], Buffer]) -> Buffer:
        """The ``replay_buffer`` option, or ``factory()`` when it was not given."""
        return factory() if self.replay_buffer is None else self.replay_buffer

    # -- training plumbing ----------------------------------------------------------
    def _optimize(
        self,
        loss: Union[torch.Tensor, Sequence[torch.Tensor]],
        optimizer: Union[torch.optim.Optimizer, Sequence[torch.optim.Optimizer]],
        parameters: Union[nn.Module, Iterable[torch.Tensor], Sequence[nn.Module]],
        gradient_max: float = math.inf,
    ) -> bool:
        """The one place where a loss becomes a step: zero grads, backward, clip, step.

        A loss that is not finite (NaN or inf) takes no step: no backward pass runs, and
        the parameters, their gradients and the optimizer state stay as they were. The
        first such loss of an algorithm instance warns (a ``RuntimeWarning``); every one
        is counted in ``skipped_updates``. Returns whether the step was taken.

        Lists of losses and of optimizers (and ``parameters`` a list of the networks)
        make one joint step, the step of the sum of the losses: every gradient is put in
        before the norm over all the networks is clipped, then every optimizer steps. No
        step is taken if one loss is not finite.
        """
        joint = isinstance(optimizer, (list, tuple))
        if joint:
            losses, optimizers, networks = list(loss), list(optimizer), list(parameters)
        else:
            losses, optimizers, networks = (loss,), (optimizer,), (parameters,)
        for one_loss, one_optimizer, network in zip(losses, optimizers, networks):
            if not _is_finite(one_loss):
                self._skip_non_finite_step(one_loss, one_optimizer, network)
                return False
        compiled = self._compiled_steps
        if compiled is not None and not joint:
            return compiled.optimize(self, loss, optimizer, parameters, gradient_max)
        for one_optimizer in optimizers:
            optimizers_module.clear_grads(one_optimizer)
        stepped = (
            self._stepped_parameters(optimizers, networks, losses) if compiled is None else None
        )
        for (
            one_loss
        ) in losses:  # from a compiled loss step when there is one, else by a backward pass
            if compiled is not None:
                compiled.put_gradients(self, one_loss)
            elif stepped is not None:
                torch.autograd.backward(one_loss, inputs=stepped)
            else:
                self._backward(one_loss)
        if gradient_max != math.inf:
            nn.utils.clip_grad_norm_(
                [p for part in networks for p in _tensors_of(part)], gradient_max
            )
        for one_optimizer in optimizers:
            if compiled is not None:
                compiled.step(self, one_optimizer, (), math.inf)  # clipped jointly above
            else:
                optimizers_module.step(one_optimizer)
        return True

    def _stepped_parameters(
        self,
        optimizers: Sequence[torch.optim.Optimizer],
        networks: Sequence[Any],
        losses: Sequence[torch.Tensor],
    ) -> Optional[List[torch.Tensor]]:
        """The tensors a step trains, when its backward pass should compute gradients for them alone.

        A loss may run through networks it does not train: the actor's loss of DDPG, TD3
        and SAC runs through the critics, whose weight gradients a full backward pass
        computes only for the critics' next ``zero_grad`` to drop. ``backward(inputs=...)``
        leaves them out, and the tensors the optimizers step get exactly the gradients of
        a full pass. Whether an optimizer's steps are restricted is decided on its first
        step (a restricted pass costs a little more where there is nothing to leave out)
        and remembered.

        ``None`` (a full backward pass): nothing to leave out, a custom backward function
        (:meth:`set_backward_function`, e.g. a gradient scaler's), a network in
        ``DistributedDataParallel`` (its reducer counts on the gradient hooks of what its
        forward pass used), or ``networks`` holding trainable tensors the optimizers do not
        step (their gradients may be wanted elsewhere).
        """
        if self._backward is not torch.autograd.backward:
            return None
        restricted = _restricted_steps.get(optimizers[0])
        if restricted is False:
            return None
        for name in self._is_top:
            if isinstance(getattr(self, name, None), nn.parallel.DistributedDataParallel):
                return None
        stepped = [
            p
            for optimizer in optimizers
            for group in getattr(optimizer, "param_groups", ())
            for p in group["params"]
            if p.requires_grad
        ]
        if restricted is None:
            inside = set(map(id, stepped))
            restricted = (
                bool(stepped)
                and all(
                    id(p) in inside
                    for part in networks
                    for p in _tensors_of(part)
                    if p.requires_grad
                )
                and _reaches_other_tensors(losses, stepped)
            )
            with contextlib.suppress(
                TypeError
            ):  # an optimizer-like object without weak references: decide every time
                _restricted_steps[optimizers[0]] = restricted
        return stepped if restricted else None

    def _skip_non_finite_step(
        self,
        loss: torch.Tensor,
        optimizer: torch.optim.Optimizer,
        parameters: Union[nn.Module, Iterable[torch.Tensor]],
    ) -> None:
        """Count a step skipped by :meth:`_optimize`; warn on the first of this instance."""
        self.skipped_updates = getattr(self, "skipped_updates", 0) + 1
        if getattr(self, "_warned_non_finite_loss", False):
            return
        self._warned_non_finite_loss = True
        name = next((k for k, v in vars(self).items() if v is optimizer), None)
        if name is None:
            name = (
                type(parameters).__name__
                if isinstance(parameters, nn.Module)
                else type(optimizer).__name__
            )
        value = loss.item() if loss.numel() == 1 else "a non-finite element"
        warn_caller(
            f"{type(self).__name__}: the loss stepped by {name!r} is {value}, not finite; its optimizer "
            f"step was skipped and the networks and optimizer state were left unchanged. Look for NaN/inf "
            f"in the stored rewards and states (or in the network outputs), and check whether the learning "
            f"rate is too high. This warning is given once per algorithm instance; skipped steps are "
            f"counted in its skipped_updates attribute.",
            RuntimeWarning,
        )

    @staticmethod
    def _set_mode(training: bool, *networks: nn.Module) -> None:
        """Switch networks to training or evaluation mode.

        Only networks with layers that behave differently in the two modes (dropout,
        batch norm, instance norm with running statistics, or any module declaring
        ``mode_sensitive = True``)
        are switched, since ``train()`` walks every submodule.
        """
        for network in networks:
            if network.training != training and _mode_sensitive(network):
                network.train(training)

    def compile(
        self,
        *,
        backend: Union[str, Callable] = "inductor",
        mode: Optional[str] = None,
        options: Optional[Dict[str, Any]] = None,
        dynamic: Optional[bool] = None,
        fullgraph: bool = True,
    ) -> TorchFramework:
        """Compile the update with ``torch.compile`` (opt-in); returns the framework itself.

        ``dqn = DQN(...).compile()``. Each step of :meth:`update` that computes losses (with
        its backward pass), a Bellman target or the target networks' soft update becomes one
        compiled call, and so does every optimizer step with its gradient clipping. The
        networks themselves are not changed (checkpoints and ``act*`` are as before), and
        the results equal eager training within float tolerance. Compiling happens on the
        first updates; a step that cannot be compiled runs eagerly after one
        :class:`~machin.frame.algorithms.compiled.CompileFallbackWarning`. The documentation's
        page "Compiled updates" says what is compiled and when it pays off.

        Args:
            backend: The ``torch.compile`` backend; ``"aot_eager"`` compiles fast but runs at
                eager speed (for checking).
            mode: The ``torch.compile`` mode. With the networks on a GPU, ``None`` means
                ``"reduce-overhead"`` (CUDA graphs) unless ``options`` are given.
            options: Inductor options, e.g. ``{"fallback_random": True}`` for eager's random numbers.
            dynamic: ``torch.compile``'s ``dynamic``; ``None`` compiles one shape-generic
                version when a batch of another size (a partial batch) comes.
            fullgraph: Compile each step whole (``False``: let torch.compile split a step
                around code it cannot trace instead of falling back to eager).
        """
        from .compiled import CompiledSteps

        self._compiled_steps = CompiledSteps(
            self, backend=backend, mode=mode, options=options, dynamic=dynamic, fullgraph=fullgraph
        )
        return self

    def set_backward_function(self, backward_func: Callable[[torch.Tensor], None]) -> None:
        """Replace ``torch.autograd.backward`` (e.g. with a gradient scaler's or accelerator's).

        Args:
            backward_func: Called as ``backward_func(loss)`` instead of ``loss.backward()`` in every optimizer step.
        """
        self._backward = backward_func

    def update_lr_scheduler(self) -> None:
        """Step every learning-rate scheduler once (call after an update)."""
        for scheduler in self._lr_schedulers:
            scheduler.step()

    def _maybe_visualize(self, final_tensor: torch.Tensor, name: str) -> None:
        if self.visualize and name not in self._visualized:
            self.visualize_model(final_tensor, name, self.visualize_dir)

    def visualize_model(self, final_tensor: torch.Tensor, name: str, directory: str) -> None:
        """Write the autograd graph ending at ``final_tensor`` once per ``name``.

        Args:
            final_tensor: The tensor (a loss) whose graph is drawn.
            name: Name of the graph; a name is drawn only once.
            directory: Directory that receives ``<name>/`` with the drawing.
        """
        if name in self._visualized:
            return
        from ...utils.visualize import visualize_graph

        self._visualized.add(name)
        visualize_graph(
            final_tensor, visualize_dir=os.path.join(directory, name), exit_after_vis=False
        )

    def enable_multiprocessing(self) -> None:
        """Move every network of ``_is_top`` to shared memory (for process-based sharing)."""
        for model in self._networks(self._is_top).values():
            model.share_memory()

    # -- checkpoints ----------------------------------------------------------------
    #: Names a network had in Machin 0.3.4 -> its attribute now (accepted in ``network_map``).
    _restorable_aliases: Dict[str, str] = {}

    def _file_names(self, network_map: Optional[Dict[str, str]]) -> Dict[str, str]:
        """``{attribute: file name}`` of every restorable network."""
        network_map = {
            self._restorable_aliases.get(k, k): v for k, v in (network_map or {}).items()
        }
        unknown = sorted(set(network_map) - set(self._is_restorable))
        if unknown:
            # Machin 0.3.4 skipped such names; skip them too, but say so (a typo would lose a network).
            warn_caller(
                f"network_map names {unknown}, which {type(self).__name__} does not save; they are "
                f"ignored. The restorable networks are {self._is_restorable}."
            )
        return {name: network_map.get(name, name) for name in self._is_restorable}

    def save(
        self, model_dir: str, network_map: Optional[Dict[str, str]] = None, version: int = 0
    ) -> None:
        """Write the ``state_dict`` of every restorable network to ``<model_dir>/<name>_<version>.pt``.

        The files of a version are one unit (see :func:`~machin.utils.prepare.prep_save_checkpoint`):
        after the networks' files (and the files of :meth:`_extra_checkpoint_state`) a manifest
        ``<first name>_<version>.manifest.json`` is written, last and atomically, so a save that
        is killed half way never yields a version that :meth:`load` accepts. Temporary files of
        earlier killed saves in ``model_dir`` are removed.

        Args:
            model_dir: Directory to write to (created if missing).
            network_map: Maps a network attribute name to the file name to use.
            version: Version number in the file names.
        """
        from ...utils.prepare import prep_save_checkpoint

        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version must be a non-negative integer, got {version!r}")
        states = {
            file_name: getattr(self, attr).state_dict()
            for attr, file_name in self._file_names(network_map).items()
        }
        for name, state in self._extra_checkpoint_state(network_map).items():
            if name in states:
                raise ValueError(
                    f"extra checkpoint file {name!r} clashes with a network's file name"
                )
            states[name] = state
        prep_save_checkpoint(model_dir, states, version, logger=default_logger)

    def _extra_checkpoint_names(self, network_map: Optional[Dict[str, str]]) -> List[str]:
        """Names (without version) of the non-network files a version may hold; read by :meth:`load`."""
        return []

    def _extra_checkpoint_state(self, network_map: Optional[Dict[str, str]]) -> Dict[str, Any]:
        """``{name: state}`` of non-network files saved with every version (in the same manifest).

        Names must be among :meth:`_extra_checkpoint_names`; states are mappings of tensors
        (and nested mappings) that ``torch.load(..., weights_only=True)`` reads back.
        """
        return {}

    def _load_extra_checkpoint_state(
        self, network_map: Optional[Dict[str, str]], states: Dict[str, Any]
    ) -> None:
        """Apply the extra files read by :meth:`load` (``None`` for a file the version lacks).

        Called after the networks are loaded and before :meth:`_post_load`; the files were
        read and checked together with the networks' files, before any network changed.
        """

    def load(
        self,
        model_dir: str,
        network_map: Optional[Dict[str, str]] = None,
        version: int = -1,
        *,
        trusted: bool = False,
    ) -> None:
        """Load the restorable networks from ``model_dir`` into the existing network objects.

        Only complete versions are loaded (see :func:`~machin.utils.prepare.prep_load_model`):
        every file of the version is read and checked against its network before any network
        changes, and a failure names the file. With ``version=-1`` a newer version that is
        incomplete (an interrupted save) or damaged is skipped, with a warning, for the
        newest complete one. Directories without manifests (written by Machin 0.3.4 or
        earlier releases) load as before.

        Args:
            model_dir: Directory holding ``<name>_<version>.pt`` files.
            network_map: Maps a network attribute name to its file name.
            version: Version to load; ``-1`` loads the newest complete version. A version no
                file has (or, without a manifest, some network lacks) loads the newest
                complete version with a warning; a version a manifest shows incomplete raises.
            trusted: Also read files that hold whole pickled modules, as Machin 0.3.4 wrote
                them. Unpickling such a file **can run arbitrary code**: pass ``True`` only
                for files you made yourself or otherwise trust. By default files are read
                with ``weights_only=True`` and must hold state dicts.

        Raises:
            RuntimeError: When the directory is missing, no complete version is common to all
                networks, a requested version is incomplete, or a file is damaged or does not
                fit its network (:class:`~machin.utils.prepare.CheckpointLoadError`,
                :class:`~machin.utils.prepare.StateDictMismatchError`, naming the file).
        """
        from ...utils.prepare import prep_load_checkpoint

        names = self._file_names(network_map)
        model_map = {file_name: getattr(self, attr) for attr, file_name in names.items()}
        _, extras = prep_load_checkpoint(
            model_dir,
            model_map,
            version=None if version == -1 else version,
            logger=default_logger,
            trusted=trusted,
            extra=self._extra_checkpoint_names(network_map),
        )
        self._load_extra_checkpoint_state(network_map, extras)
        self._post_load()

    def _post_load(self) -> None:
        """Hook run after :meth:`load` (e.g. to copy loaded targets into online networks)."""

    # -- run states (exact resume) --------------------------------------------------
    def save_state(self, path: str) -> None:
        """Write everything the algorithm's future depends on to ``path``, for :meth:`resume`.

        That is every network (targets included), optimizer and learning-rate scheduler,
        the replay buffer (as tensors: its rows, ring position, layout and priorities),
        the counters and other plain values among the attributes (``updates_done``,
        ``epsilon``, ...), the shared Ornstein-Uhlenbeck noise and the global torch, numpy
        and Python random generators (see :mod:`machin.frame.algorithms.run_state`). The
        file is written atomically, then the manifest ``<path>.manifest.json`` (size and
        SHA-256) last: a save killed half way is never resumed from. Save each time to a
        new path and resume from the newest one with a manifest. The documentation's page
        "Resuming training" says what a resumed run repeats exactly.

        Args:
            path: File to write (its directory is created if missing).
        """
        from .run_state import save_run_state

        save_run_state(self, path)

    def resume(self, path: str) -> None:
        """Continue from a :meth:`save_state`: after it, the algorithm (and the global random
        generators) are in the state they were in when ``path`` was saved.

        Everything is read and checked before anything changes: on an error nothing of the
        algorithm changed.

        Args:
            path: A file written by :meth:`save_state` of an algorithm of this class built
                with networks of the same architecture.

        Raises:
            RunStateError: (a ``ValueError``) When the save is incomplete (no manifest), the
                file is truncated or changed, or it was saved by another algorithm class,
                with networks of another architecture, or with a buffer of other columns;
                the message names the file and the mismatch.
        """
        from .run_state import resume_run_state

        resume_run_state(self, path)

    def _extra_run_state(self) -> Dict[str, Any]:
        """What a subclass adds to :meth:`save_state` (tensors, numbers, strings and containers of them)."""
        return {}

    def _check_extra_run_state(self, state: Mapping[str, Any], path: str) -> None:
        """Raise ``RunStateError`` unless :meth:`_load_extra_run_state` can load ``state``; change nothing."""

    def _load_extra_run_state(self, state: Mapping[str, Any]) -> None:
        """Load what :meth:`_extra_run_state` returned (after the checked common parts)."""

    @classmethod
    def generate_config(cls, config: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """A complete config of this algorithm: ``config`` plus the defaults it lacks
        (see :func:`machin.frame.algorithms.config.generate_config`)."""
        from .config import generate_config

        return generate_config(cls, config)

    @classmethod
    def init_from_config(cls, config: Dict[str, Any], model_device: Any = "cpu") -> TorchFramework:
        """Build this algorithm from a config, its networks on ``model_device``
        (see :func:`machin.frame.algorithms.config.init_from_config`)."""
        from .config import init_from_config

        return init_from_config(cls, config, model_device)

"""Recurrent off-policy actor-critics: SAC and TD3 trained on replayed sequences.

:class:`RecurrentSAC` and :class:`RecurrentTD3` are :class:`~machin.frame.algorithms.sac.SAC`
and :class:`~machin.frame.algorithms.td3.TD3` whose actor and critics carry a hidden state,
for tasks where one observation does not tell the whole state. They learn as
:class:`~machin.frame.algorithms.r2d1.R2D1` does: whole episodes go into a
:class:`~machin.frame.buffers.SequenceBuffer`, each update samples windows cut from them,
every network is unrolled over a window from its hidden state stored with the window's
first step, the first ``burn_in`` steps of a window only warm that state up (no gradient,
no loss) and the losses cover the next ``sequence_length`` steps. What both share lives in :class:`RecurrentActorCritic`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..buffers import Buffer, SequenceBatch, SequenceBuffer
from ..transition import Transition, as_transition
from .base import Driver
from .critics import value_column
from .options import BufferOptions, Option, non_negative_int, one_of, optional, positive_int
from .policy import split_actor_output
from .r2d1 import R2D1
from .sac import SAC
from .td3 import TD3
from .utils import Hidden, as_column, forward_takes, map_hidden, safe_call

__all__ = ["RecurrentBatch", "RecurrentActorCritic", "RecurrentSAC", "RecurrentTD3"]


def _sequence_buffer(name: str, value: Any) -> SequenceBuffer:
    if not isinstance(value, SequenceBuffer):
        raise TypeError(f"{name} must be a SequenceBuffer, got {type(value).__name__}")
    return value


def _key(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _at(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[b, index[b, j]]`` for a ``[B, W, ...]`` tensor and ``[B, L]`` positions, as ``[B * L, ...]``."""
    index = index.to(values.device).view(*index.shape, *[1] * (values.dim() - 2))
    return values.gather(1, index.expand(-1, -1, *values.shape[2:])).flatten(0, 1)


def _take(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[b, index[b, j]]`` for a ``[B, W, ...]`` tensor and ``[B, L]`` positions, as ``[B, L, ...]``."""
    return _at(values, index).view(*index.shape, *values.shape[2:])


def _with_time(values: Dict[str, Any]) -> Dict[str, Any]:
    """``values`` with a time dimension of one step: ``[B, ...]`` tensors become ``[B, 1, ...]``."""
    return {k: v.unsqueeze(1) if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def _first_step(value: Any) -> Any:
    """The first step ``[B, ...]`` of the ``[B, T, ...]`` tensors in a network output."""
    if isinstance(value, torch.Tensor):
        return value[:, 0]
    if isinstance(value, tuple):
        return tuple(_first_step(part) for part in value)
    return value


def _stack_time(steps: List[Dict[str, Any]]) -> Dict[str, torch.Tensor]:
    """Per-step dicts of ``[1, ...]`` tensors as one dict of ``[1, T, ...]`` tensors."""
    return {k: torch.stack([torch.as_tensor(step[k]) for step in steps], dim=1) for k in steps[0]}


def _has_time(value: Any, size: int, steps: int) -> bool:
    """Whether ``value`` is a ``[size, steps, ...]`` tensor."""
    return isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[:2] == (size, steps)


def _shapes(value: Any) -> Any:
    """The shapes in a network output, for error messages (type names for what is no tensor)."""
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, tuple):
        return [_shapes(part) for part in value]
    return type(value).__name__


def _describe_count(output: Any) -> str:
    """``a tuple of N values``, or the type name of what is no tuple."""
    return (
        f"a tuple of {len(output)} values" if isinstance(output, tuple) else type(output).__name__
    )


def _per_step(values: Any, size: int, length: int, what: str) -> torch.Tensor:
    """One number per sample and step, ``[B, L]``, from ``[B, L]`` or ``[B, L, 1]`` network outputs."""
    if isinstance(values, torch.Tensor) and values.dim() >= 2:
        values = values.flatten(0, 1)
    return as_column(values, size * length, what).view(size, length)


def _along_time(join: Any, outputs: List[tuple], given: List[Hidden]) -> Tuple[tuple, Hidden]:
    """Per-step (``torch.stack``) or per-part (``torch.cat``) outputs and hidden states joined
    along the time dimension; outputs that are no tensors become ``None``."""
    joined = tuple(
        join(parts, dim=1) if isinstance(parts[0], torch.Tensor) else None
        for parts in zip(*outputs)
    )
    return joined, map_hidden(lambda *parts: join(parts, dim=1), *given)


@dataclass
class RecurrentBatch(SequenceBatch):
    """A :class:`~machin.frame.buffers.SequenceBatch` with the critics' stored hidden states.

    Attributes:
        critic_hidden: ``{critic name: [B, ...] hidden state}`` stored at each window's
            first real step (``None`` where none was stored); ``state`` holds no hidden states.
    """

    critic_hidden: Dict[str, Optional[torch.Tensor]] = field(default_factory=dict)


class RecurrentActorCritic:
    """Sequence replay for recurrent actor-critics, mixed in before SAC or TD3.

    It declares the sequence options, stores whole episodes in a
    :class:`~machin.frame.buffers.SequenceBuffer` (sampled uniformly: the priorities are
    never changed), and unrolls a network over the sampled windows. A network is called
    by keyword as everywhere in machin, with the hidden state under ``hidden_key``, and
    returns its usual outputs followed by its hidden state: once per time step
    (``unroll="step"``, the default) or once per part of a window (``unroll="sequence"``,
    see :class:`RecurrentSAC`). Only what the host algorithm's losses differ in is left
    to :class:`RecurrentSAC` and :class:`RecurrentTD3`.
    """

    driver: Driver
    batch_size = BufferOptions.batch_size.but(default=32, doc="Sequences per update.")
    replay_size = BufferOptions.replay_size.but(
        default=100000, doc="Capacity of the default buffer, in steps."
    )
    replay_buffer = BufferOptions.replay_buffer.but(
        check=optional(_sequence_buffer),
        doc="A SequenceBuffer with the sequence options below, to use instead of the default one.",
    )
    sequence_length = Option(8, positive_int, "Training steps per sequence.")
    burn_in = Option(
        4,
        non_negative_int,
        "Steps before the training part that only warm up the hidden states "
        "(no gradient, no loss).",
    )
    sequence_stride = Option(
        1,
        positive_int,
        "Only every ``sequence_stride``-th step of an episode starts a "
        "sequence (1: every step does).",
    )
    hidden_key = Option(
        "hidden",
        _key,
        "Name of the hidden-state argument of every network's ``forward`` "
        "and of the actor's hidden state in the stored state dicts.",
    )
    unroll = Option(
        "step",
        one_of("step", "sequence"),
        "How the networks run over a window: ``'step'`` calls each network once per "
        "time step; ``'sequence'`` calls it once per window with ``[B, T, ...]`` inputs "
        "and takes back ``[B, T, ...]`` outputs and its hidden states after every step.",
    )
    #: What the actor returns, for error messages, and how many outputs that is at least.
    _actor_outputs: Tuple[str, int] = ("(action, ..., new_hidden)", 2)
    #: Parts of the tuple hidden states stored so far, by network name.
    _hidden_parts: Dict[str, int] = {}
    _critic_run: Optional[Tuple[SequenceBatch, List[Hidden]]] = None

    def _critic_nets(self) -> List[Tuple[str, nn.Module, nn.Module]]:
        """``(name, critic, its target)`` for every critic."""
        raise NotImplementedError

    # -- the buffer -------------------------------------------------------------------
    def _default_buffer(self) -> SequenceBuffer:
        return SequenceBuffer(self.replay_size, self.replay_device, **self._sequence_options())

    def _sequence_options(self) -> Dict[str, Any]:
        names = ("sequence_length", "burn_in", "n_step", "discount", "sequence_stride")
        return {**{name: getattr(self, name) for name in names}, "hidden_key": self.hidden_key}

    def _make_buffer(self, factory: Any) -> Buffer:
        buffer = super()._make_buffer(factory)
        for name, value in self._sequence_options().items():
            if getattr(buffer, name) != value:
                raise ValueError(
                    f"replay_buffer has {name}={getattr(buffer, name)!r}, but "
                    f"{type(self).__name__} was given {name}={value!r}"
                )
        return buffer

    # -- acting -----------------------------------------------------------------------
    def _actor_output(self, state: Dict[str, Any], *flags: Any) -> Any:
        """The actor's output for one step; in sequence mode, from a window of one step."""
        if self.unroll == "step":
            return super()._actor_output(state, *flags)
        self._check_state(state)
        hidden = state.get(self.hidden_key)
        window = {**_with_time(state), self.hidden_key: hidden}
        output = super()._actor_output(window, *flags)
        size = next(v for v in state.values() if isinstance(v, torch.Tensor)).shape[0]
        self._check_window(self.actor, "actor", output, hidden, size, 1)
        return _first_step(output)

    # -- storing ----------------------------------------------------------------------
    def store_transition(self, transition: Any) -> None:
        """Not available: recurrent networks learn from whole episodes (:meth:`store_episode`).

        Args:
            transition: Ignored.

        Raises:
            RuntimeError: Always.
        """
        raise RuntimeError(
            f"{type(self).__name__} replays sequences cut from whole episodes: "
            f"call store_episode instead of store_transition"
        )

    def store_episode(self, episode: Sequence[Union[Transition, Dict[str, Any]]]) -> None:
        """Store a whole episode with the hidden states of the actor and of the critics.

        Each step's ``state`` dict holds, under ``hidden_key``, the hidden state the actor
        was given at that step (its initial state, e.g. zeros, at the first step). The
        critics' hidden states are computed here: each critic is run over the episode's
        states and actions from its initial state, without gradient, and the state it
        was given at each step is stored with the step. End the episode with
        ``terminal=False`` when a time limit cut it. Tuple hidden states (an LSTM's
        ``(h, c)``) are stacked into one tensor for storage and split again for the network.

        Args:
            episode: The episode's steps, in order (dicts or transitions).

        Raises:
            ValueError: When the episode is empty, or a tuple hidden state holds tensors
                of different shapes.
        """
        steps = [self._packed(step) for step in episode]
        if not steps:
            raise ValueError("episode must hold at least one transition, got an empty episode")
        for name, critic, _ in self._critic_nets():
            for step, hidden in zip(steps, self._critic_states(name, critic, steps)):
                step["state"] = {**step["state"], self._hidden_key_of(name): hidden}
        self.replay_buffer.store_episode(steps)

    def _stored_keys(self) -> List[str]:
        """Keys of the stored hidden states in the state dicts (the actor's and each critic's)."""
        return [
            self._hidden_key_of(name) for name in ["actor"] + [n for n, _, _ in self._critic_nets()]
        ]

    def _hidden_key_of(self, name: str) -> str:
        """Key of the stored hidden state of network ``name`` (``hidden_key`` for the actor)."""
        return self.hidden_key if name == "actor" else f"{self.hidden_key}_{name}"

    def _packed(self, step: Any) -> Dict[str, Any]:
        """``step`` as a new dict, the actor's hidden states in it stacked when they are tuples."""
        step = dict(step) if isinstance(step, dict) else dict(as_transition(step).items())
        for attr in ("state", "next_state"):
            if isinstance(step.get(attr), dict) and self.hidden_key in step[attr]:
                hidden = self._pack("actor", step[attr][self.hidden_key])
                step[attr] = {**step[attr], self.hidden_key: hidden}
        return step

    def _pack(self, name: str, value: Any) -> Any:
        """Stack a tuple hidden state of network ``name`` into one ``[B, parts, ...]`` tensor."""
        if not isinstance(value, tuple):
            return value
        if len({tuple(v.shape) for v in value}) != 1:
            raise ValueError(
                f"a tuple hidden state of the {name} must hold tensors of one shape, got shapes "
                f"{[list(v.shape) for v in value]}"
            )
        self._hidden_parts = {**self._hidden_parts, name: len(value)}
        return torch.stack(value, dim=1)

    def _unpack(self, name: str, value: Optional[torch.Tensor]) -> Optional[Hidden]:
        """The hidden state of network ``name`` as the network takes it (see :meth:`_pack`)."""
        if value is None or name not in self._hidden_parts:
            return value
        return tuple(value.unbind(1))

    def _critic_states(
        self, name: str, critic: nn.Module, steps: List[Dict[str, Any]]
    ) -> List[torch.Tensor]:
        """The (packed) hidden state ``critic`` is given at each step when run over ``steps``."""
        stored = self._stored_keys()
        states = [{k: v for k, v in step["state"].items() if k not in stored} for step in steps]
        inputs = [_stack_time(states), _stack_time([step["action"] for step in steps])]
        observed = torch.ones(1, len(steps), dtype=torch.bool)
        with torch.no_grad():
            _, given = self._run(critic, name, inputs, None, observed, len(steps))
        return [
            self._pack(name, map_hidden(lambda h, k=k: h[:, k], given)) for k in range(len(steps))
        ]

    # -- sampling and unrolling -------------------------------------------------------
    def _sample(self, concatenate: bool, *_: Any) -> Optional[RecurrentBatch]:
        if not concatenate:
            raise ValueError(
                f"{type(self).__name__} samples batched sequences: "
                f"concatenate_samples=False is not supported"
            )
        parameter = next(iter(self.actor.parameters()), None)
        batch = self.replay_buffer.sample_sequences(
            self.batch_size, None if parameter is None else parameter.device
        )
        if batch is None:
            return None
        state, critic_hidden = dict(batch.state), {}
        first = batch.step_mask.to(torch.int8).argmax(dim=1)  # each window's first real step
        rows = torch.arange(batch.size, device=first.device)
        for name, _, _ in self._critic_nets():
            stored = state.pop(self._hidden_key_of(name), None)
            critic_hidden[name] = None if stored is None else stored[rows, first]
        return RecurrentBatch(**{**vars(batch), "state": state, "critic_hidden": critic_hidden})

    def _expected_outputs(self, role: str) -> Tuple[str, int]:
        """What network ``role`` returns, for error messages, and how many outputs that is at least."""
        return self._actor_outputs if role == "actor" else ("(value, ..., new_hidden)", 2)

    def _check_takes_hidden(self, network: nn.Module, role: str) -> None:
        if not forward_takes(network, self.hidden_key):
            raise TypeError(
                f"{type(self).__name__} passes the hidden state of the {role} as "
                f"hidden_key={self.hidden_key!r}, but the forward of {type(network).__name__} "
                f"has no argument of that name"
            )

    def _step(
        self, network: nn.Module, role: str, inputs: List[Dict[str, Any]], hidden: Optional[Hidden]
    ) -> Tuple[tuple, Hidden]:
        """One time step of ``network`` (``[B, ...]`` inputs): ``(its outputs but the last, its new hidden state)``.

        In sequence mode the network runs over a window of one step.
        """
        size = next(iter(inputs[0].values())).shape[0]
        if self.unroll == "sequence":
            output, states = self._call_window(
                network, role, [_with_time(values) for values in inputs], hidden, size, 1
            )
            return _first_step(output), _first_step(states)
        self._check_takes_hidden(network, role)
        output = safe_call(network, *inputs, {self.hidden_key: hidden})
        if not self._ends_with_hidden(output, self._expected_outputs(role)[1], size):
            raise ValueError(
                f"{type(self).__name__} needs the {role} to return "
                f"{self._expected_outputs(role)[0]}, its new hidden state ([batch, ...] tensors) "
                f"last; {type(network).__name__} returned {_describe_count(output)}"
            )
        return output[:-1], output[-1]

    @staticmethod
    def _ends_with_hidden(output: Any, needed: int, size: int) -> bool:
        """Whether ``output`` is a tuple of at least ``needed`` values ending with a hidden state of ``size`` rows."""
        if not isinstance(output, tuple) or len(output) < needed:
            return False
        parts = output[-1] if isinstance(output[-1], tuple) else (output[-1],)
        return all(
            isinstance(part, torch.Tensor) and part.dim() > 0 and part.shape[0] == size
            for part in parts
        )

    def _call_window(
        self,
        network: nn.Module,
        role: str,
        inputs: List[Dict[str, Any]],
        hidden: Optional[Hidden],
        size: int,
        steps: int,
    ) -> Tuple[tuple, Hidden]:
        """One call of ``network`` over ``[B, T, ...]`` inputs (sequence mode).

        Returns:
            Its outputs but the last, ``[B, T, ...]``, and its hidden states after every
            step, ``[B, T, ...]``.
        """
        self._check_takes_hidden(network, role)
        output = safe_call(network, *inputs, {self.hidden_key: hidden})
        self._check_window(network, role, output, hidden, size, steps)
        return output[:-1], output[-1]

    def _check_window(
        self,
        network: nn.Module,
        role: str,
        output: Any,
        hidden: Optional[Hidden],
        size: int,
        steps: int,
    ) -> None:
        """Raise ``ValueError`` unless ``output`` is what a network returns over a window in sequence mode."""
        expected, needed = self._expected_outputs(role)
        where = (
            f"{type(self).__name__} runs the {role} over windows (unroll='sequence'), so "
            f"{type(network).__name__}"
        )
        if not isinstance(output, tuple) or len(output) < needed:
            raise ValueError(
                f"{where} must return {expected} with its hidden states after every step "
                f"last; it returned {_describe_count(output)}"
            )
        states = output[-1] if isinstance(output[-1], tuple) else (output[-1],)
        given = hidden if isinstance(hidden, tuple) else (hidden,) * len(states)
        values_fit = all(
            _has_time(value, size, steps)
            for value in output[:-1]
            if isinstance(value, torch.Tensor)
        )
        states_fit = len(given) == len(states) and all(
            _has_time(state, size, steps)
            and (before is None or state.shape[2:] == before.shape[1:])
            for state, before in zip(states, given)
        )
        if not (values_fit and states_fit):
            state_shape = "..." if hidden is None else _shapes(hidden)
            raise ValueError(
                f"{where} must return outputs of shape [batch, time, ...] = [{size}, {steps}, ...] "
                f"and, last, its hidden states after every step, [batch, time, <hidden state>] "
                f"(hidden state given: {state_shape}); it returned shapes {_shapes(output)}"
            )

    def _run(
        self,
        network: nn.Module,
        role: str,
        inputs: List[Dict[str, torch.Tensor]],
        hidden: Optional[Hidden],
        observed: torch.Tensor,
        grad_from: int,
    ) -> Tuple[tuple, Hidden]:
        """Run ``network`` over windows of ``[B, L, ...]`` ``inputs`` from the hidden state ``hidden``.

        ``None`` stands for the network's initial state. Positions from ``grad_from`` on run
        with gradient, those before it without. At positions without an observation
        (``observed`` ``[B, L]`` false) the hidden state stays as it was: in sequence mode
        this holds for the positions before a window's first observation, after the last
        one the hidden states go on (no loss reads them).

        Returns:
            The outputs (without the hidden state) ``[B, L, ...]``, and the hidden states
            the network was given at each position, ``[B, L, ...]``.
        """
        run = self._run_windows if self.unroll == "sequence" else self._run_steps
        return run(network, role, inputs, hidden, observed, grad_from)

    def _run_steps(
        self,
        network: nn.Module,
        role: str,
        inputs: List[Dict[str, torch.Tensor]],
        hidden: Optional[Hidden],
        observed: torch.Tensor,
        grad_from: int,
    ) -> Tuple[tuple, Hidden]:
        """:meth:`_run` in step mode: one call per position."""
        outputs, given = [], []
        all_observed = observed.all(dim=0).tolist()
        for k, observed_k in enumerate(all_observed):
            with torch.set_grad_enabled(k >= grad_from):
                given.append(hidden)
                step_inputs = [{key: value[:, k] for key, value in d.items()} for d in inputs]
                output, new_hidden = self._step(network, role, step_inputs, hidden)
                hidden = (
                    new_hidden
                    if observed_k
                    else R2D1._keep_unobserved(observed[:, k], new_hidden, hidden)
                )
            outputs.append(output)
        if given[0] is None:  # the initial state is zeros, as for torch's recurrent cells
            given[0] = map_hidden(torch.zeros_like, hidden)
        return _along_time(torch.stack, outputs, given)

    def _run_windows(
        self,
        network: nn.Module,
        role: str,
        inputs: List[Dict[str, torch.Tensor]],
        hidden: Optional[Hidden],
        observed: torch.Tensor,
        grad_from: int,
    ) -> Tuple[tuple, Hidden]:
        """:meth:`_run` in sequence mode: one call for the part without gradient, one for the rest."""
        length = observed.shape[1]
        outputs, given = [], []
        for start, end in ((0, grad_from), (grad_from, length)):
            if start >= end:
                continue
            with torch.set_grad_enabled(start == grad_from):
                part = [{key: value[:, start:end] for key, value in d.items()} for d in inputs]
                output, part_given, hidden = self._run_window(
                    network, role, part, hidden, observed[:, start:end]
                )
            outputs.append(output)
            given.append(part_given)
        return _along_time(torch.cat, outputs, given)

    def _run_window(
        self,
        network: nn.Module,
        role: str,
        inputs: List[Dict[str, torch.Tensor]],
        hidden: Optional[Hidden],
        observed: torch.Tensor,
    ) -> Tuple[tuple, Hidden, Hidden]:
        """One call of ``network`` over a window, each row shifted to start at its first observation.

        Returns:
            The outputs ``[B, T, ...]`` (at positions before a row's first observation: its
            first output), the hidden states given at each position ``[B, T, ...]``, and
            the hidden state after the window ``[B, ...]``.
        """
        size, steps = observed.shape
        first = torch.where(observed.any(dim=1), observed.to(torch.int8).argmax(dim=1), steps)
        shift = bool(first.any())
        if shift:  # move each row's first observation to position 0
            index = (torch.arange(steps, device=first.device) + first.view(-1, 1)).clamp(
                max=steps - 1
            )
            inputs = [{key: _take(value, index) for key, value in d.items()} for d in inputs]
        output, states = self._call_window(network, role, inputs, hidden, size, steps)
        if hidden is None:  # the initial state is zeros, as for torch's recurrent cells
            hidden = map_hidden(lambda state: torch.zeros_like(state[:, 0]), states)
        # known[:, j]: the hidden state given at shifted position j (j = T: after the window)
        known = map_hidden(
            lambda before, after: torch.cat([before.unsqueeze(1).to(after), after], dim=1),
            hidden,
            states,
        )
        if shift:  # and back: position p of a row was its shifted position p - first
            back = (torch.arange(steps + 1, device=first.device) - first.view(-1, 1)).clamp(min=0)
            output = tuple(
                _take(value, back[:, :steps]) if isinstance(value, torch.Tensor) else value
                for value in output
            )
            known = map_hidden(lambda value: _take(value, back), known)
        return (
            output,
            map_hidden(lambda value: value[:, :-1], known),
            map_hidden(lambda value: value[:, -1], known),
        )

    def _unroll(
        self,
        network: nn.Module,
        role: str,
        batch: RecurrentBatch,
        length: int,
        hidden: Optional[Hidden] = None,
        action: Optional[Dict[str, torch.Tensor]] = None,
        train: bool = False,
    ) -> Tuple[tuple, Hidden]:
        """Run ``network`` over the first ``length`` positions of the windows of ``batch`` (see :meth:`_run`).

        The run starts from ``hidden`` (``None``: the network's initial state); ``action``
        (for a critic) gives the stored actions. With ``train``, the burn-in positions
        run without gradient and the others with it; else all run without gradient.
        """
        inputs = [{key: value[:, :length] for key, value in batch.state.items()}]
        if action is not None:
            inputs.append({key: value[:, :length] for key, value in action.items()})
        grad_from = min(self.burn_in, length) if train and torch.is_grad_enabled() else length
        return self._run(network, role, inputs, hidden, batch.observed[:, :length], grad_from)

    def _actor_run(
        self, actor: nn.Module, batch: RecurrentBatch, length: int, train: bool = False
    ) -> tuple:
        """The actor's outputs ``[B, length, ...]``, unrolled from the stored hidden state."""
        outputs, _ = self._unroll(
            actor, "actor", batch, length, self._unpack("actor", batch.hidden), train=train
        )
        return outputs

    def _critic_values(
        self,
        name: str,
        critic: nn.Module,
        batch: RecurrentBatch,
        length: int,
        train: bool = False,
    ) -> Tuple[torch.Tensor, Hidden]:
        """The values ``[B, length]`` of the stored actions and the hidden states the critic was given.

        ``critic`` is the critic ``name`` or its target; both start from the hidden state
        stored for ``name``.
        """
        hidden = self._unpack(name, batch.critic_hidden.get(name))
        outputs, given = self._unroll(critic, name, batch, length, hidden, batch.action, train)
        return _per_step(outputs[0], batch.size, length, f"{type(critic).__name__} output"), given

    def _value_at(
        self,
        critic: nn.Module,
        batch: RecurrentBatch,
        index: torch.Tensor,
        action: Dict[str, torch.Tensor],
        hidden: Hidden,
    ) -> torch.Tensor:
        """The critic's values ``[B, L]`` of ``action`` (``[B * L, ...]``) at the positions ``index`` ``[B, L]``.

        One batched call, from the hidden states the critic had there (``hidden``, stacked
        per position) and the states at those positions.
        """
        state = {key: _at(value, index) for key, value in batch.state.items()}
        output, _ = self._step(
            critic, "critic", [state, action], map_hidden(lambda h: _at(h, index), hidden)
        )
        return value_column(output, index.numel(), type(critic).__name__).view(index.shape)

    # -- the pieces of the losses -----------------------------------------------------
    def _training(self, values: torch.Tensor) -> torch.Tensor:
        """The training part ``[B, sequence_length, ...]`` of ``[B, W, ...]`` window values."""
        return values[:, self.burn_in : self.burn_in + self.sequence_length]

    def _positions(self, batch: RecurrentBatch) -> Tuple[torch.Tensor, torch.Tensor]:
        """The training positions and the positions each of them bootstraps from, both ``[B, L]``."""
        width = batch.reward.shape[1]
        steps = self._training(batch.steps)
        train = torch.arange(self.burn_in, self.burn_in + self.sequence_length, device=steps.device)
        train = train.expand(batch.size, -1)
        return train, (train + steps).clamp(max=width - 1)

    def _next_value(
        self, name: str, target: nn.Module, batch: RecurrentBatch, action: Dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """The values ``[B, L]`` of ``action`` at the bootstrap positions by the target of critic ``name``."""
        _, hidden = self._critic_values(name, target, batch, batch.reward.shape[1])
        return self._value_at(target, batch, self._positions(batch)[1], action, hidden)

    def _sequence_target(self, batch: RecurrentBatch, next_value: torch.Tensor) -> torch.Tensor:
        """n-step Bellman targets ``[B, L]`` of the training steps from the bootstrapped values."""
        device = next_value.device
        steps = self._training(batch.steps).to(device=device, dtype=next_value.dtype)
        return self.reward_function(
            self._training(batch.reward).to(device),
            self.discount**steps,
            next_value,
            self._training(batch.terminal).to(device),
            {},
        )

    def _fit_critics(self, batch: RecurrentBatch, target: torch.Tensor) -> List[torch.Tensor]:
        """The value loss of each critic on the training steps; keeps their hidden states for the actor."""
        length = self.burn_in + self.sequence_length
        mask = batch.train_mask.to(target.device)
        losses, hiddens = [], []
        for name, critic, _ in self._critic_nets():
            values, hidden = self._critic_values(name, critic, batch, length, train=True)
            predicted = self._training(values)
            losses.append(
                self.criterion(
                    target[mask].view(-1, 1), predicted[mask.to(predicted.device)].view(-1, 1)
                )
            )
            hiddens.append(map_hidden(torch.Tensor.detach, hidden))
        self._critic_run = (batch, hiddens)
        return losses

    def _critic_hiddens(self, batch: RecurrentBatch) -> List[Hidden]:
        """Each critic's hidden states over the window, kept from the critic step of this batch."""
        run, self._critic_run = self._critic_run, None
        if run is not None and run[0] is batch:
            return run[1]
        with torch.no_grad():
            length = self.burn_in + self.sequence_length
            return [
                self._critic_values(name, critic, batch, length)[1]
                for name, critic, _ in self._critic_nets()
            ]


class RecurrentSAC(RecurrentActorCritic, SAC):
    """:class:`~machin.frame.algorithms.sac.SAC` with a recurrent actor and critics, trained on sequences.

    Every network computes one time step and takes its hidden state as the argument
    named ``hidden_key`` (``None`` for its initial state, which must be zeros, as for
    ``nn.GRUCell``), its new hidden state returned last:

    * actor: ``forward(<state keys>, hidden=None) -> (action, log_prob, new_hidden)``;
      it may take ``deterministic`` as SAC's actor does;
    * critics: ``forward(<state keys>, action, hidden=None) -> (q_value[B, 1], new_hidden)``.

    A hidden state is a ``[B, ...]`` tensor, or a tuple of tensors of one shape (an
    LSTM's ``(h, c)``). :meth:`act` returns the actor's output as is, so the caller
    feeds its last element back as the next step's hidden state.

    That per-step contract (``unroll="step"``) costs one call of every network per
    window position in each update. With ``unroll="sequence"`` a network runs over
    many steps in one call instead: every input is ``[B, T, ...]``, ``hidden`` is the
    state before the first of those steps (``[B, ...]``, ``None`` for zeros), and it
    returns its outputs at every step, ``[B, T, ...]``, then its hidden states after
    every step, ``[B, T, ...]`` (a one-layer ``nn.GRU`` with ``batch_first=True``
    returns them as its output sequence):

    * actor: ``forward(<state keys>[B, T, ...], hidden=None) -> (action[B, T, A],
      log_prob[B, T, 1], hidden_states[B, T, ...])``;
    * critics: ``forward(<state keys>[B, T, ...], action[B, T, A], hidden=None) ->
      (q_value[B, T, 1], hidden_states[B, T, ...])``.

    The update calls a network once for the burn-in and once for the training steps
    of a window, and once with ``T = 1`` to score fresh actions from the hidden states
    the critic had at each step (why the states after every step are needed: a final
    state alone is refused with a ``ValueError`` naming the network and the shapes it
    returned). Where a window starts before its episode, each row is shifted to start
    at its first observation, so the hidden state waits there as in step mode; after
    an episode's end the states run on over padding that no loss reads. :meth:`act`
    calls the actor on a window of one step and returns its outputs at that step
    (``[B, ...]``, the new hidden state last), so acting and storing are unchanged. Store whole episodes
    with :meth:`store_episode`, each step's ``state`` dict holding the hidden state the
    actor was given at that step; the critics' hidden states are computed and stored
    with the steps there.

    :meth:`update` samples ``batch_size`` windows of ``burn_in + sequence_length +
    n_step`` steps. Each network is unrolled over a window from the hidden state stored
    at its first step (a target critic from its critic's), through the first
    ``burn_in`` steps without gradient. On the ``sequence_length`` training steps that
    follow:

    * critics: regress their values of the stored actions on
      ``r + discount**m * (1 - terminal) * (min(Q1', Q2') - alpha * log_prob)`` at the
      bootstrap step ``m`` steps later (``m = n_step`` or the steps left), with a fresh
      action of the actor there and the target critics unrolled over the stored actions;
    * actor and alpha: as in SAC, with fresh actions scored by the critics from the
      hidden states the critics had at those steps;
    * targets: soft update by ``update_rate``.

    The losses average over the real steps of the training parts. Actions must be
    continuous and drawn with ``rsample()``.

    Takes the arguments and options of :class:`~machin.frame.algorithms.sac.SAC`
    (``batch_size`` counts sequences; ``criterion`` is called on the real training
    steps, ``[N, 1]``) and the sequence options ``sequence_length``, ``burn_in``,
    ``sequence_stride``, ``hidden_key`` and ``unroll``; a ``replay_buffer`` must be a
    :class:`~machin.frame.buffers.SequenceBuffer` with the same sequence options.

    Raises:
        ValueError: When an option is out of range or ``replay_buffer`` does not match
            them; in :meth:`update`, when a network does not return its new hidden state
            (with ``unroll="sequence"``: ``[B, T, ...]`` outputs and its hidden states
            after every step, also in :meth:`store_episode` and when acting).
    """

    driver = Driver("act", {}, "act", "episode", needs_hidden=True)
    _actor_outputs = ("(action, log_prob, ..., new_hidden)", 3)

    def _critic_nets(self) -> List[Tuple[str, nn.Module, nn.Module]]:
        return [
            ("critic", self.critic, self.critic_target),
            ("critic2", self.critic2, self.critic2_target),
        ]

    def _critic_losses(self, batch: RecurrentBatch, alpha: torch.Tensor) -> List[torch.Tensor]:
        """The value losses of both critics on the training steps."""
        with torch.no_grad():
            _, bootstrap = self._positions(batch)
            action, log_prob = self._fresh_actions(self.actor, batch, batch.reward.shape[1])
            next_action = _at(action, bootstrap)
            next_log_prob = _at(log_prob, bootstrap).view(bootstrap.shape)
            action_input = self.action_transform_function(next_action, {}, {})
            next_q = torch.min(
                *(self._next_value(n, t, batch, action_input) for n, _, t in self._critic_nets())
            )
            target = self._sequence_target(
                batch, next_q - alpha.to(next_q.device) * next_log_prob.to(next_q.device)
            )
        return self._fit_critics(batch, target)

    def _fresh_actions(
        self, actor: nn.Module, batch: RecurrentBatch, length: int, train: bool = False
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Actions ``[B, length, ...]`` drawn by the actor and their log-probabilities ``[B, length, 1]``."""
        output = self._actor_run(actor, batch, length, train)
        action, log_prob, _ = split_actor_output(output, type(self).__name__)
        self._resolve_target_entropy(action[:, 0])
        log_prob = _per_step(log_prob, batch.size, length, "the actor's log_prob output")
        return action, log_prob.unsqueeze(-1)

    def _actor_and_alpha_losses(
        self, batch: RecurrentBatch, alpha: torch.Tensor
    ) -> Tuple[List[torch.Tensor], torch.Tensor]:
        """``([actor loss, alpha loss], policy value)`` on fresh actions at the training steps."""
        action, log_prob = self._fresh_actions(
            self.actor, batch, self.burn_in + self.sequence_length, train=True
        )
        action, log_prob = self._training(action), self._training(log_prob).squeeze(-1)
        if torch.is_grad_enabled() and not action.requires_grad:
            raise ValueError(
                f"{type(self).__name__} needs continuous actions drawn with rsample(), so that "
                f"the actor loss reaches the actor; the actor's actions carry no gradient"
            )
        training, _ = self._positions(batch)
        action_input = self.action_transform_function(action.flatten(0, 1), {}, {})
        q = torch.min(
            *(
                self._value_at(critic, batch, training, action_input, hidden)
                for (_, critic, _), hidden in zip(self._critic_nets(), self._critic_hiddens(batch))
            )
        )
        mask = batch.train_mask.to(q.device)
        soft_q = (q - alpha.to(q.device) * log_prob.to(q.device))[mask]
        entropy_gap = (log_prob.detach()[mask] + self.target_entropy).mean()
        alpha_loss = -self.log_alpha * entropy_gap.to(self.log_alpha.device)
        return [-soft_q.mean(), alpha_loss], soft_q.detach().mean()


class RecurrentTD3(RecurrentActorCritic, TD3):
    """:class:`~machin.frame.algorithms.td3.TD3` with a recurrent actor and critics, trained on sequences.

    The networks follow the contract of :class:`RecurrentSAC` (one time step per call,
    the hidden state as the argument named ``hidden_key``, the new one returned last):

    * actor and its target: ``forward(<state keys>, hidden=None) -> (action, new_hidden)``;
    * critics: ``forward(<state keys>, action, hidden=None) -> (q_value[B, 1], new_hidden)``.

    With ``unroll="sequence"`` they run over windows as there: ``[B, T, ...]`` inputs,
    ``(action[B, T, A], hidden_states[B, T, ...])`` from the actors.

    :meth:`act` and :meth:`act_with_noise` return ``(action, new_hidden)``. Episodes are
    stored and windows sampled as for :class:`RecurrentSAC`. On the training steps of a
    window, the critics regress on ``r + discount**m * (1 - terminal) * min(Q1', Q2')``
    with the target actor's smoothed action at the bootstrap step (the target actor
    unrolled from the stored hidden state, the target critics over the stored
    actions), and, every ``policy_update_delay`` updates, the actor ascends the first
    critic's value of its actions, scored from the hidden states the critic had at
    those steps.

    Takes the arguments and options of :class:`~machin.frame.algorithms.td3.TD3`
    (``batch_size`` counts sequences; ``criterion`` is called on the real training
    steps, ``[N, 1]``) and the sequence options of :class:`RecurrentSAC`.

    Raises:
        ValueError: When an option is out of range or ``replay_buffer`` does not match
            them; in :meth:`update`, when a network does not return its new hidden state
            (with ``unroll="sequence"``: ``[B, T, ...]`` outputs and its hidden states
            after every step, also in :meth:`store_episode` and when acting).
    """

    driver = Driver(
        "act_with_noise",
        {"noise_param": (0.0, 0.1), "mode": "normal"},
        "act",
        "episode",
        needs_hidden=True,
    )

    def _critic_nets(self) -> List[Tuple[str, nn.Module, nn.Module]]:
        return [(c.name, c.net, c.target) for c in self._critics()]

    def _actions(
        self, actor: nn.Module, batch: RecurrentBatch, length: int, train: bool = False
    ) -> torch.Tensor:
        """The actor's actions ``[B, length, ...]``, unrolled from the stored hidden state."""
        return self._actor_run(actor, batch, length, train)[0]

    def _critic_losses(self, batch: RecurrentBatch) -> List[torch.Tensor]:
        """The value loss of every critic on the training steps."""
        with torch.no_grad():
            _, bootstrap = self._positions(batch)
            action = _at(self._actions(self.actor_target, batch, batch.reward.shape[1]), bootstrap)
            smoothed = self.policy_noise_function(action, self.policy_noise, self.noise_clip)
            action_input = self.action_transform_function(self._clamp_action(smoothed), {}, {})
            next_q = torch.min(
                *(self._next_value(n, t, batch, action_input) for n, _, t in self._critic_nets())
            )
            target = self._sequence_target(batch, next_q)
        return self._fit_critics(batch, target)

    def _actor_loss(self, batch: RecurrentBatch) -> torch.Tensor:
        """Minus the first critic's mean value of the actor's actions at the training steps."""
        action = self._actions(self.actor, batch, self.burn_in + self.sequence_length, train=True)
        training, _ = self._positions(batch)
        hidden = self._critic_hiddens(batch)[0]
        action_input = self.action_transform_function(self._training(action).flatten(0, 1), {}, {})
        q = self._value_at(self.critic, batch, training, action_input, hidden)
        return -q[batch.train_mask.to(q.device)].mean()

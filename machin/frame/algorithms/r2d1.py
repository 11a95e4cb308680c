"""R2D1: recurrent double DQN learning from prioritized replayed sequences (R2D2 on one process)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch import nn

from ..buffers import Buffer, SequenceBatch, SequenceBuffer
from ..transition import Transition
from .base import Driver
from .dqn import DQN
from .dqn_per import DQNPer
from .options import Option, non_negative_int, positive, positive_int, probability
from .utils import Hidden, map_hidden, safe_call

__all__ = ["R2D1", "value_rescale", "inverse_value_rescale"]


def value_rescale(x: torch.Tensor, epsilon: float = 1e-3) -> torch.Tensor:
    """``h(x) = sign(x) * (sqrt(|x| + 1) - 1) + epsilon * x``, which squashes large values."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1) - 1) + epsilon * x


def inverse_value_rescale(x: torch.Tensor, epsilon: float = 1e-3) -> torch.Tensor:
    """The inverse of :func:`value_rescale`.

    Args:
        x: Rescaled values.
        epsilon: The ``epsilon`` used by :func:`value_rescale`.
    """
    root = (torch.sqrt(1 + 4 * epsilon * (x.abs() + 1 + epsilon)) - 1) / (2 * epsilon)
    return torch.sign(x) * (root * root - 1)


class R2D1(DQNPer):
    """Recurrent double DQN trained on prioritized sequences with a burn-in (R2D1).

    The Q network works one time step at a time::

        forward(<state keys>, hidden=None) -> (q_values[B, action_num], new_hidden)

    ``hidden`` (the argument name is ``hidden_key``) is ``None`` for the network's
    initial state, else a tensor whose first dimension is the batch (for example
    ``nn.GRUCell``'s ``[B, H]``; transpose ``nn.GRU``'s ``[layers, B, H]``), or a tuple
    of such tensors of one shape (an LSTM's ``(h, c)``). :meth:`act_discrete` and
    :meth:`act_discrete_with_noise` then return ``(action, new_hidden)``.

    Store whole episodes with :meth:`store_episode`; each step's ``state`` dict holds
    the hidden state that was given to the network at that step under ``hidden_key``
    (zeros at the first step). Without that key, every sequence starts from
    ``hidden=None`` (the "zero state" strategy). The default replay buffer is a
    :class:`~machin.frame.buffers.SequenceBuffer` built from the sequence options.

    :meth:`update` samples ``batch_size`` sequences, runs both networks from each
    sequence's stored hidden state through ``burn_in`` steps without gradient, then
    trains the online network on the next ``sequence_length`` steps against double-DQN
    n-step targets (target network evaluating the online network's greedy action on
    the same unrolled sequence). With ``value_rescaling`` the networks learn
    ``h(Q)`` and the target is ``h(r + discount**m * h^-1(q_next))``. Each sequence's
    loss is the mean criterion over its real training steps, weighted by importance;
    its new priority is ``priority_eta * max + (1 - priority_eta) * mean`` of ``|TD|``.

    Args:
        qnet: Recurrent Q network (contract above).
        qnet_target: Target network of the same structure.
        optimizer: Optimizer class, as in :class:`~machin.frame.algorithms.dqn.DQN`.
        criterion: Element-wise loss, called as ``criterion(target[B, T], predicted[B, T])``;
            it must not reduce, e.g. ``nn.MSELoss(reduction="none")``.

    The keyword options are :class:`~machin.frame.algorithms.dqn.DQN`'s (the mode is
    always ``"double"``) and the sequence options below. A ``replay_buffer`` must be a
    :class:`~machin.frame.buffers.SequenceBuffer` with the same sequence options.

    Raises:
        ValueError: When an option is out of range or ``replay_buffer`` does not match.
    """

    mode = "double"
    driver = Driver("act_discrete_with_noise", {}, "act_discrete", "episode", needs_hidden=True)
    batch_size = DQN.batch_size.but(default=32)
    replay_size = DQN.replay_size.but(default=100000)
    replay_buffer = DQN.replay_buffer.but(
        doc="A SequenceBuffer with the sequence options below, to use instead of the default one."
    )
    sequence_length = Option(8, positive_int, "Training steps per sequence.")
    burn_in = Option(
        4, non_negative_int, "Steps before the training part that only warm up the hidden state."
    )
    n_step = DQN.n_step.but(default=3, doc="Horizon of the n-step returns.")
    sequence_stride = Option(
        1,
        positive_int,
        "Only every ``sequence_stride``-th step of an episode starts a "
        "sequence (1: every step does).",
    )
    priority_eta = Option(
        0.9, probability, "Weight of the maximum TD error in a sequence priority."
    )
    hidden_key = Option(
        "hidden",
        doc="Name of the hidden-state argument of ``forward`` and of its key in the "
        "stored state dicts.",
    )
    value_rescaling = Option(
        True, doc="Learn rescaled values ``h(Q)`` (see :func:`value_rescale`)."
    )
    rescaling_epsilon = Option(1e-3, positive, "The ``epsilon`` of ``h``.")
    priority_on_store = Option(
        False,
        lambda _, v: bool(v),
        "Give the sequences of a newly stored episode "
        "priorities computed from their TD errors under the current networks (one unroll "
        "of both networks over the new sequences, without gradient), as R2D2 does, instead "
        "of the largest stored priority.",
    )
    _SEQUENCE_OPTIONS = (
        "sequence_length",
        "burn_in",
        "n_step",
        "discount",
        "sequence_stride",
        "priority_eta",
        "hidden_key",
    )

    def __init__(
        self,
        qnet: nn.Module,
        qnet_target: nn.Module,
        optimizer: Callable,
        criterion: Callable,
        *_: Any,
        **options: Any,
    ):
        super().__init__(qnet, qnet_target, optimizer, criterion, *_, **options)
        self._check_buffer(self.replay_buffer)
        self._hidden_parts = 0  # > 0 once tuple hidden states (of that many tensors) were stored
        self._online_run: Optional[Tuple[SequenceBatch, torch.Tensor]] = None

    @property
    def _sequence_options(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in self._SEQUENCE_OPTIONS}

    def _default_buffer(self) -> SequenceBuffer:
        return SequenceBuffer(self.replay_size, self.replay_device, **self._sequence_options)

    def _check_buffer(self, buffer: Buffer) -> None:
        if not isinstance(buffer, SequenceBuffer):
            raise ValueError(
                f"R2D1 needs a SequenceBuffer as replay_buffer, got {type(buffer).__name__}"
            )
        for name, value in self._sequence_options.items():
            if getattr(buffer, name) != value:
                raise ValueError(
                    f"replay_buffer has {name}={getattr(buffer, name)!r}, but R2D1 was given {name}={value!r}"
                )

    # -- storing ----------------------------------------------------------------------
    def store_transition(self, transition: Any) -> None:
        """Not available: R2D1 learns from whole episodes (:meth:`store_episode`).

        Args:
            transition: Ignored.

        Raises:
            RuntimeError: Always.
        """
        raise RuntimeError(
            "R2D1 replays sequences cut from whole episodes: call store_episode instead"
        )

    def _pack_hidden(self, value: Any) -> Any:
        """Stack a tuple hidden state (e.g. an LSTM's ``(h, c)``) into one ``[1, parts, ...]`` tensor."""
        if not isinstance(value, tuple):
            return value
        if len({tuple(v.shape) for v in value}) != 1:
            raise ValueError(
                f"a tuple hidden state must hold tensors of one shape, got shapes {[list(v.shape) for v in value]}"
            )
        self._hidden_parts = len(value)
        return torch.stack(value, dim=1)

    def _unpack_hidden(self, value: Optional[torch.Tensor]) -> Optional[Hidden]:
        if value is None or not self._hidden_parts:
            return value
        return tuple(value.unbind(1))

    def store_episode(self, episode: List[Union[Transition, Dict[str, Any]]]) -> None:
        """Store a whole episode; each step's ``state`` dict carries its hidden state under ``hidden_key``.

        End the episode with ``terminal=False`` when a time limit cut it. A tuple
        hidden state (in a step given as a dict) is stacked into one tensor for
        storage and split again for the network. With ``priority_on_store`` the new
        sequences get priorities from their TD errors right away.

        Args:
            episode: The episode's steps, in order (dicts or transitions).
        """
        packed = []
        for step in episode:
            if isinstance(step, dict):
                step = dict(step)
                for attr in ("state", "next_state"):
                    if isinstance(step.get(attr), dict) and self.hidden_key in step[attr]:
                        step[attr] = {
                            **step[attr],
                            self.hidden_key: self._pack_hidden(step[attr][self.hidden_key]),
                        }
            packed.append(step)
        positions = self.replay_buffer.store_episode(packed)
        if self.priority_on_store:
            self._prioritize(self.replay_buffer.sequence_starts(positions))

    def _prioritize(self, starts: np.ndarray) -> None:
        """Set the priorities of the sequences starting at ``starts`` from their current TD errors."""
        batch = self.replay_buffer.read_sequences(starts)
        with torch.no_grad():
            # The online run is cached for _bellman_target and _predicted_value, here without gradient.
            self._online_run = (batch, self._unroll(self.qnet, batch, batch.reward.shape[1]))
            target = self._bellman_target(batch)
            predicted = self._predicted_value(batch)
        self.replay_buffer.update_sequence_priority(
            predicted - target.to(predicted.device), batch.train_mask, batch.index
        )

    # -- sequences --------------------------------------------------------------------
    def _sample(self, concatenate: bool, additional_concat_attrs=None) -> Optional[SequenceBatch]:
        if not concatenate:
            raise ValueError(
                "R2D1 samples batched sequences: concatenate_samples=False is not supported"
            )
        return self.replay_buffer.sample_sequences(self.batch_size)

    def _step(self, network: nn.Module, state: Dict[str, torch.Tensor], hidden: Optional[Hidden]):
        output = safe_call(network, state, {self.hidden_key: hidden})
        if not isinstance(output, tuple) or len(output) < 2:
            raise ValueError(
                f"R2D1 needs a Q network returning (q_values, new_hidden); {type(network).__name__} "
                f"returned {type(output).__name__}"
            )
        return output[0], output[1]

    def _unroll(
        self, network: nn.Module, batch: SequenceBatch, length: int, train: bool = False
    ) -> torch.Tensor:
        """Q values ``[B, length, action_num]`` of ``network`` run over the first ``length`` positions.

        The run starts from the stored hidden state; the hidden state stays unchanged at
        positions without an observation (padding). With ``train``, the burn-in
        positions run without gradient and the hidden state is detached after them.
        """
        hidden = self._unpack_hidden(batch.hidden)
        all_observed = batch.observed.all(dim=0).tolist()
        outputs = []
        for k in range(length):
            with torch.set_grad_enabled(train and k >= self.burn_in and torch.is_grad_enabled()):
                if train and k == self.burn_in and hidden is not None:
                    hidden = map_hidden(torch.Tensor.detach, hidden)
                q, new_hidden = self._step(
                    network, {key: v[:, k] for key, v in batch.state.items()}, hidden
                )
                hidden = (
                    new_hidden
                    if all_observed[k]
                    else self._keep_unobserved(batch.observed[:, k], new_hidden, hidden)
                )
            outputs.append(q)
        return torch.stack(outputs, dim=1)

    @staticmethod
    def _keep_unobserved(observed: torch.Tensor, new: Hidden, old: Optional[Hidden]) -> Hidden:
        """``new`` where a row has an observation, else ``old`` (``None`` standing for zeros)."""
        if old is None:
            old = map_hidden(torch.zeros_like, new)

        def keep(n: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
            return torch.where(
                observed.to(n.device).view(-1, *[1] * (n.dim() - 1)), n, o.to(n.device)
            )

        return map_hidden(keep, new, old)

    def _online_values(self, batch: SequenceBatch) -> torch.Tensor:
        """The online network's Q values over the whole window of ``batch``, unrolled once per batch.

        The run (gradient after the burn-in) serves both the double-DQN action choice of
        the targets (detached) and the predicted values of the training part.
        """
        if self._online_run is None or self._online_run[0] is not batch:
            with torch.enable_grad():
                self._online_run = (
                    batch,
                    self._unroll(self.qnet, batch, batch.reward.shape[1], train=True),
                )
        return self._online_run[1]

    def _rescale(self, x: torch.Tensor) -> torch.Tensor:
        return value_rescale(x, self.rescaling_epsilon) if self.value_rescaling else x

    def _inverse_rescale(self, x: torch.Tensor) -> torch.Tensor:
        return inverse_value_rescale(x, self.rescaling_epsilon) if self.value_rescaling else x

    def _training_part(self, values: torch.Tensor) -> torch.Tensor:
        return values[:, self.burn_in : self.burn_in + self.sequence_length]

    # -- update hooks -----------------------------------------------------------------
    def _bellman_target(self, batch: SequenceBatch) -> torch.Tensor:
        """Double-DQN n-step targets ``[B, sequence_length]`` of the training part (no gradient)."""
        with torch.no_grad():
            width = batch.reward.shape[1]
            target_q = self._unroll(self.qnet_target, batch, width)
            online_q = self._online_values(batch).detach().to(target_q.device)
            device = target_q.device
            steps = batch.steps.to(device)
            bootstrap = (torch.arange(width, device=device) + steps).clamp(max=width - 1)  # [B, W]
            next_action = online_q.gather(1, bootstrap.unsqueeze(-1).expand_as(online_q)).argmax(
                -1, keepdim=True
            )
            next_q = target_q.gather(1, bootstrap.unsqueeze(-1).expand_as(target_q)).gather(
                2, next_action
            )
            next_value = self._inverse_rescale(next_q.squeeze(-1))
            discount = self.discount ** steps.to(next_value.dtype)
            target = self.reward_function(
                batch.reward.to(device), discount, next_value, batch.terminal.to(device), {}
            )
            return self._training_part(self._rescale(target))

    def _predicted_value(self, batch: SequenceBatch) -> torch.Tensor:
        """Online Q values ``[B, sequence_length]`` of the stored actions (gradient after the burn-in)."""
        q = self._training_part(self._online_values(batch))
        self._online_run = None  # release the graph once the loss has it
        action = self.action_get_function(batch.action).to(device=q.device, dtype=torch.long)
        action = self._training_part(action).reshape(batch.size, q.shape[1], 1)
        return q.gather(2, action).squeeze(-1)

    def _value_loss(
        self, predicted: torch.Tensor, target: torch.Tensor, batch: SequenceBatch
    ) -> torch.Tensor:
        """Importance-weighted mean over sequences of each sequence's mean step loss; updates priorities."""
        target = target.to(predicted.device)
        mask = batch.train_mask.to(predicted.device)
        per_step = self.criterion(target, predicted)
        if per_step.shape != predicted.shape:
            raise ValueError(
                f"R2D1 needs an element-wise criterion returning shape {list(predicted.shape)} "
                f"([batch_size, sequence_length]); got shape {list(per_step.shape)}. "
                f'Use e.g. nn.MSELoss(reduction="none").'
            )
        weight = mask.to(per_step.dtype)
        per_sequence = (per_step * weight).sum(dim=1) / weight.sum(dim=1).clamp_min(1)
        loss = self._per_sample_loss(per_sequence, batch)
        self._push_priority(
            self.replay_buffer.sequence_priority(predicted.detach() - target, mask), batch.index
        )
        return loss

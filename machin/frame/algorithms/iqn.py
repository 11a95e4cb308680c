"""IQN: implicit quantile networks (Dabney, Ostrovski, Silver and Munos, 2018)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from .base import split_output
from .options import Option, positive_int
from .qrdqn import QRDQN
from .utils import get_input_device, safe_call

__all__ = ["IQN"]


def _batch_of(state: Dict[str, Any]) -> Tuple[int, torch.device, torch.dtype]:
    """Batch size, device and floating-point type of the first array-like entry of ``state``.

    A numpy array counts too (for its batch size): the network then refuses it with
    machin's error that says to convert it.
    """
    for value in state.values():
        if len(getattr(value, "shape", ())) > 0:
            if isinstance(value, torch.Tensor):
                dtype = value.dtype if value.is_floating_point() else torch.get_default_dtype()
                return value.shape[0], value.device, dtype
            return value.shape[0], torch.device("cpu"), torch.get_default_dtype()
    raise ValueError(
        f"IQN draws one set of fractions tau per sample, so the state needs a tensor with a batch "
        f"dimension; got a state with keys {sorted(state)} and no such tensor"
    )


class IQN(QRDQN):
    """Implicit quantile network: the network returns the quantiles at fractions it is given.

    The Q network's ``forward`` takes the state keys and ``tau``, a ``[B, N]`` tensor of
    fractions in ``(0, 1)``, and returns ``quantiles[B, action_num, N]`` (followed by any
    extra outputs): the value of each action's return at each fraction, e.g. through a
    cosine embedding of ``tau`` multiplied into the state's features, as in the paper.
    The algorithm draws the fractions uniformly, anew at every call: ``tau_samples``
    (``N``) for the predicted quantiles of the loss, ``target_tau_samples`` (``N'``) for
    the target's, and ``policy_tau_samples`` (``K``) to choose actions by their mean
    (acting, and the next action of the ``"double"`` target). The key ``tau`` belongs to
    the algorithm: a state entry of that name is replaced.

    Everything else is :class:`~machin.frame.algorithms.qrdqn.QRDQN`'s: the target
    ``r + discount * (1 - terminal) * theta_j`` at the next state, the quantile Huber loss
    of width ``kappa``, and DQN's ``mode`` (``"double"`` by default). Since the fractions
    are random, so are the greedy actions when the quantiles are close; seed torch's
    generator for repeatable runs. :meth:`criticize` returns the quantiles at
    ``policy_tau_samples`` such fractions.

    Args:
        qnet: Implicit quantile network ``forward(<state keys>, tau)``.
        qnet_target: Target network of the same structure (ignored in vanilla mode).
        optimizer: Optimizer class.

    The keyword options are :class:`~machin.frame.algorithms.qrdqn.QRDQN`'s and the three
    numbers of fractions.
    """

    _output_shape = "quantiles[batch_size, action_num, N] for tau[batch_size, N]"

    tau_samples = Option(
        64, positive_int, "N: fractions drawn per sample for the predicted quantiles of the loss."
    )
    target_tau_samples = Option(
        64, positive_int, "N': fractions drawn per sample for the target's quantiles."
    )
    policy_tau_samples = Option(
        32, positive_int, "K: fractions drawn per state to choose the greedy action by the mean."
    )

    def _tau_count(self, purpose: str) -> int:
        if purpose == "online":
            return self.tau_samples
        return self.target_tau_samples if purpose == "target" else self.policy_tau_samples

    def _network_output(
        self, network: nn.Module, state: Dict[str, Any], purpose: str
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor], Tuple[Any, ...]]:
        """Draw the fractions ``tau[B, count]`` for ``purpose`` and evaluate ``network`` at them."""
        size, device, dtype = _batch_of(state)
        device = get_input_device(network) or device  # drawn where the network computes
        count = self._tau_count(purpose)
        tau = torch.rand(size, count, device=device, dtype=dtype)
        output, extras = split_output(
            safe_call(network, state, {"tau": tau}, required_argument=("tau",))
        )
        self._check_output(network, output)
        if output.shape[0] != size or output.shape[-1] != count:
            raise ValueError(
                f"IQN needs a Q network returning {self._output_shape}, but "
                f"{type(network).__name__} returned shape {list(output.shape)} for tau of shape "
                f"{[size, count]}"
            )
        return output, tau, extras

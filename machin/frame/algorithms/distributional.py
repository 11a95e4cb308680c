"""What the distributional DQN family shares: C51, QR-DQN, IQN and RAINBOW.

A distributional Q network returns, for every action, a distribution of the return
instead of its mean: ``dist[B, action_num, K]``, where the ``K`` entries are the
probabilities of fixed atoms (C51, RAINBOW) or the values at quantile fractions
(QR-DQN, IQN). This module holds

* :func:`categorical_projection`: the Bellman-shifted atoms of a categorical
  distribution spread back onto the fixed atoms (C51's target);
* :func:`quantile_huber_loss`: the quantile regression loss with a Huber core of
  width ``kappa`` (QR-DQN's and IQN's loss);
* :func:`quantile_midpoints`: the fixed fractions ``(2i + 1) / 2N`` of QR-DQN;
* :class:`DistributionalMixin`: acting on such networks (greedy by the mean), the next
  state's distribution under DQN's ``mode`` (double by default), and the distribution
  of the taken actions. The algorithms add their target and their loss.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from .base import split_output
from .replay import SampledBatch
from .utils import safe_call

__all__ = [
    "categorical_projection",
    "quantile_huber_loss",
    "quantile_midpoints",
    "DistributionalMixin",
]


def categorical_projection(
    shifted: torch.Tensor, probs: torch.Tensor, value_min: float, value_max: float
) -> torch.Tensor:
    """Project a distribution on moved atoms back onto ``K`` atoms evenly spaced on ``[value_min, value_max]``.

    Each shifted atom is first clamped into the range; its probability is then split
    between the two fixed atoms around it, in proportion to how close it lies to each
    (all of it to one atom when it falls exactly on it). The result sums to what
    ``probs`` sums to, row by row.

    Args:
        shifted: The moved atoms ``[B, K]`` (e.g. ``r + discount * z``).
        probs: Their probabilities ``[B, K]``.
        value_min: The lowest fixed atom.
        value_max: The highest fixed atom.

    Returns:
        The projected probabilities ``[B, K]`` on the fixed atoms.
    """
    if shifted.shape != probs.shape or probs.dim() != 2 or probs.shape[1] < 2:
        raise ValueError(
            f"categorical_projection needs shifted and probs of the same shape [B, K] with K >= 2, "
            f"got shifted {list(shifted.shape)} and probs {list(probs.shape)}"
        )
    atoms = probs.shape[1]
    delta = (value_max - value_min) / (atoms - 1)
    position = (shifted.clamp(value_min, value_max) - value_min) / delta
    lower = position.floor().long().clamp(0, atoms - 1)
    upper = position.ceil().long().clamp(0, atoms - 1)
    upper_weight = position - lower.to(position.dtype)
    projected = torch.zeros_like(probs)
    projected.scatter_add_(1, lower, probs * (1.0 - upper_weight))
    # On an exact atom lower == upper and upper_weight is 0: all of the probability lands there.
    projected.scatter_add_(1, upper, probs * upper_weight)
    return projected


def quantile_midpoints(
    count: int, device: Optional[torch.device] = None, dtype: Optional[torch.dtype] = None
) -> torch.Tensor:
    """The fractions ``(2i + 1) / (2 * count)``, ``i = 0 .. count - 1``: the midpoints of ``count`` equal slices of ``[0, 1]``.

    Args:
        count: Number of quantiles.
        device: Device of the result.
        dtype: Floating-point type of the result (the default dtype when ``None``).
    """
    return (torch.arange(count, device=device, dtype=dtype) * 2 + 1) / (2 * count)


def quantile_huber_loss(
    predicted: torch.Tensor, target: torch.Tensor, tau: torch.Tensor, kappa: float = 1.0
) -> torch.Tensor:
    """Quantile Huber loss of each sample: ``sum_i mean_j |tau_i - 1{u_ij < 0}| * L(u_ij)``.

    ``u_ij = target_j - predicted_i`` pairs every predicted quantile with every target
    sample; ``L(u) = u**2 / (2 * kappa)`` for ``|u| <= kappa`` and
    ``|u| - kappa / 2`` beyond (the Huber loss divided by ``kappa``, as in the QR-DQN
    paper); ``kappa = 0`` gives the plain quantile regression loss ``|u|``. A quantile
    below its target is pushed up with weight ``tau_i``, one above it pushed down with
    weight ``1 - tau_i``.

    Args:
        predicted: The predicted quantile values ``[B, N]``.
        target: The target samples ``[B, M]`` (no gradient flows into them).
        tau: The fractions of the predicted quantiles, ``[B, N]``, or ``[N]`` / ``[1, N]``
            shared by every sample.
        kappa: Width of the quadratic part, ``>= 0``.

    Returns:
        One loss per sample, ``[B]``.
    """
    if predicted.dim() != 2 or target.dim() != 2 or target.shape[0] != predicted.shape[0]:
        raise ValueError(
            f"quantile_huber_loss needs predicted [B, N] and target [B, M], got predicted "
            f"{list(predicted.shape)} and target {list(target.shape)}"
        )
    if tau.shape[-1] != predicted.shape[1] or tau.numel() not in (
        predicted.shape[1],
        predicted.numel(),
    ):
        raise ValueError(
            f"quantile_huber_loss needs tau of shape [B, N] or [N] for predicted {list(predicted.shape)}, "
            f"got tau {list(tau.shape)}"
        )
    if kappa < 0:
        raise ValueError(f"kappa must be non-negative, got {kappa!r}")
    u = target.detach().unsqueeze(1) - predicted.unsqueeze(2)  # [B, N, M]
    distance = u.abs()
    if kappa > 0:
        core = torch.where(distance <= kappa, 0.5 * u.pow(2) / kappa, distance - 0.5 * kappa)
    else:
        core = distance
    below = (u.detach() < 0).to(u.dtype)
    weight = (tau.reshape(-1, predicted.shape[1], 1).to(u.device, u.dtype) - below).abs()
    return (weight * core).mean(dim=2).sum(dim=1)


class DistributionalMixin:
    """Acting, next-state distributions and taken-action distributions for distributional DQNs.

    Mixed in before :class:`~machin.frame.algorithms.dqn.DQN` (or a subclass). The host
    class says what the last dimension of the network's output means:

    * :meth:`_expected_value`: the mean return ``[B, action_num]`` of a distribution
      (the greedy action maximises it);
    * ``_output_shape`` and ``_min_size``: the output's shape as errors show it, and the
      least ``K`` it accepts;
    * :meth:`_fractions`: the quantile fractions of an output (``None`` for atoms).

    It replaces DQN's acting (the network's output is checked and the action chosen by the
    mean), computes the next state's distribution under DQN's ``mode`` (``"double"``:
    the online network chooses the next action, the target network gives its
    distribution; ``"fixed_target"``: the target network does both; ``"vanilla"``: the
    online network does both) and the distribution of the stored actions. The host adds
    ``_bellman_target`` and ``_value_loss``.
    """

    _criterion_needed = False
    #: The shape the network must return, as error messages show it.
    _output_shape = "dist[batch_size, action_num, K]"
    #: The least size of the output's last dimension.
    _min_size = 1
    #: The Machin 0.3.4 helpers that the distributional update does not call.
    _legacy_hooks = {
        "_criticize": "_predicted_value(batch) and _bellman_target(batch)",
        "_act_discrete": "_bellman_target(batch)",
        "_next_value": "_next_distribution(batch)",
    }

    # -- the network's output ---------------------------------------------------------
    def _check_output(self, network: nn.Module, output: Any) -> None:
        """Raise ``ValueError`` naming ``network`` unless ``output`` is a ``[B, action_num, K]`` tensor."""
        if (
            isinstance(output, torch.Tensor)
            and output.dim() == 3
            and output.shape[-1] >= self._min_size
        ):
            return
        got = (
            f"shape {list(output.shape)}"
            if isinstance(output, torch.Tensor)
            else f"{type(output).__name__}"
        )
        least = f" (the last dimension at least {self._min_size})" if self._min_size > 1 else ""
        raise ValueError(
            f"{type(self).__name__} needs a Q network returning {self._output_shape}{least}, "
            f"but {type(network).__name__} returned {got}"
        )

    def _fractions(self, output: torch.Tensor) -> Optional[torch.Tensor]:
        """The quantile fractions of ``output``'s last dimension, or ``None`` (atoms)."""
        return None

    def _network_output(
        self, network: nn.Module, state: Dict[str, Any], purpose: str
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor], Tuple[Any, ...]]:
        """``(dist[B, action_num, K], fractions, extras)`` of ``network`` on ``state``.

        Args:
            network: The online or the target network.
            state: State dict for the network.
            purpose: ``"policy"`` (choosing actions), ``"online"`` (the prediction the
                loss trains) or ``"target"`` (the next state's distribution); IQN draws a
                different number of fractions for each.
        """
        output, extras = split_output(safe_call(network, state))
        self._check_output(network, output)
        return output, self._fractions(output), extras

    def _expected_value(self, dist: torch.Tensor) -> torch.Tensor:
        """The mean return ``[B, action_num]`` of each action's distribution."""
        raise NotImplementedError

    def _greedy_action(self, q_output: torch.Tensor) -> torch.Tensor:
        return self._expected_value(q_output).argmax(dim=1, keepdim=True)

    @staticmethod
    def _of_actions(dist: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The distributions ``[B, K]`` of the actions ``[B, 1]`` in ``dist[B, action_num, K]``."""
        index = action.view(-1, 1, 1).expand(-1, 1, dist.shape[-1])
        return dist.gather(1, index).squeeze(1)

    # -- acting -----------------------------------------------------------------------
    def _act(self, state: Dict[str, Any], use_target: bool):
        self._check_state(state)
        with torch.no_grad():
            output, _, extras = self._network_output(self._q_network(use_target), state, "policy")
        return output, extras

    def criticize(self, state: Dict[str, Any], use_target: bool = False):
        """The distributions ``[B, action_num, K]`` (and extra outputs) the network gives for ``state``.

        Args:
            state: State dict ``{key: [B, ...]}`` for the Q network.
            use_target: Evaluate the target network instead of the online one.
        """
        output, extras = self._act(state, use_target)
        return (output, *extras) if extras else output

    def _criticize(
        self, state: Dict[str, Any], use_target: bool = False, **__: Any
    ) -> torch.Tensor:
        """The distributions ``[B, action_num, K]`` of ``state``, with gradient."""
        return self._network_output(self._q_network(use_target), state, "policy")[0]

    # -- the update's pieces ----------------------------------------------------------
    def _next_distribution(self, batch: SampledBatch) -> torch.Tensor:
        """The target network's distribution ``[B, K]`` at the next state, for the action the mode picks (no gradient)."""
        target, _, _ = self._network_output(self.qnet_target, batch.next_state, "target")
        chooser = target
        if self.mode == "double":
            chooser = self._network_output(self.qnet, batch.next_state, "policy")[0]
        return self._of_actions(target, self._greedy_action(chooser).to(target.device))

    def _taken_actions(self, batch: SampledBatch, device: torch.device) -> torch.Tensor:
        """The stored actions of ``batch`` as a ``[B, 1]`` long tensor on ``device``."""
        action = self.action_get_function(batch.action)
        return action.to(device=device, dtype=torch.long).view(batch.size, 1)

    def _predicted_value(self, batch: SampledBatch) -> torch.Tensor:
        """The online network's distribution ``[B, K]`` of the stored actions (with gradient)."""
        dist, _, _ = self._network_output(self.qnet, batch.state, "online")
        return self._of_actions(dist, self._taken_actions(batch, dist.device))

"""Conservative Q-learning (Kumar et al., 2020): Q-learning from a fixed dataset.

Offline, a Q network is trained on transitions it cannot add to: actions the dataset never
took get values nobody corrects, and a greedy policy runs to the overestimated ones. CQL
adds one term to each Q loss that pushes the values of actions *proposed* in a state down
(a soft maximum over them) and the value of the action the dataset took up::

    penalty = mean over states of  T * logsumexp_a (Q(s, a) / T)  -  Q(s, a_data)

* :class:`CQLSAC` (continuous actions) is :class:`~machin.frame.algorithms.sac.SAC` with
  that term in both critic losses; the soft maximum runs over sampled actions (uniform
  ones and the actor's), each weighted by the density it was drawn from.
* :class:`DiscreteCQL` (discrete actions) is :class:`~machin.frame.algorithms.dqn.DQN`
  with that term in its TD loss; the soft maximum runs over every action (``T = 1``).

Both learn from whatever the replay buffer holds: fill it with ``store_transition`` /
``store_episode`` (or hand a filled buffer as ``replay_buffer``) and call ``update()``;
no environment is needed.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import torch

from .compiled import compilable
from .dqn import DQN
from .options import Option, non_negative, positive, positive_int, real
from .replay import SampledBatch
from .sac import SAC

__all__ = ["conservative_penalty", "ConservativeOptions", "CQLSAC", "DiscreteCQL"]


def conservative_penalty(
    proposal_q: torch.Tensor,
    data_q: torch.Tensor,
    log_density: Optional[torch.Tensor] = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """The CQL penalty, averaged over the batch.

    ``mean_b [T * logsumexp_k ((proposal_q[b, k] - log_density[b, k]) / T) - data_q[b]]``:
    a soft maximum of the proposed actions' values minus the value of the dataset's action.
    Minimising it lowers the values of the proposals and raises the dataset's.

    Args:
        proposal_q: Values ``[B, K]`` of ``K`` proposed actions per state (every action of a
            discrete space, or sampled ones).
        data_q: Values ``[B, 1]`` (or ``[B]``) of the actions the dataset took.
        log_density: Log-density ``[B, K]`` (or a number) of the distribution each proposal
            was drawn from, which turns the sum over samples into an estimate of the
            integral over actions; ``None`` when the proposals enumerate the actions.
        temperature: ``T``; the soft maximum tends to the maximum as ``T`` goes to 0.
    """
    scores = proposal_q if log_density is None else proposal_q - log_density
    soft_maximum = temperature * torch.logsumexp(scores / temperature, dim=1)
    return (soft_maximum - data_q.reshape(-1)).mean()


class ConservativeOptions:
    """The weight of the conservative penalty, shared by :class:`CQLSAC` and :class:`DiscreteCQL`."""

    cql_weight = Option(
        1.0,
        non_negative,
        "Weight alpha of the conservative penalty added to each Q loss (0: the plain algorithm).",
    )


def _repeat_rows(state: Dict[str, Any], times: int, name: str) -> Dict[str, Any]:
    """Every tensor of ``state`` with each row repeated ``times`` times in place (row ``b`` ->
    rows ``b * times ... b * times + times - 1``)."""
    repeated = {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"CQLSAC samples actions for every state of the batch, so {name}[{key!r}] must be a "
                f"tensor (update with concatenate_samples=True), got {type(value).__name__}"
            )
        repeated[key] = value.repeat_interleave(times, dim=0)
    return repeated


class CQLSAC(ConservativeOptions, SAC):
    """SAC with the conservative penalty of CQL(H) in both critic losses (offline, continuous actions).

    Takes the arguments, networks and options of :class:`~machin.frame.algorithms.sac.SAC`;
    the actor must draw its actions with ``rsample()`` and the actions must lie in the box
    ``[action_low, action_high]`` in every dimension. Each critic step adds, to each critic's
    soft Bellman loss, ``cql_weight`` times :func:`conservative_penalty` over ``3 *
    cql_samples`` proposals per state ``s`` of the batch, all valued at ``s``:

    * ``cql_samples`` actions drawn uniformly from the box (log-density ``-d * log(action_high
      - action_low)`` for ``d`` action numbers);
    * ``cql_samples`` actions drawn from the actor at ``s`` and as many at the next state
      ``s'``, with the log-probabilities the actor returns.

    The proposals are drawn without gradient (only the critics learn from the penalty). The
    actor and alpha are trained as in SAC. ``update()`` returns SAC's ``(policy value, value
    loss)``, the value loss including the penalty. ``action_transform_function`` also turns
    the proposed actions into critic inputs, for states with each row repeated.

    Raises:
        ValueError: When ``action_high`` is not above ``action_low``, or an option is out of range.
    """

    cql_weight = ConservativeOptions.cql_weight.but(default=5.0)
    cql_samples = Option(
        10,
        positive_int,
        "Actions drawn per state from each of the three proposals (uniform, actor at s, actor at s').",
    )
    cql_temperature = Option(
        1.0, positive, "Temperature T of the soft maximum over the proposed actions' values."
    )
    action_low = Option(-1.0, real, "Lower bound of every action number (uniform proposals).")
    action_high = Option(1.0, real, "Upper bound of every action number (uniform proposals).")

    def _check_options(self) -> None:
        super()._check_options()
        if not self.action_high > self.action_low:
            raise ValueError(
                f"action_high must be above action_low, got action_low={self.action_low!r}, "
                f"action_high={self.action_high!r}"
            )

    def _proposals(
        self, batch: SampledBatch
    ) -> Tuple[Dict[str, Any], Dict[str, Any], torch.Tensor]:
        """``(states, critic action input, log-densities [B, 3n])`` of the proposed actions.

        The states are ``batch.state`` with each row repeated ``n`` times, stacked three
        times: one block per kind of proposal (uniform, actor at ``s``, actor at ``s'``), the
        order :meth:`_proposal_values` undoes.
        """
        n, size = self.cql_samples, batch.size
        state = _repeat_rows(batch.state, n, "state")
        next_state = _repeat_rows(batch.next_state, n, "next_state")
        with torch.no_grad():
            action, log_prob = self._sample_action(state, size * n)
            next_action, next_log_prob = self._sample_action(next_state, size * n)
            width = self.action_high - self.action_low
            uniform = torch.rand_like(action) * width + self.action_low
            uniform_log_density = torch.full_like(log_prob, -action[0].numel() * math.log(width))
            log_density = torch.cat(
                [d.view(size, n) for d in (uniform_log_density, log_prob, next_log_prob)], dim=1
            )
        states = {key: torch.cat([value] * 3) for key, value in state.items()}
        actions = torch.cat([uniform, action, next_action.to(action.device)])
        return states, self.action_transform_function(actions, states, batch.others), log_density

    def _proposal_values(
        self, critic: Any, states: Dict[str, Any], actions: Dict[str, Any], size: int
    ) -> torch.Tensor:
        """The critic's values ``[B, 3n]`` of the proposals, in the order of the log-densities."""
        n = self.cql_samples
        q = self._critic_value(critic, states, actions, 3 * size * n)
        return q.view(3, size, n).transpose(0, 1).reshape(size, 3 * n)

    @compilable(("critic", "critic2"), after="_after_value_loss")
    def _critic_losses(self, batch: SampledBatch, alpha: torch.Tensor) -> List[torch.Tensor]:
        """Each critic's soft Bellman loss plus ``cql_weight`` times its conservative penalty."""
        states, actions, log_density = self._proposals(batch)
        target = self._bellman_target(batch, alpha)
        losses = []
        for critic in (self.critic, self.critic2):
            data_q = self._critic_value(critic, batch.state, batch.action, batch.size)
            proposal_q = self._proposal_values(critic, states, actions, batch.size)
            penalty = conservative_penalty(
                proposal_q, data_q, log_density.to(proposal_q.device), self.cql_temperature
            )
            losses.append(self._value_loss(data_q, target, batch) + self.cql_weight * penalty)
        return losses


class DiscreteCQL(ConservativeOptions, DQN):
    """DQN with the conservative penalty of CQL in its TD loss (offline, discrete actions).

    Takes the arguments, networks and options of :class:`~machin.frame.algorithms.dqn.DQN`
    (every ``mode``). The loss of one update is the DQN loss plus ``cql_weight`` times
    :func:`conservative_penalty` of all the Q values of each state:
    ``mean(logsumexp_a Q(s, a) - Q(s, a_data))``. ``update()`` returns that sum.
    """

    def _taken_values(self, q: torch.Tensor, batch: SampledBatch) -> torch.Tensor:
        """``Q(s, a_data)`` ``[B, 1]`` out of all the Q values ``q[B, action_num]``."""
        action = self.action_get_function(batch.action).to(device=q.device, dtype=torch.long)
        return q.gather(1, action.view(batch.size, 1))

    @compilable(("qnet",), after="_after_value_loss")
    def _td_loss(self, batch: SampledBatch) -> torch.Tensor:
        """The TD loss of ``qnet`` plus ``cql_weight`` times the conservative penalty."""
        target = self._bellman_target(batch)
        q = self._criticize(batch.state)
        data_q = self._taken_values(q, batch)
        penalty = conservative_penalty(q, data_q)
        return self._value_loss(data_q, target, batch) + self.cql_weight * penalty

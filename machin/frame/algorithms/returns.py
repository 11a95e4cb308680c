"""N-step returns over stored episodes, shared by the value-based and deterministic-policy families."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Union

import torch

from ..transition import Transition, TransitionBase, as_transition

__all__ = ["n_step_episode"]


def _reward(t: TransitionBase) -> float:
    reward = t.reward
    return reward.sum().item() if isinstance(reward, torch.Tensor) else float(reward)


def n_step_episode(episode: Sequence[Union[TransitionBase, Dict[str, Any]]], n: int, discount: float,
                   return_attr: str = "reward") -> List[Transition]:
    """Rewrite an episode so that each step looks ``n`` steps ahead.

    Step ``t`` gets the discounted sum ``sum_{k<m} discount**k * r_{t+k}`` of the
    next ``m = min(n, T - t)`` rewards (stored in ``return_attr``: ``"reward"``
    replaces the reward, another name adds a custom attribute), the ``next_state`` and
    ``terminal`` of step ``t + m - 1``, and the custom attribute ``steps = m``, so a
    learner bootstraps with ``discount**steps * (1 - terminal) * V(next_state)``.
    At the end of an episode fewer steps remain; an episode cut by a time limit ends
    with ``terminal=False`` and is therefore still bootstrapped from its last state.

    Args:
        episode: The episode's transitions (or dicts), in order.
        n: Number of steps to look ahead (1 keeps the one-step targets, adding ``steps``).
        discount: Discount factor.
        return_attr: Where to put the n-step return.

    Returns:
        New :class:`~machin.frame.transition.Transition` objects; the episode is not modified.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    steps = [as_transition(t) for t in episode]
    rewards = [_reward(t) for t in steps]
    length = len(steps)
    rebuilt = []
    for i, t in enumerate(steps):
        m = min(n, length - i)
        last = steps[i + m - 1]
        value = sum(rewards[i + k] * discount ** k for k in range(m))
        custom = {name: getattr(t, name) for name in t.custom_attr if name not in (return_attr, "steps")}
        fields = {"state": t.state, "action": t.action, "next_state": last.next_state,
                  "reward": t.reward, "terminal": last.terminal, **custom, "steps": m}
        fields[return_attr] = value
        rebuilt.append(Transition(**fields))
    return rebuilt

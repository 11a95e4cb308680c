"""Returns computed from stored rewards, below both the buffers and the algorithms.

* :func:`n_step_episode`: n-step returns over a stored episode (value-based and
  deterministic-policy algorithms, :class:`~machin.frame.buffers.SequenceBuffer`);
* :func:`returns_and_advantages`: discounted returns and generalized advantage
  estimates (GAE) of consecutive steps (the A2C family).

The functions work on the transitions, dicts or numbers they are handed; this module
imports neither :mod:`machin.frame.buffers` nor :mod:`machin.frame.algorithms`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple, Union

import torch

from .transition import Transition, TransitionBase, as_transition

__all__ = ["n_step_episode", "returns_and_advantages", "vtrace"]


def _reward(t: TransitionBase) -> float:
    reward = t.reward
    return reward.sum().item() if isinstance(reward, torch.Tensor) else float(reward)


def n_step_episode(
    episode: Sequence[Union[TransitionBase, Dict[str, Any]]],
    n: int,
    discount: float,
    return_attr: str = "reward",
) -> List[Transition]:
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
        value = sum(rewards[i + k] * discount**k for k in range(m))
        custom = {
            name: getattr(t, name) for name in t.custom_attr if name not in (return_attr, "steps")
        }
        fields = {
            "state": t.state,
            "action": t.action,
            "next_state": last.next_state,
            "reward": t.reward,
            "terminal": last.terminal,
            **custom,
            "steps": m,
        }
        fields[return_attr] = value
        rebuilt.append(Transition(**fields))
    return rebuilt


def returns_and_advantages(
    reward: Sequence[float],
    value: Sequence[float],
    next_value: Sequence[float],
    terminal: Sequence[bool],
    truncated: Sequence[bool],
    discount: float,
    gae_lambda: float,
) -> Tuple[List[float], List[float]]:
    """Discounted returns and GAE advantages of consecutive steps, in one reverse pass.

    Step ``t`` ends a chain of steps when it is terminal, truncated, or the last one.
    A terminal step that is not truncated has no future value (``terminal_t`` below
    is 1 only for those); any other step bootstraps from the value of its next
    state, so a chain cut short by truncation still sees the value of where it
    stopped::

        delta_t  = r_t + discount * (1 - terminal_t) * V(s'_t) - V(s_t)
        A_t      = delta_t + discount * gae_lambda * A_{t+1}          (A = 0 past a chain end)
        G_t      = r_t + discount * G_{t+1}                           inside a chain
        G_t      = r_t + discount * (1 - terminal_t) * V(s'_t)       at a chain end

    With ``gae_lambda == 1`` the advantage is ``G_t - V(s_t)`` (the Monte-Carlo
    advantage, bootstrapped at truncation).

    Args:
        reward: Reward of each step.
        value: Critic value of each step's state.
        next_value: Critic value of each step's next state.
        terminal: Whether the episode terminated at the step.
        truncated: Whether the episode was cut off (time limit) at the step.
        discount: Discount factor gamma.
        gae_lambda: GAE lambda.

    Returns:
        ``(returns, advantages)``, two lists of floats.
    """
    steps = len(reward)
    returns, advantages = [0.0] * steps, [0.0] * steps
    future_return = future_advantage = 0.0
    for t in reversed(range(steps)):
        terminated = terminal[t] and not truncated[t]
        bootstrap = 0.0 if terminated else discount * next_value[t]
        if terminated or truncated[t] or t == steps - 1:
            future_return = bootstrap
            future_advantage = 0.0
        else:
            future_return *= discount
            future_advantage *= discount * gae_lambda
        delta = reward[t] + bootstrap - value[t]
        future_advantage = advantages[t] = delta + future_advantage
        future_return = returns[t] = reward[t] + future_return
    return returns, advantages


def vtrace(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminal: torch.Tensor,
    log_ratio: torch.Tensor,
    discount: float,
    clip_rho: float,
    clip_c: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """V-trace value targets and policy-gradient advantages of one episode (1-D tensors of length T).

    With ``rho_t = min(clip_rho, pi/mu)``, ``c_t = min(clip_c, pi/mu)`` (``pi/mu`` is
    ``exp(log_ratio_t)``) and ``g_t = discount * (1 - terminal_t)``::

        delta_t = rho_t * (r_t + g_t * V(x_{t+1}) - V(x_t))
        v_t     = V(x_t) + delta_t + g_t * c_t * (v_{t+1} - V(x_{t+1}))     (v_T = V(x_T))
        A_t     = rho_t * (r_t + g_t * v_{t+1} - V(x_t))

    which unrolls to ``v_s = V(x_s) + sum_t discount^(t-s) (prod_{i<t} c_i) delta_t``.
    ``next_value[t]`` is ``V(x_{t+1})``; after the last step nothing is corrected.

    Args:
        reward: Rewards ``r_t``.
        value: ``V(x_t)``.
        next_value: ``V(x_{t+1})`` (the value of each step's next state).
        terminal: 1 where the episode terminated at the step (no value after it).
        log_ratio: ``log pi(a_t|x_t) - log mu(a_t|x_t)``.
        discount: Discount factor.
        clip_rho: Truncation of the importance weights in ``delta_t`` and ``A_t``.
        clip_c: Truncation of the trace coefficients ``c_t``.

    Returns:
        ``(v, A)``: the value targets and the advantages, both of length T.
    """
    ratio = log_ratio.exp()
    rho = ratio.clamp(max=clip_rho)
    c = ratio.clamp(max=clip_c)
    gamma = discount * (1.0 - terminal.to(value.dtype))
    delta = rho * (reward + gamma * next_value - value)
    correction = torch.zeros_like(value)  # v_t - V(x_t)
    carried = torch.zeros((), dtype=value.dtype, device=value.device)
    for t in reversed(range(value.shape[0])):
        carried = delta[t] + gamma[t] * c[t] * carried
        correction[t] = carried
    targets = value + correction
    next_targets = torch.cat([targets[1:], next_value[-1:]])
    advantage = rho * (reward + gamma * next_targets - value)
    return targets, advantage

"""Playing a learned policy in an environment, for algorithms trained without one.

:func:`evaluate_policy` is the one evaluation routine of the offline algorithms (BC,
TD3+BC, CQL, IQL, ...) and of imitation learning: it plays whole episodes with the
policy's most likely actions, stores nothing, updates nothing, and returns the mean
undiscounted return.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Union

import gymnasium as gym
import torch

from .._trainer_options import greedy_evaluation
from ..algorithms.base import TorchFramework
from ..trainer import _default_action_to_env, _default_obs_to_state

__all__ = ["evaluate_policy", "eval_act_method"]

Policy = Union[TorchFramework, Callable[[Dict[str, Any]], Any]]


def eval_act_method(framework: TorchFramework) -> str:
    """The act method that evaluates ``framework`` without exploration.

    The ``eval_act_method`` of its class's ``driver`` when it has one; else its
    ``eval_act_method`` attribute (what an offline algorithm without a driver declares);
    else ``"act"``.

    Args:
        framework: The algorithm.
    """
    driver = getattr(type(framework), "driver", None)
    if driver is not None and driver.eval_act_method:
        return driver.eval_act_method
    return getattr(framework, "eval_act_method", "act")


def _act_function(
    policy: Policy, act_method: Optional[str], act_kwargs: Optional[Dict[str, Any]]
) -> Callable[[Dict[str, Any]], Any]:
    """``state -> output`` for a framework (its evaluation act method) or a plain callable."""
    if isinstance(policy, TorchFramework):
        method = act_method or eval_act_method(policy)
        act = getattr(policy, method, None)
        if not callable(act):
            raise ValueError(
                f"act_method must name an act method of {type(policy).__name__}, got {method!r}"
            )
        kwargs = dict(greedy_evaluation(policy, method) if act_kwargs is None else act_kwargs)
        return lambda state: act(state, **kwargs)
    if act_method is not None or act_kwargs is not None:
        raise TypeError(
            "act_method and act_kwargs are for a machin algorithm; a callable policy is called "
            f"as policy(state), got act_method={act_method!r}, act_kwargs={act_kwargs!r}"
        )
    if not callable(policy):
        raise TypeError(
            "policy must be a machin algorithm or a callable policy(state) -> action, got "
            f"{policy!r} of type {type(policy).__name__}"
        )
    return policy


def _check_episodes(episodes: Any, seed: Any) -> None:
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be a positive integer, got {episodes!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an int or None, got {seed!r} of type {type(seed).__name__}")


def _play_episode(
    env: gym.Env,
    act: Callable[[Dict[str, Any]], Any],
    seed: Optional[int],
    state_key: str,
    obs_to_state: Callable[[Any], Any],
    action_to_env: Callable[[Any], Any],
) -> float:
    """The return of one episode played with ``act``."""
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        state = obs_to_state(obs)
        state = state if isinstance(state, dict) else {state_key: state}
        output = act(state)
        action = output[0] if isinstance(output, tuple) else output
        obs, reward, terminated, truncated, _ = env.step(action_to_env(action))
        total += float(reward)
        done = terminated or truncated
    return total


def evaluate_policy(
    policy: Policy,
    env: Union[gym.Env, str],
    episodes: int = 10,
    seed: Optional[int] = 0,
    *,
    act_method: Optional[str] = None,
    act_kwargs: Optional[Dict[str, Any]] = None,
    state_key: str = "state",
    obs_to_state: Optional[Callable[[Any], Any]] = None,
    action_to_env: Optional[Callable[[Any], Any]] = None,
) -> float:
    """Mean return of ``episodes`` episodes played with ``policy``, storing and updating nothing.

    Episode ``i`` starts from ``env.reset(seed=seed + i)``, so a fixed seed plays the same
    start states every time. Actions are computed under ``torch.no_grad()``.

    Args:
        policy: A machin algorithm, which acts with its evaluation act method (see
            :func:`eval_act_method`; a stochastic actor that takes ``deterministic`` is
            asked for its most likely action, as the
            :class:`~machin.frame.trainer.Trainer` evaluates), or a callable
            ``policy(state) -> action`` taking the state dict (a tuple output counts by its
            first element).
        env: A gymnasium environment, or an id for ``gymnasium.make`` (the environment
            made here is closed at the end).
        episodes: How many episodes to play.
        seed: Seed of the first episode's reset (``None``: not seeded).
        act_method: The act method of an algorithm to use instead.
        act_kwargs: Keyword arguments of every act call of an algorithm (default: the
            greedy ones described above).
        state_key: Key of the observation in the state dict (when ``obs_to_state``
            returns a tensor).
        obs_to_state: Turns an observation into a tensor ``[1, ...]`` or a state dict;
            default: a tensor of the default dtype with a batch dimension.
        action_to_env: Turns the action into what ``env.step`` takes; default: an int for
            a ``Discrete`` space (its ``start`` added), a clipped array for a ``Box``.

    Returns:
        The mean undiscounted return.

    Raises:
        ValueError: When ``episodes`` is not a positive integer or ``act_method`` names no
            method of the algorithm.
        TypeError: When ``policy`` is neither an algorithm nor callable.
    """
    _check_episodes(episodes, seed)
    act = _act_function(policy, act_method, act_kwargs)
    made = isinstance(env, str)
    if made:
        env = gym.make(env)
    try:
        to_env = action_to_env or _default_action_to_env(env.action_space)
        to_state = obs_to_state or _default_obs_to_state
        returns = []
        with torch.no_grad():
            for i in range(episodes):
                episode_seed = None if seed is None else seed + i
                returns.append(_play_episode(env, act, episode_seed, state_key, to_state, to_env))
    finally:
        if made:
            env.close()
    return sum(returns) / len(returns)

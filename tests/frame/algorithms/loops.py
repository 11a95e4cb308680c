"""The environment loops of the learning tests.

* :func:`train` drives :class:`machin.frame.trainer.Trainer` (single-process algorithms
  on one gymnasium environment): the learning tests of the DQN, DDPG, SAC, A2C and R2D1
  families use it.
* :func:`run_episodes` is the one hand-written loop, for what the trainer does not
  drive: several agents (MADDPG on simple_spread) and worker processes (A3C). The
  caller's hooks act, store and update.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch

from machin.frame.trainer import Trainer, TrainResult

from .nets import SPREAD_ACTION_DIM, SPREAD_AGENTS, SPREAD_CYCLES


# -- the trainer ------------------------------------------------------------------------------
def train(
    agent: Any,
    env: Callable[[], gym.Env],
    *,
    seed: int,
    episodes: int,
    solved_reward: float,
    solved_repeat: int = 1,
    **options: Any,
) -> TrainResult:
    """Train ``agent`` with a :class:`Trainer` until the smoothed return beats ``solved_reward``.

    Seeds torch and numpy with ``seed`` first (exploration), and the environment with
    ``seed + episode``. No evaluation, no files, no progress bar. ``options`` go to the
    trainer (``warmup_steps``, ``store``, ``act_kwargs``, ``hidden_key``, ...).
    """
    torch.manual_seed(seed)
    np.random.seed(seed)
    options = {"eval_interval": 0, "progress": False, **options}
    with Trainer(
        agent, env, solved_reward=solved_reward, solved_repeat=solved_repeat, seed=seed, **options
    ) as trainer:
        return trainer.run(episodes)


#: How the Pendulum learning tests call a run solved: the smoothed return, with weight 0.5 on
#: the past, above the threshold in two episodes in a row. With the trainer's default weight
#: of 0.9 the smoothed return needs about 16 good episodes to climb from a random policy's
#: -1200 to -400, so a run went on for 16 episodes after it had learned; this rule notices
#: within 3, and a random policy (-900 to -1700 per episode) still never meets it.
PENDULUM_RULE = {"smoothing": 0.5, "solved_repeat": 2}


#: Gaussian exploration noise of the deterministic-policy agents (DDPG, TD3, ...) on Pendulum.
PENDULUM_NOISE = {"noise_param": (0.0, 0.2), "mode": "normal"}


def learns_pendulum(
    agent: Any,
    name: str,
    threshold: float = -400,
    episodes: int = 60,
    warmup_steps: int = 500,
    act_kwargs: Optional[Dict[str, Any]] = PENDULUM_NOISE,
) -> TrainResult:
    """Train ``agent`` on Pendulum-v1 (seed 0, an update per step after ``warmup_steps``) until
    it meets ``PENDULUM_RULE`` or has played ``episodes``; print when it met the rule.

    ``act_kwargs`` are those of the exploring act call (``None``: the family's default, e.g.
    a stochastic policy's own sampling). The caller asserts on ``solved_episode``
    (:func:`pendulum_failure` words the message).
    """
    start = time.process_time()
    options = {} if act_kwargs is None else {"act_kwargs": act_kwargs}
    result = train(
        agent,
        lambda: gym.make("Pendulum-v1"),
        seed=0,
        episodes=episodes,
        solved_reward=threshold,
        warmup_steps=warmup_steps,
        **options,
        **PENDULUM_RULE,
    )
    print(
        f"{name} Pendulum: smoothed return above {threshold} from episode "
        f"{result.solved_episode} ({result.steps} steps, {time.process_time() - start:.1f} s CPU)"
    )
    return result


def pendulum_failure(name: str, result: TrainResult, threshold: float = -400) -> str:
    """The message of a Pendulum learning test whose run did not meet ``PENDULUM_RULE``."""
    return (
        f"{name} did not keep a smoothed return above {threshold} for "
        f"{PENDULUM_RULE['solved_repeat']} episodes within {len(result.returns)}; "
        f"returns {[round(r) for r in result.returns]}"
    )


def smoothed_returns(returns: Sequence[float], smoothing: float = 0.9) -> List[float]:
    """The trainer's smoothed return after each episode (starting at the first return)."""
    smoothed: List[float] = []
    for total in returns:
        smoothed.append(
            total if not smoothed else smoothing * smoothed[-1] + (1 - smoothing) * total
        )
    return smoothed


class MaskVelocity(gym.ObservationWrapper):
    """CartPole observing only the cart position and the pole angle (a POMDP)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        low, high = env.observation_space.low[[0, 2]], env.observation_space.high[[0, 2]]
        self.observation_space = gym.spaces.Box(low, high)

    def observation(self, observation):
        return observation[[0, 2]]


# -- the hand-written loop --------------------------------------------------------------------
@dataclass
class Step:
    """One environment step as the hooks of :func:`run_episodes` see it."""

    state: Any
    action: Any
    next_state: Any
    reward: Any
    terminated: Any

    def as_dict(self) -> Dict[str, Any]:
        """The transition dict the algorithms store (one agent)."""
        return {
            "state": self.state,
            "action": {"action": self.action},
            "next_state": self.next_state,
            "reward": float(self.reward),
            "terminal": bool(self.terminated),
        }

    def per_agent(self) -> List[Dict[str, Any]]:
        """One transition dict per agent (the environment is an :class:`AgentsAsOneEnv`)."""
        return [
            {
                "state": s,
                "action": {"action": a},
                "next_state": n,
                "reward": float(r),
                "terminal": bool(t),
            }
            for s, a, n, r, t in zip(
                self.state, self.action, self.next_state, self.reward, self.terminated
            )
        ]


@dataclass
class LoopResult:
    """What :func:`run_episodes` played."""

    returns: List[float] = field(default_factory=list)
    smoothed: Optional[float] = None
    steps: int = 0
    solved_episode: Optional[int] = None
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def episodes(self) -> int:
        return len(self.returns)


def default_state(obs: Any) -> Dict[str, torch.Tensor]:
    return {"state": torch.as_tensor(np.asarray(obs), dtype=torch.float32).view(1, -1)}


def run_episodes(
    env: Any,
    act: Callable[[Any, int], Any],
    *,
    episodes: int,
    seed: int,
    on_step: Optional[Callable[[Step, int], None]] = None,
    on_episode: Optional[Callable[[List[Step], int], None]] = None,
    before_episode: Optional[Callable[[int], bool]] = None,
    to_state: Callable[[Any], Any] = default_state,
    to_env: Optional[Callable[[Any], Any]] = None,
    threshold: Optional[float] = None,
    smoothing: float = 0.9,
) -> LoopResult:
    """Play up to ``episodes`` episodes; stop early once the smoothed return beats ``threshold``.

    Episode ``i`` (from 1) resets the environment with ``seed + i``. Each step calls
    ``act(state, steps_so_far)``, steps the environment with ``to_env(action)`` (default:
    an int for a ``Discrete`` space, an array otherwise) and calls ``on_step(step, steps)``;
    each episode ends with ``on_episode(steps_of_the_episode, episode)``.
    ``before_episode(episode)`` returning ``False`` stops the loop. For several agents
    (an :class:`AgentsAsOneEnv`), rewards and flags are per-agent lists: an episode's
    return adds the mean reward of each step and it ends when every agent is done.
    The smoothed return starts at the first episode's return.
    """
    if to_env is None:
        space = getattr(env, "action_space", None)
        to_env = (
            (lambda a: int(a.reshape(-1)[0].item()))
            if isinstance(space, gym.spaces.Discrete)
            else (lambda a: a.detach().numpy().reshape(-1))
        )
    result = LoopResult()
    start, cpu_start = time.time(), time.process_time()
    for episode in range(1, episodes + 1):
        if before_episode is not None and before_episode(episode) is False:
            break
        obs, _ = env.reset(seed=seed + episode)
        state, total, done, played = to_state(obs), 0.0, False, []
        while not done:
            action = act(state, result.steps)
            obs, reward, terminated, truncated, _ = env.step(to_env(action))
            step = Step(state, action, to_state(obs), reward, terminated)
            result.steps += 1
            played.append(step)
            if on_step is not None:
                on_step(step, result.steps)
            total += float(np.mean(reward))
            done = bool(np.all(terminated)) or bool(np.all(truncated))
            state = step.next_state
        if on_episode is not None:
            on_episode(played, episode)
        result.returns.append(total)
        result.smoothed = (
            total
            if result.smoothed is None
            else smoothing * result.smoothed + (1 - smoothing) * total
        )
        if threshold is not None and result.smoothed > threshold:
            result.solved_episode = episode
            break
    result.seconds, result.cpu_seconds = time.time() - start, time.process_time() - cpu_start
    return result


class AgentsAsOneEnv:
    """A PettingZoo parallel environment in gymnasium's ``reset`` / ``step`` shape, per-agent lists.

    Observations, rewards and the terminated / truncated flags come back as lists in
    the order of the agents at reset; ``step`` takes one action per agent.
    """

    def __init__(self, env: Any):
        self.env = env
        self.agents: List[str] = []

    def reset(self, seed: Optional[int] = None) -> Tuple[List[Any], Dict]:
        obs, info = self.env.reset(seed=seed)
        self.agents = list(self.env.agents)
        return [obs[name] for name in self.agents], info

    def step(self, actions: Sequence[Any]):
        obs, rewards, terminated, truncated, info = self.env.step(dict(zip(self.agents, actions)))
        return (
            [obs[name] for name in self.agents],
            [float(rewards[name]) for name in self.agents],
            [bool(terminated[name]) for name in self.agents],
            [bool(truncated[name]) for name in self.agents],
            info,
        )

    def close(self) -> None:
        self.env.close()


def make_spread() -> AgentsAsOneEnv:
    """The multi-agent particle environment simple_spread_v3, 3 agents, continuous actions."""
    from mpe2 import simple_spread_v3

    return AgentsAsOneEnv(
        simple_spread_v3.parallel_env(
            N=SPREAD_AGENTS, local_ratio=0.5, max_cycles=SPREAD_CYCLES, continuous_actions=True
        )
    )


def run_spread(
    maddpg=None,
    *,
    episodes: int,
    seed: int,
    warmup_episodes: int = 10,
    update_every: int = 1,
    noise_sigma: float = 0.1,
    critic_only_updates: int = 0,
) -> LoopResult:
    """Play simple_spread for ``episodes`` episodes (episode ``i`` from 0 reset with ``seed + i``).

    Without ``maddpg`` the agents act uniformly at random (the baseline). With it they
    act randomly for ``warmup_episodes`` episodes, then with clipped normal noise, and
    ``maddpg.update()`` runs every ``update_every`` steps after the warm-up (the first
    ``critic_only_updates`` of them leave the actors alone, so that they follow a fitted critic).
    Each return is the per-agent mean return of an episode.
    """
    rng = np.random.default_rng(seed)
    env = make_spread()
    progress = {"episode": 0, "updates": 0}

    def learning() -> bool:
        return maddpg is not None and progress["episode"] > warmup_episodes

    def act(states, _steps):
        if learning():
            actions = maddpg.act_with_noise(states, noise_param=(0.0, noise_sigma), mode="normal")
            return [a.clamp(0.0, 1.0) for a in actions]
        return [
            torch.as_tensor(rng.random((1, SPREAD_ACTION_DIM)), dtype=torch.float32) for _ in states
        ]

    def on_step(step: Step, steps: int) -> None:
        if maddpg is None:
            return
        maddpg.store_transitions(step.per_agent())
        if learning() and steps % update_every == 0:
            maddpg.update(update_policy=progress["updates"] >= critic_only_updates)
            progress["updates"] += 1

    def before_episode(episode: int) -> bool:
        progress["episode"] = episode
        return True

    try:
        return run_episodes(
            env,
            act,
            episodes=episodes,
            seed=seed - 1,
            on_step=on_step,
            before_episode=before_episode,
            to_state=lambda obs: [
                {"state": torch.as_tensor(o, dtype=torch.float32).view(1, -1)} for o in obs
            ],
            to_env=lambda actions: [a.view(-1).numpy() for a in actions],
        )
    finally:
        env.close()


# -- distributed learners ----------------------------------------------------------------------
def pull_until(agent, network, version):
    """Pull the shared network until the learner has made ``version`` updates (one push each).

    Samplers call it before each episode to keep the learner's pace; the test
    harness's hard timeout ends a run whose learner has died.
    """
    agent.manual_sync()
    while getattr(network, "pp_version", 0) < version:
        time.sleep(0.05)  # each poll is an RPC pull: poll gently, the learner needs the CPU
        agent.manual_sync()

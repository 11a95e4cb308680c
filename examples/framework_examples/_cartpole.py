"""Training loop of the value-based CartPole examples (dqn.py, dqn_per.py, rainbow.py).

One update per environment step after a warm-up; one progress line per episode;
solved once the smoothed return stays above 190 for 5 episodes in a row. At the end
the learning curve is written and, when asked, a greedy episode is recorded.
"""

import gymnasium as gym
import torch
from _common import Progress, parse_args, record_episode, write_curve

ENV_ID = "CartPole-v0"

# parse_args is re-exported for the scripts; save_curve is the older name of write_curve.
save_curve = write_curve
__all__ = ["ENV_ID", "parse_args", "run", "save_curve"]


def run(
    agent,
    *,
    episodes: int,
    seed: int,
    plot: str = "",
    gif: str = "",
    store_by_episode: bool = False,
    warmup_steps: int = 500,
    solved_reward: float = 190.0,
    solved_repeat: int = 5,
    name: str = "agent",
) -> bool:
    """Train ``agent`` (a DQN-like framework) on CartPole-v0; returns whether it was solved.

    Args:
        agent: Offers ``act_discrete_with_noise``, ``act_discrete``, ``store_transition`` /
            ``store_episode`` and ``update``.
        episodes: Episodes at most.
        seed: Episode ``i`` is reset with seed ``seed + i``.
        plot: Learning-curve PNG to write at the end (``""``: none).
        gif: GIF of one greedy episode to write at the end (``""``: none).
        store_by_episode: Store whole episodes (for n-step returns) instead of single steps.
        warmup_steps: Steps stored before the first update.
        solved_reward: Threshold of the smoothed return.
        solved_repeat: Consecutive episodes above the threshold needed.
        name: Shown in the progress lines and the plot title.
    """
    env = gym.make(ENV_ID)
    progress, steps = Progress(name, ENV_ID, solved_reward, solved_repeat), 0
    for episode in range(1, episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total, stored = False, 0.0, []
        while not done:
            action = agent.act_discrete_with_noise({"state": state})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            step = {
                "state": {"state": state},
                "action": {"action": action},
                "next_state": {"state": next_state},
                "reward": float(reward),
                "terminal": terminated,
            }
            if store_by_episode:
                stored.append(step)
            else:
                agent.store_transition(step)
                if steps >= warmup_steps:
                    agent.update()
            state, total, done, steps = (
                next_state,
                total + reward,
                terminated or truncated,
                steps + 1,
            )
        if store_by_episode:
            agent.store_episode(stored)
            if steps >= warmup_steps:
                for _ in stored:
                    agent.update()
        if progress.end_episode(total, steps):
            break
    env.close()
    progress.write_curve(plot)
    if gif:
        record_episode(ENV_ID, lambda s: agent.act_discrete({"state": s}), gif, seed=seed)
    return progress.solved

"""Shared loop for the value-based CartPole examples: progress per episode, a learning-curve PNG."""

import argparse
import time

import gymnasium as gym
import torch


def parse_args(description: str):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--episodes", type=int, default=500, help="stop after this many episodes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default="", help="write the learning curve to this PNG")
    return parser.parse_args()


def run(agent, *, episodes: int, seed: int, plot: str = "", store_by_episode: bool = False,
        warmup_steps: int = 500, solved_reward: float = 190.0, solved_repeat: int = 5, name: str = "agent"):
    """Train ``agent`` on CartPole-v0 with one update per environment step after a warm-up."""
    env = gym.make("CartPole-v0")
    smoothed, streak, steps, curve, start = 0.0, 0, 0, [], time.time()
    for episode in range(1, episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total, stored = False, 0.0, []
        while not done:
            action = agent.act_discrete_with_noise({"state": state})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            step = {"state": {"state": state}, "action": {"action": action},
                    "next_state": {"state": next_state}, "reward": float(reward), "terminal": terminated}
            if store_by_episode:
                stored.append(step)
            else:
                agent.store_transition(step)
                if steps >= warmup_steps:
                    agent.update()
            state, total, done, steps = next_state, total + reward, terminated or truncated, steps + 1
        if store_by_episode:
            agent.store_episode(stored)
            if steps >= warmup_steps:
                for _ in stored:
                    agent.update()
        smoothed = 0.9 * smoothed + 0.1 * total
        curve.append(smoothed)
        print(f"{name} episode {episode:4d}  return {total:6.1f}  smoothed {smoothed:6.1f}  "
              f"steps {steps:6d}  {time.time() - start:6.1f} s", flush=True)
        streak = streak + 1 if smoothed > solved_reward else 0
        if streak >= solved_repeat:
            print(f"Environment solved at episode {episode}!")
            break
    env.close()
    if plot:
        save_curve(curve, plot, name)
    return streak >= solved_repeat


def save_curve(curve, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(curve) + 1), curve)
    ax.set_xlabel("episode")
    ax.set_ylabel("smoothed return")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    print(f"learning curve written to {path}")

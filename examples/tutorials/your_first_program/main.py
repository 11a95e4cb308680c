"""Your first program: DQN learns CartPole.

Run it with ``python examples/tutorials/your_first_program/main.py``. It prints the
smoothed episode return after every episode and "Environment solved!" once the
smoothed return stays above 190 for 5 episodes in a row, then writes a
learning-curve PNG next to this file (``--plot`` to choose another path).
"""

import argparse

import gymnasium as gym
import torch
import torch.nn as nn

from machin.frame.algorithms import DQN
from machin.utils.logging import default_logger as logger

observe_dim = 4
action_num = 2
max_steps = 200
solved_reward = 190
solved_repeat = 5


class QNet(nn.Module):
    """A small MLP; its ``forward`` argument name is the key used in the state dicts."""

    def __init__(self, state_dim, action_num):
        super().__init__()
        self.fc1 = nn.Linear(state_dim, 16)
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, action_num)

    def forward(self, some_state):
        a = torch.relu(self.fc1(some_state))
        a = torch.relu(self.fc2(a))
        return self.fc3(a)


def main(max_episodes: int = 1000, seed: int = 0, plot: str = "") -> bool:
    torch.manual_seed(seed)
    env = gym.make("CartPole-v0")
    q_net = QNet(observe_dim, action_num)
    q_net_t = QNet(observe_dim, action_num)
    dqn = DQN(q_net, q_net_t, torch.optim.Adam, nn.MSELoss(reduction="sum"))

    smoothed_total_reward, reward_fulfilled, curve = 0.0, 0, []
    for episode in range(1, max_episodes + 1):
        total_reward, terminal, step = 0.0, False, 0
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, observe_dim)

        while not terminal and step < max_steps:
            step += 1
            with torch.no_grad():
                old_state = state
                # the agent acts: epsilon-greedy on the Q values
                action = dqn.act_discrete_with_noise({"some_state": old_state})
                obs, reward, terminated, truncated, _ = env.step(action.item())
                state = torch.tensor(obs, dtype=torch.float32).view(1, observe_dim)
                total_reward += reward
                terminal = terminated or truncated

            dqn.store_transition({
                "state": {"some_state": old_state},
                "action": {"action": action},
                "next_state": {"some_state": state},
                "reward": float(reward),
                "terminal": terminated,
            })

        # warm up the replay buffer, then update once per step taken
        if episode > 100:
            for _ in range(step):
                dqn.update()

        smoothed_total_reward = smoothed_total_reward * 0.9 + total_reward * 0.1
        curve.append(smoothed_total_reward)
        logger.info(f"Episode {episode} total reward={smoothed_total_reward:.2f}")

        if smoothed_total_reward > solved_reward:
            reward_fulfilled += 1
            if reward_fulfilled >= solved_repeat:
                logger.info("Environment solved!")
                break
        else:
            reward_fulfilled = 0
    env.close()
    if plot:
        save_curve(curve, plot)
    return reward_fulfilled >= solved_repeat


def save_curve(curve, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(1, len(curve) + 1), curve)
    ax.axhline(solved_reward, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("episode")
    ax.set_ylabel("smoothed return")
    ax.set_title("DQN on CartPole-v0")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    logger.info(f"Learning curve written to {path}")


if __name__ == "__main__":
    import os

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "learning_curve.png"))
    args = parser.parse_args()
    main(args.episodes, args.seed, args.plot)

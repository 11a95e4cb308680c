"""Your first program: DQN learns CartPole.

Run it with ``python examples/tutorials/your_first_program/main.py``. It prints the
smoothed episode return after every episode and "Environment solved!" once the
smoothed return stays above 190 for 5 episodes in a row. Then it writes the
learning curve (the return of every episode) to ``first_program_curve.png`` in the
current directory (``--plot PATH`` to choose another file, ``--plot ""`` for none)
and, with ``--gif [PATH]``, one greedy episode of the trained agent as a GIF
(default ``first_program_episode.gif``).
"""

import argparse
import os

import gymnasium as gym
import torch
import torch.nn as nn

from machin.frame.algorithms import DQN
from machin.utils.logging import default_logger as logger
from machin.utils.media import create_learning_curve, create_video

observe_dim = 4
action_num = 2
max_steps = 200
solved_reward = 190
solved_repeat = 5


def make_env(**kwargs):
    """CartPole with 200-step episodes: the task of the manual's CartPole-v0.

    CartPole-v1 with ``max_episode_steps=200`` has the same dynamics and limit, without
    the deprecation warning gymnasium prints for v0.
    """
    return gym.make("CartPole-v1", max_episode_steps=200, **kwargs)


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


def main(max_episodes: int = 1000, seed: int = 0, plot: str = "", gif: str = "") -> bool:
    torch.manual_seed(seed)
    env = make_env()
    q_net = QNet(observe_dim, action_num)
    q_net_t = QNet(observe_dim, action_num)
    dqn = DQN(q_net, q_net_t, torch.optim.Adam, nn.MSELoss(reduction="sum"))

    smoothed_total_reward, reward_fulfilled, returns = 0.0, 0, []
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

            dqn.store_transition(
                {
                    "state": {"some_state": old_state},
                    "action": {"action": action},
                    "next_state": {"some_state": state},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )

        # warm up the replay buffer, then update once per step taken
        if episode > 100:
            for _ in range(step):
                dqn.update()

        smoothed_total_reward = smoothed_total_reward * 0.9 + total_reward * 0.1
        returns.append(total_reward)
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
        directory, stem, extension = split_path(plot)
        written = create_learning_curve(
            returns,
            directory,
            stem,
            title="DQN on CartPole (200 steps)",
            extension=extension or ".png",
        )
        logger.info(f"Learning curve written to {written}")
    if gif:
        record_episode(dqn, gif, seed)
    return reward_fulfilled >= solved_repeat


def split_path(path):
    """``dir/name.ext`` -> ``("dir", "name", ".ext")``, the arguments of the media functions."""
    directory, filename = os.path.split(path)
    stem, extension = os.path.splitext(filename)
    return directory or ".", stem, extension


def record_episode(dqn, path, seed):
    """Play one greedy episode (no exploration) and write its frames as a GIF."""
    env = make_env(render_mode="rgb_array")
    obs, _ = env.reset(seed=seed)
    frames, done = [env.render()], False
    while not done:
        with torch.no_grad():
            action = dqn.act_discrete(
                {"some_state": torch.tensor(obs, dtype=torch.float32).view(1, -1)}
            )
        obs, _, terminated, truncated, _ = env.step(action.item())
        frames.append(env.render())
        done = terminated or truncated
    env.close()
    directory, stem, extension = split_path(path)
    written = create_video(frames, directory, stem, extension=extension or ".gif", fps=30)
    logger.info(f"Greedy episode ({len(frames) - 1} steps) written to {written}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plot", default="first_program_curve.png", help="learning-curve PNG ('' for none)"
    )
    parser.add_argument(
        "--gif",
        nargs="?",
        const="first_program_episode.gif",
        default="",
        help="record one greedy episode of the trained agent as a GIF",
    )
    args = parser.parse_args()
    main(args.episodes, args.seed, args.plot, args.gif)

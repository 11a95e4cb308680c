"""Train DQN on CartPole-v0 with the optional Trainer loop instead of a hand-written one.

Run ``python examples/tutorials/trainer/train_cartpole.py [--episodes N] [--seed S] [--log-dir DIR] [--gif]
[--envs K]``.
The trainer explores with ``act_discrete_with_noise``, stores every transition, updates
once per step after a warm-up, evaluates the greedy policy every 20 episodes, and stops
once the smoothed return stays above 150 for 5 episodes. ``DIR`` (default
``trainer_run``) receives ``progress.csv``, TensorBoard scalars, the best checkpoint,
``learning_curve.png`` and, with ``--gif``, ``episode.gif`` of one greedy episode at the end.
With ``--envs K`` (K > 1) it trains on K environments in worker processes, stepped
together with one batched act call per step, and evaluates on a separate one.
"""

import argparse

import gymnasium as gym
import torch
from torch import nn

from machin.env.wrappers import ParallelWrapperSubProc
from machin.frame.algorithms import DQN
from machin.frame.trainer import Trainer
from machin.utils import seed as seed_everything


class QNet(nn.Module):
    def __init__(self, state_dim: int = 4, action_num: int = 2):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, action_num),
        )

    def forward(self, state):
        return self.net(state)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", default="trainer_run")
    parser.add_argument("--gif", action="store_true", help="record one greedy episode at the end")
    parser.add_argument(
        "--envs", type=int, default=1, help="training environments stepped together"
    )
    args = parser.parse_args()
    seed_everything(args.seed)
    dqn = DQN(
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    gif_env = (lambda: gym.make("CartPole-v0", render_mode="rgb_array")) if args.gif else None
    make_env = lambda: gym.make("CartPole-v0")  # noqa: E731
    group = (
        ParallelWrapperSubProc([lambda index: make_env()] * args.envs) if args.envs > 1 else None
    )
    try:
        with Trainer(
            dqn,
            group or make_env,
            eval_env=make_env,
            warmup_steps=500,
            eval_interval=20,
            eval_episodes=3,
            solved_reward=150,
            log_dir=args.log_dir,
            gif_env=gif_env,
            seed=args.seed,
        ) as trainer:
            result = trainer.run(args.episodes)
    finally:
        if group is not None:
            group.close()
    if result.solved_episode is not None:
        print(f"Solved at episode {result.solved_episode} ({result.steps} steps).")
    if result.eval_returns:
        print(
            f"best evaluation return {result.best_eval_return:.1f} (checkpoint version {result.best_version})"
        )
    else:
        print(f"no evaluation in {result.episodes} episodes (the trainer evaluates every 20)")
    print("written:", ", ".join(f"{name}: {path}" for name, path in sorted(result.paths.items())))


if __name__ == "__main__":
    main()

"""TD3+BC on Pendulum-v1, learned offline from a dataset: ``python examples/framework_examples/td3_bc.py``.

1. Records 10 episodes of a scripted near-expert (``_pendulum_expert.py``) into a local
   Minari dataset, in a temporary directory (``MINARI_DATASETS_PATH``): nothing is
   downloaded. For a public dataset, replace this step by
   ``minari.load_dataset("mujoco/halfcheetah/medium-v0", download=True)``.
2. Loads it into a machin ``Buffer`` with ``machin.frame.offline.load_minari``.
3. Trains TD3+BC with ``update()`` alone: the environment is only used to evaluate. After
   every round of 100 updates, one evaluation episode is played with
   ``machin.frame.offline.evaluate_policy``; ``--episodes N`` is the number of rounds.

Solved once the smoothed evaluation return exceeds -250 (the dataset's own episodes score
about -130 on average, -250 at worst). Options: ``--episodes N`` (default 50),
``--seed S``, ``--plot PATH`` (the evaluation returns as a PNG, default
``td3_bc_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the learned
actor).
"""

import os
import tempfile

import gymnasium as gym
import torch
from _common import Progress, parse_args, record_episode
from _pendulum_expert import record_dataset
from ddpg import ENV_ID, Actor, Critic
from torch import nn

from machin.frame.algorithms import TD3BC
from machin.frame.offline import evaluate_policy, load_minari

UPDATES_PER_ROUND = 100
DATASET_EPISODES = 10


def main():
    args = parse_args(__doc__, episodes=50)
    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as directory:
        os.environ["MINARI_DATASETS_PATH"] = directory
        dataset = record_dataset("pendulum/scripted-v0", DATASET_EPISODES, seed=args.seed)
        buffer = load_minari(dataset)
        print(f"dataset {dataset.spec.dataset_id}: {buffer.size()} transitions loaded", flush=True)
        td3bc = TD3BC(
            Actor(),
            Actor(),
            Critic(),
            Critic(),
            Critic(),
            Critic(),
            torch.optim.Adam,
            nn.MSELoss(),
            replay_buffer=buffer,
            batch_size=256,
            actor_learning_rate=3e-3,
            critic_learning_rate=3e-3,
            alpha=2.5,
        )
        env = gym.make(ENV_ID)
        progress = Progress("TD3+BC", ENV_ID, solved_reward=-250, start=None)
        for round_ in range(args.episodes):
            for _ in range(UPDATES_PER_ROUND):
                td3bc.update()
            total = evaluate_policy(td3bc, env, episodes=1, seed=args.seed + 10**6 + round_)
            if progress.end_episode(total, (round_ + 1) * UPDATES_PER_ROUND):
                break
        progress.write_curve(args.plot)
        if args.gif:
            record_episode(ENV_ID, lambda s: td3bc.act({"state": s}), args.gif, seed=args.seed)


if __name__ == "__main__":
    main()

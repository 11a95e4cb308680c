"""Ape-X DQN on CartPole-v0 with 3 local processes: ``python dqn_apex.py [--episodes N] [--seed S]``.

Processes 0 and 1 are samplers: they play with the newest Q network (pulled once
per episode) and store every step in their own part of the distributed prioritized
buffer. Process 2 is the learner: once the group holds enough transitions it
samples across both samplers, sends the new priorities back to them and pushes
its Q network to the model server after every update. Everything stops once a
sampler has solved the environment or both have played ``--episodes`` episodes.

At the end the sampler that solved the environment (process 0 if none did) writes
its per-episode returns as a learning curve to ``--plot`` (default
``dqn_apex_curve.png``; ``--plot ""`` writes none).
"""

import argparse
import time

import gymnasium as gym
import torch
from _shared import Progress, finish_run, pull_until
from torch import nn

from machin.frame.algorithms import DQNApex
from machin.frame.helpers import model_server_helper
from machin.parallel.distributed import World
from machin.parallel.distributed.launcher import run_script

SAMPLERS, LEARNER = ("0", "1"), "2"
WARMUP = 500  # transitions stored by all samplers before the learner starts


class QNet(nn.Module):
    """Q values of the two CartPole actions."""

    def __init__(self, state_dim=4, action_num=2, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, action_num))

    def forward(self, state):
        return self.net(state)


def sample(apex, group, rank, episodes, seed):
    """Play and store episodes; returns the return of every episode played."""
    env = gym.make("CartPole-v0")
    progress, steps = Progress(group, rank, SAMPLERS), 0
    for episode in range(1, episodes + 1):
        # Keep about one learner update per two steps of each sampler (after the warm-up):
        # wait for the model server's version (one per update) to catch up.
        pull_until(apex, apex.qnet, (steps - WARMUP // 2) // 2)
        obs, _ = env.reset(seed=seed * 1000 + rank * 100000 + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total = False, 0.0
        while not done:
            action = apex.act_discrete_with_noise({"state": state})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            apex.store_transition({"state": {"state": state}, "action": {"action": action},
                                   "next_state": {"state": next_state}, "reward": float(reward),
                                   "terminal": terminated})
            state, total, done, steps = next_state, total + reward, terminated or truncated, steps + 1
        if progress.record(episode, total):  # solved here, or the other sampler has
            break
    env.close()
    group.register(f"done_{rank}", print)  # tells the learner this sampler has finished
    return progress.returns


def learn(apex, group):
    """Update until every sampler has finished; returns the number of updates."""
    updates = 0
    while not all(group.is_registered(f"done_{s}") for s in SAMPLERS):
        if apex.replay_buffer.all_size() < WARMUP:
            time.sleep(0.1)
            continue
        for _ in range(20):
            apex.update()
        updates += 20
    return updates


def main(rank, episodes=1000, seed=0, plot=""):
    torch.set_num_threads(1)
    world = World(rpc_timeout=60)
    group = world.create_rpc_group("apex", [*SAMPLERS, LEARNER])
    servers = model_server_helper(model_num=1)
    torch.manual_seed(seed)
    apex = DQNApex(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(reduction="none"), group, servers,
                   batch_size=64, epsilon_decay=0.999, update_rate=0.01, replay_size=20000)
    group.barrier()  # every part of the buffer exists
    apex.set_sync(False)  # samplers pull once per episode
    result = learn(apex, group) if str(rank) == LEARNER else sample(apex, group, rank, episodes, seed)
    # Waits for every process; then the one that solved (or process 0) writes its curve.
    finish_run(world, group, SAMPLERS, rank, result, plot, "Ape-X DQN on CartPole-v0")
    world.stop()
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=1000, help="episodes per sampler at most")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default="dqn_apex_curve.png", help="learning-curve PNG ('' for none)")
    args = parser.parse_args()
    run_script(lambda rank: main(rank, args.episodes, args.seed, args.plot), 3, timeout=3600)

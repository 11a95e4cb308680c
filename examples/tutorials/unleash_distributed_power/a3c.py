"""A3C on CartPole-v0 with 3 local processes: ``python a3c.py [--episodes N] [--seed S]``.

Every process is a sampler and a trainer: it plays its own episodes, computes the
A2C losses on them and pushes the gradients to two gradient servers (actor and
critic), which every process also helps to reduce. The run stops in every process
as soon as one of them has solved the environment (or has played ``--episodes``).
Started by ``torchrun --nproc_per_node=3 a3c.py`` each process is one rank instead.

At the end the process that solved the environment (process 0 if none did) writes
its per-episode returns as a learning curve to ``--plot`` (default
``a3c_curve.png``; ``--plot ""`` writes none).
"""

import argparse

import gymnasium as gym
import torch
from _shared import Progress, finish_run
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import A3C
from machin.frame.helpers import grad_server_helper
from machin.parallel.distributed import World
from machin.parallel.distributed.launcher import run_script


class Actor(nn.Module):
    """Samples a discrete action, or scores a given one: ``(action, log_prob, entropy)``."""

    def __init__(self, state_dim=4, action_num=2, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, action_num))

    def forward(self, state, action=None):
        dist = Categorical(logits=self.net(state))
        action = dist.sample().view(-1, 1) if action is None else action
        return action, dist.log_prob(action.view(-1)), dist.entropy()


class Critic(nn.Module):
    """State value ``V(s)``."""

    def __init__(self, state_dim=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 1))

    def forward(self, state):
        return self.net(state)


def play_episode(a3c, env, seed):
    """One episode with the current actor; returns the stored steps and the total reward."""
    obs, _ = env.reset(seed=seed)
    state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
    done, total, stored = False, 0.0, []
    while not done:
        action = a3c.act({"state": state})[0]
        obs, reward, terminated, truncated, _ = env.step(action.item())
        next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        stored.append({"state": {"state": state}, "action": {"action": action},
                       "next_state": {"state": next_state}, "reward": float(reward), "terminal": terminated})
        state, total, done = next_state, total + reward, terminated or truncated
    return stored, total


def main(rank, episodes=1000, seed=0, plot=""):
    torch.set_num_threads(1)
    world = World(rpc_timeout=60)
    group = world.create_rpc_group("a3c_control", world.get_members())
    torch.manual_seed(seed)
    servers = grad_server_helper([Actor, Critic], learning_rate=0.003)
    torch.manual_seed(seed + rank)
    a3c = A3C(Actor(), Critic(), nn.MSELoss(), servers, batch_size=1000, update_times=3, gae_lambda=0.95)
    a3c.set_sync(False)  # pull once per episode, not on every act
    env = gym.make("CartPole-v0")
    progress = Progress(group, rank, world.get_members())
    for episode in range(1, episodes + 1):
        a3c.manual_sync()
        stored, total = play_episode(a3c, env, seed * 1000 + rank * 100000 + episode)
        a3c.store_episode(stored)
        a3c.update()
        if progress.record(episode, total):  # solved here, or another process has
            break
    env.close()
    # Waits for every process; then the one that solved (or process 0) writes its curve.
    finish_run(world, group, world.get_members(), rank, progress.returns, plot, "A3C on CartPole-v0")
    world.stop()
    return progress.returns


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=1000, help="episodes per process at most")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default="a3c_curve.png", help="learning-curve PNG ('' for none)")
    args = parser.parse_args()
    run_script(lambda rank: main(rank, args.episodes, args.seed, args.plot), 3, timeout=3600)

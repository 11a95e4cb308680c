"""IMPALA on CartPole-v0 with 3 local processes: ``python impala.py [--episodes N] [--seed S]``.

Processes 0 and 1 are samplers: they play whole episodes with the newest actor
(pulled once per episode) and store each one, with the log-probability of every
action taken, as a single entry of the distributed episode buffer. Process 2 is the
learner: it samples episodes from both samplers, corrects for the policy lag with
V-trace and pushes its actor to the model server after every update. Everything
stops once a sampler has solved the environment or both have played ``--episodes``.

At the end the sampler that solved the environment (process 0 if none did) writes
its per-episode returns as a learning curve to ``--plot`` (default
``impala_curve.png``; ``--plot ""`` writes none).
"""

import argparse
import time

import gymnasium as gym
import torch
from _shared import Progress, finish_run, pull_until
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import IMPALA
from machin.frame.helpers import model_server_helper
from machin.parallel.distributed import World
from machin.parallel.distributed.launcher import run_script

SAMPLERS, LEARNER = ("0", "1"), "2"
WARMUP = 4  # episodes stored by all samplers before the learner starts


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


def sample(impala, group, rank, episodes, seed):
    """Play and store episodes; returns the return of every episode played."""
    env = gym.make("CartPole-v0")
    progress = Progress(group, rank, SAMPLERS)
    for episode in range(1, episodes + 1):
        # Keep about one learner update per episode of each sampler: wait for the
        # model server's version (one per update) to catch up.
        pull_until(impala, impala.actor, episode - WARMUP)
        obs, _ = env.reset(seed=seed * 1000 + rank * 100000 + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total, stored = False, 0.0, []
        while not done:
            action, log_prob, *_ = impala.act({"state": state})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            stored.append({"state": {"state": state}, "action": {"action": action},
                           "next_state": {"state": next_state}, "reward": float(reward),
                           "terminal": terminated, "action_log_prob": log_prob.item()})
            state, total, done = next_state, total + reward, terminated or truncated
        impala.store_episode(stored)
        if progress.record(episode, total):  # solved here, or the other sampler has
            break
    env.close()
    group.register(f"done_{rank}", print)  # tells the learner this sampler has finished
    return progress.returns


def learn(impala, group):
    """Update until every sampler has finished; returns the number of updates."""
    updates = 0
    while not all(group.is_registered(f"done_{s}") for s in SAMPLERS):
        if impala.replay_buffer.all_size() < WARMUP:
            time.sleep(0.05)
            continue
        impala.update()
        updates += 1
    return updates


def main(rank, episodes=1000, seed=0, plot=""):
    torch.set_num_threads(1)
    world = World(rpc_timeout=60)
    group = world.create_rpc_group("impala", [*SAMPLERS, LEARNER])
    servers = model_server_helper(model_num=1)
    torch.manual_seed(seed)
    impala = IMPALA(Actor(), Critic(), torch.optim.Adam, nn.MSELoss(), group, servers, batch_size=2,
                    learning_rate=0.003, replay_size=50)
    group.barrier()  # every part of the buffer exists
    impala.set_sync(False)  # samplers pull once per episode
    result = learn(impala, group) if str(rank) == LEARNER else sample(impala, group, rank, episodes, seed)
    # Waits for every process; then the one that solved (or process 0) writes its curve.
    finish_run(world, group, SAMPLERS, rank, result, plot, "IMPALA on CartPole-v0")
    world.stop()
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=1000, help="episodes per sampler at most")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default="impala_curve.png", help="learning-curve PNG ('' for none)")
    args = parser.parse_args()
    run_script(lambda rank: main(rank, args.episodes, args.seed, args.plot), 3, timeout=3600)

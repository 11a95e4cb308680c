"""Ape-X DDPG on Pendulum-v1 with 3 processes on this machine.

Run it with ``python examples/framework_examples/ddpg_apex.py`` (three local
processes), or as one rank per process under torchrun::

    torchrun --nproc_per_node 3 examples/framework_examples/ddpg_apex.py --episodes 300

Processes 0 and 1 sample with the newest actor (pulled before each episode) and
store their steps in their part of the distributed prioritized buffer; process 2
learns from batches sampled across both. The networks come from ``ddpg.py`` and the
pacing helper, the learner loop and the learning-curve helpers from the Ape-X DQN
tutorial, which this script imports.

Options: ``--episodes N`` (episodes per sampler at most), ``--seed S`` and ``--plot PATH``
(default ``ddpg_apex_curve.png``, ``""`` for none): the sampler that solved the
environment (process 0 if none did) writes its learning curve there. There is no
``--gif``: the trained networks live in the child processes.
"""

import time

import gymnasium as gym
import torch
from _common import load_tutorial, parse_args
from ddpg import Actor, Critic, noisy_action
from torch import nn

from machin.frame.algorithms import DDPGApex
from machin.frame.helpers import model_server_helper
from machin.parallel.distributed import World
from machin.parallel.distributed.launcher import run_script

SOLVED_REWARD = -200.0
SAMPLERS, LEARNER = ("0", "1"), "2"
WARMUP = 1000  # transitions stored by all samplers before the learner starts


def sample(apex, tutorial, group, rank, episodes, seed):
    """Play and store episodes; returns the return of every episode played."""
    env = gym.make("Pendulum-v1")
    smoothed, steps, returns, start = None, 0, [], time.time()
    for episode in range(1, episodes + 1):
        tutorial.pull_until(apex, apex.actor, steps - WARMUP // 2)
        obs, _ = env.reset(seed=seed * 1000 + rank * 100000 + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total = False, 0.0
        while not done:
            action = noisy_action(apex, state)
            obs, reward, terminated, truncated, _ = env.step(action.numpy().reshape(-1))
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            apex.store_transition({"state": {"state": state}, "action": {"action": action},
                                   "next_state": {"state": next_state}, "reward": float(reward),
                                   "terminal": terminated})
            state, total, done, steps = next_state, total + reward, terminated or truncated, steps + 1
        returns.append(total)
        smoothed = total if smoothed is None else 0.9 * smoothed + 0.1 * total
        print(f"process {rank} episode {episode:4d}  return {total:8.1f}  smoothed {smoothed:8.1f}  "
              f"{time.time() - start:6.1f} s", flush=True)
        if smoothed > SOLVED_REWARD:
            print(f"process {rank}: environment solved at episode {episode}!", flush=True)
            group.register(f"solved_{rank}", print)
            break
        if group.is_registered(f"solved_{SAMPLERS[1 - SAMPLERS.index(str(rank))]}"):
            break
    env.close()
    group.register(f"done_{rank}", print)  # tells the learner this sampler has finished
    return returns


def main(rank, episodes=300, seed=0, plot=""):
    torch.set_num_threads(1)
    tutorial = load_tutorial("dqn_apex")
    world = World(rpc_timeout=60)
    group = world.create_rpc_group("apex", [*SAMPLERS, LEARNER])
    servers = model_server_helper(model_num=1)
    torch.manual_seed(seed)
    apex = DDPGApex(Actor(), Actor(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss(reduction="none"),
                    group, servers, batch_size=64, replay_size=50000)
    group.barrier()  # every part of the buffer exists
    apex.set_sync(False)  # samplers pull once per episode
    if str(rank) == LEARNER:
        result = tutorial.learn(apex, group)
    else:
        result = sample(apex, tutorial, group, rank, episodes, seed)
    # Waits for every process; then the one that solved (or process 0) writes its curve.
    tutorial.finish_run(world, group, SAMPLERS, rank, result, plot, "Ape-X DDPG on Pendulum-v1")
    world.stop()
    return result


if __name__ == "__main__":
    args = parse_args(__doc__, episodes=300, gif=False)
    run_script(lambda rank: main(rank, args.episodes, args.seed, args.plot), 3, timeout=3600)

"""Ape-X DDPG on Pendulum-v1 on any number of processes.

Run it with ``python examples/framework_examples/ddpg_apex.py`` (``--nproc N`` local
processes, 3 by default), or as one rank per process under torchrun, on one node or several::

    torchrun --nproc_per_node 3 examples/framework_examples/ddpg_apex.py --episodes 300
    torchrun --nnodes 2 --nproc_per_node 4 --node_rank 0 --master_addr HOST --master_port 29500 \
        examples/framework_examples/ddpg_apex.py

or as Ray actors, one per rank, on a Ray cluster that is already running (without
``--address``, on a Ray instance started on this machine; with Ray use plain ``python``)::

    python examples/framework_examples/ddpg_apex.py --nproc 8 --backend ray --address HOST:6379

Process 0 learns (``--learners K``: processes 0 .. K-1) from batches sampled across every
sampler; every other process samples with the newest actor (pulled before each episode)
and stores its steps in its part of the distributed prioritized buffer. The networks come
from ``ddpg.py``; the learner loop, the options, the run control and the learning-curve
helpers from the Ape-X DQN tutorial, which this script imports.

Options: ``--episodes N`` (episodes per sampler at most), ``--seed S``, ``--nproc N``,
``--backend {rpc,ray}`` (torch RPC, the default, or Ray actors), ``--address ADDR`` (a
running Ray cluster; implies ``--backend ray``), ``--learners K``, ``--updates N``,
``--checkpoint-every K``, ``--checkpoint-dir DIR``, ``--resume`` and ``--plot PATH``
(default ``ddpg_apex_curve.png``, ``""`` for none): the sampler that solved the environment
(the first sampler if none did) writes its learning curve there. There is no ``--gif``: the
trained networks live in the child processes.
"""

import time

import gymnasium as gym
import torch
from _common import load_tutorial
from ddpg import Actor, Critic, noisy_action
from torch import nn

from machin.frame.algorithms import DDPGApex
from machin.parallel.distributed import World
from machin.parallel.distributed.roles import Roles, RunControl

SOLVED_REWARD = -200.0
WARMUP = 1000  # transitions stored by all samplers before the learner starts
tutorial = load_tutorial("dqn_apex")
# main() uses the tutorial's functions, not the module: with --backend ray, main travels to
# the actors by value, and a module loaded from a file path cannot be imported there by name.
learn, finish_run, stop_if_learner_lost = (
    tutorial.learn,
    tutorial.finish_run,
    tutorial.stop_if_learner_lost,
)
RPC_TIMEOUT = tutorial.RPC_TIMEOUT


def sample(apex, control, rank, args):
    """Play and store episodes; returns the return of every episode played."""
    env = gym.make("Pendulum-v1")
    smoothed, steps, returns, start = None, 0, [], time.time()
    for episode in range(1, args.episodes + 1):
        if control.wait_for_updates(steps - WARMUP // 2).stop:  # about one update per step
            break
        apex.manual_sync()
        obs, _ = env.reset(seed=args.seed * 1000 + rank * 100000 + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total, played = False, 0.0, 0
        while not done:
            action = noisy_action(apex, state)
            obs, reward, terminated, truncated, _ = env.step(action.numpy().reshape(-1))
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            apex.store_transition(
                {
                    "state": {"state": state},
                    "action": {"action": action},
                    "next_state": {"state": next_state},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
            state, total, done, played = (
                next_state,
                total + reward,
                terminated or truncated,
                played + 1,
            )
        steps += played
        returns.append(total)
        smoothed = total if smoothed is None else 0.9 * smoothed + 0.1 * total
        print(
            f"process {rank} episode {episode:4d}  return {total:8.1f}  smoothed {smoothed:8.1f}  "
            f"{time.time() - start:6.1f} s",
            flush=True,
        )
        solved = smoothed > SOLVED_REWARD
        if solved:
            print(f"process {rank}: environment solved at episode {episode}!", flush=True)
        if control.report(steps=played, episodes=1, solved=solved).stop:
            break
    env.close()
    return returns


def main(rank, args):
    torch.set_num_threads(1)
    world = World(rpc_timeout=RPC_TIMEOUT)
    roles = Roles.from_world(learners=args.learners)  # learners 0 .. K-1, samplers the rest
    torch.manual_seed(args.seed)
    apex = DDPGApex.from_roles(
        roles,
        Actor(),
        Actor(),
        Critic(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=64,
        replay_size=50000,
    )
    apex.set_sync(False)  # samplers pull once per episode
    control = RunControl(apex.apex_group, roles, learner_group=apex.learner_group)
    with stop_if_learner_lost(world, control):
        if roles.is_learner:
            result = learn(apex, control, args, warmup=WARMUP)
        else:
            result = sample(apex, control, rank, args)
        # Ends the run everywhere; then the sampler that solved (or the first) writes its curve.
        finish_run(world, control, rank, result, args.plot, "Ape-X DDPG on Pendulum-v1")
    return result


if __name__ == "__main__":
    tutorial.start(main, tutorial.parse_args(__doc__, "ddpg_apex", episodes=300))

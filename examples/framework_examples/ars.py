"""ARS (augmented random search) on CartPole-v1 on any number of processes.

Run it with ``python examples/framework_examples/ars.py`` (``--nproc N`` local processes,
3 by default), or as one rank per process under torchrun, on one node or several::

    torchrun --nproc_per_node 3 examples/framework_examples/ars.py --episodes 100
    torchrun --nnodes 2 --nproc_per_node 2 --node_rank 0 --master_addr HOST --master_port 29500 \
        examples/framework_examples/ars.py

or as one Ray actor per process, on a Ray cluster that is already running (leave out
``--address`` to start Ray on this machine; with Ray use plain ``python``, not torchrun)::

    python examples/framework_examples/ars.py --nproc 6 --backend ray --address HOST:6379

The roles come from the world (``ARS.from_roles``): process 0 manages (steps the policy
and hosts the model server) and every process plays its share of the rollouts.

The policy is linear (the action of the largest of two outputs) and starts at zero.
Each round every process plays its share of the 6 perturbation pairs (one episode per
perturbed policy) and stores the returns; ``update()`` then steps the policy on the
first process, merges the state statistics and hands both to every process. All
processes get the same mean return from ``update()``, so they stop together, once a
round's mean return reaches 475 (CartPole-v1 ends episodes at 500 steps).

Options: ``--episodes N`` (rounds at most), ``--seed S``, ``--nproc N``, ``--backend {rpc,ray}``
(torch RPC, the default, or Ray actors), ``--address ADDR`` (a running Ray cluster; implies
``--backend ray``) and ``--plot PATH`` (default ``ars_curve.png``, ``""`` for none): process 0
prints one line per round and writes the curve of the rounds' mean returns there (with Ray,
on the machine of its actor). There is no ``--gif``: the trained networks live in the child
processes.
"""

import time

import gymnasium as gym
import torch
from _common import launch_kwargs, output_path, parse_args, write_curve
from torch import nn

from machin.frame.algorithms import ARS
from machin.parallel.distributed import World
from machin.parallel.distributed.launcher import run_script
from machin.parallel.distributed.roles import Roles

ENV_ID = "CartPole-v1"
SOLVED_REWARD = 475.0


class LinearPolicy(nn.Module):
    """``argmax(W s)``: a linear policy, started at zero as in the ARS paper."""

    def __init__(self, state_dim=4, action_num=2):
        super().__init__()
        self.fc = nn.Linear(state_dim, action_num, bias=False)
        nn.init.zeros_(self.fc.weight)

    def forward(self, state):
        return self.fc(state).argmax(dim=1, keepdim=True)


def play(ars, env, actor_type, seed):
    """One episode of one of the ARS actors; returns its return and its length."""
    obs, _ = env.reset(seed=seed)
    done, total, steps = False, 0.0, 0
    while not done:
        action = ars.act({"state": torch.tensor(obs, dtype=torch.float32).view(1, -1)}, actor_type)
        obs, reward, terminated, truncated, _ = env.step(action.item())
        total, steps, done = total + float(reward), steps + 1, terminated or truncated
    return total, steps


def main(rank, rounds=100, seed=0, plot=""):
    torch.set_num_threads(1)
    world = World(rpc_timeout=60)
    roles = Roles.from_world()  # process 0 manages; every process plays its share of the rollouts
    ars = ARS.from_roles(
        roles,
        LinearPolicy(),
        torch.optim.SGD,
        learning_rate=0.5,
        noise_std_dev=0.1,
        noise_size=10**6,
        rollout_num=6,
        used_rollout_num=6,
        noise_seed=seed,
        sample_seed=seed,
    )
    env = gym.make(ENV_ID)
    returns, steps, start = [], 0, time.time()
    for round_index in range(1, rounds + 1):
        for i, actor_type in enumerate(ars.get_actor_types()):
            total, length = play(
                ars, env, actor_type, seed * 1000003 + rank * 100000 + round_index * 100 + i
            )
            ars.store_reward(total, actor_type)
            steps += length
        mean_return = ars.update()  # the same number in every process
        returns.append(mean_return)
        if rank == 0:
            print(
                f"ARS round {round_index:4d}  mean return {mean_return:8.2f}  steps {steps:6d} (process 0)  "
                f"{time.time() - start:6.1f} s",
                flush=True,
            )
        if mean_return >= SOLVED_REWARD:
            if rank == 0:
                print(f"Environment solved at round {round_index}!", flush=True)
            break
    if rank == 0:
        total, _ = play(ars, env, "original", seed)
        print(f"the unperturbed policy's return: {total:.1f}", flush=True)
        write_curve(returns, plot, f"ARS on {ENV_ID} (mean return per round)")
    env.close()
    world.stop()
    return returns


if __name__ == "__main__":
    args = parse_args(__doc__, episodes=100, gif=False, nproc=3)
    plot = output_path(
        args.plot, args
    )  # absolute with Ray: a cluster's actors work in another directory
    run_script(
        lambda rank: main(rank, args.episodes, args.seed, plot),
        args.nproc,
        timeout=3600,
        **launch_kwargs(args),
    )

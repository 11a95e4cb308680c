"""Ape-X DQN on CartPole on any number of processes: ``python dqn_apex.py [--nproc N] [--episodes E]``.

The roles come from the world: process 0 is the learner and every other process a
sampler (``--learners K`` makes processes 0 .. K-1 learners, trained together with
DistributedDataParallel). Samplers play with the newest Q network (pulled once per
episode) and store every step in their own part of the distributed prioritized buffer.
The learner, once the group holds enough transitions, samples across every sampler,
sends the new priorities back to them, pushes its Q network to the model server after
every update and writes a checkpoint every ``--checkpoint-every`` updates. Everything
stops once a sampler has solved the environment, every sampler has played ``--episodes``
episodes, or the learner has made ``--updates`` updates.

``python dqn_apex.py`` starts ``--nproc`` processes (3 by default) on this machine; under
``torchrun`` each process is one rank, on one node or many::

    torchrun --nproc_per_node 5 dqn_apex.py
    torchrun --nnodes 2 --nproc_per_node 4 --node_rank 0 --master_addr HOST --master_port 29500 dqn_apex.py

With ``--backend ray`` the ``--nproc`` ranks are Ray actors instead, in a Ray instance
started on this machine or, with ``--address``, in a cluster already running (run it
with plain ``python``; ``--address`` alone implies ``--backend ray``)::

    python dqn_apex.py --nproc 8 --backend ray --address HOST:6379

A sampler that dies (or a whole node of samplers) is reported by the learner, which goes
on with the others. If the learner dies, the samplers stop with a message; start the run
again with ``--resume`` and the learner continues from its newest checkpoint.

At the end the sampler that solved the environment (the first sampler if none did)
writes its per-episode returns as a learning curve to ``--plot`` (default
``dqn_apex_curve.png``; ``--plot ""`` writes none). With Ray, the curve and the
checkpoints are written on the machine of the rank that writes them (at the path seen
from the directory the script was started in).
"""

import time

import torch
from _shared import (
    RPC_TIMEOUT,
    Progress,
    finish_run,
    learner_summary,
    make_env,
    parse_args,
    start,
    stop_if_learner_lost,
)
from torch import nn

from machin.frame.algorithms import DQNApex
from machin.parallel.distributed import World
from machin.parallel.distributed.checkpoint import LearnerCheckpoint
from machin.parallel.distributed.roles import Roles, RunControl

WARMUP = 500  # transitions stored by all samplers before the learner starts


class QNet(nn.Module):
    """Q values of the two CartPole actions."""

    def __init__(self, state_dim=4, action_num=2, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_num),
        )

    def forward(self, state):
        return self.net(state)


def sample(apex, control, rank, args):
    """Play and store episodes; returns the return of every episode played."""
    env = make_env()
    progress, steps = Progress(rank), 0
    for episode in range(1, args.episodes + 1):
        # Keep about one learner update per two steps of each sampler (after the warm-up).
        if control.wait_for_updates((steps - WARMUP // 2) // 2).stop:
            break
        apex.manual_sync()  # the newest Q network
        obs, _ = env.reset(seed=args.seed * 1000 + rank * 100000 + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total, played = False, 0.0, 0
        while not done:
            action = apex.act_discrete_with_noise({"state": state})
            obs, reward, terminated, truncated, _ = env.step(action.item())
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
        solved = progress.record(episode, total)
        if control.report(steps=played, episodes=1, solved=solved).stop:  # solved here or elsewhere
            break
    env.close()
    return progress.returns


def learn(apex, control, args, warmup=WARMUP):
    """Update until the run stops, with a checkpoint every ``--checkpoint-every`` updates."""
    checkpoint = LearnerCheckpoint(apex, args.checkpoint_dir, every=args.checkpoint_every)
    updates = (checkpoint.resume() or 0) if args.resume else 0
    if updates:
        print(f"learner: resumed from the checkpoint of update {updates}", flush=True)
        apex.publish()  # the samplers pull the resumed network at once
    control.set_updates(updates)
    started = False
    while not control.learner_should_stop():
        # once (not again when a sampler's part is lost): wait until the group holds enough
        started = started or control.learners_agree(apex.replay_buffer.all_size() >= warmup)
        if not started:
            time.sleep(0.1)
            continue
        for _ in range(20):
            apex.update()
        updates += 20
        control.set_updates(updates)
        if control.is_coordinator:
            checkpoint.step(updates)
        if args.updates and updates >= args.updates:
            control.request_stop(f"{updates} updates made")
    if control.is_coordinator:
        learner_summary(updates, apex.sampled_from, control)
    return updates


def main(rank, args):
    torch.set_num_threads(1)
    world = World(rpc_timeout=RPC_TIMEOUT)
    roles = Roles.from_world(learners=args.learners)  # learners 0 .. K-1, samplers the rest
    torch.manual_seed(args.seed)
    apex = DQNApex.from_roles(
        roles,
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    apex.set_sync(False)  # samplers pull once per episode
    control = RunControl(apex.apex_group, roles, learner_group=apex.learner_group)
    with stop_if_learner_lost(world, control):
        result = (
            learn(apex, control, args) if roles.is_learner else sample(apex, control, rank, args)
        )
        # Ends the run everywhere; then the sampler that solved (or the first) writes its curve.
        finish_run(world, control, rank, result, args.plot, "Ape-X DQN on CartPole")
    return result


def cli(description=__doc__, name="dqn_apex"):
    """Parse the options and start the run (what ``python dqn_apex.py`` does)."""
    start(main, parse_args(description, name))


if __name__ == "__main__":
    cli()

"""IMPALA on CartPole on any number of processes: ``python impala.py [--nproc N] [--episodes E]``.

The roles come from the world: process 0 is the learner and every other process a
sampler (``--learners K``: processes 0 .. K-1 learn together with
DistributedDataParallel). Samplers play whole episodes with the newest actor (pulled
once per episode) and store each one, with the log-probability of every action taken,
as a single entry of the distributed episode buffer. The learner samples episodes from
every sampler, corrects for the policy lag with V-trace, pushes its actor to the model
server after every update and writes a checkpoint every ``--checkpoint-every`` updates.
Everything stops once a sampler has solved the environment, every sampler has played
``--episodes`` episodes, or the learner has made ``--updates`` updates.

``python impala.py`` starts ``--nproc`` processes (3 by default) on this machine; under
``torchrun`` each process is one rank (``torchrun --nproc_per_node 5 impala.py``). With
``--backend ray`` the ranks are Ray actors, on this machine or, with ``--address ADDR``
(which implies ``--backend ray``), on a running Ray cluster; run it with plain ``python``::

    python impala.py --nproc 8 --backend ray --address HOST:6379

If the learner dies, the samplers stop with a message; ``--resume`` continues from the
newest checkpoint.

At the end the sampler that solved the environment (the first sampler if none did)
writes its per-episode returns as a learning curve to ``--plot`` (default
``impala_curve.png``; ``--plot ""`` writes none).
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
from torch.distributions import Categorical

from machin.frame.algorithms import IMPALA
from machin.parallel.distributed import World
from machin.parallel.distributed.checkpoint import LearnerCheckpoint
from machin.parallel.distributed.roles import Roles, RunControl

WARMUP = 4  # episodes stored by all samplers before the learner starts


class Actor(nn.Module):
    """Samples a discrete action, or scores a given one: ``(action, log_prob, entropy)``."""

    def __init__(self, state_dim=4, action_num=2, hidden=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, action_num),
        )

    def forward(self, state, action=None):
        dist = Categorical(logits=self.net(state))
        action = dist.sample().view(-1, 1) if action is None else action
        return action, dist.log_prob(action.view(-1)), dist.entropy()


class Critic(nn.Module):
    """State value ``V(s)``."""

    def __init__(self, state_dim=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state):
        return self.net(state)


def sample(impala, control, rank, args):
    """Play and store episodes; returns the return of every episode played."""
    env = make_env()
    progress = Progress(rank)
    for episode in range(1, args.episodes + 1):
        # Keep about one learner update per episode of each sampler.
        if control.wait_for_updates(episode - WARMUP).stop:
            break
        impala.manual_sync()  # the newest actor
        obs, _ = env.reset(seed=args.seed * 1000 + rank * 100000 + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total, stored = False, 0.0, []
        while not done:
            action, log_prob, *_ = impala.act({"state": state})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            stored.append(
                {
                    "state": {"state": state},
                    "action": {"action": action},
                    "next_state": {"state": next_state},
                    "reward": float(reward),
                    "terminal": terminated,
                    "action_log_prob": log_prob.item(),
                }
            )
            state, total, done = next_state, total + reward, terminated or truncated
        impala.store_episode(stored)
        solved = progress.record(episode, total)
        if control.report(
            steps=len(stored), episodes=1, solved=solved
        ).stop:  # solved here or elsewhere
            break
    env.close()
    return progress.returns


def learn(impala, control, args):
    """Update until the run stops, with a checkpoint every ``--checkpoint-every`` updates."""
    checkpoint = LearnerCheckpoint(impala, args.checkpoint_dir, every=args.checkpoint_every)
    updates = (checkpoint.resume() or 0) if args.resume else 0
    if updates:
        print(f"learner: resumed from the checkpoint of update {updates}", flush=True)
        impala.publish()  # the samplers pull the resumed actor at once
    control.set_updates(updates)
    started = False
    while not control.learner_should_stop():
        # once (not again when a sampler's part is lost): wait until the group holds enough
        started = started or control.learners_agree(impala.replay_buffer.all_size() >= WARMUP)
        if not started:
            time.sleep(0.05)
            continue
        impala.update()
        updates += 1
        control.set_updates(updates)
        if control.is_coordinator:
            checkpoint.step(updates)
        if args.updates and updates >= args.updates:
            control.request_stop(f"{updates} updates made")
    if control.is_coordinator:
        learner_summary(updates, impala.sampled_from, control)
    return updates


def main(rank, args):
    torch.set_num_threads(1)
    world = World(rpc_timeout=RPC_TIMEOUT)
    roles = Roles.from_world(learners=args.learners)  # learners 0 .. K-1, samplers the rest
    torch.manual_seed(args.seed)
    impala = IMPALA.from_roles(
        roles,
        Actor(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=2,
        learning_rate=0.003,
        replay_size=50,
    )
    impala.set_sync(False)  # samplers pull once per episode
    control = RunControl(impala.impala_group, roles, learner_group=impala.learner_group)
    with stop_if_learner_lost(world, control):
        result = (
            learn(impala, control, args)
            if roles.is_learner
            else sample(impala, control, rank, args)
        )
        # Ends the run everywhere; then the sampler that solved (or the first) writes its curve.
        finish_run(world, control, rank, result, args.plot, "IMPALA on CartPole")
    return result


def cli(description=__doc__, name="impala"):
    """Parse the options and start the run (what ``python impala.py`` does)."""
    start(main, parse_args(description, name))


if __name__ == "__main__":
    cli()

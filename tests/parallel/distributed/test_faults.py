"""Faults of a learner/sampler run (DQNApex.from_roles + RunControl) on the local launcher.

* A sampler is killed: the learner and the other samplers go on to the end and say who left.
* The learner is killed: the samplers stop with a message naming it; the run, started
  again, resumes from the learner's newest checkpoint (networks and optimizer).

Rank 0 learns, the other ranks sample synthetic 10-step "episodes". Killing the whole node
of a torchrun run is in ``test_multinode.py``.
"""

import os
import signal
import time

import pytest
import torch
from torch import nn

from machin.frame.algorithms.apex import DQNApex
from machin.parallel.distributed import World
from machin.parallel.distributed.checkpoint import LearnerCheckpoint
from machin.parallel.distributed.roles import LearnerLostError, Roles, RunControl
from tests.frame.algorithms.nets import QNet
from tests.multiprocess import Exited, no_children_left, run_ranks  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]

KILL_SAMPLER_AT, KILL_LEARNER_AT, CHECKPOINT_EVERY = 10, 25, 10


def _flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _transition(rank, i):
    generator = torch.Generator().manual_seed(rank * 100003 + i)
    return {
        "state": {"state": torch.randn(1, 4, generator=generator)},
        "action": {"action": torch.tensor([[i % 2]])},
        "next_state": {"state": torch.randn(1, 4, generator=generator)},
        "reward": float(i % 3),
        "terminal": i % 10 == 9,
    }


def _learn(apex, control, directory, kill, target):
    checkpoint = LearnerCheckpoint(apex, directory, every=CHECKPOINT_EVERY)
    updates = checkpoint.resume() or 0
    step = (
        apex.qnet_optim.state_dict()["state"].get(0, {}).get("step")
    )  # Adam's step count (updated in place)
    resumed = (updates, _flat(apex.qnet).clone(), None if step is None else int(step))
    control.set_updates(updates)
    started = False
    while not control.learner_should_stop():
        started = started or apex.replay_buffer.all_size() >= 16
        if not started:
            time.sleep(0.02)
            continue
        apex.update()
        updates += 1
        control.set_updates(updates)
        checkpoint.step(updates)
        if kill == "learner" and updates == KILL_LEARNER_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        if updates >= target:
            control.request_stop(f"{updates} updates made")
    return {"updates": updates, "resumed": resumed, "sampled_from": dict(apex.sampled_from)}


def _sample(apex, control, rank, kill):
    i, status = 0, None
    while status is None or not status.stop:
        for _ in range(10):
            apex.store_transition(_transition(rank, i))
            i += 1
        status = control.report(steps=10, episodes=1)
        if kill == "sampler" and rank == 3 and status.updates >= KILL_SAMPLER_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.005)
    return {"stored": i}


def _run(rank, directory, kill, target):
    world = World(rpc_timeout=20)
    roles = Roles.from_world()
    torch.manual_seed(0)
    apex = DQNApex.from_roles(
        roles,
        QNet(4, 2, 8),
        QNet(4, 2, 8),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=8,
        replay_size=200,
    )
    messages, updates_seen = [], []

    def log(message):  # what the process says, with the learner's update count at that moment
        messages.append(message)
        updates_seen.append(control.status().updates if roles.is_learner else None)

    control = RunControl(apex.apex_group, roles, log=log, check_interval=0.3)
    try:
        if roles.is_learner:
            result = _learn(apex, control, directory, kill, target)
        else:
            result = _sample(apex, control, rank, kill)
        result["status"] = control.finish(world)
    except LearnerLostError as error:
        world.stop(graceful=False)
        return {"lost": str(error)}
    result.update(messages=messages, updates_seen=updates_seen)
    return result


def test_a_killed_sampler_is_reported_and_the_others_train_on(tmp_path):
    results = run_ranks(_run, 4, args=(str(tmp_path), "sampler", 200), timeout=90, allow_exit=[3])
    assert results[3] == Exited(-signal.SIGKILL)
    learner = results[0]
    assert learner["updates"] == 200 and learner["status"].gone == (3,)
    assert learner["status"].reason == "200 updates made"
    (message,) = learner["messages"]
    assert (
        message.startswith("sampler 2 (rank 3) on node 0 (host ")
        and "left the run (no answer: " in message
    )
    assert message.endswith("going on with learners [0] and samplers [1, 2]")
    assert learner["updates_seen"][0] < 200  # the learner went on updating after the loss
    assert set(learner["sampled_from"]) >= {"1", "2"}
    for rank in (1, 2):
        assert results[rank]["status"].stop and results[rank]["status"].gone == (3,)
        assert results[rank]["messages"] == [
            f"sampler {rank - 1} (rank {rank}): sampler 2 (rank 3) has left the "
            f"run; going on without it"
        ]


def test_samplers_stop_when_the_learner_dies_and_the_run_resumes_from_its_checkpoint(tmp_path):
    results = run_ranks(_run, 3, args=(str(tmp_path), "learner", 1000), timeout=90, allow_exit=[0])
    assert results[0] == Exited(-signal.SIGKILL)
    for rank in (1, 2):
        message = results[rank]["lost"]
        assert message.startswith(
            f"sampler {rank - 1} (rank {rank}) on node 0 lost the coordinating learner 0 "
            f"(rank 0), process '0' ("
        )
        assert "so this process stops. Restart the run" in message
    newest = (KILL_LEARNER_AT // CHECKPOINT_EVERY) * CHECKPOINT_EVERY
    assert sorted(p.name for p in tmp_path.glob("learner_state_*.pt")) == [
        f"learner_state_{v}.pt" for v in range(CHECKPOINT_EVERY, newest + 1, CHECKPOINT_EVERY)
    ]
    saved = torch.load(tmp_path / f"learner_state_{newest}.pt", weights_only=True)["networks"][
        "qnet"
    ]

    results = run_ranks(_run, 3, args=(str(tmp_path), None, newest + 20), timeout=90)
    updates, qnet, adam_step = results[0]["resumed"]
    assert updates == newest and adam_step == newest  # networks and optimizer of that checkpoint
    assert torch.equal(qnet, torch.cat([t.reshape(-1) for t in saved.values()]))
    assert results[0]["updates"] == newest + 20 and results[0]["status"].gone == ()
    assert all(results[rank]["status"].reason == f"{newest + 20} updates made" for rank in (1, 2))

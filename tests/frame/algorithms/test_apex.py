"""DQNApex and DDPGApex: storage over the group, priorities back to their owners, model sync.

With explicit groups (the 0.3.4 way) ranks 0 and 1 sample and rank 2 learns; with
``from_roles`` rank 0 learns (ranks 0 and 1 with two learners) and the others sample.
"""

import os
import signal
import threading
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from machin.frame.algorithms.apex import DDPGApex, DQNApex
from machin.frame.buffers import DistributedPrioritizedBuffer
from machin.frame.helpers import model_server_helper
from machin.parallel.distributed import World
from machin.parallel.distributed.roles import Roles, RunControl
from tests.frame.algorithms.loops import pull_until
from tests.frame.algorithms.nets import Actor, Critic, QNet
from tests.multiprocess import Exited, no_children_left, rank_context, run_ranks, wait_for  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]

STORED = 12  # transitions per sampler
LEARNER = 2


def _flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _dqn(group, servers):
    torch.manual_seed(0)
    return (
        DQNApex(
            QNet(4, 2, 8),
            QNet(4, 2, 8),
            torch.optim.Adam,
            nn.MSELoss(reduction="none"),
            group,
            servers,
            batch_size=8,
            replay_size=50,
        ),
        "qnet",
        4,
    )


def _ddpg(group, servers):
    torch.manual_seed(0)
    return (
        DDPGApex(
            Actor(hidden=8),
            Actor(hidden=8),
            Critic(hidden=8),
            Critic(hidden=8),
            torch.optim.Adam,
            nn.MSELoss(reduction="none"),
            group,
            servers,
            batch_size=8,
            replay_size=50,
        ),
        "actor",
        3,
    )


def _transition(rank, i, state_dim, discrete):
    generator = torch.Generator().manual_seed(rank * 100 + i)
    action = torch.tensor([[i % 2]]) if discrete else torch.rand(1, 1, generator=generator)
    return {
        "state": {"state": torch.randn(1, state_dim, generator=generator)},
        "action": {"action": action},
        "next_state": {"state": torch.randn(1, state_dim, generator=generator)},
        "reward": float(i),
        "terminal": i == STORED - 1,
    }


def _act(agent, state_dim):
    state = {"state": torch.zeros(1, state_dim)}
    return agent.act_discrete(state) if isinstance(agent, DQNApex) else agent.act_with_noise(state)


def _apex_flow(rank, build):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("apex", ["0", "1", "2"])
    # The DDPG tutorial of Machin 0.3.4 hands over both servers of model_num=2; the first is used.
    servers = model_server_helper(model_num=2 if build is _ddpg else 1)
    agent, shared, state_dim = build(group, servers)
    assert agent.model_server == (servers[0],)
    assert isinstance(agent.replay_buffer, DistributedPrioritizedBuffer)
    assert agent.replay_buffer.group is group
    group.barrier()
    if rank != LEARNER:
        agent.set_sync(False)
        agent.store_episode(
            [_transition(rank, i, state_dim, isinstance(agent, DQNApex)) for i in range(STORED)]
        )
    group.barrier()
    result = {"all_size": agent.replay_buffer.all_size(), "local_size": agent.replay_buffer.size()}
    if rank == LEARNER:
        sent = []
        original = agent.replay_buffer.update_priority
        agent.replay_buffer.update_priority = lambda p, i: (
            sent.append((p.copy(), i)),
            original(p, i),
        )[1]
        assert agent.update() is not None
        priorities, indexes = sent[0]
        offset, result["sent"] = 0, {}
        for member, (index, _) in indexes.items():
            result["sent"][member] = (
                index.tolist(),
                priorities[offset : offset + len(index)].tolist(),
            )
            offset += len(index)
        result["model"] = _flat(getattr(agent, shared))
        agent.flush()  # the priorities and the push travel without waiting: wait for them here
    group.barrier()  # the update (and its priority updates and push) is done
    if rank != LEARNER:
        local = agent.replay_buffer
        result["weights"] = local.wt_tree.get_leaf_weight(np.arange(local.size())).tolist()
        net = getattr(agent, shared)
        with torch.no_grad():
            net.net[0].weight.add_(1.0)  # away from anything the learner could have pushed
        before = _flat(net)
        _act(agent, state_dim)  # sync off: no pull
        assert torch.equal(_flat(net), before)
        if rank == 0:
            assert agent.manual_sync()
        else:
            agent.set_sync(True)
            _act(agent, state_dim)  # sync on: pulls first
        result["model"] = _flat(net)
    group.barrier()
    world.stop()
    return result


@pytest.mark.parametrize("build", [_dqn, _ddpg], ids=["DQNApex", "DDPGApex"])
def test_priorities_reach_the_sample_owners_and_samplers_pull_the_model(build):
    results = run_ranks(_apex_flow, 3, args=(build,), timeout=60)
    assert [r["all_size"] for r in results] == [2 * STORED] * 3
    assert [r["local_size"] for r in results] == [STORED, STORED, 0]
    sent = results[LEARNER]["sent"]
    assert set(sent) <= {"0", "1"} and sum(len(i) for i, _ in sent.values()) == 8
    for member, (index, priorities) in sent.items():
        weights = np.array(results[int(member)]["weights"])
        expected = {
            i: (abs(p) + 1e-2) ** 0.6 for i, p in zip(index, priorities)
        }  # the last update wins
        for i, w in expected.items():
            assert weights[i] == pytest.approx(w)
        untouched = [w for i, w in enumerate(weights) if i not in expected]
        assert all(w == pytest.approx(1.0) for w in untouched)  # stored with the initial weight 1
    for rank in (0, 1):
        assert torch.equal(results[rank]["model"], results[LEARNER]["model"])


def _ddp_learners(rank, algorithm):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("apex", ["0", "1", "2", "3"])
    servers = model_server_helper(model_num=1)
    torch.manual_seed(0)
    if algorithm == "dqn":
        nets, shared, state_dim = {"qnet": QNet(4, 2, 8), "qnet_target": QNet(4, 2, 8)}, "qnet", 4
    else:  # the actor's loss runs through the critic, and both are wrapped
        nets = {
            "actor": Actor(hidden=8),
            "actor_target": Actor(hidden=8),
            "critic": Critic(hidden=8),
            "critic_target": Critic(hidden=8),
        }
        shared, state_dim = "actor", 3
    initial = _flat(nets[shared])
    if rank >= 2:  # two learners, their online networks wrapped in DistributedDataParallel
        learners = world.create_collective_group([2, 3])
        for name in ("qnet", "actor", "critic"):
            if name in nets:
                nets[name] = DistributedDataParallel(nets[name], process_group=learners.group)
    build = DQNApex if algorithm == "dqn" else DDPGApex
    apex = build(
        *nets.values(),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        group,
        servers,
        batch_size=8,
        replay_size=50,
    )
    # A loss through tensors its step does not train gets a backward pass restricted to the stepped
    # ones (TorchFramework._stepped_parameters), but never where a network is in DistributedDataParallel.
    stepped, other = torch.zeros(1, requires_grad=True), torch.ones(1, requires_grad=True)
    probe = torch.optim.SGD([stepped], lr=1.0)
    restricted = apex._stepped_parameters([probe], [[stepped]], [(stepped * other).sum()])
    assert (restricted is None) == (rank >= 2)
    group.barrier()
    if rank < 2:
        apex.store_episode(
            [_transition(rank, i, state_dim, algorithm == "dqn") for i in range(STORED)]
        )
    group.barrier()
    if rank >= 2:
        for _ in range(3):  # every DDP member calls update(), each on its own sampled batch
            assert apex.update() is not None
        apex.flush()  # the last push travels without waiting
    group.barrier()
    if rank < 2:
        assert apex.manual_sync()
    result = _flat(getattr(apex, shared))
    assert not torch.equal(result, initial)
    group.barrier()
    world.stop()
    return result


@pytest.mark.parametrize("algorithm", ["dqn", "ddpg"])
def test_learners_wrapped_in_ddp_train_one_model_that_samplers_pull(algorithm):
    results = run_ranks(_ddp_learners, 4, args=(algorithm,), timeout=60)
    assert all(torch.equal(results[0], other) for other in results[1:])


def _stop_with_calls_in_flight(rank):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("apex", ["0", "1"])
    servers = model_server_helper(model_num=1)  # on rank 0: the learner's pushes are round trips
    agent, _, state_dim = _dqn(group, servers)
    group.barrier()
    if rank == 0:
        agent.store_episode([_transition(rank, i, state_dim, True) for i in range(STORED)])
    group.barrier()
    result = {}
    if rank == 1:
        for _ in range(3):
            assert agent.update() is not None
        result["before_stop"] = (
            agent._prefetcher.in_flight,
            agent._pusher.in_flight,
            agent.replay_buffer.queued_priority_updates > 0,
        )
    world.stop()  # runs the learner's flush: it waits for the calls in flight
    if rank == 1:
        result["after_stop"] = (
            agent._prefetcher.in_flight,
            agent._pusher.in_flight,
            agent.replay_buffer.queued_priority_updates > 0,
        )
        result["push_threads"] = [
            t.name for t in threading.enumerate() if t.name.startswith("dqnapex_push")
        ]
    return result


def test_stopping_the_world_with_calls_in_flight_waits_for_them_and_leaves_no_thread():
    _, learner = run_ranks(_stop_with_calls_in_flight, 2, timeout=60)
    assert learner["before_stop"] == (
        True,
        True,
        True,
    )  # the next batches, the push, the queued priorities
    assert learner["after_stop"] == (False, False, False) and learner["push_threads"] == []


def test_model_server_must_hold_an_accessor():
    with pytest.raises(
        ValueError, match="model_server of DQNApex must be a tuple whose first element"
    ):
        DQNApex(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(reduction="none"), None, ())


@pytest.mark.parametrize(
    "build",
    [
        lambda device: DQNApex(
            QNet(),
            QNet(),
            torch.optim.Adam,
            nn.MSELoss(reduction="none"),
            None,
            (None,),
            replay_device=device,
        ),
        lambda device: DDPGApex(
            Actor(),
            Actor(),
            Critic(),
            Critic(),
            torch.optim.Adam,
            nn.MSELoss(reduction="none"),
            None,
            (None,),
            replay_device=device,
        ),
    ],
    ids=["dqn", "ddpg"],
)
def test_replay_device_other_than_cpu_is_ignored_with_a_warning(build):
    # the group is None here, so construction fails after the check (on the buffer)
    with (
        pytest.warns(
            UserWarning,
            match=r"Apex ignores replay_device='cuda:0': its distributed buffer always "
            r"stores transitions on the CPU",
        ),
        pytest.raises(AttributeError),
    ):
        build("cuda:0")


def _dead(pid):
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _sampler_killed_mid_run(rank, updates_after, episodes_after, got_pid, killed, learner_done):
    """Rank 1 (a sampler) SIGKILLs itself; rank 0 (sampler, model server host) and rank 2 go on.

    Group registrations reach every member, so after the kill the ranks signal each
    other through the (forked) events ``got_pid``, ``killed`` and ``learner_done`` instead.
    """
    world = World(rpc_timeout=20)
    group = world.create_rpc_group("apex", ["0", "1", "2"])
    servers = model_server_helper(model_num=1)
    apex, _, state_dim = _dqn(group, servers)
    group.barrier()
    if rank == 1:
        for i in range(STORED):
            apex.store_transition(_transition(rank, i, state_dim, True))
        group.register("pid_1", os.getpid)
        assert got_pid.wait(20), "the learner never read the pid"
        os.kill(os.getpid(), signal.SIGKILL)
    if rank == LEARNER:
        wait_for(lambda: group.is_registered("pid_1"), 20)
        pid = group.registered_sync("pid_1")
        got_pid.set()  # an event, not a registration: the change would race with the kill
        losses = []
        while not _dead(pid):
            apex.update()
            time.sleep(0.01)
        killed.set()
        while len(losses) < updates_after:
            losses.append(apex.update())
        learner_done.set()
        return losses, apex.replay_buffer.all_size()
    # rank 0: one "episode" is STORED transitions; keep playing until the learner is done
    episodes, after = 0, None
    while after is None or after < episodes_after or not learner_done.is_set():
        apex.manual_sync()
        for i in range(STORED):
            apex.store_transition(_transition(rank, episodes * STORED + i, state_dim, True))
        episodes += 1
        if after is not None:
            after += 1
        elif killed.is_set():
            after = 0
    return after


def test_learner_and_surviving_sampler_keep_training_after_a_sampler_is_killed():
    events = [rank_context().Event() for _ in range(3)]
    results = run_ranks(
        _sampler_killed_mid_run, 3, args=(30, 5, *events), timeout=90, allow_exit=[1]
    )
    assert isinstance(results[1], Exited) and results[1].exitcode == -signal.SIGKILL
    assert results[0] >= 5
    losses, all_size = results[LEARNER]
    assert len(losses) == 30 and all(isinstance(loss, float) for loss in losses)
    # only the survivor's part is counted now: whole "episodes" of rank 0, capped by replay_size
    assert all_size % STORED == 0 or all_size == 50


def _build_dqn_learner(group, servers):
    return DQNApex(
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        group,
        servers,
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )


def _build_ddpg_learner(group, servers):
    return DDPGApex(
        Actor(hidden=32),
        Actor(hidden=32),
        Critic(hidden=32),
        Critic(hidden=32),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        group,
        servers,
        batch_size=256,
        learning_rate=2e-3,
        discount=0.98,
        update_rate=0.02,
        replay_size=20000,
    )


def _explore(apex, state):
    if isinstance(apex, DQNApex):
        return apex.act_discrete_with_noise({"state": state})
    return apex.act_with_noise({"state": state}, noise_param=(0.0, 0.2), mode="normal").clamp(
        -2.0, 2.0
    )


def _apex_learns(rank, build, env_name, max_episodes, threshold, warmup=500):
    """Ranks 0 and 1 play ``env_name`` and store; rank 2 updates. Returns (episode, wall s, CPU s) or None."""
    world = World(rpc_timeout=60)
    group = world.create_rpc_group("apex", ["0", "1", "2"])
    servers = model_server_helper(model_num=1)
    torch.manual_seed(0)
    apex = build(group, servers)
    network = apex.qnet if isinstance(apex, DQNApex) else apex.actor
    group.barrier()
    apex.set_sync(False)
    reached = None
    if rank == LEARNER:
        while not all(group.is_registered(f"done_{s}") for s in ("0", "1")):
            if apex.replay_buffer.all_size() < warmup:
                time.sleep(0.1)
                continue
            for _ in range(20):
                apex.update()
    else:
        torch.manual_seed(rank)
        env = gym.make(env_name)
        smoothed, above, steps = None, 0, 0
        start, cpu_start = time.time(), time.process_time()
        for episode in range(1, max_episodes + 1):
            # about one update per two steps of each sampler: wait for the model version to catch up
            pull_until(apex, network, (steps - warmup // 2) // 2)
            obs, _ = env.reset(seed=rank * 10000 + episode)
            state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            done, total = False, 0.0
            while not done:
                action = _explore(apex, state)
                obs, reward, terminated, truncated, _ = env.step(
                    action.item() if isinstance(apex, DQNApex) else action.numpy().reshape(-1)
                )
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
                state, total, done, steps = (
                    next_state,
                    total + reward,
                    terminated or truncated,
                    steps + 1,
                )
            smoothed = total if smoothed is None else 0.5 * smoothed + 0.5 * total
            above = above + 1 if smoothed > threshold else 0
            if above == 2:  # the rule of loops.PENDULUM_RULE, for both tasks
                reached = (episode, time.time() - start, time.process_time() - cpu_start)
                group.register(f"solved_{rank}", print)
                break
            if group.is_registered(f"solved_{1 - rank}"):
                break
        env.close()
        group.register(f"done_{rank}", print)
    world.barrier()
    world.stop()
    return reached


def _report(name, env_name, threshold, results):
    for rank, result in enumerate(results):
        if result is not None:
            print(
                f"{name} sampler {rank} reached a smoothed return of {threshold} on {env_name} at episode "
                f"{result[0]} ({result[1]:.1f} s wall, {result[2]:.1f} s CPU in that sampler)"
            )
    solved = [r for r in results if r is not None]
    assert solved, f"no {name} sampler reached a smoothed return of {threshold}"
    return solved


@pytest.mark.learning
def test_dqn_apex_learns_cartpole_with_two_samplers_and_a_learner(run_on):
    results = run_on(
        _apex_learns, 3, args=(_build_dqn_learner, "CartPole-v0", 400, 150.0), timeout=110
    )
    assert _report("DQNApex", "CartPole-v0", 150.0, results)


@pytest.mark.learning
def test_ddpg_apex_learns_pendulum_with_two_samplers_and_a_learner(run_on):
    results = run_on(
        _apex_learns, 3, args=(_build_ddpg_learner, "Pendulum-v1", 100, -400.0), timeout=180
    )
    assert _report("DDPGApex", "Pendulum-v1", -400.0, results)


def _from_roles(rank, replay, learners):
    """DQNApex.from_roles on 4 processes; the learner(s) make 20 updates, samplers store until told to stop."""
    world = World(rpc_timeout=30)
    roles = Roles.from_world(learners=learners, replay=replay)
    torch.manual_seed(0)
    apex = DQNApex.from_roles(
        roles,
        QNet(4, 2, 8),
        QNet(4, 2, 8),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=8,
        replay_size=500,
    )
    apex.set_sync(False)
    control = RunControl(apex.apex_group, roles, learner_group=apex.learner_group)
    result = {
        "holders": apex.replay_buffer._holders(),
        "buffer": type(apex.replay_buffer).__name__,
        "ddp": isinstance(apex.qnet, DistributedDataParallel),
    }
    if roles.is_learner:
        updates, started = 0, False
        while not control.learner_should_stop():
            started = started or control.learners_agree(apex.replay_buffer.all_size() >= 40)
            if not started:
                time.sleep(0.02)
                continue
            assert apex.update() is not None
            updates += 1
            if updates == 20:
                control.request_stop("20 updates")
        apex.flush()  # pushes go out without waiting: the last one has landed once this returns
        result["sampled_from"] = dict(apex.sampled_from)
        apex.apex_group.barrier()
    else:
        episode, status = 0, None
        while status is None or not status.stop:
            apex.store_episode(
                [_transition(rank, episode * STORED + i, 4, True) for i in range(STORED)]
            )
            episode += 1
            status = control.report(steps=STORED, episodes=1)
        apex.apex_group.barrier()  # the learners have flushed their last push
        apex.manual_sync()
    result["local_size"] = apex.replay_buffer.size()
    result["qnet"] = _flat(apex.qnet)
    control.finish(world)
    return result


def test_from_roles_keeps_the_replay_on_the_samplers_by_default():
    results = run_ranks(_from_roles, 4, args=("samplers", 1), timeout=60)
    assert all(r["holders"] == ["1", "2", "3"] for r in results)  # the learner holds no part
    assert set(results[0]["sampled_from"]) == {"1", "2", "3"}
    assert results[0]["local_size"] == 0 and all(r["local_size"] > 0 for r in results[1:])
    assert all(r["buffer"] == "DistributedPrioritizedBuffer" for r in results)


def test_from_roles_can_put_the_replay_on_the_learner():
    results = run_ranks(_from_roles, 4, args=("learners", 1), timeout=60)
    assert all(r["holders"] == ["0"] for r in results)
    assert results[0]["sampled_from"].keys() == {"0"} and results[0]["local_size"] > 0
    assert [r["buffer"] for r in results[1:]] == ["ForwardedReplay"] * 3 and all(
        r["local_size"] == 0 for r in results[1:]
    )


def test_from_roles_trains_several_learners_with_ddp_and_samplers_pull_their_network():
    results = run_ranks(_from_roles, 4, args=("samplers", 2), timeout=60)
    assert [r["ddp"] for r in results] == [True, True, False, False]
    assert all(r["holders"] == ["2", "3"] for r in results)
    assert all(torch.equal(r["qnet"], results[0]["qnet"]) for r in results[1:])


def test_from_roles_names_a_roles_object_it_needs():
    with pytest.raises(
        TypeError,
        match=r"roles must be a machin.parallel.distributed.roles.Roles .*got 3 of type int",
    ):
        DQNApex.from_roles(3, QNet(), QNet(), torch.optim.Adam, nn.MSELoss(reduction="none"))

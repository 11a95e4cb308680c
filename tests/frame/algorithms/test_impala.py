"""IMPALA: V-trace targets, episode storage over the group, learner updates pushed to samplers."""

import math
import time

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms.impala import (
    IMPALA,
    EpisodeDistributedBuffer,
    EpisodeTransition,
    vtrace,
)
from machin.frame.helpers import model_server_helper
from machin.parallel.distributed import World
from machin.parallel.distributed.roles import Roles, RunControl
from tests.frame.algorithms.loops import pull_until
from tests.frame.algorithms.nets import CategoricalActor, ValueCritic
from tests.multiprocess import no_children_left, run_ranks  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_children_left")


def test_vtrace_matches_a_hand_computed_episode():
    # rho = min(1.5, ratio) = [1.5, 0.5, 1.0], c = min(1.0, ratio) = [1.0, 0.5, 1.0], the last step terminal
    targets, advantage = vtrace(
        reward=torch.tensor([1.0, 1.0, 1.0]),
        value=torch.tensor([0.5, 0.4, 0.3]),
        next_value=torch.tensor([0.4, 0.3, 0.2]),
        terminal=torch.tensor([0.0, 0.0, 1.0]),
        log_ratio=torch.tensor([2.0, 0.5, 1.0]).log(),
        discount=0.9,
        clip_rho=1.5,
        clip_c=1.0,
    )
    # delta = [1.5 * 0.86, 0.5 * 0.87, 0.7]; v - V = [1.29 + 0.9 * 0.75, 0.435 + 0.9 * 0.5 * 0.7, 0.7]
    assert targets.tolist() == pytest.approx([2.465, 1.15, 1.0])
    # A = rho * (r + gamma * v_next - V), v_next of the last step being its next value (unused: terminal)
    assert advantage.tolist() == pytest.approx([1.5 * 1.535, 0.5 * 1.5, 0.7])


def test_vtrace_on_policy_gives_bootstrapped_returns():
    # ratios 1, no truncation: targets are the discounted returns bootstrapped from the last next value
    targets, advantage = vtrace(
        torch.tensor([1.0, 2.0]),
        torch.tensor([0.0, 0.0]),
        torch.tensor([0.0, 5.0]),
        torch.tensor([0.0, 0.0]),
        torch.zeros(2),
        discount=0.5,
        clip_rho=1.0,
        clip_c=1.0,
    )
    assert targets.tolist() == pytest.approx([1.0 + 0.5 * (2.0 + 0.5 * 5.0), 2.0 + 0.5 * 5.0])
    assert advantage.tolist() == pytest.approx(targets.tolist())


def _steps(count=4, log_prob=True):
    generator = torch.Generator().manual_seed(count)
    states = torch.randn(count + 1, 1, 4, generator=generator)
    return [
        {
            "state": {"state": states[i]},
            "action": {"action": torch.tensor([[i % 2]])},
            "next_state": {"state": states[i + 1]},
            "reward": 1.0,
            "terminal": i == count - 1,
            **({"action_log_prob": -0.69} if log_prob else {}),
        }
        for i in range(count)
    ]


def test_episode_transition_joins_the_steps():
    episode = EpisodeTransition.from_episode(_steps(4))
    assert episode.batch_size == 4
    assert episode.state["state"].shape == (4, 4) and episode.action["action"].shape == (4, 1)
    assert episode.reward.shape == (4, 1) and episode.terminal.view(-1).tolist() == [False] * 3 + [
        True
    ]
    assert episode.action_log_prob == [-0.69] * 4
    assert episode.keys()[-1] == "action_log_prob"
    with pytest.raises(ValueError, match="episode must hold at least one transition"):
        EpisodeTransition.from_episode([])


def _world_checks(rank):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("impala", ["0", "1", "2"])
    servers = model_server_helper(model_num=1)
    torch.manual_seed(0)
    impala = IMPALA(
        CategoricalActor(4, 2, 8),
        ValueCritic(4, 8),
        torch.optim.Adam,
        nn.MSELoss(),
        group,
        servers,
        batch_size=2,
        learning_rate=0.01,
    )
    assert isinstance(impala.replay_buffer, EpisodeDistributedBuffer)
    with pytest.raises(
        NotImplementedError, match="call store_episode"
    ):  # 0.3.4's type, a RuntimeError too
        impala.store_transition(_steps(1)[0])
    with pytest.raises(ValueError, match=r"missing required attribute\(s\) \['action_log_prob'\]"):
        impala.store_episode(_steps(3, log_prob=False))
    group.barrier()
    result = {}
    if rank != 2:
        impala.set_sync(False)
        impala.store_episode(_steps(3 + rank))
        impala.store_episode(_steps(5))
        with pytest.raises(ValueError, match="but the stored episodes have"):
            impala.store_episode([{**step, "extra": 1} for step in _steps(2)])
    group.barrier()
    result["all_size"] = impala.replay_buffer.all_size()
    size, (episodes,) = impala.replay_buffer.sample_batch(0, sample_method="all")
    result["lengths"] = sorted(e.batch_size for e in episodes)
    if rank == 2:
        assert impala.replay_buffer.size() == 0
        policy_value, value_loss = impala.update()
        assert math.isfinite(policy_value) and math.isfinite(value_loss)
        result["actor"] = torch.cat([p.detach().view(-1) for p in impala.actor.parameters()])
        impala.flush()  # the push travels without waiting: wait for it here
    group.barrier()
    if rank != 2:
        with torch.no_grad():
            impala.actor.net[0].weight.add_(1.0)
        impala.act({"state": torch.zeros(1, 4)})  # sync off: no pull
        changed = torch.cat([p.detach().view(-1) for p in impala.actor.parameters()])
        impala.set_sync(True)
        impala.act({"state": torch.zeros(1, 4)})
        result["actor"] = torch.cat([p.detach().view(-1) for p in impala.actor.parameters()])
        assert not torch.equal(changed, result["actor"])
    group.barrier()
    world.stop()
    return result


@pytest.mark.multiprocess
def test_episodes_are_stored_per_member_and_the_learner_pushes_the_actor():
    results = run_ranks(_world_checks, 3, timeout=60)
    assert [r["all_size"] for r in results] == [4, 4, 4]  # one entry per episode
    assert [r["lengths"] for r in results] == [[3, 4, 5, 5]] * 3
    assert torch.equal(results[0]["actor"], results[2]["actor"])
    assert torch.equal(results[1]["actor"], results[2]["actor"])


def test_options_are_checked():
    with pytest.raises(
        ValueError, match="isw_clip_rho must be at least isw_clip_c, got isw_clip_rho=0.5"
    ):
        IMPALA(
            CategoricalActor(),
            ValueCritic(),
            torch.optim.Adam,
            nn.MSELoss(),
            None,
            (None,),
            isw_clip_c=1.0,
            isw_clip_rho=0.5,
        )
    with pytest.raises(
        ValueError, match="model_server of IMPALA must be a tuple whose first element"
    ):
        IMPALA(CategoricalActor(), ValueCritic(), torch.optim.Adam, nn.MSELoss(), None, ())


def _impala_learns(rank, max_episodes, threshold, warmup=4):
    world = World(rpc_timeout=60)
    group = world.create_rpc_group("impala", ["0", "1", "2"])
    servers = model_server_helper(model_num=1)
    torch.manual_seed(0)
    impala = IMPALA(
        CategoricalActor(),
        ValueCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        group,
        servers,
        batch_size=2,
        learning_rate=0.003,
        replay_size=50,
    )
    group.barrier()
    impala.set_sync(False)
    reached = None
    if rank == 2:  # the learner
        while not all(group.is_registered(f"done_{s}") for s in (0, 1)):
            if impala.replay_buffer.all_size() < warmup:
                time.sleep(0.05)
                continue
            impala.update()
    else:
        torch.manual_seed(rank)
        env = gym.make("CartPole-v0")
        smoothed, start = 0.0, time.time()
        for episode in range(1, max_episodes + 1):
            # about one learner update per episode of each sampler
            pull_until(impala, impala.actor, episode - warmup)
            obs, _ = env.reset(seed=rank * 10000 + episode)
            state = torch.tensor(obs, dtype=torch.float32).view(1, 4)
            done, total, stored = False, 0.0, []
            while not done:
                action, log_prob, *_ = impala.act({"state": state})
                obs, reward, terminated, truncated, _ = env.step(action.item())
                next_state = torch.tensor(obs, dtype=torch.float32).view(1, 4)
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
            smoothed = 0.9 * smoothed + 0.1 * total
            if smoothed > threshold:
                reached = (episode, time.time() - start)
                group.register(f"solved_{rank}", print)
                break
            if group.is_registered(f"solved_{1 - rank}"):
                break
        env.close()
        group.register(f"done_{rank}", print)
    world.barrier()
    world.stop()
    return reached


@pytest.mark.multiprocess
@pytest.mark.learning
def test_impala_learns_cartpole_with_two_samplers_and_a_learner(run_on):
    results = run_on(_impala_learns, 3, args=(400, 150.0), timeout=110)
    for rank, result in enumerate(results):
        if result is not None:
            print(
                f"IMPALA sampler {rank} reached a smoothed return of 150 on CartPole-v0 at episode "
                f"{result[0]} ({result[1]:.1f} s)"
            )
    assert any(r is not None for r in results), "no IMPALA sampler reached a smoothed return of 150"


def _from_roles(rank, replay):
    """IMPALA.from_roles on 3 processes: rank 0 learns 5 updates, ranks 1 and 2 store episodes."""
    world = World(rpc_timeout=30)
    roles = Roles.from_world(replay=replay)
    torch.manual_seed(0)
    impala = IMPALA.from_roles(
        roles,
        CategoricalActor(4, 2, 8),
        ValueCritic(4, 8),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=2,
        learning_rate=0.01,
    )
    impala.set_sync(False)
    control = RunControl(impala.impala_group, roles)
    result = {"holders": impala.replay_buffer._holders()}
    if roles.is_learner:
        updates = 0
        while not control.learner_should_stop():
            if impala.replay_buffer.all_size() < 4:
                time.sleep(0.02)
                continue
            assert impala.update() is not None
            updates += 1
            if updates == 5:
                control.request_stop("5 updates")
        result["sampled_from"] = dict(impala.sampled_from)
    else:
        episode, status = 0, None
        while status is None or not status.stop:
            impala.store_episode(_steps(3 + episode % 3))
            episode += 1
            status = control.report(steps=3, episodes=1)
        impala.manual_sync()
    result["local_size"] = impala.replay_buffer.size()
    result["actor"] = torch.cat([p.detach().view(-1) for p in impala.actor.parameters()])
    control.finish(world)
    return result


@pytest.mark.multiprocess
@pytest.mark.parametrize("replay", ["samplers", "learners"])
def test_from_roles_derives_the_learner_and_the_samplers_from_the_world(replay):
    results = run_ranks(_from_roles, 3, args=(replay,), timeout=60)
    holders = ["1", "2"] if replay == "samplers" else ["0"]
    assert all(r["holders"] == holders for r in results)
    assert set(results[0]["sampled_from"]) == set(holders)
    assert [r["local_size"] > 0 for r in results] == [str(rank) in holders for rank in range(3)]
    assert all(torch.equal(r["actor"], results[0]["actor"]) for r in results[1:])

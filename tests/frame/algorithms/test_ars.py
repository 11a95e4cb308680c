"""ARS: one round over a group checked by hand, learning (its helpers: tests/frame/test_normalization.py, tests/frame/noise/test_noise_table.py)."""

import math
import os
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms import ARS as ExportedARS
from machin.frame.algorithms import ars as ars_module
from machin.frame.algorithms.ars import ARS, NoiseTable, SharedNoiseSampler
from machin.frame.helpers import model_server_helper
from machin.parallel.distributed import World
from machin.parallel.distributed.roles import Roles
from machin.utils.compat import ExtraArgumentsWarning
from tests.multiprocess import no_children_left, run_ranks  # noqa: F401

pytestmark = pytest.mark.usefixtures("no_children_left")


def test_the_helpers_of_0_3_4_stay_importable_from_the_ars_module():
    from machin.frame.noise import noise_table
    from machin.frame.normalization import MeanStdFilter, RunningStat

    for helper in (
        RunningStat,
        MeanStdFilter,
        noise_table.NoiseTable,
        noise_table.SharedNoiseSampler,
    ):
        assert getattr(ars_module, helper.__name__) is helper
        assert helper.__name__ in ars_module.__all__


# -- ARS --------------------------------------------------------------------------------------
class LinearPolicy(nn.Module):
    """Continuous output of a linear layer (the actions of the round checks)."""

    def __init__(self, state_dim=3, outputs=2, bias=True):
        super().__init__()
        self.fc = nn.Linear(state_dim, outputs, bias=bias)

    def forward(self, state):
        return self.fc(state)


class ArgmaxPolicy(LinearPolicy):
    """A linear policy choosing the action of the largest output, started at zero (as in the paper)."""

    def __init__(self, state_dim=4, action_num=2):
        super().__init__(state_dim, action_num, bias=False)
        nn.init.zeros_(self.fc.weight)

    def forward(self, state):
        return self.fc(state).argmax(dim=1, keepdim=True)


def test_ars_is_exported_and_checks_its_options_before_using_the_group():
    assert ExportedARS is ARS

    def build(**kwargs):
        options = {"noise_size": 1000, **kwargs}
        server = options.pop("model_server", (None,))
        return ARS(LinearPolicy(), torch.optim.SGD, None, server, **options)

    for error in (ValueError, AssertionError):
        with pytest.raises(
            error,
            match="used_rollout_num must be at most rollout_num, got used_rollout_num=5 and "
            "rollout_num=4",
        ):
            build(rollout_num=4, used_rollout_num=5)
    with pytest.raises(ValueError, match="rollout_num must be a positive integer, got 0"):
        build(rollout_num=0)
    with pytest.raises(
        ValueError, match="Noise size 5 is too small compared to the 8 parameters of the actor"
    ):
        build(noise_size=5)
    with pytest.raises(ValueError, match="noise_std_dev must be positive, got 0"):
        build(noise_std_dev=0)
    with pytest.raises(ValueError, match="learning_rate must be positive, got -1"):
        build(learning_rate=-1)
    with pytest.raises(ValueError, match="sample_seed must be a non-negative integer, got -3"):
        build(sample_seed=-3)
    with (
        pytest.warns(UserWarning, match="consider increasing noise_size"),
        pytest.raises(ValueError, match="model_server of ARS must be a tuple whose first element"),
    ):
        build(noise_size=50, model_server=())
    with (
        pytest.warns(
            ExtraArgumentsWarning, match=r"does not use keyword argument\(s\) 'replay_size'"
        ),
        pytest.raises(ValueError, match="model_server of ARS must be a tuple whose first element"),
    ):
        build(replay_size=10, model_server=None)


NOISE = {"noise_size": 20000, "noise_std_dev": 0.05, "noise_seed": 11}
RANK_SEED = 100


def _flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()])


def _states(rank):
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(RANK_SEED + rank)) * 3 + 1


def _round_checks(rank, model_dir):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("ars", ["0", "1", "2"])
    servers = model_server_helper(model_num=2)
    torch.manual_seed(
        rank
    )  # different actors everywhere: the constructor must give all the manager's
    ars = ARS(
        LinearPolicy(),
        torch.optim.SGD,
        group,
        servers[:1],
        learning_rate=0.1,
        rollout_num=5,
        used_rollout_num=3,
        **NOISE,
    )
    result = {
        "types": ars.get_actor_types(),
        "initial": _flat(ars.actor),
        "delta_idx": dict(ars.delta_idx),
    }
    table = NoiseTable(NOISE["noise_size"], NOISE["noise_std_dev"], NOISE["noise_seed"])
    for r, idx in ars.delta_idx.items():
        delta = table[idx : idx + 8]
        assert torch.allclose(
            _flat(ars.actor_with_delta[(r, True)]), result["initial"] + delta.float()
        )
        assert torch.allclose(
            _flat(ars.actor_with_delta[(r, False)]), result["initial"] - delta.float()
        )

    states = _states(rank)
    state = {"state": states, "unused": 1}
    output = ars.act(state, "original")
    assert output.shape == (4, 2) and not output.requires_grad
    assert state["state"] is states and torch.equal(states, _states(rank)), (
        "act must not modify its input"
    )
    with pytest.warns(ExtraArgumentsWarning):
        ars.act({"state": states[:1]}, ars.get_actor_types()[0], "extra")  # one more state counted
    with pytest.raises(
        ValueError, match='Invalid parameter type: .*available options are: "original", "negative_'
    ):
        ars.act(state, "positive_9")
    with pytest.raises(ValueError, match="Invalid parameter type: actor_type 'original'"):
        ars.store_reward(1.0, "original")
    with pytest.raises(ValueError, match="reward must be finite"):
        ars.store_reward(math.nan, ars.get_actor_types()[0])
    with pytest.raises(
        AssertionError, match="You must store rewards for parameters with positive noise delta"
    ):
        ars.update()  # raised before any communication, in every process

    rewards = {}
    for actor_type in ars.get_actor_types():
        sign, r = actor_type.split("_")
        rewards[actor_type] = [float(int(r) * 3 + (sign == "positive") * (2 * int(r) - 4)), 1.0]
        for value in rewards[actor_type]:
            ars.store_reward(torch.tensor(value), actor_type)  # two returns: averaged
    result["rewards"] = rewards
    result["mean_return"] = ars.update()
    result["updated"] = _flat(ars.actor)
    result["filter"] = (
        ars.filter["state"].mean.clone(),
        ars.filter["state"].std.clone(),
        ars.filter["state"].rs.n,
    )
    result["output"] = ars.act({"state": states}, "original")
    if rank == 0:
        ars.save(model_dir, version=3)
    group.barrier()

    # a fresh ARS (own model server) on 2 rollouts: the last process has none; it loads the checkpoint
    torch.manual_seed(50)
    fresh = ARS(
        LinearPolicy(),
        torch.optim.SGD,
        group,
        servers[1:],
        rollout_num=2,
        used_rollout_num=2,
        **NOISE,
    )
    result["fresh_types"] = fresh.get_actor_types()
    fresh.load(model_dir)
    assert torch.equal(_flat(fresh.actor), result["updated"])
    assert torch.equal(fresh.act({"state": states}, "original"), result["output"]), (
        "loaded actor acts differently"
    )
    for (r, positive), perturbed in fresh.actor_with_delta.items():
        delta = table[fresh.delta_idx[r] : fresh.delta_idx[r] + 8].float()
        assert torch.allclose(_flat(perturbed), result["updated"] + (delta if positive else -delta))
    for actor_type in fresh.get_actor_types():
        fresh.store_reward(1.0, actor_type)
    result["fresh_mean_return"] = fresh.update()
    group.barrier()
    world.stop()
    return result


@pytest.mark.multiprocess
def test_one_round_over_three_processes_matches_the_hand_computed_step(tmp_path):
    results = run_ranks(_round_checks, 3, args=(str(tmp_path),), timeout=60)
    assert [r["types"] for r in results] == [
        ["negative_0", "positive_0", "negative_1", "positive_1"],
        ["negative_2", "positive_2", "negative_3", "positive_3"],
        ["negative_4", "positive_4"],
    ]
    assert [r["fresh_types"] for r in results] == [
        ["negative_0", "positive_0"],
        ["negative_1", "positive_1"],
        [],
    ]
    for r in results[1:]:
        assert torch.equal(r["initial"], results[0]["initial"])
    # the start indices depend only on the seeds and the rollout index, not on the process
    indexes = {k: v for r in results for k, v in r["delta_idx"].items()}
    assert sorted(indexes) == [0, 1, 2, 3, 4]
    for rollout, idx in indexes.items():
        assert idx == SharedNoiseSampler(NoiseTable(20000), 123 + rollout).sample(8)[0]

    # the step, by hand: the three directions with the best return, scaled by the std of their returns
    rewards = {k: np.mean(v) for r in results for k, v in r["rewards"].items()}
    pos = np.array([rewards[f"positive_{i}"] for i in range(5)])
    neg = np.array([rewards[f"negative_{i}"] for i in range(5)])
    keep = np.argsort(-np.maximum(pos, neg), kind="stable")[:3]
    sigma = np.concatenate([pos[keep], neg[keep]]).std()
    table = NoiseTable(NOISE["noise_size"], NOISE["noise_std_dev"], NOISE["noise_seed"])
    step = sum((pos[k] - neg[k]) / sigma * table[indexes[k] : indexes[k] + 8] for k in keep) / 3
    expected = results[0]["initial"].double() + 0.1 * step
    for r in results:
        assert torch.allclose(r["updated"].double(), expected, atol=1e-6)
        assert r["mean_return"] == pytest.approx(np.concatenate([pos, neg]).mean())
    assert [r["fresh_mean_return"] for r in results] == [1.0] * 3

    # the state statistics of every process are merged and used everywhere
    all_states = (
        torch.cat([_states(rank) for rank in range(3)] + [_states(rank)[:1] for rank in range(3)])
        .double()
        .numpy()
    )
    for mean, std, count in (r["filter"] for r in results):
        assert count == 15
        np.testing.assert_allclose(mean.numpy(), all_states.mean(axis=0), rtol=1e-9)
        np.testing.assert_allclose(std.numpy(), all_states.std(axis=0, ddof=1), rtol=1e-9)
    assert sorted(os.listdir(tmp_path)) == [
        "actor_3.manifest.json",
        "actor_3.pt",
        "actor_state_filter_3.pt",
    ]


def _ars_learns(rank, max_rounds, threshold):
    world = World(rpc_timeout=60)
    group = world.create_rpc_group("ars", ["0", "1", "2"])
    servers = model_server_helper(model_num=1)
    ars = ARS(
        ArgmaxPolicy(),
        torch.optim.SGD,
        group,
        servers,
        learning_rate=0.5,
        noise_std_dev=0.1,
        noise_size=10**6,
        rollout_num=6,
        used_rollout_num=6,
        noise_seed=0,
        sample_seed=0,
    )
    env = gym.make("CartPole-v1")
    start, steps = time.time(), 0
    for round_index in range(1, max_rounds + 1):
        for i, actor_type in enumerate(ars.get_actor_types()):
            obs, _ = env.reset(seed=rank * 100000 + round_index * 100 + i)
            done, total = False, 0.0
            while not done:
                action = ars.act(
                    {"state": torch.tensor(obs, dtype=torch.float32).view(1, 4)}, actor_type
                )
                obs, reward, terminated, truncated, _ = env.step(action.item())
                total, steps, done = total + reward, steps + 1, terminated or truncated
            ars.store_reward(total, actor_type)
        mean_return = ars.update()  # the same number in every process: they all stop together
        if mean_return >= threshold:
            break
    env.close()
    world.stop()
    return mean_return, round_index, steps, time.time() - start


@pytest.mark.multiprocess
@pytest.mark.learning
def test_ars_learns_cartpole_with_three_processes(run_on):
    results = run_on(_ars_learns, 3, args=(40, 475.0), timeout=80)
    mean_return, rounds, _, seconds = results[0]
    print(
        f"ARS: mean return of the perturbed policies {mean_return:.1f} on CartPole-v1 after {rounds} rounds, "
        f"{sum(r[2] for r in results)} environment steps, {seconds:.1f} s"
    )
    assert len({(r[0], r[1]) for r in results}) == 1, "the processes disagree on the rounds"
    assert mean_return >= 475.0, (
        f"ARS reached a mean return of only {mean_return:.1f} in {rounds} rounds"
    )


def _from_roles(rank):
    world = World(rpc_timeout=30)
    roles = Roles.from_world()
    ars = ARS.from_roles(
        roles, LinearPolicy(), torch.optim.SGD, rollout_num=5, used_rollout_num=5, **NOISE
    )
    types = ars.get_actor_types()
    for i, actor_type in enumerate(types):
        ars.store_reward(float(rank * 10 + i), actor_type)
    mean_return = ars.update()
    result = (ars.ars_group.get_group_members(), len(types), mean_return, _flat(ars.actor))
    world.stop()
    return result


@pytest.mark.multiprocess
def test_from_roles_makes_the_first_learner_the_manager_and_every_process_plays():
    results = run_ranks(_from_roles, 3, timeout=60)
    assert all(members == ["0", "1", "2"] for members, *_ in results)
    assert [count for _, count, *_ in results] == [
        4,
        4,
        2,
    ]  # rollouts 0-1, 2-3, 4: two actor types each
    assert len({mean for *_, mean, _ in results}) == 1
    assert all(torch.equal(flat, results[0][3]) for *_, flat in results)

"""Non-finite data is stopped at the door, and a failed append leaves the buffer as it was."""

import warnings

import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms import DDPG, DQN
from machin.frame.buffers import Buffer, PrioritizedBuffer
from machin.frame.noise.action_space_noise import (
    add_clipped_normal_noise_to_action,
    add_normal_noise_to_action,
    add_ou_noise_to_action,
    add_uniform_noise_to_action,
)
from machin.frame.noise.generator import (
    ClippedNormalNoiseGen,
    NormalNoiseGen,
    OrnsteinUhlenbeckNoiseGen,
    UniformNoiseGen,
)
from machin.frame.noise.param_space_noise import AdaptiveParamNoise

NAN, INF = float("nan"), float("inf")


def step(reward=1.0, terminal=False, state=None, i=0):
    state = torch.full((1, 4), float(i)) if state is None else state
    return {
        "state": {"state": state},
        "action": {"action": torch.tensor([[1]])},
        "next_state": {"state": torch.full((1, 4), float(i + 1))},
        "reward": reward,
        "terminal": terminal,
    }


def stored_rewards(buffer):
    return (
        buffer.sample_batch(buffer.size(), sample_method="all", sample_attrs=["reward"])[1][0]
        .view(-1)
        .tolist()
    )


# -- rewards, states, terminal -----------------------------------------------------------
@pytest.mark.parametrize("bad", [NAN, INF, -INF, np.float32("nan")])
def test_non_finite_reward_is_rejected_and_nothing_is_stored(bad):
    buffer = Buffer(10)
    buffer.append(step(1.0))
    with pytest.raises(
        ValueError, match=r"attribute 'reward' must be a finite number, got (nan|inf|-inf)"
    ):
        buffer.append(step(bad))
    assert buffer.size() == 1
    assert stored_rewards(buffer) == [1.0]


def test_non_finite_reward_in_extend_names_the_transition_and_stores_nothing():
    buffer = Buffer(10)
    buffer.append(step(0.5))
    with pytest.raises(ValueError, match="got nan in transition 2"):
        buffer.extend([step(1.0), step(2.0), step(NAN), step(3.0)])
    assert buffer.size() == 1
    buffer.extend([step(1.0), step(2.0)])
    assert stored_rewards(buffer) == [0.5, 1.0, 2.0]


def test_tensor_reward_is_checked_too():
    buffer = Buffer(10)
    with pytest.raises(ValueError, match=r"attribute 'reward' must hold finite values, got inf"):
        buffer.append(step(torch.tensor([[INF]])))
    assert buffer.size() == 0


def test_nan_state_is_rejected_naming_the_key():
    buffer = Buffer(10)
    buffer.append(step())
    state = torch.tensor([[0.0, NAN, 1.0, 2.0]])
    with pytest.raises(
        ValueError, match=r"attribute state\['state'\] must hold finite values, got nan"
    ):
        buffer.append(step(state=state))
    assert buffer.size() == 1


def test_inf_next_state_in_extend_is_rejected():
    buffer = Buffer(10)
    rows = [step(i=i) for i in range(3)]
    rows[1]["next_state"]["state"] = torch.tensor([[0.0, 0.0, -INF, 0.0]])
    with pytest.raises(
        ValueError, match=r"next_state\['state'\] must hold finite values, got -inf in transition 1"
    ):
        buffer.extend(rows)
    assert buffer.size() == 0


def test_large_finite_values_whose_sum_overflows_are_accepted():
    buffer = Buffer(10)
    buffer.append(
        step(state=torch.full((1, 4), 3e38))
    )  # float32 sum overflows, every element is finite
    assert buffer.size() == 1


@pytest.mark.parametrize("terminal", [2, -1, 0.5, NAN, torch.tensor([[2.0]])])
def test_terminal_must_be_bool_or_0_1(terminal):
    buffer = Buffer(10)
    with pytest.raises(ValueError, match=r"attribute 'terminal' must be a bool or 0/1, got"):
        buffer.append(step(terminal=terminal))
    assert buffer.size() == 0


@pytest.mark.parametrize("terminal", [True, 0, 1, 1.0, np.bool_(True), torch.tensor([[1.0]])])
def test_valid_terminals_are_stored(terminal):
    buffer = Buffer(10)
    buffer.append(step(terminal=terminal))
    assert buffer.size() == 1


def test_check_finite_false_stores_nan_but_still_checks_terminal():
    buffer = Buffer(10, check_finite=False)
    buffer.append(step(NAN))
    assert np.isnan(stored_rewards(buffer)[0])
    with pytest.raises(ValueError, match="must be a bool or 0/1, got 2"):
        buffer.append(step(terminal=2))


# -- prioritized buffer ------------------------------------------------------------------
@pytest.mark.parametrize("bad", [NAN, INF])
def test_non_finite_priority_on_append_names_the_argument(bad):
    buffer = PrioritizedBuffer(10)
    buffer.append(step(), priority=1.0)
    before = buffer.wt_tree.get_leaf_all_weights()
    with pytest.raises(ValueError, match=r"priority must be a finite number, got (nan|inf)"):
        buffer.append(step(), priority=bad)
    assert buffer.size() == 1
    np.testing.assert_array_equal(buffer.wt_tree.get_leaf_all_weights(), before)


def test_nan_priority_is_rejected_even_when_alpha_is_zero():
    buffer = PrioritizedBuffer(10, alpha=0.0)  # (nan + eps) ** 0 == 1 would hide it
    with pytest.raises(ValueError, match="priority must be a finite number, got nan"):
        buffer.append(step(), priority=NAN)
    assert buffer.size() == 0


def test_non_numeric_priority_names_the_argument():
    buffer = PrioritizedBuffer(10)
    with pytest.raises(ValueError, match="priority must be a finite number, got 'high'"):
        buffer.append(step(), priority="high")
    with pytest.raises(
        ValueError, match="priorities must be finite numbers, got nan at position 1"
    ):
        buffer.extend([step(), step()], priorities=[1.0, NAN])
    assert buffer.size() == 0


@pytest.mark.parametrize("name", ["alpha", "beta", "epsilon", "beta_increment_per_sampling"])
@pytest.mark.parametrize("bad", [NAN, INF, "0.5"])
def test_prioritized_parameters_must_be_finite_numbers(name, bad):
    with pytest.raises(ValueError, match=f"^{name} must be a finite, non-negative number, got"):
        PrioritizedBuffer(10, **{name: bad})


def test_update_priority_rejects_non_finite_priorities():
    buffer = PrioritizedBuffer(10)
    buffer.extend([step(i=i) for i in range(5)])
    before = buffer.wt_tree.get_leaf_all_weights()
    with pytest.raises(
        ValueError, match="priorities must be finite numbers, got inf at position 0"
    ):
        buffer.update_priority(np.array([INF, 1.0]), np.array([0, 1]))
    with pytest.raises(ValueError, match="priorities must be finite numbers, got"):
        buffer.update_priority(["x"], np.array([0]))
    np.testing.assert_array_equal(buffer.wt_tree.get_leaf_all_weights(), before)


@pytest.mark.parametrize("index", [99, 5, -1])
def test_update_priority_on_an_unwritten_slot_raises(index):
    buffer = PrioritizedBuffer(100)
    buffer.extend([step(i=i) for i in range(5)])
    before = buffer.wt_tree.get_leaf_all_weights()
    with pytest.raises(
        ValueError, match=f"index {index} is out of range, it holds no transition .*stores 5"
    ):
        buffer.update_priority(np.array([1.0, 50.0]), np.array([0, index]))
    np.testing.assert_array_equal(buffer.wt_tree.get_leaf_all_weights(), before)
    buffer.update_priority(np.array([50.0]), np.array([4]))  # written slots still work
    assert buffer.wt_tree.get_leaf_weight(4) > before[4]


# -- noise ---------------------------------------------------------------------------------
ACTION = torch.zeros(2, 3)


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: UniformNoiseGen([2], umin=NAN), "umin"),
        (lambda: UniformNoiseGen([2], umax=INF), "umax"),
        (lambda: NormalNoiseGen([2], mu=NAN), "mu"),
        (lambda: NormalNoiseGen([2], sigma=INF), "sigma"),
        (lambda: ClippedNormalNoiseGen([2], sigma=NAN), "sigma"),
        (lambda: ClippedNormalNoiseGen([2], nmin=NAN), "nmin"),
        (lambda: OrnsteinUhlenbeckNoiseGen([2], theta=NAN), "theta"),
        (lambda: OrnsteinUhlenbeckNoiseGen([2], dt=INF), "dt"),
        (lambda: OrnsteinUhlenbeckNoiseGen([2], x0=[0.0, NAN]), "x0"),
        (lambda: AdaptiveParamNoise(initial_stddev=NAN), "initial_stddev"),
        (lambda: AdaptiveParamNoise(desired_action_stddev=INF), "desired_action_stddev"),
    ],
)
def test_generators_reject_non_finite_parameters(make, name):
    with pytest.raises(ValueError, match=f": {name} must be (finite|not NaN)"):
        make()


def test_clipped_normal_generator_accepts_infinite_bounds():
    noise = ClippedNormalNoiseGen([100], nmin=-INF, nmax=INF)()
    assert torch.isfinite(noise).all()


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: add_normal_noise_to_action(ACTION, (NAN, 1.0)), "normal_mean"),
        (lambda: add_normal_noise_to_action(ACTION, (0.0, INF)), "normal_sigma"),
        (
            lambda: add_normal_noise_to_action(ACTION, [(0.0, 1.0), (0.0, NAN), (0.0, 1.0)]),
            "normal_sigma",
        ),
        (lambda: add_uniform_noise_to_action(ACTION, (NAN, 1.0)), "uniform_min"),
        (lambda: add_clipped_normal_noise_to_action(ACTION, (0.0, 1.0, NAN, 1.0)), "clip_min"),
        (lambda: add_normal_noise_to_action(ACTION, (0.0, 1.0), ratio=NAN), "ratio"),
        (lambda: add_normal_noise_to_action(ACTION, (0.0, 1.0), ratio=torch.tensor(INF)), "ratio"),
        (lambda: add_ou_noise_to_action(ACTION, {"sigma": NAN}, reset=True), "sigma"),
    ],
)
def test_action_noise_rejects_non_finite_parameters(call, name):
    with pytest.raises(ValueError, match=f": {name} must be (finite|not NaN)"):
        call()


# -- updates with a non-finite loss ----------------------------------------------------------
class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, state):
        return self.fc(state)


def snapshot(*modules):
    return [p.detach().clone() for m in modules for p in m.parameters()]


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_nan_loss_update_is_skipped_with_one_warning():
    torch.manual_seed(0)
    dqn = DQN(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(), batch_size=4, update_rate=0.5)
    for i in range(8):
        dqn.store_transition(step(i=i))
    dqn.update()  # a normal step first: the optimizer has state
    online, target = snapshot(dqn.qnet), snapshot(dqn.qnet_target)
    optim_state = {
        k: {n: t.clone() for n, t in v.items()}
        for k, v in dqn.qnet_optim.state_dict()["state"].items()
    }
    dqn.replay_buffer.check_finite = False  # let NaN rewards in, as a buggy pipeline would
    dqn.replay_buffer.clear()
    for i in range(8):
        dqn.store_transition(step(NAN, i=i))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = [dqn.update() for _ in range(3)]
    assert all(np.isnan(loss) for loss in losses)
    skipped = [
        w
        for w in caught
        if issubclass(w.category, RuntimeWarning) and "not finite" in str(w.message)
    ]
    assert len(skipped) == 1
    message = str(skipped[0].message)
    assert (
        "'qnet_optim'" in message and "rewards and states" in message and "learning rate" in message
    )
    assert dqn.skipped_updates == 3
    assert_same(snapshot(dqn.qnet), online)
    assert_same(snapshot(dqn.qnet_target), target)  # the soft update was skipped too
    after = dqn.qnet_optim.state_dict()["state"]
    assert after.keys() == optim_state.keys()
    for k, v in optim_state.items():
        for n, t in v.items():
            assert torch.equal(after[k][n], t)
    assert all(torch.isfinite(p).all() for p in dqn.qnet.parameters())


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, state):
        return torch.tanh(self.fc(state))


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 1)

    def forward(self, state, action):
        return self.fc(torch.cat([state, action], 1))


def test_nan_loss_ddpg_update_leaves_networks_and_targets_unchanged():
    torch.manual_seed(0)
    ddpg = DDPG(
        Actor(),
        Actor(),
        Critic(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=4,
        replay_buffer=Buffer(100, check_finite=False),
    )
    for i in range(8):
        ddpg.store_transition({**step(NAN, i=i), "action": {"action": torch.zeros(1, 1)}})
    # The critic's loss holds the NaN rewards; the actor's (-Q(s, mu(s))) does not, yet the
    # skipped critic step ends the update: no actor step and no soft update of the targets.
    nets = (ddpg.critic, ddpg.actor, ddpg.actor_target, ddpg.critic_target)
    before = snapshot(*nets)
    with pytest.warns(
        RuntimeWarning, match="'critic_optim' is nan, not finite; its optimizer step was skipped"
    ):
        ddpg.update()
    assert ddpg.skipped_updates == 1
    assert_same(snapshot(*nets), before)


def test_finite_updates_still_step():
    torch.manual_seed(0)
    dqn = DQN(QNet(), QNet(), torch.optim.SGD, nn.MSELoss(), batch_size=4, learning_rate=0.1)
    for i in range(8):
        dqn.store_transition(step(i=i))
    before = snapshot(dqn.qnet)
    dqn.update()
    assert getattr(dqn, "skipped_updates", 0) == 0
    assert any(not torch.equal(a, b) for a, b in zip(snapshot(dqn.qnet), before))


# -- a failed append leaves the buffer as it was -------------------------------------------
def test_nan_first_transition_leaves_an_empty_usable_buffer():
    buffer = Buffer(10)
    with pytest.raises(ValueError, match="must be a finite number, got nan"):
        buffer.append(step(NAN))
    assert buffer.size() == 0 and buffer.attribute_names is None
    buffer.append(step(2.0))
    assert stored_rewards(buffer) == [2.0]


def test_failed_allocation_on_first_append_leaves_an_empty_usable_buffer(monkeypatch):
    buffer = Buffer(10)
    real_empty, calls = torch.empty, []

    def failing_empty(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # fail in the middle of the layout: some columns already exist
            raise RuntimeError("out of memory (simulated)")
        return real_empty(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", failing_empty)
    with pytest.raises(RuntimeError, match="out of memory"):
        buffer.append(step(1.0))
    monkeypatch.setattr(torch, "empty", real_empty)
    assert buffer.size() == 0 and buffer.attribute_names is None
    buffer.append(step(2.0))
    assert buffer.size() == 1 and stored_rewards(buffer) == [2.0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a usable GPU")
def test_unusable_device_on_first_append_leaves_an_empty_buffer():
    with pytest.raises(
        ValueError, match="buffer_device='cuda' cannot hold tensors in this process"
    ):
        Buffer(10, buffer_device="cuda")  # refused where it is given
    buffer = Buffer(10)
    buffer.buffer_device = torch.device(
        "cuda"
    )  # set past the constructor's check: the append fails
    # torch's own error: a CPU build names CUDA, a CUDA build without a driver names the driver
    with pytest.raises((RuntimeError, AssertionError), match="(?i)cuda|nvidia driver"):
        buffer.append(step(1.0))
    assert buffer.size() == 0 and buffer.attribute_names is None
    buffer.buffer_device = torch.device(
        "cpu"
    )  # the layout was not kept: a later append starts afresh
    buffer.append(step(2.0))
    assert stored_rewards(buffer) == [2.0]


def test_failed_growth_leaves_the_stored_rows_and_counters(monkeypatch):
    buffer = Buffer(4096)
    buffer.extend([step(float(i), i=i) for i in range(1024)])  # the initial capacity, full
    real_new_empty = torch.Tensor.new_empty
    calls = []

    def failing_new_empty(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("out of memory (simulated)")
        return real_new_empty(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "new_empty", failing_new_empty)
    with pytest.raises(RuntimeError, match="out of memory"):
        buffer.append(step(5000.0))
    monkeypatch.setattr(torch.Tensor, "new_empty", real_new_empty)
    assert buffer.size() == 1024
    assert stored_rewards(buffer) == [float(i) for i in range(1024)]
    buffer.append(step(5000.0))
    assert buffer.size() == 1025 and stored_rewards(buffer)[-1] == 5000.0
    assert buffer[1024].state["state"].tolist() == [[0.0] * 4]


def test_failed_promotion_write_rolls_the_column_back(monkeypatch):
    buffer = Buffer(10)
    buffer.append({**step(), "count": 1})  # an int custom column
    real_tensor = torch.tensor

    def failing_tensor(*args, **kwargs):
        raise RuntimeError("write failed (simulated)")

    monkeypatch.setattr(torch, "tensor", failing_tensor)
    with pytest.raises(RuntimeError, match="write failed"):
        buffer.extend(
            [{**step(i=1), "count": 2}, {**step(i=2), "count": 2.5}]
        )  # promotes int -> float
    monkeypatch.setattr(torch, "tensor", real_tensor)
    assert buffer.size() == 1
    assert buffer._custom["count"].kind is int
    assert buffer.sample_batch(1, sample_method="all", sample_attrs=["count"])[1][0] == [1]

"""Machin 0.3.4 behaviours of machin.frame.buffers, machin.frame.transition and machin.frame.noise.

One test per restored behaviour: calls that 0.3.4 accepted keep working (extra arguments are
ignored with an ExtraArgumentsWarning), errors keep 0.3.4's exception types and key phrases,
and accessors return what 0.3.4's returned.
"""

import random
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.buffers import (
    Buffer,
    DistributedBuffer,
    DistributedPrioritizedBuffer,
    PrioritizedBuffer,
    WeightTree,
)
from machin.frame.noise import action_space_noise
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
from machin.frame.noise.param_space_noise import AdaptiveParamNoise, perturb_model
from machin.frame.transition import Transition, TransitionBase
from machin.parallel.distributed import World
from machin.utils.checker import CheckError
from machin.utils.compat import ExtraArgumentsWarning
from machin.utils.helper_classes import Switch
from tests.multiprocess import no_children_left, run_ranks  # noqa: F401


def step(i=0.0, **custom):
    return Transition(
        state={"s": torch.full((1, 3), float(i))},
        action={"a": torch.tensor([[int(i)]])},
        next_state={"s": torch.full((1, 3), float(i) + 1)},
        reward=float(i),
        terminal=False,
        **custom,
    )


def filled(buffer, n=5, **custom):
    for i in range(n):
        buffer.append(step(i, **custom))
    return buffer


@pytest.fixture
def no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# ================================================================================ transition
def test_len_of_a_transition_is_its_number_of_attributes():
    assert len(step(k=1, z="a")) == 7
    base = TransitionBase(
        ["obs"], ["value"], [], [{"x": torch.zeros(2, 1)}], [torch.zeros(2, 1)], []
    )
    assert len(base) == 2


def test_items_gives_name_value_pairs():
    t = step(2, k=1)
    assert [name for name, _ in t.items()] == t.keys()
    assert dict(t.items())["reward"] == 2.0 and dict(t.items())["k"] == 1
    assert dict(t)["k"] == 1  # keys() + __getitem__ make a transition dict()-able


def test_getitem_of_an_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'missing'"):
        step()["missing"]
    with pytest.raises(KeyError):  # also a KeyError, as in machin
        step()["missing"]


@pytest.mark.parametrize("how", ["item", "attribute"])
def test_new_attributes_cannot_be_set(how, no_warnings):
    t = step()
    with pytest.raises(RuntimeError, match="You cannot dynamically set new attributes"):
        if how == "item":
            t["extra"] = 1
        else:
            t.extra = 1
    t["reward"] = 5.0  # known attributes can be set (validated)
    t.terminal = True
    assert (t.reward, t.terminal) == (5.0, True) and "extra" not in t


def test_accessors_keys_has_keys_to_and_groups():
    t = step(1, b=2, a=1)
    assert t.keys() == ["state", "action", "next_state", "reward", "terminal", "a", "b"]
    assert t.has_keys(["state", "a"]) and not t.has_keys(["nope"])
    assert (t.major_attr, t.sub_attr, t.custom_attr) == (
        ["state", "action", "next_state"],
        ["reward", "terminal"],
        ["a", "b"],
    )
    assert t.to("cpu") is t
    assert t["state"]["s"].shape == (1, 3) and t.action["a"].dtype == torch.int64


def test_custom_attributes_may_be_tensors_and_are_not_moved():
    t = step(h=torch.ones(2, 2))
    assert torch.equal(t.h, torch.ones(2, 2))
    t.to("meta")
    assert t.state["s"].device.type == "meta" and t.h.device.type == "cpu"


def test_transitions_are_hashable():
    a, b = step(1), step(1)
    assert len({a, b}) == 2 and {a: 1}[a] == 1


@pytest.mark.parametrize(
    "kwargs, phrase",
    [
        (
            {"state": {"s": [1.0]}},
            "Key 's' of transition major attribute 'state' is a invalid tensor",
        ),
        ({"reward": torch.tensor(1.0)}, "Transition sub attribute 'reward' is a invalid tensor"),
        (
            {"reward": "high"},
            "Transition sub attribute 'reward' has invalid value 'high', requires scalar or tensor",
        ),
        ({"state": {"s": torch.zeros(2, 3)}}, "must be 1"),
    ],
)
def test_invalid_transition_attributes_raise_value_error(kwargs, phrase):
    data = dict(
        state={"s": torch.zeros(1, 3)},
        action={"a": torch.zeros(1, 1)},
        next_state={"s": torch.zeros(1, 3)},
        reward=0.0,
        terminal=False,
    )
    data.update(kwargs)
    with pytest.raises(ValueError, match=phrase):
        Transition(**data)


def test_inconsistent_batch_sizes_raise_value_error():
    with pytest.raises(
        ValueError, match="Transition sub attribute 'value' has invalid batch size 2"
    ):
        TransitionBase(["obs"], ["value"], [], [{"x": torch.zeros(3, 2)}], [torch.ones(2, 1)], [])
    with pytest.raises(
        ValueError, match="Key 'y' of transition major attribute 'obs' has invalid batch size 1"
    ):
        TransitionBase(["obs"], [], [], [{"x": torch.zeros(3, 2), "y": torch.zeros(1, 2)}], [], [])


@pytest.mark.parametrize("order", ["scalar first", "tensor first"])
def test_a_scalar_sub_attribute_in_a_batch_of_several_raises(order):
    # 0.3.4 refused a scalar sub attribute once the batch had more than one row.
    subs = [("done", False), ("value", torch.ones(3, 1))]
    if order == "tensor first":
        subs.reverse()
    names, values = zip(*subs)
    with pytest.raises(
        ValueError, match="Transition sub attribute 'done' is a scalar, but batch size is 3"
    ):
        TransitionBase(["obs"], names, [], [{"x": torch.zeros(3, 2)}], values, [])
    single = TransitionBase(
        ["obs"],
        names,
        [],
        [{"x": torch.zeros(1, 2)}],
        [v if k == "done" else torch.ones(1, 1) for k, v in subs],
        [],
    )
    assert single.batch_size == 1
    batch = TransitionBase(
        ["obs"], ["value"], [], [{"x": torch.zeros(3, 2)}], [torch.ones(3, 1)], []
    )
    with pytest.raises(ValueError, match="'value' is a scalar, but batch size is 3"):
        batch.value = 1.0
    assert torch.equal(batch.value, torch.ones(3, 1))  # unchanged


# ================================================================================== buffer
def test_buffer_constructor_ignores_extra_arguments_with_a_warning():
    with pytest.warns(ExtraArgumentsWarning, match="'device'"):
        buffer = Buffer(10, "cpu", "unused", device="cpu")
    assert buffer.buffer_size == 10 and filled(buffer).size() == 5


def test_sample_batch_ignores_extra_arguments_with_a_warning():
    buffer = filled(Buffer(10))
    with pytest.warns(ExtraArgumentsWarning, match="'sample_keys'"):
        size, (reward,) = buffer.sample_batch(
            3, True, None, "random_unique", ["reward"], None, "extra", sample_keys=["state"]
        )
    assert size == 3 and reward.shape == (3, 1)


def test_unknown_sample_method_raises_runtime_error():
    buffer = filled(Buffer(10))
    with pytest.raises(RuntimeError, match="Cannot find specified sample method"):
        buffer.sample_batch(2, sample_method="bogus")
    with pytest.raises(ValueError, match="Cannot find specified sample method"):
        buffer.sample_batch(2, sample_method="bogus")


def test_sample_methods_are_found_by_name_on_subclasses():
    class NewestFirst(Buffer):
        @staticmethod
        def sample_method_newest(buffer, batch_size):
            n = min(batch_size, buffer.size())
            return n, list(range(buffer.size() - 1, buffer.size() - 1 - n, -1))

    buffer = filled(NewestFirst(10))
    size, (reward,) = buffer.sample_batch(2, sample_method="newest", sample_attrs=["reward"])
    assert size == 2 and reward.view(-1).tolist() == [4.0, 3.0]


def test_sample_method_written_for_0_3_4_returns_transitions():
    def sample_two(buffer, batch_size):  # 0.3.4 contract: (size, list of transitions)
        return 2, random.sample(buffer, 2)

    buffer = filled(Buffer(10))
    size, (state, reward, others) = buffer.sample_batch(
        99, sample_method=sample_two, sample_attrs=["state", "reward", "*"]
    )
    assert size == 2 and state["s"].shape == (2, 3) and reward.shape == (2, 1) and others == {}
    assert len(buffer) == 5 and buffer[0].reward == 0.0 and buffer[-1].reward == 4.0


def test_append_of_something_else_raises_runtime_error():
    with pytest.raises(
        RuntimeError,
        match="Transition object must be a dict or an instance of the Transition class",
    ):
        Buffer(2).append([1, 2])


def test_append_of_a_dict_missing_arguments_raises_type_error():
    data = dict(
        state={"s": torch.zeros(1, 3)},
        action={"a": torch.zeros(1, 1)},
        next_state={"s": torch.zeros(1, 3)},
        reward=0.0,
    )
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'terminal'"):
        Buffer(2).append(data)


def test_append_without_required_attributes_raises_value_error():
    base = TransitionBase(["state"], ["reward"], [], [{"s": torch.zeros(1, 1)}], [1.0], [])
    with pytest.raises(ValueError, match="Transition object missing attributes"):
        Buffer(2).append(base)


def test_append_with_different_attributes_raises_value_error():
    buffer = filled(Buffer(10), 1)
    with pytest.raises(ValueError, match="Transition object has different attributes"):
        buffer.append(step(1, extra=1))


def test_non_concatenable_batches_raise_value_error():
    with pytest.raises(ValueError, match="Batch not concatenable"):
        Buffer.make_tensor_from_batch(["a", "b"], "cpu", True)
    buffer = filled(Buffer(10), tag="x")
    with pytest.raises(ValueError, match="Batch not concatenable"):
        buffer.sample_batch(2, additional_concat_attrs=["tag"])


def test_sample_batch_return_layout():
    buffer = Buffer(10)
    assert buffer.sample_batch(4) == (0, None)
    filled(buffer, 3, note="n")
    size, values = buffer.sample_batch(8)
    assert size == 3 and isinstance(values, tuple) and len(values) == 6
    size, (reward, others, state) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["reward", "*", "unknown", "state"]
    )
    assert reward.view(-1).tolist() == [0.0, 1.0, 2.0] and others == {"note": ["n"] * 3}
    assert state["s"].shape == (3, 3)
    size, (reward,) = buffer.sample_batch(2, concatenate=False, sample_attrs=["reward"])
    assert size == 2 and isinstance(reward, list) and len(reward) == 2


def test_custom_tensor_attributes_are_sampled_as_lists_or_concatenated():
    buffer = Buffer(10)
    for i in range(3):
        buffer.append(step(i, h=torch.full((1, 2), float(i))))
    _, (h,) = buffer.sample_batch(-1, sample_method="all", sample_attrs=["h"])
    assert isinstance(h, list) and [v[0, 0].item() for v in h] == [0.0, 1.0, 2.0]
    _, (h,) = buffer.sample_batch(
        -1, sample_method="all", sample_attrs=["h"], additional_concat_attrs=["h"]
    )
    assert torch.equal(h[:, 0], torch.tensor([0.0, 1.0, 2.0]))


# ====================================================================== prioritized buffer
def test_prioritized_buffer_ignores_extra_arguments_with_a_warning():
    with pytest.warns(ExtraArgumentsWarning, match="'device'"):
        buffer = PrioritizedBuffer(10, "cpu", device="cpu")
    filled(buffer)
    with pytest.warns(ExtraArgumentsWarning, match="'sample_method'"):
        result = buffer.sample_batch(4, sample_method="random")
    size, values, indexes, is_weights = result
    assert size == 4 and len(values) == 5
    assert isinstance(indexes, np.ndarray) and indexes.shape == (4,)
    assert isinstance(is_weights, np.ndarray) and is_weights.shape == (4,)
    assert PrioritizedBuffer(10).sample_batch(3) == (0, None, None, None)


def test_prioritized_buffer_curr_beta():
    buffer = filled(PrioritizedBuffer(10, beta=0.5, beta_increment_per_sampling=0.1))
    assert buffer.curr_beta == 0.5
    buffer.sample_batch(2)
    assert buffer.curr_beta == pytest.approx(0.6) and buffer.beta == 0.5
    buffer.clear()
    assert buffer.curr_beta == 0.5


def test_update_priority_length_mismatch_raises_value_error():
    buffer = filled(PrioritizedBuffer(10))
    with pytest.raises(ValueError, match="Dimension of weights and indexes doesn't match"):
        buffer.update_priority(np.ones(3), np.arange(2))


# ============================================================================= weight tree
def test_weight_tree_errors_keep_0_3_4_phrases():
    tree = WeightTree(4)
    with pytest.raises(ValueError, match="Index has elements out of boundary"):
        tree.get_leaf_weight(4)
    with pytest.raises(ValueError, match="Index has elements out of boundary"):
        tree.update_leaf(1.0, -1)
    with pytest.raises(ValueError, match="Index has elements out of boundary"):
        tree.update_leaf_batch([1.0], [7])
    with pytest.raises(ValueError, match="Dimension of weights and indexes doesn't match"):
        tree.update_leaf_batch([1.0, 2.0], [0])
    with pytest.raises(ValueError, match="Weights size must match tree size"):
        tree.update_all_leaves([1.0] * 5)


def test_weight_tree_return_shapes_and_attributes():
    tree = WeightTree(4)
    tree.update_all_leaves([1.0, 2.0, 3.0, 4.0])
    assert isinstance(tree.get_weight_sum(), float) and tree.get_weight_sum() == 10.0
    assert isinstance(tree.get_leaf_weight(2), float)
    assert isinstance(tree.get_leaf_weight([1, 2]), np.ndarray)
    assert isinstance(tree.find_leaf_index(3.5), int) and tree.find_leaf_index(3.5) == 2
    assert tree.find_leaf_index([0.5, 9.5]).tolist() == [0, 3]
    assert tree.get_leaf_all_weights().shape == (4,)
    assert tree.max_leaf == tree.get_leaf_max() == 4.0
    assert tree.depth == 3 and tree.sizes.tolist() == [4, 2, 1]
    assert tree.offsets.tolist() == [0, 4, 6, 7]


# ===================================================================== distributed buffers
class _Done:
    def __init__(self, value):
        self.value = value

    def wait(self):
        return self.value


class LocalGroup:
    """A one-process stand-in for an RpcGroup: services are called in place."""

    def __init__(self, member=True):
        self.member = member
        self.services = {}

    def is_member(self, target=None):
        return self.member

    @staticmethod
    def get_cur_name():
        return "0"

    def get_group_name(self):
        return "local"

    def get_group_members(self):
        return ["0"]

    def register(self, key, service):
        if key in self.services:
            raise KeyError(f"service {key!r} already registered")
        self.services[key] = service

    def is_registered(self, key):
        return key in self.services

    def registered_async(self, key, args=(), kwargs=None):
        return _Done(self.services[key](*args, **(kwargs or {})))


@pytest.mark.parametrize("cls", [DistributedBuffer, DistributedPrioritizedBuffer])
def test_distributed_buffers_ignore_extra_arguments_with_a_warning(cls):
    group = LocalGroup()
    with pytest.warns(ExtraArgumentsWarning, match="'buffer_device'"):
        buffer = cls("replay", group, 10, "cpu", buffer_device="cpu")
    filled(buffer)
    assert buffer.all_size() == 5
    with pytest.warns(ExtraArgumentsWarning, match="'unused'"):
        result = buffer.sample_batch(3, True, None, unused=1)
    assert result[0] == 3 and len(result) == (2 if cls is DistributedBuffer else 4)
    with buffer.wr_lock, buffer.wr_lock:  # reentrant, as 0.3.4's RLock
        buffer.append(step(9))


@pytest.mark.parametrize("cls", [DistributedBuffer, DistributedPrioritizedBuffer])
def test_distributed_buffer_errors_keep_0_3_4_types(cls):
    group = LocalGroup()
    cls("replay", group, 10)
    with pytest.raises(KeyError, match="already registered"):
        cls("replay", group, 10)
    with pytest.raises(AssertionError, match="must be a member of group"):
        cls("other", LocalGroup(member=False), 10)


def test_distributed_buffer_unknown_sample_method_raises_runtime_error():
    buffer = filled(DistributedBuffer("replay", LocalGroup(), 10))
    with pytest.raises(RuntimeError, match="Cannot find specified sample method"):
        buffer.sample_batch(2, sample_method="bogus")


# =================================================================================== noise
def test_per_column_noise_parameters_follow_the_last_dimension():
    action = torch.zeros(5, 4, 2)
    out = add_uniform_noise_to_action(action, [(0.0, 0.0), (1.0, 1.0)])
    assert torch.equal(out[..., 0], torch.zeros(5, 4)) and torch.equal(
        out[..., 1], torch.ones(5, 4)
    )
    assert add_normal_noise_to_action(torch.zeros(3), [(0.0, 1.0)] * 3).shape == (3,)
    with pytest.raises(
        ValueError, match="Noise param length doesn't match the last dimension of action"
    ):
        add_clipped_normal_noise_to_action(torch.zeros(4, 3), [(0.0, 1.0, -1.0, 1.0)] * 2)


def test_longer_noise_parameter_tuples_use_their_leading_values():
    with pytest.warns(ExtraArgumentsWarning, match="ignores the other 2"):
        out = add_normal_noise_to_action(torch.zeros(4, 2), (1.0, 0.0, -0.5, 0.5))
    assert torch.equal(out, torch.ones(4, 2))


def test_integer_actions_get_floating_noise():
    out = add_uniform_noise_to_action(torch.zeros(2, 2, dtype=torch.int64), (0.5, 0.5))
    assert out.dtype == torch.get_default_dtype() and torch.equal(out, torch.full((2, 2), 0.5))


def test_ou_noise_param_errors_are_type_errors(monkeypatch):
    monkeypatch.setattr(action_space_noise, "DEFAULT_OU_GEN", None)
    with pytest.raises(TypeError, match="must be a mapping"):
        add_ou_noise_to_action(torch.zeros(2), (0.0, 1.0), reset=True)
    with pytest.raises(TypeError, match="got an unexpected keyword argument"):
        add_ou_noise_to_action(torch.zeros(2), {"scale": 1.0}, reset=True)


def test_ou_action_noise_shares_default_ou_gen(monkeypatch):
    monkeypatch.setattr(action_space_noise, "DEFAULT_OU_GEN", None)
    add_ou_noise_to_action(torch.zeros(3), {"sigma": 0.0, "mu": 1.0, "theta": 1.0}, reset=True)
    shared = action_space_noise.DEFAULT_OU_GEN
    assert isinstance(shared, OrnsteinUhlenbeckNoiseGen) and shared.mu == 1.0
    add_ou_noise_to_action(torch.zeros(3))
    assert action_space_noise.DEFAULT_OU_GEN is shared
    action_space_noise.DEFAULT_OU_GEN = None  # 0.3.4 code reset it this way
    add_ou_noise_to_action(torch.zeros(3))
    assert action_space_noise.DEFAULT_OU_GEN is not shared


def test_noise_generators_keep_0_3_4_reprs_and_attributes():
    uniform = UniformNoiseGen([2], -1.0, 2.0)
    assert repr(uniform) == "UniformNoise(min=-1.0, max=2.0)"
    assert (uniform.min, uniform.max) == (-1.0, 2.0) and uniform.dist.high == 2.0
    normal = NormalNoiseGen([2], 0.5, 2.0)
    assert repr(normal) == "NormalNoise(mu=0.5, sigma=2.0)" and normal.dist.mean == 0.5
    clipped = ClippedNormalNoiseGen([2], 0.0, 1.0, -0.5, 0.5)
    assert repr(clipped) == "ClippedNormalNoise(mu=0.0, sigma=1.0, min=-0.5, max=0.5)"
    assert (clipped.min, clipped.max) == (-0.5, 0.5)
    ou = OrnsteinUhlenbeckNoiseGen([2], 0.0, 1.0, dt=torch.tensor(0.01))
    assert repr(ou) == "OrnsteinUhlenbeckNoise(mu=0.0, sigma=1.0)"
    assert torch.equal(ou.x_prev, torch.zeros(2))
    value = ou(None)
    assert torch.equal(ou.x_prev, value) and ou.norm_dist.stddev == 1.0
    ou.reset()
    assert torch.equal(ou.x_prev, torch.zeros(2))


def test_ou_x0_of_the_wrong_shape_raises_check_error():
    with pytest.raises(CheckError, match="has invalid shape"):
        OrnsteinUhlenbeckNoiseGen([2, 3], x0=torch.zeros(3))


def test_non_numeric_noise_parameters_raise_value_error():
    with pytest.raises(ValueError, match="mu must be a real number"):
        NormalNoiseGen([2], "zero")
    with pytest.raises(ValueError, match="umin must be a real number"):
        UniformNoiseGen([2], None)


def test_adaptive_param_noise_attributes_and_repr():
    noise = AdaptiveParamNoise(0.2, 0.3, 1.5)
    noise.adapt(1.0)
    assert noise.initial_stddev == 0.2 and noise.current_stddev == pytest.approx(0.2 / 1.5)
    assert repr(noise) == "AdaptiveParamNoise(i_std=0.2, da_std=0.3, adpt_coeff=1.5)"


def test_perturb_model_prefers_noise_generate_function_with_a_warning():
    model = nn.Linear(2, 2)
    p_switch, r_switch = Switch(), Switch()
    with pytest.warns(ExtraArgumentsWarning, match="noise_generate_function excludes"):
        cancel = perturb_model(
            model,
            p_switch,
            r_switch,
            noise_generator=UniformNoiseGen,
            noise_generate_function=lambda shape, device, std: torch.ones(shape, device=device),
        )
    clean = model(torch.zeros(1, 2))
    p_switch.on()
    assert torch.allclose(model(torch.zeros(1, 2)), clean + 1.0)
    cancel()


def test_perturb_model_accepts_a_model_without_parameters():
    p_switch, r_switch = Switch(), Switch()
    model = nn.ReLU()
    with pytest.warns(UserWarning, match="no parameters to perturb"):
        cancel = perturb_model(model, p_switch, r_switch)
    p_switch.on()
    assert torch.equal(model(torch.ones(2)), torch.ones(2))
    p_switch.off()
    assert torch.equal(model(-torch.ones(2)), torch.zeros(2))
    cancel()


def test_noise_package_exports_its_modules():
    namespace = {}
    exec("from machin.frame.noise import *", namespace)
    assert {"action_space_noise", "generator", "param_space_noise"} <= set(namespace)


def _distributed_compat_checks(rank):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("compat", world.get_members())
    with pytest.warns(ExtraArgumentsWarning, match="1 positional"):
        plain = DistributedBuffer("plain", group, 10, "cpu")
    with pytest.warns(ExtraArgumentsWarning, match="'buffer_device'"):
        prioritized = DistributedPrioritizedBuffer("per", group, 10, buffer_device="cpu")
    with pytest.raises(KeyError, match="already registered"):
        DistributedBuffer("plain", group, 10)
    for i in range(3):
        plain.append(step(rank * 10 + i))
        prioritized.append(step(rank * 10 + i))
    group.barrier()
    with pytest.warns(ExtraArgumentsWarning, match="'unused'"):
        size, (reward,) = plain.sample_batch(4, sample_attrs=["reward"], unused=True)
    assert size == 4 and reward.shape == (4, 1)
    with pytest.warns(ExtraArgumentsWarning, match="'sample_method'"):
        size, values, indexes, is_weights = prioritized.sample_batch(4, sample_method="random")
    assert (
        size == 4 and len(values) == 5 and set(indexes) <= {"0", "1"} and is_weights.shape == (4,)
    )
    with pytest.raises(RuntimeError, match="Cannot find specified sample method"):
        plain.sample_batch(2, sample_method="bogus")
    group.barrier()
    world.stop()
    return rank


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
@pytest.mark.usefixtures("no_children_left")
def test_distributed_buffers_keep_0_3_4_calls_over_rpc():
    assert run_ranks(_distributed_compat_checks, 2) == [0, 1]

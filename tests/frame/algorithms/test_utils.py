"""Tests of machin.frame.algorithms.utils: safe_call, soft/hard update, probability check.

Checklist 6.9 items 108-112 (safe_call) and the soft/hard update contract of section 3.7.
"""

import copy
import gc
import warnings
import weakref

import pytest
import torch
from torch import nn

from machin.frame.algorithms import utils
from machin.frame.algorithms.utils import (
    assert_output_is_probs,
    get_input_device,
    hard_update,
    safe_call,
    soft_update,
)


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, some_state, hidden=None):
        q = self.fc(some_state)
        return q if hidden is None else (q, hidden + 1)


class WithDevice(QNet):
    """Declares its input device like NeuralNetworkModule and the wrappers do."""

    input_device = torch.device("cpu")


class Recorder(nn.Module):
    """Records the keyword arguments it receives."""

    input_device = "cpu"

    def __init__(self):
        super().__init__()
        self.seen = None

    def forward(self, state, action=None, *, scale=1.0):
        self.seen = {"state": state, "action": action, "scale": scale}
        return state * scale


class AnyKwargs(nn.Module):
    input_device = "cpu"

    def forward(self, state, **others):
        return sorted(others)


class OnMeta(nn.Module):
    """A network whose parameters live on another device (meta stands in for an accelerator)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2, device="meta")

    def forward(self, state):
        return self.fc(state)


# -- keyword matching (item 108) -----------------------------------------------------------
def test_only_forward_arguments_are_passed():
    net = Recorder()
    x = torch.ones(2, 3)
    out = safe_call(net, {"state": x, "unused": 5, "other": torch.zeros(1)})
    assert torch.equal(out, x)
    assert net.seen == {"state": x, "action": None, "scale": 1.0}


def test_keys_from_several_dicts_later_wins_and_none_is_skipped():
    net = Recorder()
    x, a = torch.ones(1, 3), torch.zeros(1, 1)
    safe_call(net, {"state": x, "scale": 2.0}, None, {"action": a, "scale": 3.0})
    assert net.seen["action"] is a and net.seen["scale"] == 3.0


def test_keyword_only_arguments_are_matched():
    net = Recorder()
    out = safe_call(net, {"state": torch.ones(1, 3), "scale": 4.0})
    assert torch.equal(out, torch.full((1, 3), 4.0))


def test_forward_with_var_keyword_receives_every_key():
    assert safe_call(AnyKwargs(), {"state": 1, "b": 2, "a": 3}) == ["a", "b"]


def test_return_value_is_passed_back_unchanged():
    net = QNet()
    out = safe_call(net, {"some_state": torch.ones(1, 3), "hidden": torch.zeros(1, 4)})
    assert isinstance(out, tuple) and len(out) == 2
    assert torch.equal(out[1], torch.ones(1, 4))
    single = safe_call(net, {"some_state": torch.ones(1, 3)})
    assert isinstance(single, torch.Tensor) and single.shape == (1, 2)


def test_optional_arguments_may_be_left_out():
    # The DRQN pattern: every argument optional, only some keys given.
    class Recurrent(nn.Module):
        input_device = "cpu"

        def forward(self, mem=None, hidden=None, history_mem=None):
            return mem, hidden, history_mem

    assert safe_call(Recurrent(), {"hidden": 1}) == (None, 1, None)


# -- errors (item 110) -------------------------------------------------------------------
def test_missing_required_argument_names_class_argument_and_keys():
    with pytest.raises(TypeError) as info:
        safe_call(QNet(), {"state": torch.ones(1, 3), "reward": 1.0})
    message = str(info.value)
    assert "QNet.forward requires argument(s) ['some_state']" in message
    assert "['reward', 'state']" in message


def test_required_argument_list_is_enforced():
    net = Recorder()
    with pytest.raises(TypeError, match=r"Recorder.forward requires argument\(s\) \['action'\]"):
        safe_call(net, {"state": torch.ones(1, 3)}, required_argument=("action",))
    safe_call(
        net, {"state": torch.ones(1, 3), "action": torch.ones(1)}, required_argument=("action",)
    )
    assert net.seen["action"] is not None


def test_missing_argument_message_with_no_dicts():
    with pytest.raises(TypeError, match=r"have the keys \[\]"):
        safe_call(QNet(), None)


# -- devices (items 109, 111) ------------------------------------------------------------
def _device_warnings(*calls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for model, args in calls:
            safe_call(model, args)
    return [str(w.message) for w in caught if "input device" in str(w.message)]


def test_plain_module_on_one_device_is_called_silently():
    class Fresh(QNet):
        pass

    assert _device_warnings((Fresh(), {"some_state": torch.ones(1, 3)})) == []
    assert get_input_device(Fresh()) == torch.device("cpu")


def test_module_on_several_devices_warns_once_per_class_and_says_what_to_do():
    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.register_buffer("far", torch.zeros(1, device="meta"))

        def forward(self, some_state):
            return self.fc(some_state)

    messages = _device_warnings(*[(Split(), {"some_state": torch.ones(1, 3)})] * 2)
    assert len(messages) == 1
    assert "Split has parameters on several devices (cpu, meta)" in messages[0]
    assert "static_module_wrapper" in messages[0] and "Declare its input device" in messages[0]


def test_module_without_parameters_warns_and_leaves_inputs_in_place():
    class Empty(nn.Module):
        def forward(self, some_state):
            return some_state

    x = torch.ones(1, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert safe_call(Empty(), {"some_state": x}) is x
        assert get_input_device(Empty()) is None
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "Empty has no parameters or buffers" in messages[0]


def test_declared_input_device_gives_no_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = safe_call(WithDevice(), {"some_state": torch.ones(1, 3)})
    assert out.shape == (1, 2)
    assert not [w for w in caught if "input device" in str(w.message)]


def test_inputs_are_moved_to_the_parameter_device():
    out = safe_call(OnMeta(), {"state": torch.ones(2, 3), "extra": torch.ones(1)})
    assert out.device.type == "meta" and out.shape == (2, 2)


def test_inputs_are_moved_to_the_declared_input_device():
    class Declared(Recorder):
        input_device = "meta"

    net = Declared()
    safe_call(net, {"state": torch.ones(1, 3), "action": [torch.ones(1)]})
    assert net.seen["state"].device.type == "meta"
    assert net.seen["action"][0].device.type == "cpu"  # nested tensors are not moved


def test_get_input_device():
    assert get_input_device(WithDevice()) == torch.device("cpu")
    assert get_input_device(OnMeta()).type == "meta"

    class NoParameters(nn.Module):
        def forward(self, x):
            return x

    with pytest.warns(UserWarning, match="NoParameters has no parameters or buffers"):
        assert get_input_device(NoParameters()) is None

    class OnlyBuffer(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.zeros(1, device="meta"))

    assert get_input_device(OnlyBuffer()).type == "meta"


def test_the_remembered_input_device_follows_moves_and_later_declarations():
    net = QNet()
    assert safe_call(net, {"some_state": torch.ones(1, 3)}).device.type == "cpu"  # remembered now
    net.to("meta")  # this move replaces the parameters: the remembered one is not followed
    assert safe_call(net, {"some_state": torch.ones(1, 3)}).device.type == "meta"
    net.to_empty(device="cpu")
    assert safe_call(net, {"some_state": torch.ones(1, 3)}).device.type == "cpu"
    net.input_device = "meta"  # declared on the instance after the first call
    with pytest.raises(RuntimeError):  # cpu weights, meta inputs: the declaration was followed
        safe_call(net, {"some_state": torch.ones(1, 3)})

    class Switching(QNet):
        where = "cpu"

        @property
        def input_device(self):
            return self.where

    seen = []
    switching = Switching()
    switching.forward = lambda some_state: seen.append(some_state.device.type) or some_state
    for where in ("cpu", "meta", "cpu"):
        switching.where = where
        safe_call(switching, {"some_state": torch.ones(1, 3)})
    assert seen == ["cpu", "meta", "cpu"]  # a declared device is asked on every call


# -- wrapped and compiled modules --------------------------------------------------------
class Scriptable(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, some_state: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.fc(some_state) * scale


@pytest.mark.filterwarnings("ignore:`torch.jit")
def test_torchscript_module_is_matched_by_its_schema():
    scripted = torch.jit.script(Scriptable())
    x = torch.ones(1, 3)
    out = safe_call(scripted, {"some_state": x, "noise": 1})
    assert torch.allclose(out, scripted.fc(x))
    doubled = safe_call(scripted, {"some_state": x, "scale": 2.0})
    assert torch.allclose(doubled, 2 * out)
    with pytest.raises(
        TypeError, match=r"Scriptable.forward requires argument\(s\) \['some_state'\]"
    ):
        safe_call(scripted, {"state": x})


@pytest.mark.filterwarnings("ignore:`torch.jit")
def test_traced_module_is_matched_by_its_schema():
    traced = torch.jit.trace(nn.Linear(3, 1), torch.ones(1, 3))
    assert safe_call(traced, {"input": torch.ones(2, 3), "other": 0}).shape == (2, 1)


def test_data_parallel_wrapper_uses_the_inner_signature():
    # DataParallel wants its module on the first GPU when one is present.
    device = "cuda" if torch.cuda.is_available() else "cpu"
    inner = QNet().to(device)
    wrapped = nn.DataParallel(inner)
    x = torch.ones(1, 3)
    out = safe_call(wrapped, {"some_state": x, "ignored": torch.zeros(1)})
    assert torch.allclose(out, inner.fc(x.to(device)))
    with pytest.raises(
        TypeError,
        match=r"QNet \(in DataParallel\)\.forward requires argument\(s\) \['some_state'\]",
    ):
        safe_call(wrapped, {"state": x})


def test_compiled_module_uses_the_original_signature():
    inner = WithDevice()
    compiled = torch.compile(inner, backend="eager")
    x = torch.ones(1, 3)
    out = safe_call(compiled, {"some_state": x, "ignored": torch.zeros(1)})
    assert torch.allclose(out, inner.fc(x))
    with pytest.raises(TypeError, match=r"requires argument\(s\) \['some_state'\]"):
        safe_call(compiled, {"state": x})


def test_custom_wrapper_with_star_args_is_unwrapped():
    class Wrapper(nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

    net = Recorder()
    safe_call(Wrapper(net), {"state": torch.ones(1, 3), "junk": 1})
    assert set(net.seen) == {"state", "action", "scale"}


def test_signature_is_read_once_and_cached_weakly(monkeypatch):
    calls = []
    original = utils._read_signature

    def counting(model):
        calls.append(type(model).__name__)
        return original(model)

    monkeypatch.setattr(utils, "_read_signature", counting)
    net = WithDevice()
    for _ in range(3):
        safe_call(net, {"some_state": torch.ones(1, 3)})
    assert calls == ["WithDevice"]
    assert net in utils._signatures
    # The cache does not keep the module alive.
    alive = weakref.ref(net)
    del net
    gc.collect()
    assert alive() is None


def test_safe_call_does_not_set_attributes_on_the_module():
    net = QNet()
    before = set(vars(net))
    safe_call(net, {"some_state": torch.ones(1, 3)})
    assert set(vars(net)) == before


# -- soft / hard update ---------------------------------------------------------------------
def make_pair():
    torch.manual_seed(0)
    target = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    source = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    with torch.no_grad():
        for p in target.parameters():
            p.fill_(1.0)
        for p in source.parameters():
            p.fill_(3.0)
    source.train()
    source(torch.randn(8, 3))  # moves the running statistics and the batch counter
    return target, source


def test_soft_update_blends_parameters_and_float_buffers():
    target, source = make_pair()
    old_mean = target[1].running_mean.clone()
    soft_update(target, source, 0.25)
    for p in target.parameters():
        assert torch.allclose(p, torch.full_like(p, 1.5))  # 0.75 * 1 + 0.25 * 3
    expected_mean = 0.75 * old_mean + 0.25 * source[1].running_mean
    assert torch.allclose(target[1].running_mean, expected_mean)
    assert target[1].num_batches_tracked.item() == source[1].num_batches_tracked.item() == 1
    assert all(not p.requires_grad or p.grad is None for p in target.parameters())


def test_soft_update_leaves_the_source_unchanged():
    target, source = make_pair()
    before = [p.clone() for p in source.parameters()]
    soft_update(target, source, 0.5)
    assert all(torch.equal(a, b) for a, b in zip(before, source.parameters()))


def test_soft_update_rate_one_copies_and_zero_keeps():
    target, source = make_pair()
    soft_update(target, source, 0.0)
    assert all(torch.equal(p, torch.ones_like(p)) for p in target.parameters())
    soft_update(target, source, 1.0)
    assert all(torch.equal(a, b) for a, b in zip(target.parameters(), source.parameters()))


def test_soft_update_pairs_moves_every_target_as_soft_update_does_and_checks_before_moving():
    pairs, expected = [], []
    for _ in range(2):
        target, source = make_pair()
        twin_target, twin_source = copy.deepcopy(target), copy.deepcopy(source)
        soft_update(twin_target, twin_source, 0.25)
        pairs.append((source, target))
        expected.append(twin_target)
    utils.soft_update_pairs(pairs, 0.25)
    for (_, target), want in zip(pairs, expected):
        assert all(
            torch.equal(a, b)
            for a, b in zip(target.state_dict().values(), want.state_dict().values())
        )
    before = [p.clone() for _, t in pairs for p in t.parameters()]
    with pytest.raises(ValueError, match="same structure"):
        utils.soft_update_pairs(
            pairs + [(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)))], 0.5
        )
    assert all(
        torch.equal(a, b) for a, b in zip(before, [p for _, t in pairs for p in t.parameters()])
    )


def test_soft_update_rejects_different_structures():
    with pytest.raises(
        ValueError, match="same structure, got 2 target parameters and 4 source parameters"
    ):
        soft_update(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), 0.1)


def test_hard_update_copies_parameters_and_buffers():
    target, source = make_pair()
    hard_update(target, source)
    for a, b in zip(target.state_dict().values(), source.state_dict().values()):
        assert torch.equal(a, b)
    # A copy, not shared storage.
    with torch.no_grad():
        next(source.parameters()).add_(1.0)
    assert not torch.equal(next(target.parameters()), next(source.parameters()))


def test_updates_work_under_autograd_and_do_not_track_gradients():
    target, source = make_pair()
    soft_update(target, source, 0.1)
    hard_update(target, source)
    assert all(p.grad_fn is None for p in target.parameters())


# -- assert_output_is_probs --------------------------------------------------------------
def test_probabilities_pass():
    assert_output_is_probs(torch.softmax(torch.randn(4, 3), dim=1))
    assert_output_is_probs(torch.tensor([[0.0, 1.0], [0.5, 0.5]]))


@pytest.mark.parametrize(
    "tensor, match",
    [
        (torch.ones(3), r"shape \[batch_size, action_num\], got shape \(3,\)"),
        (torch.ones(2, 2, 2), r"got shape \(2, 2, 2\)"),
        (torch.tensor([[0.5, 0.6]]), "rows summing to"),
        (torch.tensor([[1.5, -0.5]]), "non-negative"),
        (torch.tensor([[float("nan"), 1.0]]), "sum to 1"),
    ],
)
def test_non_probabilities_raise(tensor, match):
    with pytest.raises(ValueError, match=match):
        assert_output_is_probs(tensor)

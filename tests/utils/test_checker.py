import warnings

import pytest
import torch
from tensorboardX import SummaryWriter
from torch import nn

from machin.utils.checker import (
    CheckError,
    check_model,
    check_nan,
    check_shape,
    i_chk_nan,
    mark_as_atom_module,
    mark_module_output,
    o_chk_nan,
    p_chk_nan,
)

NAN = float("nan")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(3, 4)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Recorder:
    """A check hook that records (pass number, name, module) for every call."""

    def __init__(self):
        self.calls = []

    def __call__(self, counter, writer, model, module, name, value):
        self.calls.append((counter.get(), name, module))

    def names(self):
        return [name for _, name, _ in self.calls]

    def passes(self, name):
        return [number for number, n, _ in self.calls if n == name]


def _recording_check(model, **kwargs):
    inputs, outputs, params = Recorder(), Recorder(), Recorder()
    cancel = check_model(
        None,
        model,
        input_check_hooks=(inputs,),
        output_check_hooks=(outputs,),
        param_check_hooks=(params,),
        **kwargs,
    )
    return cancel, inputs, outputs, params


def _hook_count(model):
    count = 0
    for module in model.modules():
        count += len(module._forward_pre_hooks) + len(module._forward_hooks)
        for param in module.parameters(recurse=False):
            count += len(getattr(param, "_post_accumulate_grad_hooks", None) or {})
    return count


def test_check_nan_and_check_shape_raise_runtime_error():
    check_nan(torch.zeros(2), "fine")
    check_nan(torch.zeros(2, dtype=torch.long), "ints")
    with pytest.raises(CheckError, match="Tensor 'weights' contains nan: 1 of 2 elements"):
        check_nan(torch.tensor([1.0, NAN]), "weights")
    check_shape(torch.zeros(2, 3), [2, 3], "fine")
    with pytest.raises(
        CheckError, match=r"Tensor 'obs' has invalid shape, required shape \[2, 3\], is \[3, 2\]"
    ):
        check_shape(torch.zeros(3, 2), [2, 3], "obs")
    with pytest.raises(TypeError, match="tensor must be a torch.Tensor, got list"):
        check_nan([1.0])
    with pytest.raises(TypeError, match="tensor must be a torch.Tensor, got int"):
        check_shape(3, [1])


def test_nan_input_raises_check_error_and_cancel_removes_every_hook():
    model = Net()
    hooks_before = _hook_count(model)
    cancel = check_model(None, model, name="net")
    assert _hook_count(model) > hooks_before
    model(torch.ones(1, 3))
    with pytest.raises(CheckError, match=r"NaN found in input 'net/fc1/input/input' at pass 2"):
        model(torch.tensor([[NAN, 0.0, 0.0]]))
    cancel()
    assert _hook_count(model) == hooks_before
    out = model(torch.tensor([[NAN, 0.0, 0.0]]))
    assert torch.isnan(out).all()
    cancel()  # a second call is harmless


def test_no_hook_fires_after_cancel():
    model = Net()
    cancel, inputs, outputs, params = _recording_check(model, param_check_interval=1)
    model(torch.ones(2, 3)).sum().backward()
    counts = (len(inputs.calls), len(outputs.calls), len(params.calls))
    assert counts == (2, 2, 4)
    cancel()
    model(torch.ones(2, 3)).sum().backward()
    assert (len(inputs.calls), len(outputs.calls), len(params.calls)) == counts


def test_hooks_see_qualified_names_modules_and_pass_numbers():
    model = Net()
    _, inputs, outputs, params = _recording_check(model, name="net", param_check_interval=1)
    model(torch.ones(1, 3)).sum().backward()
    assert inputs.names() == ["net/fc1/input/input", "net/fc2/input/input"]
    assert outputs.names() == ["net/fc1/output/0", "net/fc2/output/0"]
    assert sorted(params.names()) == [
        "net/fc1/param/bias",
        "net/fc1/param/weight",
        "net/fc2/param/bias",
        "net/fc2/param/weight",
    ]
    assert [module for _, _, module in inputs.calls] == [model.fc1, model.fc2]
    assert {number for number, _, _ in inputs.calls + params.calls} == {1}


def test_intervals_count_forward_and_backward_passes():
    model = Net()
    _, inputs, outputs, params = _recording_check(
        model, input_check_interval=2, output_check_interval=3, param_check_interval=3
    )
    for _ in range(7):
        model(torch.ones(1, 3)).sum().backward()
    assert inputs.passes("fc1/input/input") == [1, 3, 5, 7]
    assert outputs.passes("fc2/output/0") == [1, 4, 7]
    assert params.passes("fc1/param/weight") == [1, 4, 7]
    assert params.passes("fc2/param/bias") == [1, 4, 7]


def test_parameter_hooks_run_after_the_gradient_is_accumulated():
    model = Net()
    grads = []

    def grad_hook(counter, writer, _model, module, name, value):
        grads.append((name, value.grad.clone()))

    check_model(
        None,
        model,
        input_check_hooks=(),
        output_check_hooks=(),
        param_check_hooks=(grad_hook,),
        param_check_interval=1,
    )
    model(torch.ones(1, 3)).sum().backward()
    by_name = dict(grads)
    assert torch.equal(by_name["fc2/param/bias"], torch.ones(2))
    assert torch.equal(by_name["fc1/param/weight"], model.fc1.weight.grad)


def test_nan_parameter_raises_in_backward():
    model = Net()
    check_model(
        None, model, input_check_hooks=(), output_check_hooks=(), param_check_interval=1, name="net"
    )
    with torch.no_grad():
        model.fc2.bias[0] = NAN
    out = model(torch.ones(1, 3))
    with pytest.raises(CheckError, match=r"NaN found in parameter 'net/fc2/param/bias' at pass 1"):
        out.sum().backward()


def test_nan_output_raises():
    model = Net()
    check_model(
        None,
        model,
        input_check_hooks=(i_chk_nan,),
        output_check_hooks=(o_chk_nan,),
        param_check_hooks=(p_chk_nan,),
    )
    with torch.no_grad():
        model.fc1.weight.fill_(NAN)
    with pytest.raises(CheckError, match=r"NaN found in output 'fc1/output/0' at pass 1"):
        model(torch.ones(1, 3))


def test_range_hooks_write_min_max_mean(tmp_path, read_scalars):
    model = Net()
    writer = SummaryWriter(str(tmp_path))
    cancel = check_model(writer, model, name="net", param_check_interval=2)
    inputs = [torch.tensor([[1.0, -2.0, 3.0]]), torch.tensor([[0.5, 0.25, -1.0]])]
    for x in inputs:
        model(x).sum().backward()
    cancel()
    writer.close()
    scalars = read_scalars(str(tmp_path))
    assert scalars["net/fc1/input/input/min"] == [(1, -2.0), (2, -1.0)]
    assert scalars["net/fc1/input/input/max"] == [(1, 3.0), (2, 0.5)]
    assert [step for step, _ in scalars["net/fc1/input/input/mean"]] == [1, 2]
    assert scalars["net/fc1/input/input/mean"][1][1] == pytest.approx(-0.25 / 3)
    out_max = scalars["net/fc2/output/0/max"]
    assert [step for step, _ in out_max] == [1, 2]
    weight = model.fc1.weight.detach()
    # With param_check_interval=2 only the first of the two backward passes is checked.
    assert scalars["net/fc1/param/weight/min"] == [(1, pytest.approx(weight.min().item()))]
    assert scalars["net/fc1/param/weight/mean"] == [(1, pytest.approx(weight.mean().item()))]
    # Parameters also get a histogram (under their own name), as in Machin 0.3.4.
    histograms = {
        tag for tag in scalars if "/param/" in tag and not tag.endswith(("min", "max", "mean"))
    }
    assert histograms == {
        "net/fc1/param/weight",
        "net/fc1/param/bias",
        "net/fc2/param/weight",
        "net/fc2/param/bias",
    }
    assert len(scalars) == 3 * (2 + 2 + 4) + 4


def test_mark_module_output_names_tuple_outputs():
    class Pair(nn.Module):
        def forward(self, x):
            return x + 1, x * 2

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pair = Pair()
            self.unnamed = Pair()

        def forward(self, x):
            return self.pair(x), self.unnamed(x)

    model = Holder()
    mark_module_output(model.pair, ["plus", "times"])
    _, _, outputs, _ = _recording_check(model)
    model(torch.ones(1))
    assert outputs.names() == [
        "pair/output/plus",
        "pair/output/times",
        "unnamed/output/0",
        "unnamed/output/1",
    ]

    # names that do not match the outputs: 0.3.4 paired them with zip (no error); machin
    # warns once and still checks every output
    mark_module_output(model.unnamed, ["a"])
    outputs.calls.clear()
    with pytest.warns(
        UserWarning,
        match=r"module 'unnamed' was marked with 1 output names \['a'\] but returned 2 outputs",
    ):
        model(torch.ones(1))
    assert outputs.names() == [
        "pair/output/plus",
        "pair/output/times",
        "unnamed/output/a",
        "unnamed/output/1",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model(torch.ones(1))  # warned once per module
    mark_module_output(model.unnamed, ["a", "b", "c"])
    outputs.calls.clear()
    model(torch.ones(1))
    assert outputs.names()[2:] == ["unnamed/output/a", "unnamed/output/b"]


def test_dict_outputs_are_named_by_key_and_kwargs_by_name():
    class Scaled(nn.Module):
        def forward(self, x, *extra, scale=None):
            return {"value": x * scale, "sum": x.sum()}

    model = Scaled()
    _, inputs, outputs, _ = _recording_check(model, name="m")
    model(torch.ones(2), torch.zeros(1), scale=torch.tensor(3.0))
    assert inputs.names() == ["m/input/x", "m/input/extra_0", "m/input/scale"]
    assert outputs.names() == ["m/output/value", "m/output/sum"]


def test_mark_as_atom_module_checks_a_composite_as_one_unit():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
            self.head = nn.Linear(3, 1)

        def forward(self, x):
            return self.head(self.block(x))

    model = Model()
    _, inputs, _, params = _recording_check(model, param_check_interval=1)
    model(torch.ones(1, 3)).sum().backward()
    assert inputs.names() == ["block.0/input/input", "block.1/input/input", "head/input/input"]

    atom = Model()
    mark_as_atom_module(atom.block)
    _, inputs, _, params = _recording_check(atom, param_check_interval=1)
    atom(torch.ones(1, 3)).sum().backward()
    assert inputs.names() == ["block/input/input", "head/input/input"]
    assert [module for _, _, module in inputs.calls] == [atom.block, atom.head]
    assert sorted(params.names()) == [
        "block/param/0.bias",
        "block/param/0.weight",
        "head/param/bias",
        "head/param/weight",
    ]
    assert {module for _, name, module in params.calls if name.startswith("block")} == {atom.block}


def test_frozen_parameters_and_leaf_model():
    model = nn.Linear(2, 2)
    model.bias.requires_grad_(False)
    _, inputs, _, params = _recording_check(model, param_check_interval=1)
    model(torch.ones(1, 2)).sum().backward()
    assert inputs.names() == ["input/input"]
    assert params.names() == ["param/weight"]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"model": 3}, TypeError, "model must be a torch.nn.Module, got int"),
        (
            {"input_check_interval": 0},
            ValueError,
            "input_check_interval must be a positive integer, got 0",
        ),
        (
            {"param_check_interval": 1.5},
            ValueError,
            "param_check_interval must be a positive integer, got 1.5",
        ),
        ({"output_check_hooks": (3,)}, TypeError, "output_check_hooks must hold callables, got 3"),
    ],
)
def test_check_model_validates_arguments(kwargs, error, message):
    arguments = {"writer": None, "model": Net(), **kwargs}
    with pytest.raises(error, match=message):
        check_model(**arguments)


def test_marks_validate_arguments():
    with pytest.raises(TypeError, match="module must be a torch.nn.Module, got str"):
        mark_as_atom_module("block")
    with pytest.raises(TypeError, match="output_names must be a list of strings, got 'ab'"):
        mark_module_output(nn.Linear(1, 1), "ab")

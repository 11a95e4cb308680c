"""Tests of machin.frame.noise.param_space_noise (checklist 78-83)."""

import copy
import gc
import weakref

import pytest
import torch
from torch import nn
from torch.func import functional_call

from machin.frame.noise.generator import NoiseGen, UniformNoiseGen
from machin.frame.noise.param_space_noise import (
    AdaptiveParamNoise,
    ModelPerturbation,
    perturb_model,
)
from machin.utils.compat import ExtraArgumentsWarning
from machin.utils.helper_classes import Switch, Trigger


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 2))


def constant_noise(value: float):
    """A noise_generate_function adding ``value * std`` to every parameter element."""

    def generate(shape, device, std):
        return torch.full(shape, value * std, device=device)

    return generate


def shifted_copy(model: nn.Module, shift: float) -> nn.Module:
    """A copy of ``model`` whose parameters are all moved by ``shift``."""
    shifted = copy.deepcopy(model)
    with torch.no_grad():
        for param in shifted.parameters():
            param.add_(shift)
    return shifted


@pytest.fixture
def switches():
    return Switch(), Switch()


X = torch.linspace(-1.0, 1.0, 12).reshape(4, 3)
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


# ------------------------------------------------------------------- AdaptiveParamNoise


def test_adaptive_param_noise_adapts_by_the_coefficient():
    noise = AdaptiveParamNoise(
        initial_stddev=0.2, desired_action_stddev=0.5, adoption_coefficient=2.0
    )
    assert noise.get_dev() == 0.2
    noise.adapt(0.1)
    assert noise.get_dev() == pytest.approx(0.4)
    noise.adapt(0.5)  # equal to the target still counts as "within"
    assert noise.get_dev() == pytest.approx(0.8)
    noise.adapt(0.6)
    assert noise.get_dev() == pytest.approx(0.4)
    noise.adapt(torch.tensor(3.0))
    assert noise.get_dev() == pytest.approx(0.2)


def test_adaptive_param_noise_defaults():
    noise = AdaptiveParamNoise()
    assert noise.get_dev() == 0.1
    noise.adapt(0.1)
    assert noise.get_dev() == pytest.approx(0.101)
    assert noise.initial_stddev == 0.1
    assert repr(noise) == "AdaptiveParamNoise(i_std=0.1, da_std=0.1, adpt_coeff=1.01)"


def test_adaptive_param_noise_bad_arguments():
    with pytest.raises(
        ValueError, match="AdaptiveParamNoise: initial_stddev must not be negative, got -0.1"
    ):
        AdaptiveParamNoise(initial_stddev=-0.1)
    with pytest.raises(
        ValueError, match="AdaptiveParamNoise: desired_action_stddev must not be negative"
    ):
        AdaptiveParamNoise(desired_action_stddev=-1)
    with pytest.raises(
        ValueError, match="AdaptiveParamNoise: adoption_coefficient must be at least 1, got 0.5"
    ):
        AdaptiveParamNoise(adoption_coefficient=0.5)
    with pytest.raises(
        TypeError,
        match=r"AdaptiveParamNoise: initial_stddev must be a real number, got '1' \(str\)",
    ):
        AdaptiveParamNoise(initial_stddev="1")
    noise = AdaptiveParamNoise()
    with pytest.raises(ValueError, match="AdaptiveParamNoise.adapt: distance must not be NaN"):
        noise.adapt(float("nan"))
    with pytest.raises(
        TypeError,
        match=r"AdaptiveParamNoise.adapt: distance must be a real number, got 'far' \(str\)",
    ):
        noise.adapt("far")
    assert noise.get_dev() == 0.1


# ------------------------------------------------------------------------- checklist 79


def test_perturbation_changes_the_output_only_when_switched_on(switches):
    p_switch, r_switch = switches
    model = make_model()
    reference = copy.deepcopy(model)
    handle = perturb_model(model, p_switch, r_switch)
    assert isinstance(handle, ModelPerturbation) and handle.active
    assert torch.equal(model(X), reference(X))
    p_switch.on()
    noisy = model(X)
    assert not torch.allclose(noisy, reference(X), atol=1e-3)
    p_switch.off()
    assert torch.equal(model(X), reference(X))


def test_parameters_stay_clean_outside_forward_passes(switches):
    p_switch, r_switch = switches
    model = make_model()
    reference = copy.deepcopy(model)
    params_before = list(model.parameters())
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    model(X)
    assert all(a is b for a, b in zip(model.parameters(), params_before))
    assert all(isinstance(p, nn.Parameter) and p.is_leaf for p in model.parameters())
    for key, value in model.state_dict().items():
        assert torch.equal(value, reference.state_dict()[key]), key


def test_perturbed_output_matches_a_model_with_the_noisy_parameters(switches):
    p_switch, r_switch = switches
    model = make_model()
    expected = shifted_copy(model, 2.0 * 0.1)(X)
    perturb_model(model, p_switch, r_switch, noise_generate_function=constant_noise(2.0))
    p_switch.on()
    assert torch.allclose(model(X), expected, atol=1e-6)


# ------------------------------------------------------------------------- checklist 80


def test_reset_switch_draws_fresh_noise_every_forward(switches):
    p_switch, r_switch = switches
    model = make_model()
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    r_switch.on()
    first, second = model(X), model(X)
    assert not torch.allclose(first, second, atol=1e-4)


def test_without_reset_the_same_noisy_parameters_are_reused(switches):
    p_switch, r_switch = switches
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    first = model(X)
    assert torch.equal(model(X), first)
    p_switch.off()
    model(X)
    # Training moves the clean parameters; the stored noisy parameters do not follow.
    model(X).sum().backward()
    optimizer.step()
    p_switch.on()
    assert torch.equal(model(X), first)


# ------------------------------------------------------------------------- checklist 81


@pytest.mark.parametrize("reset", [False, True])
def test_backward_and_step_update_the_clean_parameters(switches, reset):
    p_switch, r_switch = switches
    if reset:
        r_switch.on()
    model = make_model()
    clean_before = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    perturb_model(model, p_switch, r_switch, noise_generate_function=constant_noise(3.0))
    p_switch.on()
    loss = (model(X) - 1.0).pow(2).sum()
    # The gradient is the one of the noisy network, taken at the noisy parameters.
    noisy_reference = shifted_copy(clean_before, 0.3)
    (noisy_reference(X) - 1.0).pow(2).sum().backward()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    for (name, param), ref, noisy_ref in zip(
        model.named_parameters(), clean_before.parameters(), noisy_reference.parameters()
    ):
        assert torch.allclose(param.grad, noisy_ref.grad, atol=1e-5), name
        # Updated from the clean value: no trace of the 0.3 noise.
        expected = ref.detach() - 0.1 * param.grad
        assert torch.allclose(param.detach(), expected, atol=1e-6), name
        assert not torch.allclose(param.detach(), ref.detach()), name
    p_switch.off()
    expected_model = copy.deepcopy(clean_before)
    with torch.no_grad():
        for p, e in zip(model.parameters(), expected_model.parameters()):
            e.sub_(0.1 * p.grad)
    assert torch.allclose(model(X), expected_model(X), atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_noise_training_and_cancel_on_the_model_device(switches, device):
    p_switch, r_switch = switches
    model = make_model().to(device)
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = X.to(device)
    # A CPU-seeded generator still gives noise on the parameters' device.
    kwargs = {"generator": torch.Generator().manual_seed(0)}
    cancel = perturb_model(model, p_switch, r_switch, noise_generator_kwargs=kwargs)
    p_switch.on()
    noisy = model(x)
    assert noisy.device.type == device
    assert not torch.allclose(noisy, reference(x), atol=1e-4)
    noisy.sum().backward()
    optimizer.step()
    assert all(p.grad.device.type == device for p in model.parameters())
    cancel()
    expected = [
        r.detach() - 0.1 * p.grad for r, p in zip(reference.parameters(), model.parameters())
    ]
    assert all(torch.allclose(p, e, atol=1e-6) for p, e in zip(model.parameters(), expected))


def test_gradients_reach_the_parameters_of_recurrent_modules(switches):
    p_switch, r_switch = switches
    torch.manual_seed(0)
    model = nn.LSTM(3, 4, batch_first=True)
    reference = copy.deepcopy(model)
    seq = torch.randn(2, 5, 3)
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    noisy, _ = model(seq)
    assert not torch.allclose(noisy, reference(seq)[0], atol=1e-4)
    noisy.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    p_switch.off()
    assert torch.equal(model(seq)[0], reference(seq)[0])


# ------------------------------------------------------------------------- checklist 82


def test_cancel_removes_every_hook_and_restores_the_clean_model(switches):
    p_switch, r_switch = switches
    model = make_model()
    reference = copy.deepcopy(model)
    cancel = perturb_model(model, p_switch, r_switch)
    p_switch.on()
    r_switch.on()
    model(X)
    cancel()
    assert not cancel.active
    assert len(model._forward_hooks) == 0 and len(model._forward_pre_hooks) == 0
    assert torch.equal(model(X), reference(X))
    cancel()  # idempotent
    # After cancelling, the model may be perturbed again.
    again = perturb_model(model, p_switch, r_switch)
    assert not torch.allclose(model(X), reference(X), atol=1e-4)
    again()
    assert torch.equal(model(X), reference(X))


def test_a_model_cannot_be_perturbed_twice(switches):
    model = make_model()
    perturb_model(model, *switches)
    with pytest.raises(RuntimeError, match="perturb_model: model Sequential is already perturbed"):
        perturb_model(model, *switches)


def test_a_trigger_as_reset_switch_draws_fresh_noise_once(switches):
    p_switch, _ = switches
    trigger = Trigger()
    model = make_model()
    perturb_model(model, p_switch, trigger)
    p_switch.on()
    trigger.on()
    first = model(X)
    assert torch.equal(model(X), first)
    trigger.on()
    second = model(X)
    assert not torch.allclose(second, first, atol=1e-4)
    assert torch.equal(model(X), second)


def test_a_deep_copy_carries_the_perturbation_and_cannot_be_perturbed_again(switches):
    model = make_model()
    perturb_model(model, *switches)
    duplicate = copy.deepcopy(model)
    with pytest.raises(RuntimeError, match="perturb_model: model Sequential is already perturbed"):
        perturb_model(duplicate, *switches)


def test_a_perturbed_model_can_be_garbage_collected(switches):
    model = make_model()
    perturb_model(model, *switches)
    ref = weakref.ref(model)
    del model
    gc.collect()
    assert ref() is None


def test_handle_reset_drops_the_noise_set_and_resets_generators(switches):
    p_switch, r_switch = switches
    resets = []

    class Counting(UniformNoiseGen):
        def reset(self):
            resets.append(self.shape)

    model = make_model()
    handle = perturb_model(model, p_switch, r_switch, noise_generator=Counting)
    p_switch.on()
    first = model(X)
    assert torch.equal(model(X), first)
    handle.reset()
    assert sorted(resets) == sorted(p.shape for p in model.parameters())
    assert not torch.allclose(model(X), first, atol=1e-4)


# ------------------------------------------------------------------------- checklist 83


def test_noise_generate_function_replaces_the_generator(switches):
    p_switch, r_switch = switches
    calls = []

    def generate(shape, device, std):
        calls.append((tuple(shape), torch.device(device), std))
        return torch.full(shape, 0.5, device=device)

    model = make_model()
    expected = shifted_copy(model, 0.5)(X)
    perturb_model(model, p_switch, r_switch, noise_generate_function=generate)
    p_switch.on()
    out = model(X)
    assert calls == [(tuple(p.shape), torch.device("cpu"), 0.1) for p in model.parameters()]
    assert torch.allclose(out, expected, atol=1e-6)


def test_noise_generator_class_arguments_and_seeding(switches):
    p_switch, r_switch = switches
    models = [nn.Linear(2, 2), nn.Linear(2, 2)]
    outputs = []
    torch.manual_seed(11)
    expected_global = torch.rand(2)
    torch.manual_seed(11)
    for model in models:
        with torch.no_grad():
            model.weight.zero_()
            model.bias.zero_()
        perturb_model(
            model,
            p_switch,
            r_switch,
            noise_generator=UniformNoiseGen,
            noise_generator_args=(1.0, 2.0),
            noise_generator_kwargs={"generator": torch.Generator().manual_seed(3)},
        )
        p_switch.on()
        outputs.append(model(torch.zeros(1, 2)))
        p_switch.off()
    # Bias noise is U(1, 2) scaled by the initial std 0.1.
    assert outputs[0].min() >= 0.1 and outputs[0].max() <= 0.2
    assert torch.equal(outputs[0], outputs[1])
    assert torch.equal(torch.rand(2), expected_global)


def test_noise_generate_function_excludes_generator_arguments(switches):
    # As in Machin 0.3.4 the function wins; the generator arguments are ignored with a warning.
    message = (
        "perturb_model: noise_generate_function excludes noise_generator, noise_generator_args "
        "and noise_generator_kwargs, which are ignored; got noise_generator=.*UniformNoiseGen"
    )
    with pytest.warns(ExtraArgumentsWarning, match=message):
        perturb_model(
            make_model(),
            *switches,
            noise_generator=UniformNoiseGen,
            noise_generate_function=constant_noise(1.0),
        )
    with pytest.warns(ExtraArgumentsWarning, match=r"noise_generator_args=\(0.0, 1.0\)"):
        perturb_model(
            make_model(),
            *switches,
            noise_generator_args=(0.0, 1.0),
            noise_generate_function=constant_noise(1.0),
        )
    p_switch, r_switch = switches
    model = make_model()
    expected = shifted_copy(model, 0.1)(X)  # the function's noise: 1.0 * the initial std 0.1
    with pytest.warns(ExtraArgumentsWarning, match=r"noise_generator_kwargs=\{'sigma': 2.0\}"):
        perturb_model(
            model,
            p_switch,
            r_switch,
            noise_generator_kwargs={"sigma": 2.0},
            noise_generate_function=constant_noise(1.0),
        )
    p_switch.on()
    assert torch.allclose(model(X), expected, atol=1e-6)


# --------------------------------------------------------------------------- adaptation


def test_distance_of_clean_and_noisy_outputs_on_the_same_input_drives_adaptation(switches):
    p_switch, r_switch = switches
    seen = []
    distance = {"value": 0.1}

    def record(clean, noisy):
        seen.append((clean.clone(), noisy.clone()))
        return distance["value"]

    model = make_model()
    reference = copy.deepcopy(model)
    handle = perturb_model(
        model, p_switch, r_switch, distance_func=record, desired_action_stddev=0.5
    )
    p_switch.on()
    model(X + 5.0)  # noisy forward on another input
    noisy = model(X)
    p_switch.off()
    clean = model(X)
    assert torch.equal(clean, reference(X))
    assert len(seen) == 1
    assert torch.equal(seen[0][0], clean)
    assert torch.allclose(seen[0][1], noisy)
    assert handle.adaptive_noise.get_dev() == pytest.approx(0.1 * 1.01)
    # One adaptation per noise set.
    model(X)
    assert len(seen) == 1
    # A new noise set (scaled by the adapted std) is measured again.
    distance["value"] = 2.0
    p_switch.on()
    r_switch.on()
    model(X)
    p_switch.off()
    model(X)
    assert len(seen) == 2
    assert handle.adaptive_noise.get_dev() == pytest.approx(0.1)


@pytest.mark.parametrize("desired, factor", [(0.31, 1.01), (0.29, 1 / 1.01)])
def test_default_distance_is_the_root_mean_square_difference(switches, desired, factor):
    p_switch, r_switch = switches

    class TupleOutput(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = nn.Parameter(torch.zeros(3))

        def forward(self, x):
            return x + self.bias, torch.zeros(1)

    model = TupleOutput()
    handle = perturb_model(
        model,
        p_switch,
        r_switch,
        desired_action_stddev=desired,
        noise_generate_function=constant_noise(3.0),
    )
    p_switch.on()
    model(torch.zeros(2, 3))  # noise 0.3 on every output element: RMS distance 0.3
    p_switch.off()
    model(torch.zeros(2, 3))
    assert handle.adaptive_noise.get_dev() == pytest.approx(0.1 * factor)


def test_noise_scale_follows_the_adapted_std(switches):
    p_switch, r_switch = switches
    stds = []

    def generate(shape, device, std):
        stds.append(std)
        return torch.zeros(shape, device=device)

    model = nn.Linear(2, 2)
    perturb_model(
        model, p_switch, r_switch, distance_func=lambda a, b: 0.0, noise_generate_function=generate
    )
    for _ in range(2):
        p_switch.on()
        r_switch.on()
        model(torch.ones(1, 2))
        p_switch.off()
        model(torch.ones(1, 2))
    assert stds == pytest.approx([0.1, 0.1, 0.101, 0.101])


# ------------------------------------------------------------------------- other behaviour


def test_tied_parameters_get_the_same_noise(switches):
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Linear(3, 3)
            self.second = nn.Linear(3, 3)
            self.second.weight = self.first.weight
            self.second.bias = self.first.bias

        def forward(self, x):
            return self.first(x), self.second(x)

    p_switch, r_switch = switches
    torch.manual_seed(0)
    model = Tied()
    clean, _ = model(X)
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    first, second = model(X)
    assert torch.equal(first, second)
    assert not torch.allclose(first, clean, atol=1e-4)
    assert model.second.weight is model.first.weight


def test_an_exception_in_forward_leaves_the_clean_parameters(switches):
    class Failing(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 2)
            self.fail = True

        def forward(self, x):
            out = self.linear(x)
            if self.fail:
                raise RuntimeError("forward failed")
            return out

    p_switch, r_switch = switches
    model = Failing()
    weight = model.linear.weight
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    with pytest.raises(RuntimeError, match="forward failed"):
        model(X)
    assert model.linear._parameters["weight"] is weight
    model.fail = False
    p_switch.off()
    assert torch.equal(model(X), nn.functional.linear(X, weight, model.linear.bias))


def test_stale_noise_is_redrawn_after_a_dtype_change(switches):
    p_switch, r_switch = switches
    model = make_model()
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    model(X)
    model.double()
    out = model(X.double())
    assert out.dtype == torch.float64
    p_switch.off()
    assert not torch.allclose(out, model(X.double()), atol=1e-4)


def test_perturbed_forward_under_no_grad(switches):
    p_switch, r_switch = switches
    model = make_model()
    reference = copy.deepcopy(model)
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    with torch.no_grad():
        out = model(X)
    assert not out.requires_grad
    assert not torch.allclose(out, reference(X), atol=1e-4)
    assert torch.equal(model(X).detach(), out)


def test_debug_backward_prints_when_the_backward_pass_arrives(switches, capsys):
    p_switch, r_switch = switches
    model = make_model()
    perturb_model(model, p_switch, r_switch, debug_backward=True)
    p_switch.on()
    out = model(X)
    assert capsys.readouterr().out == ""
    out.sum().backward()
    printed = capsys.readouterr().out
    for name, _ in model.named_parameters():
        assert (
            f"perturb_model: backward pass reached perturbed parameter '{name}' of Sequential"
            in printed
        )


def test_no_message_without_debug_backward(switches, capsys):
    p_switch, r_switch = switches
    model = make_model()
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    model(X).sum().backward()
    assert capsys.readouterr().out == ""


def test_functional_call_still_sees_the_clean_parameters(switches):
    p_switch, r_switch = switches
    model = make_model()
    reference = copy.deepcopy(model)
    perturb_model(model, p_switch, r_switch)
    p_switch.on()
    params = {k: v.detach() for k, v in model.named_parameters()}
    noisy = functional_call(model, params, (X,))
    assert not torch.allclose(noisy, reference(X), atol=1e-4)
    assert torch.equal(dict(model.named_parameters())["0.weight"], reference[0].weight)


# ------------------------------------------------------------------------------- errors


def test_bad_arguments(switches):
    with pytest.raises(
        TypeError, match=r"perturb_model: model must be a torch.nn.Module, got 3 \(int\)"
    ):
        perturb_model(3, *switches)
    with pytest.raises(
        TypeError,
        match=r"perturb_model: perturb_switch must have a get\(\) -> bool method .*got True \(bool\)",
    ):
        perturb_model(make_model(), True, switches[1])
    with pytest.raises(
        TypeError,
        match=r"perturb_model: reset_switch must have a get\(\) -> bool method .*got None",
    ):
        perturb_model(make_model(), switches[0], None)
    with pytest.raises(TypeError, match="perturb_model: distance_func must be callable, got 'rms'"):
        perturb_model(make_model(), *switches, distance_func="rms")
    with pytest.raises(
        TypeError, match="perturb_model: noise_generate_function must be callable or None, got 1"
    ):
        perturb_model(make_model(), *switches, noise_generate_function=1)
    with pytest.raises(
        TypeError, match="perturb_model: noise_generator must be a class, got 'normal'"
    ):
        perturb_model(make_model(), *switches, noise_generator="normal")
    with pytest.warns(UserWarning, match="perturb_model: model ReLU has no parameters to perturb"):
        perturb_model(nn.ReLU(), *switches)
    with pytest.raises(
        ValueError, match="AdaptiveParamNoise: desired_action_stddev must not be negative"
    ):
        perturb_model(make_model(), *switches, desired_action_stddev=-1.0)
    with pytest.raises(ValueError, match="UniformNoiseGen: umin must not be greater than umax"):
        perturb_model(
            make_model(),
            *switches,
            noise_generator=UniformNoiseGen,
            noise_generator_args=(1.0, 0.0),
        )


def test_noise_of_the_wrong_shape_is_reported_at_forward(switches):
    p_switch, r_switch = switches
    model = make_model()
    weight = model[0].weight
    perturb_model(
        model, p_switch, r_switch, noise_generate_function=lambda shape, device, std: torch.zeros(2)
    )
    p_switch.on()
    with pytest.raises(
        ValueError,
        match=r"perturb_model: the noise for parameter '0.weight' must be a tensor of shape \[8, 3\], got \[2\]",
    ):
        model(X)
    assert model[0]._parameters["weight"] is weight


def test_a_custom_noise_gen_subclass_is_accepted(switches):
    class Ones(NoiseGen):
        def __init__(self, shape):
            self.shape = shape

        def __call__(self, device=None):
            return torch.ones(self.shape, device=device)

    p_switch, r_switch = switches
    model = make_model()
    expected = shifted_copy(model, 0.1)(X)
    perturb_model(model, p_switch, r_switch, noise_generator=Ones)
    p_switch.on()
    assert torch.allclose(model(X), expected, atol=1e-6)

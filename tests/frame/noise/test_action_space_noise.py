"""Tests of machin.frame.noise.action_space_noise (checklist 68-73)."""

import re

import numpy as np
import pytest
import torch

from machin.frame.noise import action_space_noise as asn
from machin.frame.noise.action_space_noise import (
    add_clipped_normal_noise_to_action,
    add_normal_noise_to_action,
    add_ou_noise_to_action,
    add_uniform_noise_to_action,
)

N = 20000
DEVICES = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])
ALL_FUNCTIONS = [
    add_uniform_noise_to_action,
    add_normal_noise_to_action,
    add_clipped_normal_noise_to_action,
    add_ou_noise_to_action,
]
TUPLE_FUNCTIONS = ALL_FUNCTIONS[:3]
# A valid per-column parameter tuple for each tuple function.
ROW = {
    add_uniform_noise_to_action: (0.0, 1.0),
    add_normal_noise_to_action: (0.0, 1.0),
    add_clipped_normal_noise_to_action: (0.0, 1.0, -1.0, 1.0),
}


@pytest.fixture(autouse=True)
def fresh_shared_ou(monkeypatch):
    """Every test starts without a shared Ornstein-Uhlenbeck generator."""
    monkeypatch.setattr(asn, "DEFAULT_OU_GEN", None)
    monkeypatch.setattr(asn, "_shared_ou_kwargs", {})


# ------------------------------------------------------------------------ checklist 68


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("func", ALL_FUNCTIONS)
def test_shape_device_and_dtype_follow_the_action(func, dtype, device):
    action = torch.zeros(5, 3, 2, dtype=dtype, device=device)
    out = func(action)
    assert out.shape == action.shape
    assert out.dtype == dtype
    assert out.device.type == device


@pytest.mark.parametrize("func", ALL_FUNCTIONS)
def test_input_is_not_modified_and_result_is_new(func):
    torch.manual_seed(0)
    action = torch.randn(4, 3)
    before = action.clone()
    out = func(action)
    assert torch.equal(action, before)
    assert out.data_ptr() != action.data_ptr()
    assert not torch.equal(out, action)


@pytest.mark.parametrize("func", TUPLE_FUNCTIONS)
def test_per_column_parameters_keep_shape_device_and_dtype(func):
    # One tuple per element of the last dimension (as in Machin 0.3.4).
    action = torch.zeros(6, 4, 2, dtype=torch.float64, device="meta")
    out = func(action, [ROW[func], ROW[func]])
    assert (out.shape, out.dtype, out.device.type) == ((6, 4, 2), torch.float64, "meta")


# ------------------------------------------------------------------------ checklist 69


def test_uniform_noise_range_and_mean_with_ratio():
    torch.manual_seed(0)
    action = torch.full((N, 1), 10.0)
    delta = add_uniform_noise_to_action(action, (-1.0, 3.0), ratio=0.5) - action
    assert delta.min() >= -0.5 and delta.max() <= 1.5
    assert delta.mean().item() == pytest.approx(0.5, abs=0.02)


def test_uniform_defaults_to_unit_interval():
    torch.manual_seed(0)
    delta = add_uniform_noise_to_action(torch.zeros(N))
    assert delta.min() >= 0.0 and delta.max() < 1.0
    assert delta.mean().item() == pytest.approx(0.5, abs=0.02)


# ------------------------------------------------------------------------ checklist 70


def test_uniform_per_column_ranges():
    torch.manual_seed(0)
    params = [(0.0, 1.0), (10.0, 11.0), (-5.0, -3.0)]
    delta = add_uniform_noise_to_action(torch.zeros(N, 3), params, ratio=2.0)
    for column, (low, high) in enumerate(params):
        assert delta[:, column].min() >= 2 * low and delta[:, column].max() <= 2 * high
        assert delta[:, column].mean().item() == pytest.approx(low + high, abs=0.05)


def test_normal_per_column_statistics_on_a_3d_action():
    torch.manual_seed(0)
    params = [(1.0, 0.1), (-2.0, 2.0)]
    delta = add_normal_noise_to_action(torch.zeros(N // 4, 4, 2), params)
    for column, (mean, sigma) in enumerate(params):
        values = delta[..., column]
        assert values.mean().item() == pytest.approx(mean, abs=0.05)
        assert values.std().item() == pytest.approx(sigma, rel=0.03)


def test_clipped_normal_per_column_bounds():
    torch.manual_seed(0)
    params = [(0.0, 1.0, -0.5, 0.5), (5.0, 1.0, 4.0, 7.0)]
    delta = add_clipped_normal_noise_to_action(torch.zeros(N, 2), params)
    assert delta[:, 0].min().item() == -0.5 and delta[:, 0].max().item() == 0.5
    assert delta[:, 1].min().item() == 4.0 and delta[:, 1].max() <= 7.0
    assert delta[:, 1].mean().item() == pytest.approx(5.0, abs=0.15)


def test_parameters_accept_lists_numpy_scalars_and_generators():
    torch.manual_seed(0)
    delta = add_uniform_noise_to_action(torch.zeros(N, 2), [np.float32(2.0), 3])
    assert delta.min() >= 2.0 and delta.max() <= 3.0
    rows = ((float(c), float(c) + 1.0) for c in range(2))
    delta = add_uniform_noise_to_action(torch.zeros(N, 2), rows)
    assert delta[:, 1].min() >= 1.0 and delta[:, 0].max() <= 1.0


# ------------------------------------------------------------------------ checklist 71


def test_normal_noise_mean_and_std_with_ratio():
    torch.manual_seed(0)
    action = torch.full((N,), -1.0, dtype=torch.float64)
    delta = add_normal_noise_to_action(action, (0.5, 2.0), ratio=0.5) - action
    assert delta.mean().item() == pytest.approx(0.25, abs=0.03)
    assert delta.std().item() == pytest.approx(1.0, rel=0.03)


# ------------------------------------------------------------------------ checklist 72


def test_clipped_normal_noise_range_with_ratio():
    torch.manual_seed(0)
    action = torch.zeros(N)
    delta = add_clipped_normal_noise_to_action(action, (0.0, 3.0, -1.0, 2.0), ratio=0.5)
    assert delta.min().item() == -0.5
    assert delta.max().item() == 1.0
    default = add_clipped_normal_noise_to_action(action)
    assert default.min().item() == -1.0 and default.max().item() == 1.0


# ------------------------------------------------------------------------ checklist 73


def lag1_autocorrelation(seq: torch.Tensor) -> float:
    seq = seq - seq.mean()
    return float((seq[1:] * seq[:-1]).mean() / (seq * seq).mean())


def test_ou_noise_is_correlated_across_calls():
    torch.manual_seed(0)
    action = torch.zeros(1, 1)
    seq = torch.cat([add_ou_noise_to_action(action).flatten() for _ in range(2000)])
    assert lag1_autocorrelation(seq) > 0.9


def test_ou_reset_with_noise_param_recreates_the_shared_generator():
    action = torch.ones(2, 3)
    params = {"mu": 2.0, "sigma": 0.0, "theta": 0.5, "dt": 0.1, "x0": torch.full((2, 3), 1.0)}
    first = add_ou_noise_to_action(action, params, reset=True)
    assert torch.allclose(first, action + 1.0 + 0.5 * (2.0 - 1.0) * 0.1)
    second = add_ou_noise_to_action(action)
    assert torch.allclose(second - action, (first - action) + 0.5 * (2.0 - (first - action)) * 0.1)
    # Without reset, noise_param is ignored and the process continues.
    third = add_ou_noise_to_action(action, {"mu": -100.0, "sigma": 0.0})
    x2 = second - action
    assert torch.allclose(third - action, x2 + 0.5 * (2.0 - x2) * 0.1)
    # reset=True without noise_param keeps the settings and restarts the process.
    assert torch.allclose(add_ou_noise_to_action(action, reset=True), first)
    # An empty dict returns to the generator defaults (x0 = 0, sigma = 1).
    torch.manual_seed(0)
    default = add_ou_noise_to_action(torch.zeros(N), {}, reset=True)
    assert default.std().item() == pytest.approx(0.1, rel=0.03)


def test_ou_ratio_scales_the_noise():
    params = {"sigma": 0.0, "x0": torch.full((3,), 2.0)}
    plain = add_ou_noise_to_action(torch.zeros(3), params, reset=True)
    scaled = add_ou_noise_to_action(torch.zeros(3), params, ratio=3.0, reset=True)
    assert torch.allclose(scaled, 3.0 * plain)


def test_ou_reset_reproduces_the_sequence_under_the_same_seed():
    action = torch.zeros(4, 2)
    torch.manual_seed(1)
    first = [add_ou_noise_to_action(action, {"sigma": 0.5}, reset=(i == 0)) for i in range(5)]
    torch.manual_seed(1)
    second = [add_ou_noise_to_action(action, reset=(i == 0)) for i in range(5)]
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_ou_generator_is_recreated_when_the_action_shape_changes():
    params = {"sigma": 0.0, "theta": 0.0, "x0": torch.full((2,), 3.0)}
    assert torch.equal(add_ou_noise_to_action(torch.zeros(2), params), torch.full((2,), 3.0))
    # New shape: the settings are kept, the x0 of the old shape no longer fits.
    with pytest.raises(
        ValueError, match=r"x0 must have the generator's shape \[3\], got shape \[2\]"
    ):
        add_ou_noise_to_action(torch.zeros(3))
    out = add_ou_noise_to_action(torch.zeros(3), {"sigma": 0.0, "mu": 1.0, "theta": 1.0})
    assert torch.allclose(out, torch.full((3,), 0.01))


def test_ou_seeded_by_a_torch_generator():
    params = {"generator": torch.Generator().manual_seed(4)}
    first = add_ou_noise_to_action(torch.zeros(3), params, reset=True)
    params = {"generator": torch.Generator().manual_seed(4)}
    assert torch.equal(add_ou_noise_to_action(torch.zeros(3), params, reset=True), first)


# ------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "func, given, fields",
    [
        (add_uniform_noise_to_action, (0.0,), "uniform_min, uniform_max"),
        (
            add_clipped_normal_noise_to_action,
            (0.0, 1.0),
            "normal_mean, normal_sigma, clip_min, clip_max",
        ),
        (add_normal_noise_to_action, [(0.0, 1.0), (0.0,)], "normal_mean, normal_sigma"),
        (add_normal_noise_to_action, [(0.0, 1.0), 2.0], "normal_mean, normal_sigma"),
        (add_normal_noise_to_action, "ab", "normal_mean, normal_sigma"),
        (add_normal_noise_to_action, 1.0, "normal_mean, normal_sigma"),
        (add_normal_noise_to_action, [], "normal_mean, normal_sigma"),
        (add_normal_noise_to_action, {"mean": 0.0}, "normal_mean, normal_sigma"),
        (add_uniform_noise_to_action, torch.tensor([0.0, 1.0]), "uniform_min, uniform_max"),
    ],
)
def test_wrong_noise_param_form(func, given, fields):
    message = (
        rf"{func.__name__}: noise_param must be a tuple \({fields}\) or a sequence of such "
        rf"tuples, one per column, got {re.escape(repr(given))}"
    )
    with pytest.raises(ValueError, match=message):
        func(torch.zeros(4, 2), given)


@pytest.mark.parametrize("func", TUPLE_FUNCTIONS)
def test_per_column_count_must_match_the_action(func):
    message = (
        rf"{func.__name__}: Noise param length doesn't match the last dimension of action: "
        r"per-column noise_param needs one tuple per element of the action's last dimension; "
        r"got 2 tuples for an action of shape \[4, 3\]"
    )
    with pytest.raises(ValueError, match=message):
        func(torch.zeros(4, 3), [ROW[func]] * 2)
    with pytest.raises(ValueError, match=r"got 1 tuples for an action of shape \[4\]"):
        func(torch.zeros(4), [ROW[func]])
    with pytest.raises(ValueError, match=r"got 2 tuples for an action of shape \[6, 2, 4\]"):
        func(torch.zeros(6, 2, 4), [ROW[func]] * 2)
    # A one-dimensional action takes one tuple per element.
    assert func(torch.zeros(2), [ROW[func]] * 2).shape == (2,)


@pytest.mark.parametrize(
    "func, given, message",
    [
        (
            add_uniform_noise_to_action,
            (1.0, 0.0),
            "uniform_min must not be greater than uniform_max, got uniform_min=1.0 and uniform_max=0.0",
        ),
        (add_normal_noise_to_action, (0.0, -1.0), "normal_sigma must not be negative, got -1.0"),
        (
            add_clipped_normal_noise_to_action,
            (0.0, 1.0, 1.0, -1.0),
            "clip_min must not be greater than clip_max, got clip_min=1.0 and clip_max=-1.0",
        ),
        (
            add_clipped_normal_noise_to_action,
            [(0.0, 1.0, -1.0, 1.0), (0.0, -2.0, -1.0, 1.0)],
            "normal_sigma must not be negative, got -2.0",
        ),
    ],
)
def test_out_of_range_parameters(func, given, message):
    with pytest.raises(ValueError, match=f"{func.__name__}: {message}"):
        func(torch.zeros(3, 2), given)


@pytest.mark.parametrize("func", ALL_FUNCTIONS)
def test_action_must_be_a_real_tensor(func):
    name = func.__name__
    # An integer action gets noise of the default dtype and a floating result (as in 0.3.4).
    out = func(torch.zeros(3, 2, dtype=torch.int64))
    assert out.shape == (3, 2) and out.dtype == torch.get_default_dtype()
    with pytest.raises(
        TypeError,
        match=rf"{name}: action must be a real torch.Tensor, got dtype torch.complex64 \(Tensor\)",
    ):
        func(torch.zeros(3, 2, dtype=torch.complex64))
    with pytest.raises(
        TypeError,
        match=rf"{name}: action must be a real torch.Tensor, got \[1.0, 2.0\] \(list\)",
    ):
        func([1.0, 2.0])
    with pytest.raises(TypeError, match=rf"{name}: ratio must be a real number, got '2' \(str\)"):
        func(torch.zeros(3, 2), ratio="2")


def test_ratio_may_be_a_tensor():
    action = torch.zeros(3, 2)
    out = add_uniform_noise_to_action(action, (1.0, 1.0), ratio=torch.tensor([[1.0], [2.0], [0.0]]))
    assert torch.equal(out, torch.tensor([[1.0, 1.0], [2.0, 2.0], [0.0, 0.0]]))


def test_ou_noise_param_must_be_a_dict_of_known_keys():
    name = "add_ou_noise_to_action"
    with pytest.raises(
        ValueError,
        match=rf"{name}: noise_param must be None or a dict of OrnsteinUhlenbeckNoiseGen keyword arguments, got \(0.0, 1.0\) \(tuple\)",
    ):
        add_ou_noise_to_action(torch.zeros(2), (0.0, 1.0))
    with pytest.raises(
        ValueError,
        match=rf"{name}: noise_param keys must be among \['mu', 'sigma', 'theta', 'dt', 'x0', 'generator'\], got unknown \['shape', 'std'\]",
    ):
        add_ou_noise_to_action(torch.zeros(2), {"std": 1.0, "shape": [2], "mu": 0.0})
    with pytest.raises(ValueError, match=r"OrnsteinUhlenbeckNoiseGen: sigma must not be negative"):
        add_ou_noise_to_action(torch.zeros(2), {"sigma": -1.0}, reset=True)

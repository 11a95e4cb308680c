"""Tests of machin.frame.noise.generator (checklist 74-77)."""

import math

import pytest
import torch

from machin.frame.noise.generator import (
    ClippedNormalNoiseGen,
    NoiseGen,
    NormalNoiseGen,
    OrnsteinUhlenbeckNoiseGen,
    UniformNoiseGen,
)

N = 20000
DEVICES = ["cpu", "meta"] + (["cuda"] if torch.cuda.is_available() else [])


def lag1_autocorrelation(seq: torch.Tensor) -> float:
    seq = seq - seq.mean()
    return float((seq[1:] * seq[:-1]).mean() / (seq * seq).mean())


# ---------------------------------------------------------------------------- NoiseGen


def test_noise_gen_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        NoiseGen()


def test_noise_gen_subclass_needs_only_call():
    class Constant(NoiseGen):
        def __call__(self, device=None):
            return torch.ones(2, device=device)

    gen = Constant()
    assert gen.reset() is None
    assert torch.equal(gen("cpu"), torch.ones(2))


@pytest.mark.parametrize(
    "gen_class", [UniformNoiseGen, NormalNoiseGen, ClippedNormalNoiseGen, OrnsteinUhlenbeckNoiseGen]
)
def test_builtin_generators_are_noise_gens(gen_class):
    gen = gen_class([2, 3])
    assert isinstance(gen, NoiseGen)
    assert gen.shape == torch.Size([2, 3])


# ------------------------------------------------------------- shape, dtype and device


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "gen_class", [UniformNoiseGen, NormalNoiseGen, ClippedNormalNoiseGen, OrnsteinUhlenbeckNoiseGen]
)
def test_shape_and_device(gen_class, device):
    noise = gen_class([2, 3, 4])(device)
    assert noise.shape == (2, 3, 4)
    assert noise.device.type == device
    assert noise.dtype == torch.get_default_dtype()


@pytest.mark.parametrize(
    "gen_class", [UniformNoiseGen, NormalNoiseGen, ClippedNormalNoiseGen, OrnsteinUhlenbeckNoiseGen]
)
def test_int_shape_default_device_and_dtype_keyword(gen_class):
    assert gen_class(5)().shape == (5,)
    assert gen_class(torch.Size([3]))().device.type == "cpu"
    assert gen_class([2], dtype=torch.float64)().dtype == torch.float64


@pytest.mark.parametrize(
    "gen_class", [UniformNoiseGen, NormalNoiseGen, ClippedNormalNoiseGen, OrnsteinUhlenbeckNoiseGen]
)
def test_bad_shape_dtype_and_generator(gen_class):
    name = gen_class.__name__
    with pytest.raises(TypeError, match=rf"{name}: shape must be .*got 'ab' \(str\)"):
        gen_class("ab")
    with pytest.raises(TypeError, match=rf"{name}: shape must be .*got \[2, -1\]"):
        gen_class([2, -1])
    with pytest.raises(TypeError, match=rf"{name}: dtype must be a floating .*got torch.int64"):
        gen_class([2], dtype=torch.int64)
    with pytest.raises(
        TypeError, match=rf"{name}: generator must be a torch.Generator.*got 3 \(int\)"
    ):
        gen_class([2], generator=3)


@pytest.mark.parametrize(
    "gen_class", [UniformNoiseGen, NormalNoiseGen, ClippedNormalNoiseGen, OrnsteinUhlenbeckNoiseGen]
)
def test_seeded_generator_is_reproducible_and_leaves_global_rng_alone(gen_class):
    torch.manual_seed(3)
    expected_global = torch.rand(3)
    torch.manual_seed(3)
    first = gen_class([4], generator=torch.Generator().manual_seed(7))
    second = gen_class([4], generator=torch.Generator().manual_seed(7))
    assert torch.equal(first(), second())
    assert torch.equal(first(), second())
    assert torch.equal(torch.rand(3), expected_global)


# ------------------------------------------------------------------------- distributions


def test_uniform_values_within_bounds_and_mean():
    torch.manual_seed(0)
    noise = UniformNoiseGen([N], -2.0, 3.0)()
    assert noise.min() >= -2.0 and noise.max() < 3.0
    assert noise.mean().item() == pytest.approx(0.5, abs=0.05)
    assert noise.std().item() == pytest.approx(5 / math.sqrt(12), rel=0.03)
    assert UniformNoiseGen([10], 1.5, 1.5)().eq(1.5).all()


def test_uniform_bad_arguments():
    with pytest.raises(
        ValueError,
        match=r"UniformNoiseGen: umin must not be greater than umax, got umin=1.0 and umax=0.0",
    ):
        UniformNoiseGen([2], 1.0, 0.0)
    with pytest.raises(
        TypeError, match=r"UniformNoiseGen: umax must be a real number, got '1' \(str\)"
    ):
        UniformNoiseGen([2], 0.0, "1")


def test_normal_mean_and_std():
    torch.manual_seed(0)
    noise = NormalNoiseGen([N], 1.5, 0.5)()
    assert noise.mean().item() == pytest.approx(1.5, abs=0.02)
    assert noise.std().item() == pytest.approx(0.5, rel=0.03)


def test_normal_bad_arguments():
    with pytest.raises(ValueError, match=r"NormalNoiseGen: sigma must not be negative, got -1.0"):
        NormalNoiseGen([2], 0.0, -1.0)
    with pytest.raises(TypeError, match=r"NormalNoiseGen: mu must be a real number, got None"):
        NormalNoiseGen([2], None)


def test_clipped_normal_within_bounds_and_reaches_them():
    torch.manual_seed(0)
    noise = ClippedNormalNoiseGen([N], 0.0, 2.0, -0.5, 1.0)()
    assert noise.min().item() == -0.5
    assert noise.max().item() == 1.0
    # Far bounds do not clip: plain normal statistics.
    wide = ClippedNormalNoiseGen([N], 1.0, 0.5, -100.0, 100.0)()
    assert wide.mean().item() == pytest.approx(1.0, abs=0.02)
    assert wide.std().item() == pytest.approx(0.5, rel=0.03)


def test_clipped_normal_bad_arguments():
    with pytest.raises(
        ValueError,
        match=r"ClippedNormalNoiseGen: nmin must not be greater than nmax, got nmin=1.0 and nmax=-1.0",
    ):
        ClippedNormalNoiseGen([2], 0.0, 1.0, 1.0, -1.0)
    with pytest.raises(ValueError, match=r"ClippedNormalNoiseGen: sigma must not be negative"):
        ClippedNormalNoiseGen([2], 0.0, -0.1)


# ------------------------------------------------------------------------ Ornstein-Uhlenbeck


def test_ou_deterministic_step_without_wiener_part():
    x0 = torch.tensor([[1.0, -2.0]])
    gen = OrnsteinUhlenbeckNoiseGen([1, 2], mu=0.5, sigma=0.0, theta=0.2, dt=0.1, x0=x0)
    first = gen()
    assert torch.allclose(first, x0 + 0.2 * (0.5 - x0) * 0.1)
    second = gen()
    assert torch.allclose(second, first + 0.2 * (0.5 - first) * 0.1)
    # Mean reversion: the process converges to mu.
    for _ in range(3000):
        last = gen()
    assert torch.allclose(last, torch.full((1, 2), 0.5), atol=1e-3)


def test_ou_increments_have_wiener_scale():
    torch.manual_seed(0)
    gen = OrnsteinUhlenbeckNoiseGen([N], mu=0.0, sigma=2.0, theta=0.0, dt=0.04)
    first, second = gen(), gen()
    assert first.std().item() == pytest.approx(2.0 * 0.2, rel=0.03)
    assert (second - first).std().item() == pytest.approx(2.0 * 0.2, rel=0.03)


def test_ou_is_temporally_correlated_unlike_normal_noise():
    torch.manual_seed(0)
    ou = OrnsteinUhlenbeckNoiseGen([1])
    normal = NormalNoiseGen([1])
    ou_seq = torch.cat([ou() for _ in range(2000)])
    normal_seq = torch.cat([normal() for _ in range(2000)])
    assert lag1_autocorrelation(ou_seq) > 0.9
    assert abs(lag1_autocorrelation(normal_seq)) < 0.1


def test_ou_reset_repeats_the_sequence_under_the_same_seed():
    gen = OrnsteinUhlenbeckNoiseGen([2, 3], sigma=0.3)
    torch.manual_seed(5)
    first = [gen() for _ in range(5)]
    gen.reset()
    torch.manual_seed(5)
    second = [gen() for _ in range(5)]
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[0], first[1])


def test_ou_reset_returns_to_x0():
    x0 = torch.full((3,), 4.0)
    gen = OrnsteinUhlenbeckNoiseGen([3], sigma=0.0, x0=x0)
    first = gen()
    for _ in range(10):
        gen()
    gen.reset()
    assert torch.equal(gen(), first)


def test_ou_x0_and_returned_tensor_are_copies():
    x0 = torch.zeros(2, dtype=torch.float64)
    gen = OrnsteinUhlenbeckNoiseGen([2], sigma=0.0, mu=1.0, x0=x0)
    assert gen.dtype == torch.float64
    x0.fill_(100.0)
    out = gen()
    assert out.dtype == torch.float64
    assert torch.allclose(out, torch.full((2,), 0.15 * 0.01, dtype=torch.float64))
    out.fill_(-50.0)
    assert torch.all(gen() > 0)


def test_ou_state_follows_the_requested_device():
    gen = OrnsteinUhlenbeckNoiseGen([2])
    gen("cpu")
    assert gen("meta").device.type == "meta"
    assert gen().device.type == "meta"
    gen.reset()
    assert gen().device.type == "cpu"


def test_ou_bad_arguments():
    name = "OrnsteinUhlenbeckNoiseGen"
    with pytest.raises(
        ValueError, match=rf"{name}: x0 must have the generator's shape \[2, 3\], got shape \[3\]"
    ):
        OrnsteinUhlenbeckNoiseGen([2, 3], x0=torch.zeros(3))
    with pytest.raises(ValueError, match=rf"{name}: dt must be a positive time step, got 0"):
        OrnsteinUhlenbeckNoiseGen([2], dt=0)
    with pytest.raises(ValueError, match=rf"{name}: theta must not be negative, got -0.1"):
        OrnsteinUhlenbeckNoiseGen([2], theta=-0.1)
    with pytest.raises(ValueError, match=rf"{name}: sigma must not be negative"):
        OrnsteinUhlenbeckNoiseGen([2], sigma=-1)
    with pytest.raises(TypeError, match=rf"{name}: mu must be a real number, got True \(bool\)"):
        OrnsteinUhlenbeckNoiseGen([2], mu=True)

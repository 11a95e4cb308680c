"""Noise generators: callable objects that produce a noise tensor of a fixed shape.

Every generator is called as ``gen(device=None)`` and returns a fresh tensor of
the shape given to its constructor, on the requested device. The sampling
kernels at the bottom of this module (``_sample_*``) are shared with
:mod:`machin.frame.noise.action_space_noise`, whose per-column parameters are
tensors that broadcast against the noise instead of Python floats.

Extensions over Machin 0.3.4: every generator accepts the keyword-only
arguments ``generator`` (a :class:`torch.Generator` used for seeding) and
``dtype`` (the floating dtype of the noise). The attribute names and the
``repr`` of 0.3.4 are kept (e.g. ``UniformNoiseGen.min``, ``dist``,
``OrnsteinUhlenbeckNoiseGen.x_prev``).

Every parameter must be finite: a NaN or infinite ``mu``, ``sigma``, ``umin``, ...
raises a :class:`ValueError` naming it (only the clipping bounds ``nmin``/``nmax``
may be infinite, which clips nothing on that side), since it would make every
sample NaN.
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from typing import Any, Iterable, Optional, Union

import torch
from torch import distributions

from ...utils.checker import CheckError

__all__ = [
    "NoiseParamError",
    "NoiseShapeError",
    "NoiseGen",
    "UniformNoiseGen",
    "NormalNoiseGen",
    "ClippedNormalNoiseGen",
    "OrnsteinUhlenbeckNoiseGen",
]

Device = Union[str, int, torch.device, None]
Shape = Union[int, Iterable[int], torch.Size]
Param = Union[float, torch.Tensor]


class NoiseParamError(TypeError, ValueError):
    """A noise parameter of the wrong kind (not a number, an unknown keyword, not a mapping).

    A :class:`TypeError`, and a :class:`ValueError` as torch's distributions raised for
    such parameters in Machin 0.3.4.
    """


class NoiseShapeError(ValueError, CheckError):
    """A tensor given to a noise generator has the wrong shape.

    A :class:`ValueError`, and the :class:`~machin.utils.checker.CheckError` of Machin 0.3.4.
    """


class NoiseGen(ABC):
    """Base class of noise generators.

    A generator is called with an optional device and returns a noise tensor;
    :meth:`reset` clears whatever internal state the generator keeps.
    """

    @abstractmethod
    def __call__(self, device: Device = None) -> torch.Tensor:
        """Draw one noise tensor.

        Args:
            device: Device of the returned tensor; ``None`` means torch's default device
                (stateful generators use the device of their current state).

        Returns:
            A new noise tensor.
        """

    def reset(self) -> None:
        """Reset the internal state of the generator; generators without state do nothing."""
        return None


class _ShapedNoiseGen(NoiseGen):
    """Common part of the built-in generators: output shape, dtype and random source."""

    def __init__(
        self,
        shape: Shape,
        *,
        generator: Optional[torch.Generator] = None,
        dtype: Optional[torch.dtype] = None,
    ):
        owner = type(self).__name__
        self.shape = _as_shape(owner, shape)
        self.dtype = _as_float_dtype(owner, dtype)
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"{owner}: generator must be a torch.Generator or None, "
                f"got {generator!r} ({type(generator).__name__})"
            )
        self.generator = generator


class UniformNoiseGen(_ShapedNoiseGen):
    """Uniform noise on ``[umin, umax)``.

    Example::

        >>> gen = UniformNoiseGen([2, 3], -0.5, 0.5)
        >>> gen("cpu").shape
        torch.Size([2, 3])

    Args:
        shape: Shape of the noise tensor.
        umin: Lower bound of the noise.
        umax: Upper bound of the noise, at least ``umin``.
        generator: (Extension) random source used instead of torch's global one.
        dtype: (Extension) floating dtype of the noise; torch's default dtype if ``None``.

    Raises:
        TypeError: ``shape`` is not a shape, a bound is not a real number, ``dtype`` is not
            a floating dtype or ``generator`` is not a ``torch.Generator``.
        ValueError: ``umin > umax``.
    """

    def __init__(
        self,
        shape: Shape,
        umin: float = 0.0,
        umax: float = 1.0,
        *,
        generator: Optional[torch.Generator] = None,
        dtype: Optional[torch.dtype] = None,
    ):
        super().__init__(shape, generator=generator, dtype=dtype)
        self.umin = _real("UniformNoiseGen", "umin", umin)
        self.umax = _real("UniformNoiseGen", "umax", umax)
        _check_bounds("UniformNoiseGen", "umin", self.umin, "umax", self.umax)

    def __call__(self, device: Device = None) -> torch.Tensor:
        """Draw uniform noise of ``shape`` on ``device`` (see :meth:`NoiseGen.__call__`)."""
        return _sample_uniform(self.shape, self.umin, self.umax, device, self.dtype, self.generator)

    @property
    def min(self) -> float:
        """``umin`` (the 0.3.4 name)."""
        return self.umin

    @property
    def max(self) -> float:
        """``umax`` (the 0.3.4 name)."""
        return self.umax

    @property
    def dist(self) -> distributions.Uniform:
        """The noise distribution as a ``torch.distributions`` object (sampling uses ``generator``, not this)."""
        return distributions.Uniform(self.umin, self.umax, validate_args=False)

    def __repr__(self) -> str:
        return f"UniformNoise(min={self.umin}, max={self.umax})"


class NormalNoiseGen(_ShapedNoiseGen):
    """Normal (Gaussian) noise with mean ``mu`` and standard deviation ``sigma``.

    Example::

        >>> gen = NormalNoiseGen([2, 3], 0.0, 1.0)
        >>> gen().shape
        torch.Size([2, 3])

    Args:
        shape: Shape of the noise tensor.
        mu: Mean of the noise.
        sigma: Standard deviation of the noise, not negative.
        generator: (Extension) random source used instead of torch's global one.
        dtype: (Extension) floating dtype of the noise; torch's default dtype if ``None``.

    Raises:
        TypeError: see :class:`UniformNoiseGen`.
        ValueError: ``sigma < 0``.
    """

    def __init__(
        self,
        shape: Shape,
        mu: float = 0.0,
        sigma: float = 1.0,
        *,
        generator: Optional[torch.Generator] = None,
        dtype: Optional[torch.dtype] = None,
    ):
        super().__init__(shape, generator=generator, dtype=dtype)
        self.mu = _real("NormalNoiseGen", "mu", mu)
        self.sigma = _real("NormalNoiseGen", "sigma", sigma)
        _check_sigma("NormalNoiseGen", "sigma", self.sigma)

    def __call__(self, device: Device = None) -> torch.Tensor:
        """Draw normal noise of ``shape`` on ``device`` (see :meth:`NoiseGen.__call__`)."""
        return _sample_normal(self.shape, self.mu, self.sigma, device, self.dtype, self.generator)

    @property
    def dist(self) -> distributions.Normal:
        """The noise distribution as a ``torch.distributions`` object (sampling uses ``generator``, not this)."""
        return distributions.Normal(self.mu, self.sigma, validate_args=False)

    def __repr__(self) -> str:
        return f"NormalNoise(mu={self.mu}, sigma={self.sigma})"


class ClippedNormalNoiseGen(_ShapedNoiseGen):
    """Normal noise clipped into ``[nmin, nmax]``.

    Example::

        >>> gen = ClippedNormalNoiseGen([2, 3], 0.0, 1.0, -0.5, 0.5)
        >>> bool(gen().abs().max() <= 0.5)
        True

    Args:
        shape: Shape of the noise tensor.
        mu: Mean of the normal noise before clipping.
        sigma: Standard deviation of the normal noise before clipping, not negative.
        nmin: Lower clipping bound.
        nmax: Upper clipping bound, at least ``nmin``.
        generator: (Extension) random source used instead of torch's global one.
        dtype: (Extension) floating dtype of the noise; torch's default dtype if ``None``.

    Raises:
        TypeError: see :class:`UniformNoiseGen`.
        ValueError: ``sigma < 0`` or ``nmin > nmax``.
    """

    def __init__(
        self,
        shape: Shape,
        mu: float = 0.0,
        sigma: float = 1.0,
        nmin: float = -1.0,
        nmax: float = 1.0,
        *,
        generator: Optional[torch.Generator] = None,
        dtype: Optional[torch.dtype] = None,
    ):
        super().__init__(shape, generator=generator, dtype=dtype)
        owner = "ClippedNormalNoiseGen"
        self.mu = _real(owner, "mu", mu)
        self.sigma = _real(owner, "sigma", sigma)
        self.nmin = _real(owner, "nmin", nmin, allow_inf=True)  # an infinite bound clips nothing
        self.nmax = _real(owner, "nmax", nmax, allow_inf=True)
        _check_sigma(owner, "sigma", self.sigma)
        _check_bounds(owner, "nmin", self.nmin, "nmax", self.nmax)

    def __call__(self, device: Device = None) -> torch.Tensor:
        """Draw clipped normal noise of ``shape`` on ``device`` (see :meth:`NoiseGen.__call__`)."""
        return _sample_clipped_normal(
            self.shape,
            self.mu,
            self.sigma,
            self.nmin,
            self.nmax,
            device,
            self.dtype,
            self.generator,
        )

    @property
    def min(self) -> float:
        """``nmin`` (the 0.3.4 name)."""
        return self.nmin

    @property
    def max(self) -> float:
        """``nmax`` (the 0.3.4 name)."""
        return self.nmax

    @property
    def dist(self) -> distributions.Normal:
        """The normal distribution before clipping, as a ``torch.distributions`` object."""
        return distributions.Normal(self.mu, self.sigma, validate_args=False)

    def __repr__(self) -> str:
        return f"ClippedNormalNoise(mu={self.mu}, sigma={self.sigma}, min={self.nmin}, max={self.nmax})"


class OrnsteinUhlenbeckNoiseGen(_ShapedNoiseGen):
    r"""Ornstein-Uhlenbeck process, a temporally correlated noise.

    Each call advances the process by one step and returns its new value:

    .. math::

        X_{n+1} = X_n + \theta (\mu - X_n) \Delta t + \sigma \sqrt{\Delta t}\, \epsilon_n,
        \qquad \epsilon_n \sim \mathcal{N}(0, 1)

    (the Wiener increment :math:`\Delta W_n` has variance :math:`\Delta t`). The process
    starts at ``x0``, or at zero when ``x0`` is ``None``; :meth:`reset` returns it there.
    The state follows the device asked for in each call.

    Example::

        >>> gen = OrnsteinUhlenbeckNoiseGen([2, 3], mu=0.0, sigma=1.0)
        >>> first, second = gen(), gen()
        >>> gen.reset()

    Args:
        shape: Shape of the noise tensor.
        mu: Long-run mean the process is pulled towards.
        sigma: Scale of the random (Wiener) part, not negative.
        theta: Strength of the pull towards ``mu``, not negative.
        dt: Time step, positive.
        x0: Initial value, a tensor (or array-like) of exactly ``shape``.
        generator: (Extension) random source used instead of torch's global one.
        dtype: (Extension) floating dtype of the noise; if ``None``, the dtype of a
            floating ``x0``, else torch's default dtype.

    Raises:
        TypeError: see :class:`UniformNoiseGen`.
        ValueError: ``sigma < 0``, ``theta < 0``, ``dt <= 0`` or ``x0`` does not have ``shape``.
    """

    def __init__(
        self,
        shape: Shape,
        mu: float = 0.0,
        sigma: float = 1.0,
        theta: float = 0.15,
        dt: float = 1e-2,
        x0: Optional[Any] = None,
        *,
        generator: Optional[torch.Generator] = None,
        dtype: Optional[torch.dtype] = None,
    ):
        owner = "OrnsteinUhlenbeckNoiseGen"
        if x0 is not None:
            x0 = torch.as_tensor(x0)
            if dtype is None and x0.is_floating_point():
                dtype = x0.dtype
        super().__init__(shape, generator=generator, dtype=dtype)
        self.mu = _real(owner, "mu", mu)
        self.sigma = _real(owner, "sigma", sigma)
        self.theta = _real(owner, "theta", theta)
        self.dt = _real(owner, "dt", dt)
        _check_sigma(owner, "sigma", self.sigma)
        _check_sigma(owner, "theta", self.theta)
        if not self.dt > 0:
            raise ValueError(f"{owner}: dt must be a positive time step, got {dt!r}")
        if x0 is not None:
            if x0.shape != self.shape:
                raise NoiseShapeError(
                    f"{owner}: x0 must have the generator's shape {list(self.shape)}, "
                    f"got shape {list(x0.shape)} (tensor x0 has invalid shape)"
                )
            x0 = x0.to(self.dtype).clone()
            if not bool(torch.isfinite(x0).all()):
                raise ValueError(f"{owner}: x0 must be finite, got {x0.tolist()}")
        self.x0 = x0
        self._x: Optional[torch.Tensor] = None

    def __call__(self, device: Device = None) -> torch.Tensor:
        """Advance the process one step and return its value on ``device``.

        Args:
            device: Device of the returned tensor (and of the state from now on); ``None``
                keeps the device of the current state.

        Returns:
            The new value of the process, a new tensor of ``shape``.
        """
        x = self._x if self._x is not None else self._initial_state(device)
        if device is not None:
            x = x.to(device)
        step = _standard_sample(torch.randn, self.shape, x.device, self.dtype, self.generator)
        x = x + self.theta * (self.mu - x) * self.dt + self.sigma * math.sqrt(self.dt) * step
        self._x = x
        return x.clone()

    def reset(self) -> None:
        """Return the process to its initial value (``x0``, or zeros)."""
        self._x = None

    @property
    def x_prev(self) -> torch.Tensor:
        """Current value of the process (the initial value before the first call)."""
        return self._x if self._x is not None else self._initial_state(None)

    @x_prev.setter
    def x_prev(self, value: Any) -> None:
        value = torch.as_tensor(value, dtype=self.dtype)
        if value.shape != self.shape:
            raise NoiseShapeError(
                f"OrnsteinUhlenbeckNoiseGen: x_prev must have the generator's shape {list(self.shape)}, "
                f"got shape {list(value.shape)} (tensor x_prev has invalid shape)"
            )
        self._x = value

    @property
    def norm_dist(self) -> distributions.Normal:
        """The standard normal distribution of the process's random steps."""
        return distributions.Normal(0.0, 1.0)

    def __repr__(self) -> str:
        return f"OrnsteinUhlenbeckNoise(mu={self.mu}, sigma={self.sigma})"

    def _initial_state(self, device: Device) -> torch.Tensor:
        if self.x0 is not None:
            return self.x0 if device is None else self.x0.to(device)
        return torch.zeros(self.shape, dtype=self.dtype, device=device)


# ----------------------------------------------------------------------------------------
# Argument checks shared with the action-space functions.


def _as_shape(owner: str, shape: Shape) -> torch.Size:
    integral = isinstance(shape, numbers.Integral) and not isinstance(shape, bool)
    try:
        size = torch.Size([int(shape)] if integral else list(shape))
    except TypeError:
        size = None
    if size is None or any(d < 0 for d in size):
        raise TypeError(
            f"{owner}: shape must be an int or a sequence of non-negative ints, "
            f"got {shape!r} ({type(shape).__name__})"
        )
    return size


def _as_float_dtype(owner: str, dtype: Optional[torch.dtype]) -> torch.dtype:
    if dtype is None:
        return torch.get_default_dtype()
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{owner}: dtype must be a floating torch.dtype or None, got {dtype!r}")
    return dtype


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _real(owner: str, name: str, value: Any, allow_inf: bool = False) -> float:
    """``value`` as a float; a finite one unless ``allow_inf`` (which still rejects NaN)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        value = value.item()  # Machin 0.3.4 took tensors, e.g. ``dt=torch.tensor(0.01)``
    if not _is_real(value):
        raise NoiseParamError(
            f"{owner}: {name} must be a real number, got {value!r} ({type(value).__name__})"
        )
    value = float(value)
    _check_finite(owner, name, value, allow_inf)
    return value


def _check_finite(owner: str, name: str, value: float, allow_inf: bool = False) -> None:
    """A ValueError naming ``name`` when ``value`` is NaN, or infinite unless ``allow_inf``."""
    if math.isnan(value) or (not allow_inf and math.isinf(value)):
        kind = "not NaN" if allow_inf else "finite"
        raise ValueError(
            f"{owner}: {name} must be {kind}, got {value!r} (it would make every noise sample NaN)"
        )


def _check_sigma(owner: str, name: str, value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{owner}: {name} must not be negative, got {value!r}")


def _check_bounds(owner: str, low_name: str, low: float, high_name: str, high: float) -> None:
    if not low <= high:
        raise ValueError(
            f"{owner}: {low_name} must not be greater than {high_name}, "
            f"got {low_name}={low!r} and {high_name}={high!r}"
        )


# ----------------------------------------------------------------------------------------
# Sampling kernels. ``Param`` arguments are floats or tensors that broadcast to ``shape``.


def _standard_sample(
    sampler: Any,
    shape: torch.Size,
    device: Device,
    dtype: torch.dtype,
    generator: Optional[torch.Generator],
) -> torch.Tensor:
    """``torch.rand`` / ``torch.randn`` draw; a given generator draws on its own device."""
    if generator is None:
        return sampler(shape, device=device, dtype=dtype)
    out = sampler(shape, generator=generator, device=generator.device, dtype=dtype)
    return out if device is None else out.to(device)


def _sample_uniform(
    shape: torch.Size,
    low: Param,
    high: Param,
    device: Device,
    dtype: torch.dtype,
    generator: Optional[torch.Generator],
) -> torch.Tensor:
    unit = _standard_sample(torch.rand, shape, device, dtype, generator)
    return unit * (high - low) + low


def _sample_normal(
    shape: torch.Size,
    mean: Param,
    std: Param,
    device: Device,
    dtype: torch.dtype,
    generator: Optional[torch.Generator],
) -> torch.Tensor:
    unit = _standard_sample(torch.randn, shape, device, dtype, generator)
    if isinstance(std, torch.Tensor):
        unit = unit * std
    else:
        unit.mul_(std)  # a fresh tensor: scaled in place, the same numbers
    return unit if _is_zero(mean) else unit + mean


def _is_zero(value: Any) -> bool:
    """Whether ``value`` is the plain number 0 (adding it would change nothing)."""
    return (type(value) is float or type(value) is int) and value == 0


def _is_one(value: Any) -> bool:
    """Whether ``value`` is the plain number 1 (multiplying by it would change nothing)."""
    return (type(value) is float or type(value) is int) and value == 1


def _sample_clipped_normal(
    shape: torch.Size,
    mean: Param,
    std: Param,
    low: Param,
    high: Param,
    device: Device,
    dtype: torch.dtype,
    generator: Optional[torch.Generator],
) -> torch.Tensor:
    return torch.clamp(_sample_normal(shape, mean, std, device, dtype, generator), low, high)

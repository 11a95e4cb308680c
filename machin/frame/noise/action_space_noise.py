"""Noise added directly to actions.

Each function returns a new tensor ``action + ratio * noise``; the noise has the
action's shape and device, and the action's dtype when that is a floating dtype
(an integer action gets noise of torch's default dtype, and a floating result, as in
Machin 0.3.4). The input is never modified.

``noise_param`` comes in two forms for the uniform, normal and clipped normal
functions:

* one tuple, e.g. ``(mean, sigma)``, used for every element of the action;
* a sequence of such tuples, one per element of the action's last dimension
  ``action[..., i]`` (the columns of a ``[batch, action_dim]`` action); the
  parameters are laid out as tensors along that dimension and broadcast, so no
  Python loop runs over the batch or the columns.

A tuple longer than the function needs (e.g. the 4-tuple of clipped normal noise
given to normal noise) is used for its leading values, with an
:class:`~machin.utils.compat.ExtraArgumentsWarning`, as Machin 0.3.4 ignored the rest.

Ornstein-Uhlenbeck noise has a state, so :func:`add_ou_noise_to_action` draws
from one generator shared by every caller of this module, ``DEFAULT_OU_GEN``
(setting it to ``None`` makes the next call build a new one).

Noise parameters and ``ratio`` must be finite (clipping bounds may be infinite):
NaN or infinite values raise a :class:`ValueError` naming the parameter instead of
returning NaN actions.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from ...utils.compat import ExtraArgumentsWarning
from .generator import (
    NoiseParamError,
    OrnsteinUhlenbeckNoiseGen,
    _check_bounds,
    _check_finite,
    _check_sigma,
    _is_one,
    _is_real,
    _sample_clipped_normal,
    _sample_normal,
    _sample_uniform,
)

__all__ = [
    "add_uniform_noise_to_action",
    "add_normal_noise_to_action",
    "add_clipped_normal_noise_to_action",
    "add_ou_noise_to_action",
]

NoiseParam = Union[Tuple[float, ...], Iterable[Tuple[float, ...]]]
Param = Union[float, torch.Tensor]

_OU_KEYS = ("mu", "sigma", "theta", "dt", "x0", "generator")
#: The Ornstein-Uhlenbeck generator shared by all calls of add_ou_noise_to_action (the name
#: of Machin 0.3.4); ``None`` until the first call.
DEFAULT_OU_GEN: Optional[OrnsteinUhlenbeckNoiseGen] = None
# The keyword arguments DEFAULT_OU_GEN was built with.
_shared_ou_kwargs: Dict[str, Any] = {}


def add_uniform_noise_to_action(
    action: torch.Tensor, noise_param: NoiseParam = (0.0, 1.0), ratio: float = 1.0
) -> torch.Tensor:
    """Add uniform noise to an action.

    Args:
        action: Raw action, a real tensor (usually floating; see the module notes).
        noise_param: ``(uniform_min, uniform_max)`` for every element, or a sequence of
            such tuples, one per element of the last dimension ``action[..., i]``.
        ratio: The sampled noise is multiplied by this before it is added.

    Returns:
        A new tensor: the action plus uniform noise in ``[ratio*min, ratio*max)``.

    Raises:
        TypeError: ``action`` is not a real tensor or ``ratio`` is not a number.
        ValueError: ``noise_param`` does not have one of the two forms, has a column count
            different from ``action.shape[-1]`` ("Noise param length doesn't match the last
            dimension of action"), or a minimum above its maximum.
    """
    name = "add_uniform_noise_to_action"
    low, high = _parse_noise_param(
        name, action, noise_param, ratio, ("uniform_min", "uniform_max"), _check_uniform
    )
    noise = _sample_uniform(action.shape, low, high, action.device, _noise_dtype(action), None)
    return action + (noise if _is_one(ratio) else noise * ratio)


def add_normal_noise_to_action(
    action: torch.Tensor, noise_param: NoiseParam = (0.0, 1.0), ratio: float = 1.0
) -> torch.Tensor:
    """Add normal (Gaussian) noise to an action.

    Args:
        action: Raw action, see :func:`add_uniform_noise_to_action`.
        noise_param: ``(normal_mean, normal_sigma)`` for every element, or a sequence of
            such tuples, one per element of the last dimension ``action[..., i]``.
        ratio: The sampled noise is multiplied by this before it is added.

    Returns:
        A new tensor: the action plus normal noise.

    Raises:
        TypeError: see :func:`add_uniform_noise_to_action`.
        ValueError: ``noise_param`` has the wrong form (see
            :func:`add_uniform_noise_to_action`) or a negative sigma.
    """
    name = "add_normal_noise_to_action"
    mean, std = _parse_noise_param(
        name, action, noise_param, ratio, ("normal_mean", "normal_sigma"), _check_normal
    )
    noise = _sample_normal(action.shape, mean, std, action.device, _noise_dtype(action), None)
    return action + (noise if _is_one(ratio) else noise * ratio)


def add_clipped_normal_noise_to_action(
    action: torch.Tensor,
    noise_param: NoiseParam = (0.0, 1.0, -1.0, 1.0),
    ratio: float = 1.0,
) -> torch.Tensor:
    """Add normal noise, clipped into ``[clip_min, clip_max]``, to an action.

    The noise is clipped before it is multiplied by ``ratio``, so ``result - action`` lies
    in ``[ratio*clip_min, ratio*clip_max]``.

    Args:
        action: Raw action, see :func:`add_uniform_noise_to_action`.
        noise_param: ``(normal_mean, normal_sigma, clip_min, clip_max)`` for every
            element, or a sequence of such tuples, one per element of the last dimension
            ``action[..., i]``.
        ratio: The clipped noise is multiplied by this before it is added.

    Returns:
        A new tensor: the action plus clipped normal noise.

    Raises:
        TypeError: see :func:`add_uniform_noise_to_action`.
        ValueError: ``noise_param`` has the wrong form (see
            :func:`add_uniform_noise_to_action`), a negative sigma, or a ``clip_min``
            above its ``clip_max``.
    """
    name = "add_clipped_normal_noise_to_action"
    fields = ("normal_mean", "normal_sigma", "clip_min", "clip_max")
    mean, std, low, high = _parse_noise_param(
        name, action, noise_param, ratio, fields, _check_clipped_normal
    )
    noise = _sample_clipped_normal(
        action.shape, mean, std, low, high, action.device, _noise_dtype(action), None
    )
    return action + (noise if _is_one(ratio) else noise * ratio)


def add_ou_noise_to_action(
    action: torch.Tensor,
    noise_param: Optional[Dict[str, Any]] = None,
    ratio: float = 1.0,
    reset: bool = False,
) -> torch.Tensor:
    """Add Ornstein-Uhlenbeck noise to an action.

    All calls share one :class:`~machin.frame.noise.generator.OrnsteinUhlenbeckNoiseGen`,
    so consecutive calls give temporally correlated noise. The generator is (re)created
    with the shape of ``action`` on the first call, when ``reset`` is true, and when the
    action's shape differs from the generator's. ``noise_param`` only matters at such a
    (re)creation: it holds the generator's keyword arguments, and ``None`` keeps those of
    the previous generator (the generator's defaults on the first call; pass ``{}`` to
    return to the defaults). The same parameters apply to every action column.

    Args:
        action: Raw action, a real tensor.
        noise_param: Keyword arguments of ``OrnsteinUhlenbeckNoiseGen`` other than
            ``shape``: any of ``mu``, ``sigma``, ``theta``, ``dt``, ``x0`` and ``generator``.
        ratio: The sampled noise is multiplied by this before it is added.
        reset: Re-create the shared generator, which restarts the process.

    Returns:
        A new tensor: the action plus the next value of the shared process.

    Raises:
        TypeError: see :func:`add_uniform_noise_to_action`.
        NoiseParamError: (a ``TypeError`` and a ``ValueError``) ``noise_param`` is not a
            dict of the keys above.
        ValueError: ``noise_param`` holds values the generator rejects.
    """
    global DEFAULT_OU_GEN, _shared_ou_kwargs
    name = "add_ou_noise_to_action"
    _check_action_and_ratio(name, action, ratio)
    if noise_param is not None:
        if not isinstance(noise_param, Mapping):
            raise NoiseParamError(
                f"{name}: noise_param must be None or a dict of OrnsteinUhlenbeckNoiseGen "
                f"keyword arguments, got {noise_param!r} ({type(noise_param).__name__}); "
                f"the generator's arguments must be a mapping"
            )
        unknown = sorted(str(key) for key in noise_param if key not in _OU_KEYS)
        if unknown:
            raise NoiseParamError(
                f"{name}: noise_param keys must be among {list(_OU_KEYS)}, got unknown {unknown} "
                f"(OrnsteinUhlenbeckNoiseGen got an unexpected keyword argument)"
            )
    dtype = _noise_dtype(action)
    shared = DEFAULT_OU_GEN
    if reset or shared is None or shared.shape != action.shape:
        kwargs = dict(noise_param) if noise_param is not None else _shared_ou_kwargs
        shared = DEFAULT_OU_GEN = OrnsteinUhlenbeckNoiseGen(action.shape, dtype=dtype, **kwargs)
        _shared_ou_kwargs = kwargs
    noise = shared(action.device)
    return action + noise.to(dtype) * ratio


def shared_ou_state() -> Optional[Dict[str, Any]]:
    """The state of the generator shared by :func:`add_ou_noise_to_action` (``None`` before its first call).

    Its shape, dtype and keyword arguments, the process's current value, and the state of
    its own ``torch.Generator`` if it was given one: tensors, numbers and strings only.
    """
    shared = DEFAULT_OU_GEN
    if shared is None:
        return None
    kwargs = {key: value for key, value in _shared_ou_kwargs.items() if key != "generator"}
    generator = shared.generator.get_state() if shared.generator is not None else None
    return {
        "shape": list(shared.shape),
        "dtype": str(shared.dtype).replace("torch.", ""),
        "kwargs": kwargs,
        "x": shared._x,
        "generator": generator,
    }


def load_shared_ou_state(state: Optional[Mapping[str, Any]]) -> None:
    """Make the generator shared by :func:`add_ou_noise_to_action` the one :func:`shared_ou_state` described.

    The generator is built anew (with a new ``torch.Generator`` in the saved state where
    it had one); a state that does not build raises before anything changes.

    Args:
        state: What :func:`shared_ou_state` returned (``None``: no shared generator yet).
    """
    global DEFAULT_OU_GEN, _shared_ou_kwargs
    if state is None:
        DEFAULT_OU_GEN, _shared_ou_kwargs = None, {}
        return
    kwargs = dict(state["kwargs"])
    built_kwargs = dict(kwargs)
    if state["generator"] is not None:
        built_kwargs["generator"] = torch.Generator()
        built_kwargs["generator"].set_state(state["generator"])
    shared = OrnsteinUhlenbeckNoiseGen(
        tuple(state["shape"]), dtype=getattr(torch, state["dtype"]), **built_kwargs
    )
    if state["x"] is not None:
        shared.x_prev = state["x"]
    DEFAULT_OU_GEN, _shared_ou_kwargs = shared, built_kwargs


# ----------------------------------------------------------------------------------------
# Parameter parsing shared by the uniform, normal and clipped normal functions.


def _check_uniform(owner: str, values: Sequence[float]) -> None:
    _check_finite(owner, "uniform_min", values[0])
    _check_finite(owner, "uniform_max", values[1])
    _check_bounds(owner, "uniform_min", values[0], "uniform_max", values[1])


def _check_normal(owner: str, values: Sequence[float]) -> None:
    _check_finite(owner, "normal_mean", values[0])
    _check_finite(owner, "normal_sigma", values[1])
    _check_sigma(owner, "normal_sigma", values[1])


def _check_clipped_normal(owner: str, values: Sequence[float]) -> None:
    _check_finite(owner, "normal_mean", values[0])
    _check_finite(owner, "normal_sigma", values[1])
    _check_sigma(owner, "normal_sigma", values[1])
    # An infinite clip bound clips nothing on that side; NaN would.
    _check_finite(owner, "clip_min", values[2], allow_inf=True)
    _check_finite(owner, "clip_max", values[3], allow_inf=True)
    _check_bounds(owner, "clip_min", values[2], "clip_max", values[3])


def _noise_dtype(action: torch.Tensor) -> torch.dtype:
    """The action's dtype if it is a floating one, else torch's default dtype."""
    return action.dtype if action.is_floating_point() else torch.get_default_dtype()


def _check_action_and_ratio(name: str, action: Any, ratio: Any) -> None:
    if not isinstance(action, torch.Tensor) or action.is_complex():
        given = f"dtype {action.dtype}" if isinstance(action, torch.Tensor) else repr(action)
        raise TypeError(
            f"{name}: action must be a real torch.Tensor, got {given} ({type(action).__name__})"
        )
    if not (_is_real(ratio) or isinstance(ratio, torch.Tensor)):
        raise TypeError(
            f"{name}: ratio must be a real number, got {ratio!r} ({type(ratio).__name__})"
        )
    if isinstance(ratio, torch.Tensor):
        if ratio.is_floating_point() and not bool(torch.isfinite(ratio).all()):
            raise ValueError(
                f"{name}: ratio must be finite, got {ratio.tolist()} (it would make the action NaN)"
            )
    elif not math.isfinite(ratio):
        raise ValueError(
            f"{name}: ratio must be finite, got {ratio!r} (it would make the action NaN)"
        )


def _as_list(value: Any) -> Optional[List[Any]]:
    """The items of a non-string, non-mapping iterable, or ``None`` for anything else."""
    if isinstance(value, (str, bytes, Mapping, torch.Tensor)) or not isinstance(value, Iterable):
        return None
    return list(value)


def _as_reals(items: Optional[List[Any]], arity: int) -> Optional[Tuple[float, ...]]:
    """``items`` as floats (at least ``arity`` of them), or ``None`` if they are not that many reals."""
    if items is None or len(items) < arity or not all(_is_real(v) for v in items):
        return None
    return tuple(float(v) for v in items)


#: ``noise_param`` tuples of plain numbers that passed their check, by (function, tuple).
_checked_params: Dict[Tuple[str, Tuple[Any, ...]], Tuple[float, ...]] = {}


def _parse_noise_param(
    name: str,
    action: torch.Tensor,
    noise_param: Any,
    ratio: Any,
    fields: Tuple[str, ...],
    check: Callable[[str, Sequence[float]], None],
) -> List[Param]:
    """Validate the arguments and return one value per field.

    A single tuple gives floats. Per-column tuples give tensors of shape
    ``[1, ..., 1, columns]`` on the action's device, which broadcast along the last
    dimension of the action. Values past ``len(fields)`` are dropped with a warning.
    """
    _check_action_and_ratio(name, action, ratio)
    arity = len(fields)
    plain = (
        type(noise_param) is tuple
        and len(noise_param) == arity
        and all(type(v) is float or type(v) is int for v in noise_param)
    )
    if plain:  # the usual call: one tuple of plain numbers, checked once
        known = _checked_params.get((name, noise_param))
        if known is not None:
            return list(known)
    items = _as_list(noise_param)
    single = _as_reals(items, arity)
    if single is not None:
        _warn_extra_values(name, fields, [single])
        check(name, single[:arity])
        if plain and len(_checked_params) < 1024:
            _checked_params[(name, noise_param)] = single[:arity]
        return list(single[:arity])

    columns = [_as_reals(_as_list(row), arity) for row in items or ()]
    if not columns or any(row is None for row in columns):
        expected = f"a tuple ({', '.join(fields)}) or a sequence of such tuples, one per column"
        raise ValueError(f"{name}: noise_param must be {expected}, got {noise_param!r}")
    if action.dim() < 1 or action.shape[-1] != len(columns):
        raise ValueError(
            f"{name}: Noise param length doesn't match the last dimension of action: per-column "
            f"noise_param needs one tuple per element of the action's last dimension; got "
            f"{len(columns)} tuples for an action of shape {list(action.shape)}"
        )
    _warn_extra_values(name, fields, columns)
    columns = [row[:arity] for row in columns]
    for row in columns:
        check(name, row)
    table = torch.tensor(columns, dtype=_noise_dtype(action), device=action.device)
    view = (1,) * (action.dim() - 1) + (len(columns),)
    return [table[:, i].reshape(view) for i in range(arity)]


def _warn_extra_values(name: str, fields: Tuple[str, ...], rows: List[Tuple[float, ...]]) -> None:
    longest = max(len(row) for row in rows)
    if longest > len(fields):
        warnings.warn(
            f"{name} uses the first {len(fields)} values of noise_param ({', '.join(fields)}) and "
            f"ignores the other {longest - len(fields)} (Machin 0.3.4 ignored them too)",
            ExtraArgumentsWarning,
            stacklevel=4,
        )

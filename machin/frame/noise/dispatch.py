"""The exploration modes of ``act_with_noise``: mode name -> noise function and its parameters.

DDPG (and its variants) and MADDPG take ``mode="uniform" | "normal" | "clipped_normal" | "ou"``
and a ``noise_param`` whose form depends on the mode; this module turns the pair into
the function of :mod:`machin.frame.noise.action_space_noise` to call.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import torch

from .action_space_noise import (
    add_clipped_normal_noise_to_action,
    add_normal_noise_to_action,
    add_ou_noise_to_action,
    add_uniform_noise_to_action,
)

__all__ = [
    "DEFAULT_NOISE_PARAM",
    "NOISE_DEFAULTS",
    "NOISE_MODES",
    "resolve_noise_mode",
    "noise_adder",
]

#: The documented default of ``act_with_noise(noise_param=...)``. It fits the
#: ``"uniform"`` and ``"normal"`` modes; passed as it is (the same object), the other
#: modes use their own defaults instead (:data:`NOISE_DEFAULTS`).
DEFAULT_NOISE_PARAM = (0.0, 1.0)

#: ``noise_param`` of the modes whose parameters :data:`DEFAULT_NOISE_PARAM` does not fit.
NOISE_DEFAULTS: Dict[str, Any] = {"clipped_normal": (0.0, 1.0, -1.0, 1.0), "ou": None}

#: ``act_with_noise`` mode -> the function of :mod:`machin.frame.noise.action_space_noise` it uses.
NOISE_MODES: Dict[str, Callable[..., torch.Tensor]] = {
    "uniform": add_uniform_noise_to_action,
    "normal": add_normal_noise_to_action,
    "clipped_normal": add_clipped_normal_noise_to_action,
    "ou": add_ou_noise_to_action,
}


def resolve_noise_mode(mode: str, noise_param: Any) -> Tuple[Callable[..., torch.Tensor], Any]:
    """Return the noise function of an ``act_with_noise`` mode and the parameters to pass it.

    A ``noise_param`` left at the documented default ``(0.0, 1.0)``
    (:data:`DEFAULT_NOISE_PARAM` itself) becomes the mode's own default
    (``(0, 1, -1, 1)`` for ``"clipped_normal"``, ``None`` for ``"ou"``).

    Args:
        mode: One of :data:`NOISE_MODES`.
        noise_param: The parameters given to ``act_with_noise``.

    Raises:
        ValueError: When ``mode`` is not one of :data:`NOISE_MODES`.
    """
    add_noise = NOISE_MODES.get(mode)
    if add_noise is None:
        raise ValueError(f"Unknown noise type: {mode!r}; mode must be one of {list(NOISE_MODES)}")
    if noise_param is DEFAULT_NOISE_PARAM:
        noise_param = NOISE_DEFAULTS.get(mode, noise_param)
    return add_noise, noise_param


def noise_adder(
    mode: str, noise_param: Any, ratio: float
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``f(action) -> noisy action`` for one ``act_with_noise`` call; its errors name the mode.

    Args:
        mode: One of :data:`NOISE_MODES`.
        noise_param: The parameters given to ``act_with_noise`` (see :func:`resolve_noise_mode`).
        ratio: Factor applied to the sampled noise.

    Raises:
        ValueError: When ``mode`` is unknown (at once); when ``noise_param`` does not fit
            the mode (when ``f`` is called).
    """
    add_noise, noise_param = resolve_noise_mode(mode, noise_param)

    def add(action: torch.Tensor) -> torch.Tensor:
        try:
            return add_noise(action, noise_param, ratio)
        except (
            ValueError,
            TypeError,
        ) as error:  # the noise function says what it expects; add the mode
            raise type(error)(f"act_with_noise(mode={mode!r}): {error}") from error

    return add

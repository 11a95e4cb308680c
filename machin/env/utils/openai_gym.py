"""Gymnasium helpers: headless rendering and support for old gym-style environments.

Machin targets `gymnasium <https://gymnasium.farama.org>`_ (see DESIGN.md, decision 1).
Environments written against the old gym API (``reset() -> obs``, a 4-tuple ``step`` and
``seed(n)``) keep working through :class:`GymLegacyAdapter`, and
:func:`ensure_gymnasium_env` applies that adapter only where it is needed.
"""

import os
from typing import Any, Dict, Optional, Tuple

import gymnasium

__all__ = ["GymLegacyAdapter", "disable_view_window", "ensure_gymnasium_env"]


def disable_view_window() -> None:
    """Make environment rendering headless, so it never needs a display.

    Gymnasium draws its classic-control and box2d environments with pygame (SDL). This
    function selects SDL's ``dummy`` video driver (the ``SDL_VIDEODRIVER`` environment
    variable) unless the user already chose a driver, so pygame can initialise without a
    display and never opens a window. Call it before the first environment is created:
    SDL reads the variable when its video system starts.

    Frames are still available: create environments with ``render_mode="rgb_array"`` and
    ``env.render()`` returns each frame as an ``(H, W, 3)`` ``uint8`` array. In gymnasium
    the render mode is fixed when the environment is made (``gymnasium.make(name,
    render_mode="rgb_array")``); ``render()`` takes no ``mode`` argument any more.

    Calling it several times is harmless; it never overrides a driver set by the user.
    """
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


class GymLegacyAdapter(gymnasium.Env):
    """Present an old gym-style environment through the gymnasium API.

    The wrapped environment must provide ``reset() -> obs``,
    ``step(action) -> (obs, reward, done, info)``, ``action_space`` and
    ``observation_space``; ``seed(n)``, ``render(mode=...)`` and ``close()`` are used when
    present. The adapter then offers:

    * ``reset(seed=None, options=None) -> (obs, info)``: ``seed`` is passed to the old
      ``seed(n)`` method before resetting; ``info`` is an empty dict.
    * ``step(action) -> (obs, reward, terminated, truncated, info)``: an episode cut by a
      time limit is recognised by ``info["TimeLimit.truncated"]`` (the old gym convention),
      so ``truncated = done and info.get("TimeLimit.truncated", False)`` and
      ``terminated = done and not truncated``.
    * ``render()``: calls the old ``render(mode=render_mode)``.

    Args:
        env: The old gym-style environment; it is available afterwards as ``legacy_env``.
        render_mode: Render mode passed to the old ``render(mode=...)``, for example
            ``"rgb_array"``. Defaults to the environment's own ``render_mode`` attribute
            if it has one, else ``None`` (``render()`` is then called without arguments).

    Raises:
        TypeError: If ``env`` lacks a callable ``reset`` or ``step``, or lacks
            ``action_space`` / ``observation_space``.
    """

    def __init__(self, env: Any, render_mode: Optional[str] = None) -> None:
        for name in ("reset", "step"):
            if not callable(getattr(env, name, None)):
                raise TypeError(
                    f"env must have a callable {name}() method to be adapted, "
                    f"got {env!r} of type {type(env).__name__}"
                )
        for name in ("action_space", "observation_space"):
            if not hasattr(env, name):
                raise TypeError(
                    f"env must have an {name} attribute to be adapted, "
                    f"got {env!r} of type {type(env).__name__}"
                )
        self.legacy_env = env
        self.action_space = env.action_space
        self.observation_space = env.observation_space
        self.metadata = dict(getattr(env, "metadata", None) or {})
        self.render_mode = (
            render_mode if render_mode is not None else getattr(env, "render_mode", None)
        )

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None
    ) -> Tuple[Any, Dict[str, Any]]:
        """Reset the old environment, seeding it first when ``seed`` is given.

        Args:
            seed: Seed handed to the old ``seed(n)`` method; ``None`` keeps the current
                random state.
            options: Not supported by old-style environments; must be ``None`` or empty.

        Returns:
            ``(observation, {})``.

        Raises:
            TypeError: If ``seed`` is given but the environment has no ``seed`` method.
            ValueError: If ``options`` is not empty.
        """
        super().reset(seed=seed)
        if options:
            raise ValueError(
                "options are not supported by an old gym-style environment, "
                f"expected None or an empty dict, got {options!r}"
            )
        if seed is not None:
            seed_method = getattr(self.legacy_env, "seed", None)
            if not callable(seed_method):
                raise TypeError(
                    f"cannot seed {type(self.legacy_env).__name__}: it has no seed(n) "
                    f"method, but reset() was called with seed={seed!r}"
                )
            seed_method(seed)
        return self.legacy_env.reset(), {}

    def step(self, action: Any) -> Tuple[Any, float, bool, bool, Dict[str, Any]]:
        """Step the old environment and split ``done`` into terminated / truncated.

        Args:
            action: Action passed unchanged to the old ``step``.

        Returns:
            ``(observation, reward, terminated, truncated, info)``; ``info`` is the old
            environment's info dict (an empty dict if it returned ``None``).

        Raises:
            RuntimeError: If the old ``step`` does not return four values.
        """
        result = self.legacy_env.step(action)
        if not isinstance(result, tuple) or len(result) != 4:
            raise RuntimeError(
                f"{type(self.legacy_env).__name__}.step() must return "
                "(obs, reward, done, info) for GymLegacyAdapter, got "
                f"{type(result).__name__} of length "
                f"{len(result) if isinstance(result, tuple) else 'n/a'}"
            )
        observation, reward, done, info = result
        info = {} if info is None else info
        done = bool(done)
        truncated = done and bool(info.get("TimeLimit.truncated", False))
        return observation, reward, done and not truncated, truncated, info

    def render(self) -> Any:
        """Render through the old ``render(mode=render_mode)``.

        Returns:
            Whatever the old environment returns (an ``(H, W, 3)`` array for
            ``render_mode="rgb_array"``).
        """
        if self.render_mode is None:
            return self.legacy_env.render()
        return self.legacy_env.render(mode=self.render_mode)

    def close(self) -> None:
        """Close the old environment if it has a ``close`` method."""
        close = getattr(self.legacy_env, "close", None)
        if callable(close):
            close()


def ensure_gymnasium_env(env: Any) -> gymnasium.Env:
    """Return ``env`` as a gymnasium environment.

    A :class:`gymnasium.Env` (wrappers included) is returned unchanged; any other object
    is treated as an old gym-style environment and wrapped in :class:`GymLegacyAdapter`.

    Args:
        env: A gymnasium environment or an old gym-style one.

    Returns:
        A gymnasium environment.

    Raises:
        TypeError: If ``env`` is neither a gymnasium environment nor has the old API
            (see :class:`GymLegacyAdapter`).
    """
    if isinstance(env, gymnasium.Env):
        return env
    return GymLegacyAdapter(env)

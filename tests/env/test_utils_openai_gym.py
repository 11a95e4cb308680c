"""Tests for machin.env.utils.openai_gym: headless rendering and the old-gym adapter."""

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from machin.env.utils import GymLegacyAdapter, disable_view_window, ensure_gymnasium_env, openai_gym


def test_disable_view_window_is_exported_from_both_paths():
    assert disable_view_window is openai_gym.disable_view_window


def test_disable_view_window_selects_dummy_driver_when_unset(monkeypatch):
    monkeypatch.delenv("SDL_VIDEODRIVER", raising=False)
    assert disable_view_window() is None
    assert os.environ["SDL_VIDEODRIVER"] == "dummy"


def test_disable_view_window_keeps_a_driver_chosen_by_the_user(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "offscreen")
    disable_view_window()
    assert os.environ["SDL_VIDEODRIVER"] == "offscreen"


def test_rgb_array_rendering_works_without_a_display():
    # A fresh interpreter with no display and no SDL driver chosen, so that the function
    # under test is what makes pygame headless. The module is loaded from its file, which
    # needs only gymnasium, to keep the child free of the torch import that `import machin`
    # brings.
    script = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('gym_utils', sys.argv[1])\n"
        "gym_utils = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(gym_utils)\n"
        "gym_utils.disable_view_window()\n"
        "import gymnasium as gym, pygame\n"
        "env = gym.make('CartPole-v1', render_mode='rgb_array')\n"
        "env.reset(seed=0)\n"
        "frame = env.render()\n"
        "print(frame.shape, frame.dtype, int(frame.min()), int(frame.max()))\n"
        "print(pygame.display.get_driver())\n"
        "env.close()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "SDL_VIDEODRIVER")}
    result = subprocess.run(
        [sys.executable, "-c", script, openai_gym.__file__],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    # A real (H, W, 3) picture: black cart on a white background.
    assert lines[0] == "(400, 600, 3) uint8 0 255"
    # pygame runs on SDL's dummy driver, which cannot open a window.
    assert lines[1] == "dummy"


def test_adapter_reset_returns_obs_and_info_and_seeds_the_old_env(legacy_env_class):
    legacy = legacy_env_class()
    env = GymLegacyAdapter(legacy)
    assert isinstance(env, gym.Env)
    obs, info = env.reset(seed=7)
    assert legacy.seeds == [7]
    assert obs.tolist() == [70.0]
    assert info == {}
    obs, _ = env.reset()
    assert legacy.seeds == [7]  # no seed given: the old seed() is not called again
    assert env.action_space == gym.spaces.Discrete(2)
    assert env.observation_space == legacy.observation_space


def test_adapter_step_reports_termination(legacy_env_class):
    env = GymLegacyAdapter(legacy_env_class(horizon=2))
    env.reset()
    assert env.step(1) == (np.array([1.0]), 1.0, False, False, {"t": 1})
    obs, reward, terminated, truncated, info = env.step(0)
    assert (obs.tolist(), reward, terminated, truncated, info) == (
        [2.0],
        0.0,
        True,
        False,
        {"t": 2},
    )


def test_adapter_step_takes_truncation_from_the_timelimit_info_key(legacy_env_class):
    env = GymLegacyAdapter(legacy_env_class(horizon=1, truncate=True))
    env.reset()
    _, _, terminated, truncated, info = env.step(1)
    assert (terminated, truncated) == (False, True)
    assert info == {"TimeLimit.truncated": True}


def test_adapter_render_passes_the_render_mode_and_close_is_forwarded(legacy_env_class):
    legacy = legacy_env_class()
    env = GymLegacyAdapter(legacy, render_mode="rgb_array")
    assert env.render().shape == (4, 5, 3)
    assert legacy.render_modes == ["rgb_array"]
    env.close()
    assert legacy.closed


def test_adapter_rejects_objects_without_the_old_api():
    with pytest.raises(TypeError, match=r"callable step\(\) method.*of type NoStep"):
        GymLegacyAdapter(type("NoStep", (), {"reset": lambda self: 0})())
    with pytest.raises(TypeError, match="action_space attribute"):
        GymLegacyAdapter(type("NoSpaces", (), {"reset": lambda s: 0, "step": lambda s, a: 0})())


def test_adapter_reset_errors(legacy_env_class):
    env = GymLegacyAdapter(legacy_env_class())
    with pytest.raises(ValueError, match=r"options are not supported.*\{'level': 2\}"):
        env.reset(options={"level": 2})
    legacy = legacy_env_class()
    legacy.seed = None  # an old env without a seed method
    with pytest.raises(TypeError, match=r"no seed\(n\) method.*seed=3"):
        GymLegacyAdapter(legacy).reset(seed=3)


def test_adapter_step_must_return_four_values(legacy_env_class):
    legacy = legacy_env_class()
    legacy.step = lambda action: (0, 0.0, False, False, {})
    env = GymLegacyAdapter(legacy)
    env.reset()
    with pytest.raises(RuntimeError, match=r"must return \(obs, reward, done, info\).*length 5"):
        env.step(0)


def test_ensure_gymnasium_env_keeps_gymnasium_envs_and_wraps_old_ones(legacy_env_class):
    modern = gym.make("CartPole-v1")
    assert ensure_gymnasium_env(modern) is modern
    legacy = legacy_env_class()
    adapted = ensure_gymnasium_env(legacy)
    assert isinstance(adapted, GymLegacyAdapter)
    assert adapted.legacy_env is legacy
    with pytest.raises(TypeError, match="callable reset.*got 42 of type int"):
        ensure_gymnasium_env(42)
    modern.close()

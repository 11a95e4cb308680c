"""Fixtures for the machin.env tests: no test may leave a child process behind."""

import gymnasium as gym
import numpy as np
import psutil
import pytest

# Interpreter-wide helpers that multiprocessing starts once and reuses (the resource tracker
# comes with the "spawn" start method); they are not leftovers of a test.
_SHARED_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _is_shared_helper(process):
    try:
        command_line = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    return any(helper in command_line for helper in _SHARED_HELPERS)


@pytest.fixture(autouse=True)
def no_leftover_children():
    """Fail a test that leaves new child processes (alive or zombie) behind."""
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    yield
    leftovers = [
        child
        for child in me.children(recursive=True)
        if child.pid not in before and not _is_shared_helper(child)
    ]
    descriptions = []
    for child in leftovers:
        try:
            descriptions.append(f"pid {child.pid} ({child.status()})")
            child.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(leftovers, timeout=5)
    assert not descriptions, f"test left child processes behind: {', '.join(descriptions)}"


class LegacyEnv:
    """An old gym-style environment: reset() -> obs, 4-tuple step, seed(n)."""

    metadata = {"render.modes": ["rgb_array"]}

    def __init__(self, horizon=3, truncate=False):
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
        self.horizon = horizon
        self.truncate = truncate
        self.seeds = []
        self.render_modes = []
        self.closed = False
        self.t = 0

    def seed(self, seed=None):
        self.seeds.append(seed)
        return [seed]

    def reset(self):
        self.t = 0
        return np.array([10.0 * (self.seeds[-1] if self.seeds else 0)], dtype=np.float32)

    def step(self, action):
        self.t += 1
        done = self.t >= self.horizon
        info = {"TimeLimit.truncated": True} if done and self.truncate else {"t": self.t}
        return np.array([self.t], dtype=np.float32), float(action), done, info

    def render(self, mode="human"):
        self.render_modes.append(mode)
        return np.zeros((4, 5, 3), dtype=np.uint8)

    def close(self):
        self.closed = True


@pytest.fixture
def legacy_env_class():
    """The old gym-style test environment class (shared by the utils and wrapper tests)."""
    return LegacyEnv

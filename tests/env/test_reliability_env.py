"""ParallelWrapperSubProc: step timeout, and environments defined in the user's script."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import numpy as np
import pytest

from machin.env.wrappers.openai_gym import (
    GymTerminationError,
    GymTimeoutError,
    GymWorkerError,
    ParallelWrapperSubProc,
)
from tests.multiprocess import no_children_left  # noqa: F401

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.timeout(60),
    pytest.mark.usefixtures("no_children_left"),
]


class _HangingEnv(gym.Env):
    """Steps normally, except that action 1 never returns."""

    def __init__(self):
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action):
        if action == 1:
            time.sleep(3600)
        return np.ones(2, dtype=np.float32), 1.0, False, False, {}


def _make_hanging(index):
    return _HangingEnv()


def test_a_step_that_never_returns_times_out_and_retires_the_worker():
    envs = ParallelWrapperSubProc([_make_hanging] * 3, timeout=2)
    try:
        envs.reset()
        process = envs._processes[1]
        start = time.monotonic()
        with pytest.raises(GymTimeoutError, match=r"environment 1 did not answer 'step'") as info:
            envs.step([0, 1, 0])
        assert time.monotonic() - start < 10
        error = info.value
        assert error.env_index == 1
        assert isinstance(error, GymWorkerError) and isinstance(error, TimeoutError)
        assert isinstance(error, RuntimeError)
        # the worker is killed and reaped; the environment is out of service
        assert not process.is_alive() and process.exitcode == -signal.SIGKILL
        with pytest.raises(GymTerminationError, match="environment 1 failed earlier"):
            envs.step([0], idx=[1])
        # the others still work
        observations, rewards, _, _ = envs.step([0, 0], idx=[0, 2])
        assert rewards == [1.0, 1.0]
    finally:
        envs.close()


def test_a_stopped_worker_times_out():
    envs = ParallelWrapperSubProc([_make_hanging] * 2, timeout=1.5)
    try:
        envs.reset()
        process = envs._processes[0]
        os.kill(process.pid, signal.SIGSTOP)
        with pytest.raises(GymTimeoutError, match=r"environment 0 did not answer 'step'"):
            envs.step([0, 0])
        assert not process.is_alive()
        assert envs.step([0], idx=[1])[1] == [1.0]
    finally:
        envs.close()


def test_timeout_is_checked():
    for bad in (0, -1, "1", True):
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            ParallelWrapperSubProc([_make_hanging], timeout=bad)


_SCRIPT = """
import gymnasium as gym
import numpy as np
from machin.env.wrappers.openai_gym import ParallelWrapperSubProc


class ScriptEnv(gym.Env):
    def __init__(self, index):
        self.index = index
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (1,), dtype=np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([self.index], dtype=np.float32), {{}}

    def step(self, action):
        obs = np.array([self.index + action], dtype=np.float32)
        return obs, float(action), False, False, {{"cls": type(self).__mro__[1].__name__}}


if __name__ == "__main__":
    envs = ParallelWrapperSubProc([lambda i: ScriptEnv(i)] * 2, context={context!r})
    print("reset", [float(o[0]) for o in envs.reset()])
    obs, rewards, done, infos = envs.step([1, 0])
    print("step", [float(o[0]) for o in obs], rewards, done, [i["cls"] for i in infos])
    envs.close()
"""


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_an_env_class_defined_in_the_users_script_works_in_workers(tmp_path, context):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(_SCRIPT.format(context=context)))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=180,  # spawned workers import torch: tens of seconds on a busy machine
        env=env,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "reset [0.0, 1.0]",
        "step [1.0, 1.0] [1.0, 0.0] [False, False] ['Env', 'Env']",
    ], done.stdout + done.stderr

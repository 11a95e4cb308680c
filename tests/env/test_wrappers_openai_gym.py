"""Tests for machin.env.wrappers.openai_gym (checklist 6.2, items 9-17)."""

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import gymnasium as gym
import numpy as np
import psutil
import pytest

import machin.env
from machin.env.wrappers import (
    GymTerminationError,
    GymWorkerError,
    ParallelWrapperDummy,
    ParallelWrapperSubProc,
)
from machin.utils.compat import ExtraArgumentsWarning

MULTIPROCESS = [pytest.mark.multiprocess, pytest.mark.timeout(60)]
BOTH = pytest.mark.parametrize(
    "wrapper_class",
    [
        pytest.param(ParallelWrapperDummy, id="dummy"),
        pytest.param(ParallelWrapperSubProc, id="subproc", marks=MULTIPROCESS),
    ],
)


class CounterEnv(gym.Env):
    """Observation ``[index, t]``; terminal after ``horizon`` steps.

    Step number ``fail_at`` raises, step number ``slow_at`` takes 1.5 seconds.
    """

    def __init__(self, index, horizon=100, fail_at=None, slow_at=None):
        self.index = index
        self.horizon = horizon
        self.fail_at = fail_at
        self.slow_at = slow_at
        self.t = 0
        self.closed = False
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.index, 0], dtype=np.float32), {"index": self.index}

    def step(self, action):
        self.t += 1
        if self.t == self.fail_at:
            raise RuntimeError(f"boom in env {self.index}")
        if self.t == self.slow_at:
            time.sleep(1.5)
        obs = np.array([self.index, self.t], dtype=np.float32)
        return obs, float(action), self.t >= self.horizon, False, {"t": self.t}

    def close(self):
        self.closed = True


@pytest.fixture
def make():
    """Build wrappers and close whatever a test leaves open."""
    created = []

    def build(wrapper_class, creators, **kwargs):
        wrapper = wrapper_class(creators, **kwargs)
        created.append(wrapper)
        return wrapper

    yield build
    for wrapper in created:
        wrapper.close()


def counters(n, **kwargs):
    return [lambda i: CounterEnv(i, **kwargs)] * n


def cartpoles(n, **kwargs):
    return [lambda i: gym.make("CartPole-v1", **kwargs) for _ in range(n)]


def worker_pids(wrapper):
    return [process.pid for process in wrapper._processes]


def child_pids():
    return {child.pid for child in psutil.Process().children(recursive=True)}


# -- item 9: creators ---------------------------------------------------------------------


@BOTH
def test_each_creator_is_called_with_its_index(wrapper_class, make):
    wrapper = make(wrapper_class, counters(3))
    assert [obs[0] for obs in wrapper.reset()] == [0.0, 1.0, 2.0]


def test_dummy_calls_creators_in_order_with_indexes(make):
    calls = []

    def creator(index):
        calls.append(index)
        return CounterEnv(index)

    make(ParallelWrapperDummy, [creator] * 4)
    assert calls == [0, 1, 2, 3]


@BOTH
def test_creators_are_validated(wrapper_class):
    with pytest.raises(ValueError, match="at least one creator, got an empty list"):
        wrapper_class([])
    with pytest.raises(TypeError, match=r"env_creators\[1\] must be callable.*got 5 of type int"):
        wrapper_class([lambda i: CounterEnv(i), 5])
    with pytest.raises(TypeError, match="must be a list of callables.*got function"):
        wrapper_class(lambda i: CounterEnv(i))


# -- item 10: reset -------------------------------------------------------------------------


@BOTH
def test_reset_all_or_selected_environments(wrapper_class, make):
    wrapper = make(wrapper_class, counters(3))
    assert wrapper.active().tolist() == []
    only_one = wrapper.reset(idx=1)
    assert [obs.tolist() for obs in only_one] == [[1.0, 0.0]]
    assert wrapper.active().tolist() == [1]
    observations, infos = wrapper.reset(idx=[2, 0], return_info=True)
    assert [obs[0] for obs in observations] == [2.0, 0.0]
    assert infos == [{"index": 2}, {"index": 0}]
    assert wrapper.active().tolist() == [0, 1, 2]
    assert len(wrapper.reset()) == wrapper.size() == 3


@BOTH
def test_idx_is_validated(wrapper_class, make):
    wrapper = make(wrapper_class, counters(3))
    with pytest.raises(ValueError, match=r"range \[0, 3\) for 3 environments, got 3"):
        wrapper.reset(idx=3)
    with pytest.raises(ValueError, match=r"must not repeat an environment index, got \[0, 0\]"):
        wrapper.reset(idx=[0, 0])
    with pytest.raises(TypeError, match="idx must be None, an int or a list of ints, got 1.5"):
        wrapper.reset(idx=1.5)
    with pytest.raises(TypeError, match="idx must contain only ints, got 'a'"):
        wrapper.reset(idx=["a"])
    assert [obs[0] for obs in wrapper.reset(idx=np.array([2, 1]))] == [2.0, 1.0]


# -- items 11 and 12: step ------------------------------------------------------------------


@BOTH
def test_step_returns_four_lists_for_the_selected_environments(wrapper_class, make):
    wrapper = make(wrapper_class, counters(3))
    wrapper.reset()
    observations, rewards, terminals, infos = wrapper.step(np.array([1, 0, 1]))
    assert [obs.tolist() for obs in observations] == [[0, 1], [1, 1], [2, 1]]
    assert rewards == [1.0, 0.0, 1.0]
    assert terminals == [False, False, False]
    assert infos == [{"t": 1, "terminated": False, "truncated": False}] * 3
    observations, rewards, terminals, infos = wrapper.step([1], idx=2)
    assert [obs.tolist() for obs in observations] == [[2, 2]]
    assert (rewards, terminals, [info["t"] for info in infos]) == ([1.0], [False], [2])
    assert wrapper.step([], idx=[]) == ([], [], [], [])


@BOTH
def test_action_count_must_match_the_selection(wrapper_class, make):
    wrapper = make(wrapper_class, counters(3))
    wrapper.reset()
    with pytest.raises(ValueError, match=r"len\(action\) is 3 but idx selects 2 environment"):
        wrapper.step([0, 1, 0], idx=[0, 1])
    with pytest.raises(ValueError, match=r"len\(action\) is 1 but idx selects 3 environment"):
        wrapper.step(np.zeros((1, 2)))
    with pytest.raises(TypeError, match="one action per selected environment, got 1 of type int"):
        wrapper.step(1, idx=0)
    # nothing was stepped by the rejected calls
    assert [info["t"] for info in wrapper.step([0, 0, 0])[3]] == [1, 1, 1]


# -- item 13: terminal environments -----------------------------------------------------------


@BOTH
def test_terminal_environment_leaves_active_until_reset(wrapper_class, make):
    wrapper = make(wrapper_class, [lambda i: CounterEnv(i, horizon=i + 1)] * 3)
    with pytest.raises(GymTerminationError, match=r"not active \(terminal, or never reset\)"):
        wrapper.step([0, 0, 0])
    wrapper.reset()
    assert wrapper.step([0, 0, 0])[2] == [True, False, False]
    assert wrapper.active().tolist() == [1, 2]
    with pytest.raises(
        GymTerminationError, match=r"environment\(s\) \[0\].*reset\(idx=\[0\]\)"
    ) as info:
        wrapper.step([0, 0, 0])
    assert info.value.env_index == 0
    assert wrapper.step([0, 0], idx=[1, 2])[2] == [True, False]
    assert wrapper.active().tolist() == [2]
    wrapper.reset(idx=[0, 1])
    assert wrapper.active().tolist() == [0, 1, 2]
    assert [info["t"] for info in wrapper.step([0, 0, 0])[3]] == [1, 1, 3]


@BOTH
def test_truncation_and_termination_are_told_apart(wrapper_class, make):
    wrapper = make(
        wrapper_class,
        [
            lambda i: gym.make("CartPole-v1", max_episode_steps=3),
            lambda i: gym.make("CartPole-v1"),
        ],
    )
    wrapper.seed(0)
    wrapper.reset()
    for _ in range(2):
        assert wrapper.step([1, 1])[2] == [False, False]
    _, _, terminals, infos = wrapper.step([1, 1])
    assert terminals == [True, False]
    assert (infos[0]["terminated"], infos[0]["truncated"]) == (False, True)
    # pushing right all the time makes the pole fall within a few steps: a real terminal state
    for _ in range(20):
        _, _, terminals, infos = wrapper.step([1], idx=1)
        if terminals[0]:
            break
    assert terminals == [True]
    assert (infos[0]["terminated"], infos[0]["truncated"]) == (True, False)
    assert wrapper.active().tolist() == []


# -- item 14: seeds ---------------------------------------------------------------------------


def rollout(wrapper, seeds, actions):
    """Seed, reset and run ``actions`` (resetting terminal envs); return everything seen."""
    wrapper.seed(seeds)
    seen = [np.stack(wrapper.reset())]
    for action in actions:
        observations, rewards, terminals, infos = wrapper.step(action)
        seen += [np.stack(observations), np.array(rewards), np.array(terminals)]
        seen += [np.array([[info["terminated"], info["truncated"]] for info in infos])]
        done = [i for i, terminal in enumerate(terminals) if terminal]
        if done:
            for position, obs in zip(done, wrapper.reset(idx=done)):
                seen.append(np.concatenate([[position], obs]))
    return seen


def assert_same(first, second):
    assert len(first) == len(second)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


@BOTH
def test_seed_forms_and_errors(wrapper_class, make):
    wrapper = make(wrapper_class, counters(3))
    assert wrapper.seed(5) == [5, 5, 5]
    assert wrapper.seed([1, 2, 3]) == [1, 2, 3]
    drawn = wrapper.seed()
    assert len(drawn) == 3 and all(isinstance(s, int) and s >= 0 for s in drawn)
    with pytest.raises(ValueError, match=r"one seed per environment \(3\), got 2 seeds"):
        wrapper.seed([1, 2])
    with pytest.raises(TypeError, match="seed list must contain ints, got 2.5"):
        wrapper.seed([1, 2.5, 3])
    with pytest.raises(TypeError, match="seed must be None, an int or a list of ints, got 'a'"):
        wrapper.seed("a")
    with pytest.raises(ValueError, match="seeds must be non-negative, got -1"):
        wrapper.seed(-1)


@BOTH
def test_same_seeds_give_identical_trajectories(wrapper_class, make):
    wrapper = make(wrapper_class, cartpoles(3))
    actions = np.random.default_rng(0).integers(0, 2, size=(40, 3))
    first = rollout(wrapper, [1, 2, 3], actions)
    assert_same(first, rollout(wrapper, [1, 2, 3], actions))
    assert not np.array_equal(first[0][0], first[0][1])  # different seeds, different starts
    wrapper.seed(9)
    same_seed = np.stack(wrapper.reset())
    assert np.array_equal(same_seed[0], same_seed[1]) and np.array_equal(same_seed[0], same_seed[2])
    # a seed is used once: the next reset continues the random stream
    assert not np.array_equal(np.stack(wrapper.reset()), same_seed)
    # fresh seeds drawn by seed() reproduce the run when given back
    drawn = wrapper.seed()
    assert_same(rollout(wrapper, drawn, actions[:5]), rollout(wrapper, drawn, actions[:5]))


# -- item 15: render --------------------------------------------------------------------------


@BOTH
def test_render_returns_rgb_frames(wrapper_class, make):
    wrapper = make(wrapper_class, cartpoles(3, render_mode="rgb_array"))
    wrapper.seed([4, 5, 6])
    wrapper.reset()
    frames = wrapper.render()
    assert [(f.shape, f.dtype) for f in frames] == [((400, 600, 3), np.uint8)] * 3
    reference = gym.make("CartPole-v1", render_mode="rgb_array")
    reference.reset(seed=5)
    expected = reference.render()
    reference.close()
    np.testing.assert_array_equal(frames[1], expected)
    with pytest.warns(ExtraArgumentsWarning, match="'mode'"):
        only = wrapper.render(idx=[1], mode="rgb_array")  # old-style mode argument is ignored
    assert len(only) == 1
    np.testing.assert_array_equal(only[0], expected)


@BOTH
@pytest.mark.filterwarnings("ignore:.*render method without specifying any render mode")
def test_render_without_rgb_array_mode_raises(wrapper_class, make):
    wrapper = make(wrapper_class, cartpoles(2))
    wrapper.reset()
    with pytest.raises(
        RuntimeError, match=r"environment 0 returned 'NoneType'.*render_mode='rgb_array'"
    ):
        wrapper.render()


# -- item 16: size and spaces -----------------------------------------------------------------


@BOTH
@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
def test_size_and_spaces_match_the_wrapped_environments(wrapper_class, make, name):
    wrapper = make(wrapper_class, [lambda i: gym.make(name)] * 2)
    reference = gym.make(name)
    assert wrapper.size() == 2
    assert wrapper.action_space == reference.action_space
    assert wrapper.observation_space == reference.observation_space
    reference.close()


@BOTH
def test_environments_must_share_their_spaces(wrapper_class):
    with pytest.raises(
        ValueError, match="one action space: environment 0 has Discrete.*environment 1 has Box"
    ):
        wrapper_class([lambda i: gym.make("CartPole-v1"), lambda i: gym.make("Pendulum-v1")])


# -- closing ----------------------------------------------------------------------------------


@BOTH
def test_closed_wrapper_rejects_calls_and_close_is_idempotent(wrapper_class):
    with wrapper_class(counters(2)) as wrapper:
        wrapper.reset()
    assert wrapper.active().tolist() == []
    with pytest.raises(RuntimeError, match=f"{wrapper_class.__name__} is closed"):
        wrapper.reset()
    with pytest.raises(RuntimeError, match="is closed"):
        wrapper.seed(1)
    wrapper.close()


def test_dummy_close_closes_the_environments():
    envs = []
    wrapper = ParallelWrapperDummy([lambda i: envs.append(CounterEnv(i)) or envs[-1]] * 2)
    wrapper.close()
    assert [env.closed for env in envs] == [True, True]


def test_dummy_closes_created_environments_when_construction_fails():
    envs = []

    def creator(index):
        if index == 2:
            raise ValueError("bad creator")
        envs.append(CounterEnv(index))
        return envs[-1]

    with pytest.raises(ValueError, match="bad creator"):
        ParallelWrapperDummy([creator] * 3)
    assert [env.closed for env in envs] == [True, True]


# -- failures -----------------------------------------------------------------------------------


@BOTH
def test_environment_exception_raises_and_puts_it_out_of_service(wrapper_class, make):
    wrapper = make(wrapper_class, [lambda i: CounterEnv(i, fail_at=2 if i == 1 else None)] * 3)
    wrapper.reset()
    wrapper.step([0, 0, 0])
    with pytest.raises(GymTerminationError, match="environment 1 raise") as info:
        wrapper.step([0, 0, 0])
    assert info.value.env_index == 1
    if wrapper_class is ParallelWrapperSubProc:
        assert "RuntimeError: boom in env 1" in info.value.remote_traceback
        assert "RuntimeError: boom in env 1" in str(info.value)
    else:
        assert isinstance(info.value.__cause__, RuntimeError)
        assert str(info.value.__cause__) == "boom in env 1"
    assert wrapper.active().tolist() == [0, 2]
    # the other environments ran the failed batch's step, and keep working
    assert [i["t"] for i in wrapper.step([0, 0], idx=[0, 2])[3]] == [3, 3]
    with pytest.raises(
        GymTerminationError, match="environment 1 failed earlier and is out of service"
    ):
        wrapper.reset(idx=1)


# -- item 17: the sub-process wrapper -------------------------------------------------------------


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
def test_subproc_matches_dummy_step_for_step(make, name):
    rng = np.random.default_rng(1)
    if name == "CartPole-v1":
        actions = rng.integers(0, 2, size=(60, 3))
    else:
        actions = rng.uniform(-2.0, 2.0, size=(60, 3, 1)).astype(np.float32)
    creators = [lambda i: gym.make(name, max_episode_steps=25)] * 3
    dummy = rollout(make(ParallelWrapperDummy, creators), [7, 8, 9], actions)
    subproc = rollout(make(ParallelWrapperSubProc, creators), [7, 8, 9], actions)
    assert_same(dummy, subproc)
    assert len(dummy) > 4 * len(actions)  # some environments were reset on the way


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_subproc_accepts_closures(make):
    def creator_for(limit):
        return lambda i: gym.make("CartPole-v1", max_episode_steps=limit + i)

    wrapper = make(ParallelWrapperSubProc, [creator_for(2)] * 2)
    wrapper.reset()
    assert wrapper.step([0, 0])[2] == [False, False]
    _, _, terminals, infos = wrapper.step([0, 0])
    assert terminals == [True, False]
    assert infos[0]["truncated"] is True


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_killed_worker_raises_gym_termination_error(make):
    wrapper = make(ParallelWrapperSubProc, counters(3))
    wrapper.reset()
    os.kill(worker_pids(wrapper)[1], signal.SIGKILL)
    pattern = r"worker process of environment 1 \(pid \d+\) died: it was killed by signal SIGKILL"
    with pytest.raises(GymTerminationError, match=pattern) as info:
        wrapper.step([0, 0, 0])
    assert info.value.env_index == 1
    assert isinstance(info.value, RuntimeError) and "exited with code -9" in str(info.value)
    assert wrapper.active().tolist() == [0, 2]
    assert [i["t"] for i in wrapper.step([1, 1], idx=[0, 2])[3]] == [2, 2]
    with pytest.raises(GymWorkerError, match="environment 1 failed earlier"):
        wrapper.step([0], idx=1)


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_close_leaves_no_worker_process():
    wrapper = ParallelWrapperSubProc(counters(3))
    pids = worker_pids(wrapper)
    assert set(pids) <= child_pids()
    wrapper.close()
    assert not set(pids) & child_pids()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_garbage_collection_leaves_no_worker_process():
    wrapper = ParallelWrapperSubProc(counters(2))
    wrapper.reset()
    pids = worker_pids(wrapper)
    assert set(pids) <= child_pids()
    del wrapper
    gc.collect()
    assert not set(pids) & child_pids()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_workers_do_not_outlive_a_parent_that_dies_without_closing():
    # The child registers a bare `machin` package so that importing machin.env does not
    # run machin/__init__.py, whose torch import would take seconds; machin.env needs
    # no torch.
    script = (
        "import os, sys, types, gymnasium as gym\n"
        "package = types.ModuleType('machin')\n"
        "package.__path__ = [sys.argv[1]]\n"
        "sys.modules['machin'] = package\n"
        "from machin.env.wrappers import ParallelWrapperSubProc\n"
        "wrapper = ParallelWrapperSubProc([lambda i: gym.make('CartPole-v1')] * 2)\n"
        "wrapper.reset()\n"
        "print(*[process.pid for process in wrapper._processes], flush=True)\n"
        "os._exit(0)  # no close(), no finaliser, no atexit handler\n"
    )
    machin_path = os.path.dirname(os.path.dirname(machin.env.__file__))
    result = subprocess.run(
        [sys.executable, "-c", script, machin_path], capture_output=True, text=True, timeout=50
    )
    assert result.returncode == 0, result.stderr
    pids = [int(pid) for pid in result.stdout.split()]
    assert len(pids) == 2
    workers = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            workers.append(psutil.Process(pid))
    _, alive = psutil.wait_procs(workers, timeout=20)
    for process in alive:
        process.kill()
    assert alive == []


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_failing_creator_is_reported_and_cleaned_up():
    def creator(index):
        if index == 1:
            raise ValueError("bad creator")
        return CounterEnv(index)

    before = child_pids()
    with pytest.raises(
        GymWorkerError,
        match=r"environment 1 raised(.|\n)*failed to create environment 1(.|\n)*ValueError: bad creator",
    ) as info:
        ParallelWrapperSubProc([creator] * 2)
    assert isinstance(info.value, (GymTerminationError, RuntimeError))
    assert "ValueError: bad creator" in info.value.remote_traceback
    assert isinstance(info.value.__cause__, ValueError)
    assert child_pids() == before


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_unpicklable_action_fails_before_anything_is_sent(make):
    wrapper = make(ParallelWrapperSubProc, counters(2))
    wrapper.reset()
    with pytest.raises(TypeError, match="step arguments for environment 1 cannot be pickled"):
        wrapper.step([0, lambda: 1])
    # no command went out, so replies still match commands
    assert [info["t"] for info in wrapper.step([0, 0])[3]] == [1, 1]


class UnpicklableInfoEnv(CounterEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {"callback": lambda: None}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_reply_that_cannot_be_pickled_is_reported(make):
    wrapper = make(ParallelWrapperSubProc, [lambda i: UnpicklableInfoEnv(i)])
    wrapper.reset()
    with pytest.raises(GymTerminationError, match="environment 0 raised an exception") as info:
        wrapper.step([0])
    assert "pickle" in info.value.remote_traceback.lower()
    assert "lambda" in info.value.remote_traceback


class Interrupted(Exception):
    pass


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_interrupted_call_puts_unanswered_environments_out_of_service(make):
    wrapper = make(
        ParallelWrapperSubProc, [lambda i: CounterEnv(i, slow_at=2 if i == 0 else None)] * 3
    )
    wrapper.reset()
    wrapper.step([0, 0, 0])

    def interrupt(*_):
        raise Interrupted()

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(
        0.3, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1)
    )
    timer.start()
    try:
        with pytest.raises(Interrupted):
            wrapper.step([0, 0], idx=[0, 1])  # environment 0 answers after 1.5 s
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)
    assert wrapper.active().tolist() == [2]
    with pytest.raises(
        GymTerminationError, match="environment 0 failed earlier.*interrupted while running 'step'"
    ):
        wrapper.reset(idx=0)
    with pytest.raises(GymTerminationError, match="environment 1 failed earlier.*interrupted"):
        wrapper.step([0], idx=1)
    # environment 2 was not part of the interrupted call and keeps working
    assert [info["t"] for info in wrapper.step([0], idx=2)[3]] == [2]


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_subproc_argument_errors():
    generator = (x for x in range(3))
    with pytest.raises(TypeError, match=r"env_creators\[0\] cannot be serialised with dill"):
        ParallelWrapperSubProc([lambda i: (generator, CounterEnv(i))[1]])
    with pytest.raises(ValueError, match="context must be one of .*got 'threads'"):
        ParallelWrapperSubProc(counters(1), context="threads")


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_subproc_with_spawn_context(make):
    wrapper = make(ParallelWrapperSubProc, [lambda i: gym.make("CartPole-v1")], context="spawn")
    wrapper.seed(3)
    reference = gym.make("CartPole-v1")
    np.testing.assert_array_equal(wrapper.reset()[0], reference.reset(seed=3)[0])
    reference.close()


# -- old gym-style environments -------------------------------------------------------------------


@BOTH
def test_old_gym_style_environments_are_adapted(wrapper_class, make, legacy_env_class):
    wrapper = make(wrapper_class, [lambda i: legacy_env_class(horizon=2, truncate=i == 1)] * 2)
    wrapper.seed([1, 2])
    assert [obs.tolist() for obs in wrapper.reset()] == [[10.0], [20.0]]
    wrapper.step([1, 1])
    _, rewards, terminals, infos = wrapper.step([1, 0])
    assert rewards == [1.0, 0.0] and terminals == [True, True]
    assert [(i["terminated"], i["truncated"]) for i in infos] == [(True, False), (False, True)]

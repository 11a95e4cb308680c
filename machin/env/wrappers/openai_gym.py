"""Parallel wrappers for gymnasium environments.

Two wrappers share one interface (:class:`~machin.env.wrappers.base.ParallelWrapperBase`)
and one set of rules, implemented once in :class:`_GymParallelWrapper`:

* :class:`ParallelWrapperDummy` steps the environments one after the other in the calling
  process; it is meant for debugging.
* :class:`ParallelWrapperSubProc` runs every environment in its own worker process.

The environments follow the gymnasium API; old gym-style environments returned by a
creator are adapted with :func:`machin.env.utils.openai_gym.ensure_gymnasium_env`.
"""

import contextlib
import multiprocessing
import numbers
import os
import pickle
import signal
import threading
import time
import traceback
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import dill
import numpy as np

from ...parallel.pickle import dumps as pickle_dumps
from ...utils.compat import ignores_extra_args
from ..utils.openai_gym import ensure_gymnasium_env
from .base import ParallelWrapperBase

__all__ = [
    "GymTerminationError",
    "GymTimeoutError",
    "GymWorkerError",
    "ParallelWrapperDummy",
    "ParallelWrapperSubProc",
]

EnvCreator = Callable[[int], Any]
Index = Union[int, List[int], None]

# How often a worker's watchdog thread checks that its parent process is still alive.
_PARENT_CHECK_INTERVAL = 1.0
# How long close() waits for workers to exit on their own before terminating them.
_CLOSE_TIMEOUT = 5.0


class GymTerminationError(Exception):
    """An environment cannot run the requested operation.

    Raised when a selected environment is not active (it reached a terminal state, or
    was never reset) and when an environment has failed: its worker process died, or the
    environment raised an exception (in which case that environment is out of service
    for the rest of the wrapper's life).

    When an environment raised an exception, that exception is the ``__cause__`` of
    the error (for :class:`ParallelWrapperSubProc`, when it could be pickled back from
    the worker).

    Args:
        message: Description of the problem; it names the environment index. Without
            it, the message of Machin 0.3.4 is used.
        env_index: Index of the environment concerned.
        remote_traceback: Traceback text of the exception raised inside a worker process,
            when there was one.

    Attributes:
        env_index: Index of the environment concerned, or ``None``.
        remote_traceback: Traceback text from the worker process, or ``None``.
    """

    def __init__(
        self,
        message: Optional[str] = None,
        env_index: Optional[int] = None,
        remote_traceback: Optional[str] = None,
    ) -> None:
        if message is None:
            message = "One or several environments have terminated, reset before continuing."
        super().__init__(message)
        self.env_index = env_index
        self.remote_traceback = remote_traceback


class GymWorkerError(GymTerminationError, RuntimeError):
    """The worker process of an environment failed to create it, or died.

    A :class:`GymTerminationError` that is also a :class:`RuntimeError`, the type
    Machin 0.3.4 raised in these cases.
    """


class GymTimeoutError(GymWorkerError, TimeoutError):
    """An environment did not answer within the ``timeout`` of :class:`ParallelWrapperSubProc`.

    Its worker process is killed and reaped, and the environment is out of service, as
    for a worker that died. A :class:`GymWorkerError` (so also a ``GymTerminationError``
    and a ``RuntimeError``) and a built-in :class:`TimeoutError`.
    """


# ---------------------------------------------------------------------------------------
# What each command does to one environment. Both wrappers call these functions, the
# dummy one directly and the sub-process one inside its workers.
# ---------------------------------------------------------------------------------------


def _env_reset(env: Any, seed: Optional[int]) -> Tuple[Any, Dict[str, Any]]:
    return env.reset(seed=seed)


def _env_step(env: Any, action: Any) -> Tuple[Any, float, bool, Dict[str, Any]]:
    observation, reward, terminated, truncated, info = env.step(action)
    info = dict(info)
    info["terminated"] = bool(terminated)
    info["truncated"] = bool(truncated)
    return observation, float(reward), bool(terminated or truncated), info


def _env_render(env: Any) -> Any:
    return env.render()


def _env_spaces(env: Any) -> Tuple[Any, Any]:
    return env.action_space, env.observation_space


def _env_close(env: Any) -> None:
    env.close()


_COMMANDS: Dict[str, Callable[..., Any]] = {
    "reset": _env_reset,
    "step": _env_step,
    "render": _env_render,
    "spaces": _env_spaces,
    "close": _env_close,
}


class _Failure:
    """Marks the result of an environment that failed while running a command."""

    __slots__ = ("error",)

    def __init__(self, error: GymTerminationError) -> None:
        self.error = error


class _ActiveIndexes(np.ndarray):
    """The integer array returned by ``active()``: a numpy array, as in Machin 0.3.4, that
    is also true exactly when it is not empty, like a list (``while envs.active(): ...``).

    Results of computations on it (``active == 2``, ``active + 1``) are plain arrays.
    """

    def __bool__(self) -> bool:
        return self.size > 0

    def __repr__(self) -> str:
        return repr(np.asarray(self))

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        plain = np.asarray(array)
        return plain[()] if return_scalar else plain


def _is_index(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


class _GymParallelWrapper(ParallelWrapperBase):
    """Argument checking and bookkeeping shared by the gymnasium parallel wrappers.

    Subclasses create the environments, then call :meth:`_init_spaces`, and implement
    :meth:`_execute` (run one command on several environments) and :meth:`_shutdown`.
    """

    def __init__(self, env_creators: Sequence[EnvCreator]) -> None:
        super().__init__()
        if isinstance(env_creators, (str, bytes)) or not isinstance(env_creators, Sequence):
            raise TypeError(
                "env_creators must be a list of callables, each taking the environment "
                f"index, got {type(env_creators).__name__}"
            )
        if len(env_creators) == 0:
            raise ValueError("env_creators must contain at least one creator, got an empty list")
        for index, creator in enumerate(env_creators):
            if not callable(creator):
                raise TypeError(
                    f"env_creators[{index}] must be callable (index -> env), "
                    f"got {creator!r} of type {type(creator).__name__}"
                )
        self._size = len(env_creators)
        self._active = [False] * self._size
        self._failures: List[Optional[GymTerminationError]] = [None] * self._size
        self._pending_seeds: List[Optional[int]] = [None] * self._size
        self._closed = False
        self._action_space: Any = None
        self._observation_space: Any = None

    # -- to be implemented by subclasses ------------------------------------------------

    def _execute(self, indices: List[int], command: str, args: List[tuple]) -> List[Any]:
        """Run ``command`` on each selected environment with its own arguments.

        Returns one result per index, a :class:`_Failure` for an environment that failed.
        """
        raise NotImplementedError

    def _shutdown(self) -> None:
        """Close every environment and release resources (called once, by ``close``)."""
        raise NotImplementedError

    # -- shared helpers -------------------------------------------------------------------

    def _init_spaces(self) -> None:
        """Read the spaces of every environment and check that they are all the same."""
        spaces = self._run(list(range(self._size)), "spaces", [()] * self._size)
        self._action_space, self._observation_space = spaces[0]
        for index, (action_space, observation_space) in enumerate(spaces):
            for kind, expected, got in (
                ("action", self._action_space, action_space),
                ("observation", self._observation_space, observation_space),
            ):
                if got != expected:
                    raise ValueError(
                        f"all environments must share one {kind} space: environment 0 has "
                        f"{expected!r} but environment {index} has {got!r}"
                    )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed; create a new wrapper")

    def _select(self, idx: Index) -> List[int]:
        """Turn ``idx`` into a list of valid indexes of environments that have not failed."""
        self._check_open()
        if idx is None:
            indices = list(range(self._size))
        elif _is_index(idx):
            indices = [int(idx)]
        else:
            try:
                indices = list(idx)
            except TypeError:
                raise TypeError(
                    "idx must be None, an int or a list of ints, "
                    f"got {idx!r} of type {type(idx).__name__}"
                ) from None
            for index in indices:
                if not _is_index(index):
                    raise TypeError(
                        f"idx must contain only ints, got {index!r} of type "
                        f"{type(index).__name__} in {idx!r}"
                    )
            indices = [int(index) for index in indices]
        for index in indices:
            if not 0 <= index < self._size:
                raise ValueError(
                    f"idx must be in range [0, {self._size}) for {self._size} environments, "
                    f"got {index}"
                )
        if len(set(indices)) != len(indices):
            raise ValueError(f"idx must not repeat an environment index, got {indices}")
        for index in indices:
            failure = self._failures[index]
            if failure is not None:
                raise type(failure)(
                    f"environment {index} failed earlier and is out of service: {failure}",
                    env_index=index,
                    remote_traceback=failure.remote_traceback,
                )
        return indices

    def _run(
        self,
        indices: List[int],
        command: str,
        args: List[tuple],
        on_success: Optional[Callable[[int, Any], None]] = None,
    ) -> List[Any]:
        """Execute a command, record failures, then raise the first one if any."""
        results = self._execute(indices, command, args)
        first_error = None
        for index, result in zip(indices, results):
            if isinstance(result, _Failure):
                self._failures[index] = result.error
                self._active[index] = False
                if first_error is None:
                    first_error = result.error
            elif on_success is not None:
                on_success(index, result)
        if first_error is not None:
            raise first_error
        return results

    @staticmethod
    def _split_actions(action: Any, count: int) -> List[Any]:
        try:
            length = len(action)
        except TypeError:
            raise TypeError(
                "action must be a list or array with one action per selected environment, "
                f"got {action!r} of type {type(action).__name__}"
            ) from None
        if length != count:
            raise ValueError(
                f"Action number must match environment number: action must have one entry "
                f"per selected environment, len(action) is {length} but idx selects "
                f"{count} environment(s)"
            )
        return [action[k] for k in range(count)]

    # -- public API -------------------------------------------------------------------------

    def reset(
        self, idx: Index = None, *, return_info: bool = False
    ) -> Union[List[Any], Tuple[List[Any], List[Dict[str, Any]]]]:
        """Reset all environments, or the selected ones, which then become active.

        A seed chosen with :meth:`seed` is passed to the environment's
        ``reset(seed=...)`` the next time that environment is reset, and then forgotten,
        so later resets continue the seeded random stream.

        Args:
            idx: Index or list of indexes of the environments to reset; ``None`` means
                all of them.
            return_info: Also return the ``info`` dicts produced by ``env.reset``.

        Returns:
            The list of initial observations of the selected environments, in the order of
            ``idx``; with ``return_info=True``, the tuple ``(observations, infos)``.

        Raises:
            TypeError, ValueError: If ``idx`` is not valid.
            GymTerminationError: If a selected environment failed.
            RuntimeError: If the wrapper is closed.
        """
        indices = self._select(idx)

        def mark_reset(index: int, _: Any) -> None:
            self._active[index] = True
            self._pending_seeds[index] = None

        results = self._run(
            indices, "reset", [(self._pending_seeds[i],) for i in indices], mark_reset
        )
        observations = [result[0] for result in results]
        if return_info:
            return observations, [result[1] for result in results]
        return observations

    def step(
        self, action: Union[np.ndarray, List[Any]], idx: Index = None
    ) -> Tuple[List[Any], List[float], List[bool], List[Dict[str, Any]]]:
        """Advance the selected environments by one time step.

        The selected environments must be active. An environment whose step reports
        ``terminated`` or ``truncated`` becomes inactive and must be reset before it is
        stepped again.

        Args:
            action: One action per selected environment (a list, or an array whose first
                dimension is the number of selected environments), in the order of
                ``idx``; also when ``idx`` is a single int.
            idx: Index or list of indexes of the environments to step; ``None`` means all.

        Returns:
            ``(observations, rewards, terminals, infos)``, four lists with one entry per
            selected environment. ``terminal`` is ``terminated or truncated``; each
            ``info`` dict is a copy of the environment's, with the added keys
            ``"terminated"`` and ``"truncated"`` so that time-limit truncation can be told
            apart from a real terminal state.

        Raises:
            TypeError, ValueError: If ``idx`` or ``action`` is not valid, including
                ``len(action) != len(idx)``.
            GymTerminationError: If a selected environment is not active, or fails.
            RuntimeError: If the wrapper is closed.
        """
        indices = self._select(idx)
        actions = self._split_actions(action, len(indices))
        inactive = [index for index in indices if not self._active[index]]
        if inactive:
            raise GymTerminationError(
                f"One or several environments have terminated, reset before continuing: "
                f"cannot step environment(s) {inactive}: not active (terminal, or never "
                f"reset); call reset(idx={inactive}) first",
                env_index=inactive[0],
            )

        def mark_terminal(index: int, result: Tuple[Any, float, bool, Dict[str, Any]]) -> None:
            self._active[index] = not result[2]

        results = self._run(indices, "step", [(a,) for a in actions], mark_terminal)
        return (
            [result[0] for result in results],
            [result[1] for result in results],
            [result[2] for result in results],
            [result[3] for result in results],
        )

    def seed(self, seed: Union[int, List[int], None] = None) -> List[int]:
        """Choose the seeds used at the next reset of each environment.

        Gymnasium environments have no ``seed`` method: they are seeded through
        ``reset(seed=...)``. This method only records the seeds; each environment
        receives its seed the next time it is reset (see :meth:`reset`).

        Args:
            seed: An ``int`` gives every environment that same seed; a list gives one seed
                per environment and must have ``size()`` entries; ``None`` draws fresh
                seeds from the operating system's entropy, so the run can be repeated
                from the returned values.

        Returns:
            The seed each environment will use, one per environment.

        Raises:
            TypeError: If ``seed`` or one of its entries is not an int.
            ValueError: If a seed is negative, or the list length is not ``size()``.
            RuntimeError: If the wrapper is closed.
        """
        self._check_open()
        if seed is None:
            seeds = [int(s) for s in np.random.SeedSequence().generate_state(self._size)]
        elif _is_index(seed):
            seeds = [int(seed)] * self._size
        elif isinstance(seed, (list, tuple, np.ndarray)):
            if len(seed) != self._size:
                raise ValueError(
                    f"seed list must have one seed per environment ({self._size}), "
                    f"got {len(seed)} seeds"
                )
            for entry in seed:
                if not _is_index(entry):
                    raise TypeError(
                        f"seed list must contain ints, got {entry!r} of type {type(entry).__name__}"
                    )
            seeds = [int(entry) for entry in seed]
        else:
            raise TypeError(
                f"seed must be None, an int or a list of ints, got {seed!r} of type "
                f"{type(seed).__name__}"
            )
        negative = [s for s in seeds if s < 0]
        if negative:
            raise ValueError(f"seeds must be non-negative, got {negative[0]}")
        self._pending_seeds = list(seeds)
        return list(seeds)

    @ignores_extra_args
    def render(self, idx: Index = None) -> List[np.ndarray]:
        """Render all environments, or the selected ones, as RGB frames.

        The environments must have been created with ``render_mode="rgb_array"``; in
        gymnasium the render mode is fixed at creation, so extra positional or keyword
        arguments (such as an old ``mode="rgb_array"``) are accepted and ignored, with
        an :class:`~machin.utils.compat.ExtraArgumentsWarning`.

        Args:
            idx: Index or list of indexes of the environments to render; ``None`` means
                all.

        Returns:
            One ``(H, W, 3)`` array per selected environment.

        Raises:
            RuntimeError: If an environment does not return an ``(H, W, 3)`` array, or
                the wrapper is closed.
            GymTerminationError: If a selected environment fails.
        """
        indices = self._select(idx)
        frames = self._run(indices, "render", [()] * len(indices))
        for index, frame in zip(indices, frames):
            if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[2] == 3):
                described = (
                    f"an array of shape {frame.shape}"
                    if isinstance(frame, np.ndarray)
                    else repr(type(frame).__name__)
                )
                raise RuntimeError(
                    f"render() of environment {index} returned {described}, expected an "
                    "(H, W, 3) array; create the environments with render_mode='rgb_array'"
                )
        return frames

    def close(self) -> None:
        """Close all environments; the wrapper cannot be used afterwards.

        Calling it again does nothing.
        """
        if self._closed:
            return
        self._closed = True
        self._active = [False] * self._size
        self._shutdown()

    def active(self) -> np.ndarray:
        """Return the indexes of the active environments (reset and not terminal since).

        Returns:
            A 1-D integer numpy array, as in Machin 0.3.4 (``.tolist()`` gives a list). It
            is true when it is not empty, so ``while envs.active():`` works as with a list.
        """
        return np.flatnonzero(np.asarray(self._active, dtype=bool)).view(_ActiveIndexes)

    def size(self) -> int:
        """Return the number of environments."""
        return self._size

    @property
    def action_space(self) -> Any:
        """The action space shared by all environments."""
        return self._action_space

    @property
    def observation_space(self) -> Any:
        """The observation space shared by all environments."""
        return self._observation_space

    def __enter__(self) -> "_GymParallelWrapper":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class ParallelWrapperDummy(_GymParallelWrapper):
    """Run the environments one after the other in the calling process (for debugging).

    It behaves exactly like :class:`ParallelWrapperSubProc` (same results for the same
    seeds and actions) but needs no processes, so breakpoints and profilers work inside
    the environments. An exception raised by an environment is re-raised as
    :class:`GymTerminationError` chained to the original exception, and that environment
    is out of service afterwards, as with the sub-process wrapper.

    Args:
        env_creators: One callable per environment; each is called with the environment
            index (``0 .. n - 1``) and returns a gymnasium environment (an old gym-style
            one is adapted). All environments must share the same action and observation
            space.

    Raises:
        TypeError: If ``env_creators`` is not a list of callables.
        ValueError: If it is empty, or the environments' spaces differ.
        Exception: Whatever a creator raises, unchanged.
    """

    def __init__(self, env_creators: List[EnvCreator]) -> None:
        super().__init__(env_creators)
        self._envs: List[Any] = []
        try:
            for index, creator in enumerate(env_creators):
                self._envs.append(ensure_gymnasium_env(creator(index)))
            self._init_spaces()
        except BaseException:
            self.close()  # closes the environments created so far
            raise

    def _execute(self, indices: List[int], command: str, args: List[tuple]) -> List[Any]:
        function = _COMMANDS[command]
        results: List[Any] = []
        for index, arguments in zip(indices, args):
            try:
                results.append(function(self._envs[index], *arguments))
            except Exception as exc:
                error = GymTerminationError(
                    f"environment {index} raised {type(exc).__name__}: {exc}",
                    env_index=index,
                )
                error.__cause__ = exc
                results.append(_Failure(error))
        return results

    def _shutdown(self) -> None:
        for env in self._envs:
            env.close()
        self._envs = []


# ---------------------------------------------------------------------------------------
# Sub-process wrapper
# ---------------------------------------------------------------------------------------


# Messages between the parent and its workers are plain pickles sent as bytes, which is
# cheaper than Connection.send (a new ForkingPickler for every message).
_loads = pickle.loads


def _dumps(message: Any) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def _dump_creator(creator: EnvCreator) -> bytes:
    """Serialise a creator for its worker (dill, through machin's pickler).

    :func:`machin.parallel.pickle.dumps` rebuilds classes defined in ``__main__``
    (environments defined in the user's script) with their real base classes, which
    plain ``dill`` loses for subclasses of ``gymnasium.Env``.
    """
    return pickle_dumps(creator, recurse=True, copy_tensor=True)


def _default_start_method() -> str:
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def _exit_when_orphaned(parent_pid: int) -> None:
    """Watchdog thread of a worker: end the process once its parent is gone."""
    while True:
        time.sleep(_PARENT_CHECK_INTERVAL)
        if os.getppid() != parent_pid:
            os._exit(1)


def _worker(connection: Any, parent_end: Any, payload: bytes, index: int, parent_pid: int) -> None:
    """Body of a worker process: create one environment, then serve commands.

    Every command gets exactly one reply, ``("ok", result)`` or ``("error", traceback)``.
    After an error, and after ``close``, the worker exits. It also exits when the
    connection breaks, and a watchdog thread ends it if its parent process disappears
    (the connection alone may not break then: processes forked later can hold a copy of
    the parent's end), so it never outlives its owner. Commands are read with a blocking
    receive, which keeps the per-command cost at one wake-up.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    if parent_end is not None:
        parent_end.close()
    env = None
    creation_error = None
    try:
        env = ensure_gymnasium_env(dill.loads(payload)(index))
    except Exception as exc:
        creation_error = _error_reply("create_error", exc)
    try:
        while True:
            data = connection.recv_bytes()
            if creation_error is not None:
                connection.send_bytes(creation_error)
                break
            try:
                command, args = _loads(data)
                reply = _dumps(("ok", _COMMANDS[command](env, *args)))
            except Exception as exc:
                connection.send_bytes(_error_reply("error", exc))
                break
            connection.send_bytes(reply)
            if command == "close":
                env = None
                break
    except (EOFError, OSError, KeyboardInterrupt):
        pass
    finally:
        if env is not None:
            with contextlib.suppress(Exception):
                env.close()
        connection.close()


def _error_reply(status: str, exc: BaseException) -> bytes:
    """A worker's reply for a failure: the traceback text and, when it pickles, the exception."""
    try:
        pickled_exc: Optional[bytes] = _dumps(exc)
        _loads(pickled_exc)
    except Exception:
        pickled_exc = None
    return _dumps((status, traceback.format_exc(), pickled_exc))


def _stop_workers(owner_pid: int, processes: List[Any], connections: List[Any]) -> None:
    """Close the environments and make sure every worker process has exited and is reaped.

    Registered with :func:`weakref.finalize`, so it also runs when the wrapper is garbage
    collected or the interpreter exits. Does nothing in a process other than the owner
    (a forked child inherits the wrapper object but not the right to join its workers).
    """
    if os.getpid() != owner_pid:
        return
    for connection, process in zip(connections, processes):
        if process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                connection.send_bytes(_dumps(("close", ())))
    deadline = time.monotonic() + _CLOSE_TIMEOUT
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(1.0)
        if process.is_alive():
            process.kill()
            process.join()
    for connection in connections:
        connection.close()
    processes.clear()
    connections.clear()


class ParallelWrapperSubProc(_GymParallelWrapper):
    """Run every environment in its own worker process.

    Each call sends its command to all selected workers first and only then collects the
    replies, so the environments work in parallel. Creators may be lambdas or closures:
    they are serialised with ``dill`` (``recurse=True``) and called in the worker.

    Worker processes are started with the ``"fork"`` method where the platform has it
    (fast start, nothing re-imported) and ``"spawn"`` otherwise; pass ``context`` to
    choose another. With ``"spawn"`` or ``"forkserver"`` the worker imports ``machin``
    and whatever the creator needs.

    A worker that dies (killed, or its environment raised an exception) makes the call
    raise :class:`GymTerminationError` naming the environment index, with the remote
    traceback text when there is one and the environment's exception as ``__cause__``
    when it can be pickled; a killed worker or a failed creation raises a
    :class:`GymWorkerError`, which is also a ``RuntimeError``. The other selected
    environments still complete the command, and the failed environment stays out of
    service.

    :meth:`close` closes the environments and joins the workers (terminating any that do
    not exit within a few seconds). The same clean-up runs automatically when the wrapper
    is garbage collected or the interpreter exits, and idle workers exit by themselves if
    the parent process disappears, so no worker is left behind.

    Args:
        env_creators: One callable per environment, called in its worker with the
            environment index (``0 .. n - 1``); it returns a gymnasium environment (an
            old gym-style one is adapted). All environments must share the same action
            and observation space.
        context: ``multiprocessing`` start method; ``None`` means ``"fork"`` where
            available, else ``"spawn"``.
        timeout: Keyword only. Seconds each call (``reset``, ``step``, ``render``, and
            the reading of the spaces at construction, which also waits for the
            environments to be created) may wait for the replies of its environments;
            ``None`` (the default) waits forever. An environment that has not answered in
            time (its ``step`` hangs, or its worker was stopped) makes the call raise
            :class:`GymTimeoutError` naming its index; its worker is killed and reaped,
            and the environment stays out of service. The other environments still
            complete the call.

    Raises:
        TypeError: If ``env_creators`` is not a list of callables, or a creator cannot be
            serialised with dill.
        ValueError: If it is empty, ``context`` is unknown, the spaces differ, or
            ``timeout`` is not a positive number.
        GymWorkerError: If a creator raises in its worker (a ``GymTerminationError``
            and a ``RuntimeError``).
    """

    def __init__(
        self,
        env_creators: List[EnvCreator],
        *,
        context: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        super().__init__(env_creators)
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout > 0
        ):
            raise ValueError(
                f"timeout must be a positive number of seconds or None, got {timeout!r}"
            )
        self._timeout = None if timeout is None else float(timeout)
        method = _default_start_method() if context is None else context
        if method not in multiprocessing.get_all_start_methods():
            raise ValueError(
                f"context must be one of {multiprocessing.get_all_start_methods()}, got {context!r}"
            )
        payloads = []
        for index, creator in enumerate(env_creators):
            try:
                payloads.append(_dump_creator(creator))
            except Exception as exc:
                raise TypeError(
                    f"env_creators[{index}] cannot be serialised with dill: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        mp_context = multiprocessing.get_context(method)
        self._processes: List[Any] = []
        self._connections: List[Any] = []
        self._finalizer = weakref.finalize(
            self, _stop_workers, os.getpid(), self._processes, self._connections
        )
        try:
            for index, payload in enumerate(payloads):
                # Start workers one by one and drop the child end right after each start,
                # so that a later worker never holds an earlier worker's end: the parent
                # then sees EOF as soon as a worker dies.
                parent_end, child_end = mp_context.Pipe(duplex=True)
                process = mp_context.Process(
                    target=_worker,
                    args=(
                        child_end,
                        parent_end if method == "fork" else None,
                        payload,
                        index,
                        os.getpid(),
                    ),
                    name=f"machin-env-worker-{index}",
                    daemon=True,
                )
                process.start()
                child_end.close()
                self._processes.append(process)
                self._connections.append(parent_end)
            self._init_spaces()
        except BaseException:
            self._closed = True
            self._finalizer()
            raise

    def _lost(self, index: int) -> _Failure:
        """Describe a worker whose connection broke (it died)."""
        process = self._processes[index]
        process.join(1.0)
        code = process.exitcode
        if code is None:
            how = "its connection broke while it was still running"
        elif code < 0:
            try:
                how = f"it was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"it was killed by signal {-code}"
        else:
            how = f"it exited with code {code}"
        if code is not None and code < 0:
            how += f" (exited with code {code})"
        return _Failure(
            GymWorkerError(
                f"the worker process of environment {index} (pid {process.pid}) died: {how}",
                env_index=index,
            )
        )

    def _execute(self, indices: List[int], command: str, args: List[tuple]) -> List[Any]:
        # Serialise every message first: an argument that cannot be pickled must fail
        # before anything is sent, or the replies would no longer match the commands.
        messages = []
        for index, arguments in zip(indices, args):
            try:
                messages.append(_dumps((command, arguments)))
            except Exception as exc:
                raise TypeError(
                    f"the {command} arguments for environment {index} cannot be pickled "
                    f"for its worker process: {type(exc).__name__}: {exc}"
                ) from exc
        results: List[Any] = [None] * len(indices)
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        pending = []
        for position, (index, message) in enumerate(zip(indices, messages)):
            try:
                self._connections[index].send_bytes(message)
                pending.append(position)
            except (OSError, ValueError):
                results[position] = self._lost(index)
        try:
            while pending:
                position = pending[0]
                results[position] = self._receive(indices[position], command, deadline)
                pending.pop(0)
        except BaseException:
            # Interrupted (Ctrl-C, for instance) before every reply arrived: the replies
            # still on their way would be taken for answers to later commands, so the
            # environments concerned are put out of service.
            for position in pending:
                index = indices[position]
                self._active[index] = False
                self._failures[index] = GymTerminationError(
                    f"environment {index} was interrupted while running {command!r}",
                    env_index=index,
                )
            raise
        return results

    def _retire(self, index: int, command: str) -> _Failure:
        """Kill and reap the worker of an environment that did not answer in time."""
        process = self._processes[index]
        if process.is_alive():
            process.kill()  # SIGKILL also ends a stopped (SIGSTOP) process
        process.join(_CLOSE_TIMEOUT)
        state = "killed" if process.exitcode is not None else "sent SIGKILL, not yet reaped"
        self._connections[index].close()
        return _Failure(
            GymTimeoutError(
                f"environment {index} did not answer {command!r} within the timeout of "
                f"{self._timeout} s: its worker process (pid {process.pid}) is {state}, and "
                f"environment {index} is out of service",
                env_index=index,
            )
        )

    def _receive(self, index: int, command: str = "", deadline: Optional[float] = None) -> Any:
        """Wait for the reply of one worker; return its result or a :class:`_Failure`."""
        connection = self._connections[index]
        try:
            if deadline is not None and not connection.poll(max(0.0, deadline - time.monotonic())):
                return self._retire(index, command)
            data = connection.recv_bytes()
        except (EOFError, OSError):
            return self._lost(index)
        try:
            status, payload, *pickled_exc = _loads(data)
        except Exception as exc:
            return _Failure(
                GymTerminationError(
                    f"the reply of environment {index} cannot be unpickled: "
                    f"{type(exc).__name__}: {exc}",
                    env_index=index,
                )
            )
        if status == "ok":
            return payload
        self._processes[index].join(1.0)
        pid = self._processes[index].pid
        if status == "create_error":
            error: GymTerminationError = GymWorkerError(
                f"environment {index} raised an exception while being created: the worker "
                f"process (pid {pid}) failed to create environment {index}:\n{payload}",
                env_index=index,
                remote_traceback=payload,
            )
        else:
            error = GymTerminationError(
                f"environment {index} raised an exception in its worker process "
                f"(pid {pid}):\n{payload}",
                env_index=index,
                remote_traceback=payload,
            )
        if pickled_exc and pickled_exc[0] is not None:
            with contextlib.suppress(Exception):
                error.__cause__ = _loads(pickled_exc[0])
        return _Failure(error)

    def _shutdown(self) -> None:
        self._finalizer()

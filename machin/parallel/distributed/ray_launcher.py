"""Run a function on a Ray cluster, one Ray actor per world rank.

:func:`launch_ray` is :func:`~machin.parallel.distributed.launcher.launch` for the
``ray`` transport: it connects to a running cluster (``address``) or starts a local
one, creates one :class:`~machin.parallel.distributed.transport.ray.RankActor` per
rank (named in a namespace of its own, so that the ranks find each other), calls
``target(rank, *args)`` in each and brings back every return value or exception
with its remote traceback. Every actor is killed before it returns, whatever
happened. Inside the actors ``World(...)`` uses the ``ray`` transport by default,
so a script's ``main(rank)`` runs unchanged under both launchers::

    from machin.parallel.distributed import World, launch_ray

    def main(rank):
        world = World(name=str(rank), rank=rank, world_size=3)
        ...

    launch_ray(main, 3)                        # a local Ray instance
    launch_ray(main, 3, address="10.0.0.1:6379")  # an existing cluster
"""

import io
import os
import signal
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..pickle import Pickler, dumps, loads
from .launcher import Exited, _results
from .transport import ENV_VARIABLE
from .transport.ray import RankActor, actor_name, require_ray

__all__ = ["launch_ray"]


class _Connection:
    """This process's connection to Ray, made by :func:`launch_ray` (or found made).

    ``ray.init`` installs its own SIGTERM handler (``sys.exit``) in the calling process and
    ``ray.shutdown`` leaves it there; a process that forks workers afterwards (a ``Pool``)
    would hand it to them, and ``terminate()`` would then run their exit handlers instead
    of ending them. :meth:`close` disconnects, if this call connected, and puts the
    handler of before back.
    """

    def __init__(self, ray: Any, address: Optional[str], world_size: int):
        self.ray = ray
        main = threading.current_thread() is threading.main_thread()
        self.sigterm = signal.getsignal(signal.SIGTERM) if main else None
        self.started = _connect(ray, address, world_size)

    def close(self) -> None:
        if not self.started:
            return
        self.ray.shutdown()
        if self.sigterm is not None and signal.getsignal(signal.SIGTERM) is not self.sigterm:
            signal.signal(signal.SIGTERM, self.sigterm)


def _connect(ray: Any, address: Optional[str], world_size: int) -> bool:
    """Connect to ``address`` (or start a local instance); ``True`` when this call did."""
    if ray.is_initialized():
        return False
    options: Dict[str, Any] = {"address": address, "logging_level": "ERROR"}
    if address is None:  # a new local instance with room for one actor per rank
        options.update(
            address="local",
            num_cpus=max(world_size, os.cpu_count() or 1),
            include_dashboard=False,
        )
    ray.init(**options)
    return True


def _actor_env(rank: int, world_size: int) -> Dict[str, str]:
    """Environment of a rank's actor: the torchrun variables and the default transport."""
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(rank),
        ENV_VARIABLE: "ray",
    }


def _runtime_env() -> Dict[str, Any]:
    """Let the actors import what the caller imports (its working directory, its path)."""
    paths = [os.getcwd()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}}


def _start_actors(
    ray: Any,
    world_size: int,
    namespace: str,
    options: Dict[str, Any],
    restarts: Dict[int, int],
) -> List[Any]:
    """One actor per rank; Ray restarts those of the ranks in ``restarts`` (rank -> most times)."""
    actor_class = ray.remote(RankActor)
    actors = []
    for rank in range(world_size):
        extra = {}
        if rank in restarts:  # a task running when the actor dies fails: the launcher reruns it
            extra = {"max_restarts": restarts[rank], "max_task_retries": 0}
        actor = actor_class.options(
            name=actor_name(rank), namespace=namespace, **{**options, **extra}
        ).remote(rank, world_size, namespace, _actor_env(rank, world_size))
        actors.append(actor)
    return actors


def _payload(target: Callable[..., Any]) -> Tuple[bytes, Optional[str]]:
    """The dill payload of ``target``, and the script the ranks must load as their ``__main__``
    before reading it (``None``: none is needed).

    A function of the caller's script travels by value with the globals it uses
    (dill's ``recurse``). When functions of the script call each other, dill's search
    of those globals never ends; the payload then refers to the globals of ``__main__``
    as the receiving process has them, so a rank first loads the caller's script as its
    ``__main__`` (as multiprocessing's spawn start does: its top-level code runs, its
    ``if __name__ == "__main__":`` block does not).
    """
    buffer = io.BytesIO()
    try:
        Pickler(buffer, recurse=True, copy_tensor=True).dump(target)
        return buffer.getvalue(), None
    except RecursionError:
        script = getattr(sys.modules.get("__main__"), "__file__", None)
        main = os.path.abspath(script) if script and script.endswith(".py") else None
        return dumps(target), main


class _Ranks:
    """The actors of a run, and how ``target`` is run (again) in them.

    Args:
        ray: The ray module.
        actors: The actors, by rank.
        payload: The dill-pickled target, and the script to load as ``__main__`` first
            (see :func:`_payload`).
        args: Further arguments of the target.
        max_restarts: Rank -> how many times its actor may be restarted.
        deadline: ``time.monotonic()`` limit of the run, or ``None``.
    """

    def __init__(
        self,
        ray: Any,
        actors: List[Any],
        payload: Tuple[bytes, Optional[str]],
        args: tuple,
        max_restarts: Dict[int, int],
        deadline: Optional[float],
    ):
        self.ray = ray
        self.actors = actors
        self.payload = payload
        self.args = args
        self.max_restarts = max_restarts
        self.deadline = deadline
        self.restarts = {rank: 0 for rank in max_restarts}
        self._counted: Dict[int, str] = {}  # rank -> the last worker counted as a restart

    def run(self, rank: int) -> Any:
        """Start ``target(rank, *args)`` in the actor of ``rank``; a reference to its report."""
        restarts = self.restarts.get(rank, 0)
        return self.actors[rank].run.remote(*self.payload, self.args, restarts)

    def rerun(self, rank: int) -> Optional[Any]:
        """Run the target again in the restarted actor of ``rank``; ``None`` if it was not restarted.

        It waits until Ray has started the new process of the actor (or has given
        it up), then counts the restart unless that process was counted already
        (a run sent while the process started, which never reached it).
        """
        if rank not in self.max_restarts:
            return None
        info = self._await_process(rank)
        if info is None or info[1] > 0:  # gone for good, or the old process still runs
            return None
        worker = info[0]
        if self._counted.get(rank) != worker:
            self._counted[rank] = worker
            self.restarts[rank] += 1
        return self.run(rank)

    def _await_process(self, rank: int) -> Optional[tuple]:
        """``(worker id, runs started)`` of the actor of ``rank`` once it answers; ``None``
        when it died for good or the run's deadline passed first."""
        unavailable = self.ray.exceptions.ActorUnavailableError
        while self.deadline is None or time.monotonic() < self.deadline:
            left = None if self.deadline is None else max(self.deadline - time.monotonic(), 0.1)
            try:
                return self.ray.get(self.actors[rank].process_info.remote(), timeout=left)
            except unavailable:  # Ray is restarting it: ask again shortly
                time.sleep(0.2)
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
                return None
        return None

    def death(self, rank: int, error: BaseException) -> RuntimeError:
        """The failure of a rank whose actor died (and is not restarted any more)."""
        after = self.restarts.get(rank, 0)
        restarted = f" after {after} restart(s)" if after else ""
        return RuntimeError(f"the actor of rank {rank} died{restarted}: {error}")


def _report(ray: Any, ref: Any, rank: int, ranks: _Ranks, allow_exit: set) -> tuple:
    """What a finished ``run`` of ``rank`` says: ``("ok" | "failed" | "again", value)``.

    ``"again"``: the actor died and was restarted; the value is the new run's reference.
    """
    try:
        ok, value = loads(ray.get(ref))
    except ray.exceptions.RayActorError as error:
        again = ranks.rerun(rank)
        if again is not None:
            return "again", again
        if rank in allow_exit:
            return "ok", Exited(None)
        return "failed", ranks.death(rank, error)
    return ("ok" if ok else "failed"), value


def _collect(
    ray: Any,
    ranks: _Ranks,
    deadline: Optional[float],
    allow_exit: set,
    grace: float,
) -> tuple:
    """Wait for the ranks' reports: (results, failures, unfinished ranks), as ``launch`` does."""
    results: Dict[int, Any] = {}
    failures: Dict[int, BaseException] = {}
    pending = {ranks.run(rank): rank for rank in range(len(ranks.actors))}
    give_up = deadline
    while pending:
        remaining = None if give_up is None else give_up - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=remaining)
        for ref in ready:
            rank = pending.pop(ref)
            kind, value = _report(ray, ref, rank, ranks, allow_exit)
            if kind == "again":
                pending[value] = rank
            else:
                (results if kind == "ok" else failures)[rank] = value
        if failures:
            soon = time.monotonic() + grace
            give_up = soon if give_up is None else min(give_up, soon)
    return results, failures, sorted(pending.values())


def _restarts(restart: Iterable[int], max_restarts: int, world_size: int) -> Dict[int, int]:
    """Rank -> how many times its actor may be restarted, checked."""
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 1:
        raise ValueError(f"max_restarts must be a positive int, got {max_restarts!r}")
    ranks = list(restart)
    for rank in ranks:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"restart must list ranks in [0, {world_size - 1}], got {ranks!r}")
    return {rank: max_restarts for rank in ranks}


def _print_stacks(ray: Any, actors: List[Any], unfinished: List[int]) -> None:
    """Print the threads' stacks of the ranks about to be killed unfinished (as a hanging process's are)."""
    for rank in unfinished:
        try:
            stacks = ray.get(actors[rank].stacks.remote(), timeout=10)
        except Exception as error:  # dead or stuck beyond answering: say so, kill it anyway
            stacks = f"(no answer: {error!r})"
        print(f"rank {rank} was still running; its threads:\n{stacks}", file=sys.stderr, flush=True)


def launch_ray(
    target: Callable[..., Any],
    world_size: int,
    *,
    args: Sequence[Any] = (),
    address: Optional[str] = None,
    timeout: Optional[float] = None,
    max_concurrency: int = 64,
    num_cpus: float = 1,
    actor_options: Optional[Dict[str, Any]] = None,
    allow_exit: Iterable[int] = (),
    failure_grace: float = 5.0,
    restart: Iterable[int] = (),
    max_restarts: int = 1,
) -> List[Any]:
    """Run ``target(rank, *args)`` in ``world_size`` Ray actors and return their results.

    ``target`` travels as a dill payload: a module-level function by reference (the
    actors import its module: the caller's working directory and ``PYTHONPATH``
    are put on their ``PYTHONPATH``), a lambda or local function by value.

    Args:
        target: Function run by each rank, with its rank as first argument.
        world_size: Number of ranks.
        args: Further arguments of ``target``.
        address: Address of a running Ray cluster; ``None`` uses the instance this
            process is connected to, or starts a local one.
        timeout: Hard limit in seconds for the whole run; ``None`` for none.
        max_concurrency: Threads of each actor (``main`` holds one; each call being
            served holds one).
        num_cpus: CPUs each actor claims from Ray's scheduler.
        actor_options: Further ``.options(...)`` of the actors (``resources``,
            ``scheduling_strategy`` ...).
        allow_exit: Ranks whose actor may die without returning; their result is
            an :class:`~machin.parallel.distributed.launcher.Exited`.
        failure_grace: After a rank fails, seconds the others get to finish
            before they are killed.
        restart: Ranks whose actor Ray restarts when its process dies (a sampler,
            say). The launcher then calls ``target(rank, *args)`` again in the new
            process, where :func:`~machin.parallel.distributed.transport.ray.restarts`
            tells how many restarts happened and a ``World`` rejoins the run (see
            the "Faults on Ray" section of the distributed docs). The other ranks
            are not restarted: such a rank's death fails the run.
        max_restarts: How many times each actor of ``restart`` may be restarted;
            one more death fails the run.

    Returns:
        The return values, by rank.

    Raises:
        ImportError: If Ray is not installed (``pip install machin[ray]``).
        ValueError: If ``world_size`` is not a positive int, ``restart`` lists
            something other than ranks, or ``max_restarts`` is not a positive int.
        LaunchError: If a rank raised, its actor died (for good), or the timeout
            passed; the message names the rank.
    """
    ray = require_ray()
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    restarts = _restarts(restart, max_restarts, world_size)
    connection = _Connection(ray, address, world_size)
    deadline = None if timeout is None else time.monotonic() + timeout
    options = {
        "max_concurrency": max_concurrency,
        "num_cpus": num_cpus,
        "runtime_env": _runtime_env(),
        **(actor_options or {}),
    }
    actors: List[Any] = []
    try:
        namespace = f"machin-{uuid.uuid4().hex[:12]}"
        actors = _start_actors(ray, world_size, namespace, options, restarts)
        ranks = _Ranks(ray, actors, _payload(target), tuple(args), restarts, deadline)
        outcome = _collect(ray, ranks, deadline, set(allow_exit), failure_grace)
        _print_stacks(ray, actors, outcome[2])
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        connection.close()
    return _results(outcome, world_size, timeout)

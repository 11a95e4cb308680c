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

import os
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from ..pickle import dumps, loads
from .launcher import Exited, _results
from .transport import ENV_VARIABLE
from .transport.ray import RankActor, actor_name, require_ray

__all__ = ["launch_ray"]


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


def _start_actors(ray: Any, world_size: int, namespace: str, options: Dict[str, Any]) -> List[Any]:
    actor_class = ray.remote(RankActor)
    return [
        actor_class.options(name=actor_name(rank), namespace=namespace, **options).remote(
            rank, world_size, namespace, _actor_env(rank, world_size)
        )
        for rank in range(world_size)
    ]


def _collect(
    ray: Any,
    refs: List[Any],
    deadline: Optional[float],
    allow_exit: set,
    grace: float,
) -> tuple:
    """Wait for the ranks' reports: (results, failures, unfinished ranks), as ``launch`` does."""
    results: Dict[int, Any] = {}
    failures: Dict[int, BaseException] = {}
    pending = {ref: rank for rank, ref in enumerate(refs)}
    give_up = deadline
    while pending:
        remaining = None if give_up is None else give_up - time.monotonic()
        if remaining is not None and remaining <= 0:
            break
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=remaining)
        for ref in ready:
            rank = pending.pop(ref)
            try:
                ok, value = loads(ray.get(ref))
            except ray.exceptions.RayActorError as error:
                if rank in allow_exit:
                    results[rank] = Exited(None)
                    continue
                ok, value = False, RuntimeError(f"the actor of rank {rank} died: {error}")
            (results if ok else failures)[rank] = value
        if failures:
            soon = time.monotonic() + grace
            give_up = soon if give_up is None else min(give_up, soon)
    return results, failures, sorted(pending.values())


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

    Returns:
        The return values, by rank.

    Raises:
        ImportError: If Ray is not installed (``pip install machin[ray]``).
        ValueError: If ``world_size`` is not a positive int.
        LaunchError: If a rank raised, its actor died, or the timeout passed.
    """
    ray = require_ray()
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    started = _connect(ray, address, world_size)
    deadline = None if timeout is None else time.monotonic() + timeout
    options = {
        "max_concurrency": max_concurrency,
        "num_cpus": num_cpus,
        "runtime_env": _runtime_env(),
        **(actor_options or {}),
    }
    actors: List[Any] = []
    try:
        actors = _start_actors(ray, world_size, f"machin-{uuid.uuid4().hex[:12]}", options)
        payload = dumps(target, recurse=True)
        refs = [actor.run.remote(payload, tuple(args)) for actor in actors]
        outcome = _collect(ray, refs, deadline, set(allow_exit), failure_grace)
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        if started:
            ray.shutdown()
    return _results(outcome, world_size, timeout)

"""Harness of the tests on the Ray transport: a real two-node cluster on this machine.

``ray_cluster`` (a module-scoped fixture: the test worker starts one cluster, when a
module first needs it, and keeps it for the session; the worker connects for each module's
Ray tests and disconnects when the module ends, so that the ranks of the following
tests are forked again, which is much faster than the fork server a Ray-connected
process must use; see ``tests/multiprocess.py``) starts a head and a worker node with
:class:`ray.cluster_utils.Cluster`, every process bound to 127.0.0.1 and listening on
ports of a block below the kernel's ephemeral range (see ``_port_block``), no dashboard,
no usage statistics and small CPU and memory claims, connects the test process to
it and checks with ``ray.nodes()`` that every node has address 127.0.0.1. At the
end of the session it shuts the cluster down and checks with psutil that no Ray
process (gcs_server, raylet, workers) is left.

``run_ray_ranks(target, world_size)`` is ``run_ranks`` for the Ray transport: one
actor per rank through :func:`~machin.parallel.distributed.ray_launcher.launch_ray`,
with a hard timeout. Inside the actors ``World()`` uses the Ray transport.
"""

import contextlib
import functools
import os
import re
import signal
import time
from multiprocessing import forkserver
from typing import Any, Callable, List, Optional, Sequence, Tuple

import psutil
import pytest
import torch

from tests.multiprocess import keep_processes

__all__ = [
    "ray_cluster",
    "run_on",
    "run_ray_ranks",
    "in_ray_group",
    "stop_after_the_ray_group",
    "RAY_TIMEOUT",
]

#: Hard limit of one run on the cluster, in seconds.
RAY_TIMEOUT = 120.0
#: Seconds added to a run's limit for starting its actors.
ACTOR_STARTUP = 60.0
_NODE = {
    "num_cpus": 3,
    "object_store_memory": 200 * 1024 * 1024,
    "node_ip_address": "127.0.0.1",
}
_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # Ray resolves "127.0.0.1" in an address to the machine's outward IP unless told
    # that this is a single-machine setup: then every lookup gives 127.0.0.1
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    # the raylet waits for its agents, which start slowly on a loaded 2-core machine
    "RAY_agent_register_timeout_ms": "120000",
    "RAY_raylet_start_wait_time_s": "120",
    # Ray starts its workers (the rank actors) at nice 15; next to the other test worker's
    # processes (nice 0) they then got a few percent of a core, and slow tests timed out
    "RAY_worker_niceness": "0",
}
# Ray reads these when it is imported and when it starts a process: set them before both.
os.environ.update(_ENV)

_RAY_PROCESS_NAMES = ("gcs_server", "raylet", "ray::", "/ray/")
#: Starts of the cluster tried before the tests fail (the raylet gives up when its
#: agents are slow to start, which happens on a loaded machine).
_ATTEMPTS = 2


def _single_threaded(target: Callable[..., Any], rank: int, *args: Any) -> Any:
    torch.set_num_threads(1)
    return target(rank, *args)


def run_ray_ranks(
    target: Callable[..., Any],
    world_size: int = 3,
    *,
    args: Sequence[Any] = (),
    timeout: float = RAY_TIMEOUT,
    allow_exit: Sequence[int] = (),
) -> List[Any]:
    """Run ``target(rank, *args)`` on ``world_size`` Ray actors of the connected cluster.

    ``timeout`` is the time the ranks get, as for ``run_ranks``; the actors' start-up
    (a fresh interpreter per rank that imports torch: seconds on two busy cores, where a
    forked rank starts at once) gets ``ACTOR_STARTUP`` seconds more.

    Raises:
        LaunchError: If a rank raised, its actor died or the timeout passed.
    """
    from machin.parallel.distributed.ray_launcher import launch_ray

    return launch_ray(
        functools.partial(_single_threaded, target),
        world_size,
        args=args,
        timeout=timeout + ACTOR_STARTUP,
        allow_exit=allow_exit,
    )


#: First port of the blocks the test clusters' nodes take their ports from (see _node_args).
_PORT_BASE = 20000
_PORTS_PER_NODE = 1000
_PORT_NAMES = (
    "node_manager_port",
    "object_manager_port",
    "metrics_agent_port",
    "metrics_export_port",
    "dashboard_agent_listen_port",
    "runtime_env_agent_port",
)


def _ephemeral_range() -> Tuple[int, int]:
    """The ports the kernel hands out to a socket bound to port 0 (first, last)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
        low, high = (int(n) for n in ranges.read().split())
    return low, high


def _port_block(node: int) -> int:
    """First port of the block of ``node`` (0: head, 1: worker) of this test worker's cluster.

    Every port a node's processes listen on for long comes from its block, below the
    range the kernel hands out for port 0. :class:`ray.cluster_utils.Cluster` lets its
    workers take any free port, so a killed rank actor's port went back to the kernel
    while the raylet and the GCS still retried their gRPC connections to it, once a
    second for minutes; when a torch RPC rank of the other test worker then got that port
    for its TensorPipe listener, the HTTP/2 greeting it received made it abort
    (``std::bad_alloc``, exit -6).
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    first = _PORT_BASE + (2 * index + node) * _PORTS_PER_NODE
    ephemeral = _ephemeral_range()[0]
    assert first + _PORTS_PER_NODE <= ephemeral, (
        f"the ports of the test cluster ({first}...) reach the ephemeral range ({ephemeral}...)"
    )
    return first


def _node_args(node: int) -> dict:
    """Arguments of one node: its ports, all from its own block (see ``_port_block``).

    Giving the agents' ports has a second use: the raylet then uses them instead of
    waiting (a short, fixed time) for the agents to report theirs, which they can miss on
    a loaded machine.
    """
    first = _port_block(node)
    ports = {name: first + offset for offset, name in enumerate(_PORT_NAMES)}
    if node == 0:
        ports["gcs_server_port"] = first + len(_PORT_NAMES)
    workers = {"min_worker_port": first + 10, "max_worker_port": first + _PORTS_PER_NODE - 1}
    return {**_NODE, **ports, **workers}


def _start_cluster() -> Any:
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={**_node_args(0), "include_dashboard": False}
    )
    cluster.add_node(**_node_args(1))
    return cluster


def _start_or_fail() -> Any:
    """Start the cluster (in the main thread, as Ray requires); fail the test if it cannot.

    The test's own timeout (pytest-timeout, which covers fixtures) bounds the start.
    """
    errors = []
    for _ in range(_ATTEMPTS):
        try:
            return _start_cluster()
        except Exception as error:
            errors.append(repr(error))
            _kill_ray_processes()
    pytest.fail(f"the Ray cluster did not start in {_ATTEMPTS} attempts: {errors}")


def _ray_processes() -> List[psutil.Process]:
    found = []
    # the fork server of run_ranks names Ray's directory in its arguments (the sys.path it
    # was given), but it is multiprocessing's, not Ray's
    fork_server = getattr(forkserver._forkserver, "_forkserver_pid", None)
    for child in psutil.Process().children(recursive=True):
        if child.pid == fork_server:
            continue
        with contextlib.suppress(psutil.Error):
            line = " ".join(child.cmdline())
            if child.status() != psutil.STATUS_ZOMBIE and any(
                n in line or n in child.name() for n in _RAY_PROCESS_NAMES
            ):
                found.append(child)
    return found


def _ephemeral_listeners(processes: List[psutil.Process]) -> List[str]:
    """The listening sockets of ``processes`` in the kernel's ephemeral range (see _port_block)."""
    low, high = _ephemeral_range()
    found = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            for conn in process.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and low <= conn.laddr.port <= high:
                    found.append(f"{process.name()}:{conn.laddr.port}")
    return found


def _kill_ray_processes() -> List[int]:
    left = _ray_processes()
    for process in left:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(left, timeout=10)
    return [p.pid for p in left]


class _WorkerCluster:
    """The two-node cluster of one test worker: started when a module first needs it, kept
    until the end of the session (a start costs 12-28 s), restarted if a module left it
    without its two nodes."""

    def __init__(self) -> None:
        self.cluster: Any = None
        self._kept: Any = None

    def start(self) -> Any:
        self.cluster = _start_or_fail()
        self._kept = keep_processes(p.pid for p in psutil.Process().children(recursive=True))
        ephemeral = _ephemeral_listeners(_ray_processes())
        assert not ephemeral, f"Ray processes listen on ports the kernel hands out: {ephemeral}"
        return self.cluster

    def shutdown(self) -> None:
        """Shut the cluster down; fail if any Ray process outlives it."""
        if self.cluster is None:
            return
        # Listed while they are descendants of this process: workers whose raylet has
        # gone are adopted by init, out of reach of a search among our children.
        ours = _ray_processes()
        self.cluster.shutdown()
        self.cluster = None
        self._kept.release()
        _, alive = psutil.wait_procs(ours, timeout=15)
        left = [p.pid for p in alive] + _kill_ray_processes()
        assert not left, f"Ray processes left after the cluster's shutdown: {left}"


def _alive_node_addresses(ray: Any) -> List[str]:
    return sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])


def _connect(ray: Any, cluster: Any) -> List[str]:
    ray.init(address=cluster.address, logging_level="ERROR")
    cluster.wait_for_nodes(timeout=60)
    return _alive_node_addresses(ray)


#: The cluster of this test process (one per xdist worker).
_HOLDER = _WorkerCluster()
#: SIGTERM's handler before ``ray.init``, which installs its own (``sys.exit``) and never puts
#: the old one back: processes this test process forks later (a ``Pool``'s workers) would
#: inherit it, and a terminated pool worker then runs its exit handlers instead of dying.
_SIGTERM_BEFORE_RAY = signal.getsignal(signal.SIGTERM)


def _disconnect(ray: Any) -> None:
    ray.shutdown()
    signal.signal(signal.SIGTERM, _SIGTERM_BEFORE_RAY)


_RAY_IN_ID = re.compile(r"(?<![a-z])ray(?![a-z])")


def in_ray_group(nodeid: str) -> bool:
    """Whether a test id names ray as a word (``test_ray_faults.py``, ``[ray]``,
    ``..._on_a_ray_cluster``): such tests run together on one xdist worker."""
    return bool(_RAY_IN_ID.search(nodeid.lower()))


def stop_after_the_ray_group(item: pytest.Item, nextitem: Optional[pytest.Item]) -> None:
    """Under xdist, stop the cluster once this worker has run the Ray group (which it runs as
    one unit, see ``tests/conftest.py``): idle, the cluster costs a tenth of a core."""
    if not os.environ.get("PYTEST_XDIST_WORKER") or _HOLDER.cluster is None:
        return
    if nextitem is not None and in_ray_group(nextitem.nodeid):
        return
    import ray

    _disconnect(ray)  # a module-scoped connection whose module goes on without Ray
    _HOLDER.shutdown()


@pytest.fixture(scope="session")
def _worker_cluster():
    """This test worker's cluster (see ``_WorkerCluster``), shut down and checked at the end."""
    pytest.importorskip("ray")
    from ray._private import ray_constants

    assert not ray_constants.ENABLE_RAY_CLUSTER, "ray was imported before tests.ray_cluster"
    yield _HOLDER
    _HOLDER.shutdown()


@pytest.fixture(scope="module")
def ray_cluster(_worker_cluster):
    """The test worker's two-node Ray cluster on 127.0.0.1, connected for the module's tests.

    Yields its address and the seconds its start (or this connection) took. The test process
    disconnects at the end of the module: a process connected to Ray must start its ranks
    with the fork server (see ``tests/multiprocess.py``), a disconnected one forks them.
    """
    import ray

    began = time.monotonic()
    cluster = _worker_cluster.cluster or _worker_cluster.start()
    try:
        addresses = _connect(ray, cluster)
        if len(addresses) != 2:  # a module before this one left it broken: start it again
            _disconnect(ray)
            _worker_cluster.shutdown()
            addresses = _connect(ray, _worker_cluster.start())
        assert addresses == ["127.0.0.1", "127.0.0.1"], f"nodes bound elsewhere: {addresses}"
        yield {
            "address": _worker_cluster.cluster.address,
            "start_seconds": time.monotonic() - began,
        }
    finally:
        _disconnect(ray)


@pytest.fixture(params=["rpc", "ray"])
def run_on(request):
    """The harness of one transport: ``run_ranks`` (torch RPC) or ``run_ray_ranks`` (Ray)."""
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
        return run_ray_ranks
    from tests.multiprocess import run_ranks

    return run_ranks

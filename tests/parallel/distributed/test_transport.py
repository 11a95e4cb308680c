"""The transport seam: choosing a transport, its errors, and torch RPC kept in one module."""

import pathlib
import re
import sys
import threading

import pytest

import machin
from machin.parallel.distributed import World, launch
from machin.parallel.distributed import transport as transports
from machin.parallel.distributed.transport import ray as ray_transport
from machin.parallel.distributed.transport.base import LocalReference, Transport

PACKAGE = pathlib.Path(machin.__file__).parent


def test_transport_and_backend_are_sorted_out(monkeypatch):
    monkeypatch.delenv(transports.ENV_VARIABLE, raising=False)
    assert transports.resolve(None, None) == ("rpc", None)
    assert transports.resolve(None, "gloo") == ("rpc", "gloo")
    assert transports.resolve("ray", "gloo") == ("ray", "gloo")
    # "ray" and "rpc" can never be process-group backends: they name the transport
    assert transports.resolve(None, "ray") == ("ray", None)
    assert transports.resolve("ray", "ray") == ("ray", None)
    with pytest.raises(ValueError, match="backend='ray' names a transport, but transport='rpc'"):
        transports.resolve("rpc", "ray")
    with pytest.raises(ValueError, match=r"transport must be one of \['rpc', 'ray'\], got 'mpi'"):
        transports.resolve("mpi", None)
    monkeypatch.setenv(transports.ENV_VARIABLE, "ray")  # what the Ray launcher sets in a rank
    assert transports.resolve(None, None) == ("ray", None)
    assert transports.resolve("rpc", None) == ("rpc", None)


def test_world_checks_the_transport_before_starting(monkeypatch):
    monkeypatch.delenv(transports.ENV_VARIABLE, raising=False)
    with pytest.raises(ValueError, match="transport must be one of"):
        World(rank=0, world_size=1, transport="tcp")
    with pytest.raises(ValueError, match="names a transport"):
        World(rank=0, world_size=1, transport="rpc", backend="ray")


def test_the_ray_transport_runs_only_in_ranks_of_the_ray_launcher():
    pytest.importorskip("ray")
    with pytest.raises(RuntimeError, match="transport='ray' runs inside the ranks started by"):
        World(rank=0, world_size=1, transport="ray")


def test_a_missing_ray_tells_how_to_install_it(monkeypatch):
    monkeypatch.setattr(ray_transport, "ray", None)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails
    with pytest.raises(ImportError, match=r"pip install machin\[ray\]"):
        ray_transport.require_ray()


def test_launch_names_an_unknown_transport():
    with pytest.raises(ValueError, match="transport must be 'rpc' or 'ray', got 'mpi'"):
        launch(len, 1, transport="mpi")


def test_launch_restarts_ranks_only_on_ray():
    with pytest.raises(ValueError, match=r"restart needs transport='ray'.*restart=\(1,\)"):
        launch(len, 2, restart=[1])


def test_launch_passes_restarts_on_to_the_ray_launcher(monkeypatch):
    seen = {}

    def fake_launch_ray(target, world_size, **kwargs):
        seen.update(kwargs)
        return [None] * world_size

    monkeypatch.setattr("machin.parallel.distributed.ray_launcher.launch_ray", fake_launch_ray)
    launch(len, 3, transport="ray", restart=[1, 2], max_restarts=4)
    assert seen["restart"] == [1, 2] and seen["max_restarts"] == 4


def test_a_local_reference_gives_back_the_value_itself():
    value = {"a": [1, 2]}
    reference = Transport("0", 0, 1, 5.0).local_ref(value)
    assert isinstance(reference, LocalReference)
    assert reference.to_here() is value and reference.local_value() is value
    assert reference.is_owner()


def test_a_deadline_fails_a_call_that_does_not_answer():
    pending = ray_transport._Pending("the call on member 'x'", 0.05)
    future = pending.future
    ray_transport._DEADLINES.add(0.05, pending.expire)
    with pytest.raises(
        TimeoutError, match="the call on member 'x' did not answer within 0.05 seconds"
    ):
        future.wait()
    pending.settle(True, 1)  # a reply after the timeout changes nothing
    assert future.done() and pending.future is None


def test_an_answered_call_lets_go_of_its_result_before_its_deadline():
    pending = ray_transport._Pending("the call", 60.0)
    future = pending.future
    pending.settle(True, [1, 2])
    assert future.wait() == [1, 2]
    assert pending.future is None  # the queued deadline holds no reference to the answer
    pending.expire()  # the deadline coming later changes nothing
    assert future.wait() == [1, 2]


def test_a_sooner_deadline_wakes_the_deadline_thread():
    deadlines = ray_transport._Deadlines()
    late, soon = threading.Event(), threading.Event()
    deadlines.add(600.0, late.set)
    deadlines.add(0.01, soon.set)  # queued after a far one: it must still run on time
    assert soon.wait(30.0) and not late.is_set()


def test_only_the_rpc_transport_imports_torch_rpc():
    pattern = re.compile(
        r"^\s*(import torch\.distributed\.rpc|from torch\.distributed\.rpc|"
        r"from torch\.distributed import rpc)",
        re.MULTILINE,
    )
    users = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if pattern.search(path.read_text())
    )
    assert users == ["parallel/distributed/transport/rpc.py"]

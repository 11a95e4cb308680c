"""The transport seam: choosing a transport, its errors, and torch RPC kept in one module."""

import pathlib
import re
import sys

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


def test_a_local_reference_gives_back_the_value_itself():
    value = {"a": [1, 2]}
    reference = Transport("0", 0, 1, 5.0).local_ref(value)
    assert isinstance(reference, LocalReference)
    assert reference.to_here() is value and reference.local_value() is value
    assert reference.is_owner()


def test_a_deadline_fails_a_call_that_does_not_answer():
    pending = ray_transport._Pending()
    ray_transport._DEADLINES.add(0.05, lambda: pending.settle(False, TimeoutError("late")))
    with pytest.raises(TimeoutError, match="late"):
        pending.future.wait()
    pending.settle(True, 1)  # a reply after the timeout changes nothing
    assert pending.future.done()


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

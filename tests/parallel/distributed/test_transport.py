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


def test_a_launch_that_connected_puts_back_the_sigterm_handler_it_found():
    import signal

    from machin.parallel.distributed import ray_launcher

    class FakeRay:
        """Connects the way ray.init does: a SIGTERM handler of its own, left after shutdown."""

        def __init__(self, initialized=False):
            self.initialized, self.shut = initialized, False

        def is_initialized(self):
            return self.initialized

        def init(self, **_):
            self.initialized = True
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

        def shutdown(self):
            self.shut = True

    before = signal.getsignal(signal.SIGTERM)
    try:
        fake = FakeRay()
        connection = ray_launcher._Connection(fake, None, 2)
        assert connection.started and signal.getsignal(signal.SIGTERM) is not before
        connection.close()
        assert fake.shut and signal.getsignal(signal.SIGTERM) is before
        connected = FakeRay(initialized=True)  # somebody else's connection: left alone
        ray_launcher._Connection(connected, None, 2).close()
        assert not connected.shut
    finally:
        signal.signal(signal.SIGTERM, before)


SCRIPT_WITH_MUTUAL_CALLS = """
import torch

from machin.parallel.distributed.ray_launcher import _payload


def even(n):
    return torch.ones(1) if n == 0 else odd(n - 1)


def odd(n):
    return torch.zeros(1) if n == 0 else even(n - 1)


def main(rank):
    return float(even(rank))


if __name__ == "__main__":
    PAYLOAD = _payload(main)
"""


def test_a_launch_target_whose_script_functions_call_each_other_runs_in_a_rank(tmp_path):
    """dill cannot gather the globals of such functions; the payload then refers to those of
    __main__, and a rank loads the script as its __main__ before reading it."""
    import runpy

    from machin.parallel.distributed.transport.ray import load_target
    from machin.parallel.pickle import loads

    script = tmp_path / "mutual.py"
    script.write_text(SCRIPT_WITH_MUTUAL_CALLS)
    payload, main_script = runpy.run_path(str(script), run_name="__main__")["PAYLOAD"]
    assert main_script == str(script)
    with pytest.raises(NameError):  # read without the script: this process's __main__ lacks them
        loads(payload)(2)
    saved = {name: sys.modules.get(name) for name in ("__main__", "__mp_main__")}
    try:
        target = load_target(payload, main_script, 0)
        assert (target(2), target(3)) == (1.0, 0.0)
        assert sys.modules["__main__"].__file__ == main_script
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    with pytest.raises(FileNotFoundError, match="rank 3 must load the launching script .*/gone.py"):
        load_target(payload, str(tmp_path / "gone.py"), 3)

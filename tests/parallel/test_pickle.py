import ctypes
import io
import sys
import types

import dill
import pytest
import torch

import machin.parallel.pickle as machin_pickle
from machin.parallel.pickle import Pickler, dumps, loads, mark_static_module


def test_lambda_round_trips_with_recurse():
    data = dumps(lambda x: x * 3, recurse=True)
    assert isinstance(data, bytes)
    assert dill.loads(data)(4) == 12


def test_local_closure_round_trips():
    offset = 10

    def add(x):
        return x + offset

    assert loads(dumps(add, recurse=True))(5) == 15
    assert loads(dumps(add))(6) == 16


def test_copied_cpu_tensor_is_independent():
    tensor = torch.arange(4.0)
    clone = loads(dumps(tensor, copy_tensor=True))
    assert torch.equal(clone, tensor)
    clone[0] = 100.0
    assert tensor[0].item() == 0.0
    assert not tensor.is_shared()


def test_dumps_copies_tensors_by_default():
    tensor = torch.ones(3)
    clone = loads(dumps({"t": tensor}))["t"]
    clone.add_(1)
    assert tensor.tolist() == [1.0, 1.0, 1.0]


def test_shared_cpu_tensor_moves_to_shared_memory_and_aliases():
    tensor = torch.zeros(3)
    data = dumps(tensor, copy_tensor=False)
    assert tensor.is_shared()
    alias = loads(data)
    alias[1] = 7.0
    assert tensor.tolist() == [0.0, 7.0, 0.0]


def test_pickler_shares_tensors_by_default():
    tensor = torch.zeros(2)
    buffer = io.BytesIO()
    Pickler(buffer).dump(tensor)
    assert tensor.is_shared()
    loads(buffer.getvalue()).fill_(5.0)
    assert tensor.tolist() == [5.0, 5.0]


def test_parameter_and_nested_tensors_are_copied():
    model = torch.nn.Linear(2, 1)
    clone = loads(dumps(model))
    assert torch.equal(clone.weight, model.weight)
    with torch.no_grad():
        clone.weight.zero_()
    assert model.weight.abs().sum().item() > 0


def test_dispatch_is_shared_and_dispatch_table_is_per_instance():
    copying, sharing = Pickler(io.BytesIO(), copy_tensor=True), Pickler(io.BytesIO())
    assert copying.dispatch is sharing.dispatch is Pickler.dispatch
    assert copying.dispatch_table is not sharing.dispatch_table
    assert torch.Tensor in sharing.dispatch_table
    assert torch.Tensor not in copying.dispatch_table


@pytest.fixture()
def handmade_module(tmp_path, monkeypatch):
    """A module outside site-packages holding something dill cannot pickle."""
    module = types.ModuleType("machin_test_static_module")
    module.__file__ = str(tmp_path / "machin_test_static_module.py")
    module.handle = ctypes.pointer(ctypes.c_int(3))  # like a handle into a hand-loaded CDLL
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(machin_pickle, "_STATIC_MODULES", set())
    return module


def test_unmarked_module_is_pickled_by_value(handmade_module):
    with pytest.raises(ValueError, match="ctypes objects containing pointers cannot be pickled"):
        dumps(handmade_module)


def test_marked_module_is_pickled_by_reference(handmade_module):
    mark_static_module(handmade_module)
    data = dumps(handmade_module)
    assert len(data) < 200
    assert loads(data) is handmade_module


def test_function_using_marked_module_keeps_a_reference(handmade_module):
    mark_static_module(handmade_module)
    module = handmade_module

    def uses_module():
        return module.handle

    assert loads(dumps(uses_module, recurse=True))() is handmade_module.handle


def test_mark_static_module_rejects_non_modules():
    with pytest.raises(TypeError, match="module must be a module object, got 3 of type int"):
        mark_static_module(3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensor_round_trips_as_copy():
    tensor = torch.arange(4.0, device="cuda")
    clone = loads(dumps(tensor, copy_tensor=True))
    assert clone.device == tensor.device
    assert torch.equal(clone, tensor)
    clone.zero_()
    assert tensor.sum().item() == 6.0


def test_class_whose_package_hides_its_submodule_is_pickled_by_reference(monkeypatch):
    # torch 2.13 deletes torch.optim.adam from the package namespace; dill alone then
    # tries to pickle Adam by value and fails on a C handle.
    module = types.ModuleType("machin_test_pkg.hidden")
    package = types.ModuleType("machin_test_pkg")
    package.__path__ = []

    class Hidden:
        pass

    Hidden.__module__, Hidden.__qualname__ = module.__name__, "Hidden"
    module.Hidden = Hidden
    monkeypatch.setitem(sys.modules, package.__name__, package)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    data = dumps(Hidden)
    assert b"machin_test_pkg.hidden" in data and loads(data) is Hidden
    assert loads(dumps(torch.optim.Adam)) is torch.optim.Adam


_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from machin.parallel.pickle import dumps, loads

def even(n):
    return True if n == 0 else odd(n - 1)

def odd(n):
    return False if n == 0 else even(n - 1)

def main(rank):
    return even(rank)

if __name__ == "__main__":
    copy = loads(dumps(main, recurse=True))
    print(copy(4), copy(3))
"""


def test_functions_of_a_script_that_call_each_other_are_dumped(tmp_path):
    # dill's globals search with recurse=True never ends on them (RecursionError)
    import pathlib
    import subprocess

    root = str(pathlib.Path(machin_pickle.__file__).resolve().parents[2])
    script = tmp_path / "mutual.py"
    script.write_text(_SCRIPT.format(root=root))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False"]

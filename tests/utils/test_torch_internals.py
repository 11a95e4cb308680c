"""machin.utils.torch_internals: each private torch API machin relies on exists and behaves as relied on.

A torch upgrade that renames, removes or changes one of them fails here, by name, before
it shows up as a slow or wrong update elsewhere.
"""

import ast
import pathlib
import warnings

import pytest
import torch
from torch import nn
from torch.torch_version import TorchVersion

from machin.utils import torch_internals as ti

MACHIN = pathlib.Path(__file__).resolve().parents[2] / "machin"


def _adam(**kwargs):
    net = nn.Linear(3, 2)
    return net, torch.optim.Adam(net.parameters(), lr=0.1, **kwargs)


def _give_gradients(net):
    net(torch.ones(4, 3)).sum().backward()


def test_the_installed_torch_is_the_one_the_module_was_checked_with():
    assert ti.TORCH_VERSION >= ti.CHECKED_WITH, (
        f"torch {ti.TORCH_VERSION} is older than {ti.CHECKED_WITH}: check every entry of torch_internals again"
    )


def test_fused_kernel_devices_include_the_cpu_from_torch_2_4():
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    devices = ti.fused_kernel_devices()
    assert devices == frozenset(_get_fused_kernels_supported_devices())
    assert {"cpu", "cuda"} <= devices


def test_set_fused_flags_switches_adam_between_its_two_steps_with_the_same_arithmetic():
    torch.manual_seed(0)
    net, optimizer = _adam(fused=True)
    assert optimizer._step_supports_amp_scaling is True  # what a fused Adam's constructor sets
    ti.set_fused_flags(optimizer, False)
    assert optimizer.defaults["fused"] is False and optimizer._step_supports_amp_scaling is False
    assert all(group["fused"] is False for group in optimizer.param_groups)
    reference = nn.Linear(3, 2)
    reference.load_state_dict(net.state_dict())
    plain = torch.optim.Adam(reference.parameters(), lr=0.1)
    for model, opt in ((net, optimizer), (reference, plain)):
        _give_gradients(model)
        opt.step()
    for got, want in zip(net.parameters(), reference.parameters()):
        assert torch.equal(got, want)


def test_profiler_enabled_follows_the_autograd_profiler():
    assert ti.profiler_enabled() is False
    with torch.autograd.profiler.profile():
        assert ti.profiler_enabled() is True
    assert ti.profiler_enabled() is False


def test_has_step_hooks_sees_hooks_of_one_optimizer_and_global_ones():
    _, optimizer = _adam()
    assert ti.has_step_hooks(optimizer) is False
    handle = optimizer.register_step_pre_hook(lambda *_: None)
    assert ti.has_step_hooks(optimizer) is True
    handle.remove()
    handle = optimizer.register_step_post_hook(lambda *_: None)
    assert ti.has_step_hooks(optimizer) is True
    handle.remove()
    assert ti.has_step_hooks(optimizer) is False
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    for register in (register_optimizer_step_pre_hook, register_optimizer_step_post_hook):
        handle = register(lambda *_: None)
        try:
            assert ti.has_step_hooks(optimizer) is True
        finally:
            handle.remove()
    assert ti.has_step_hooks(optimizer) is False


def test_hooked_step_inner_is_the_step_inside_the_profiling_wrapper():
    torch.manual_seed(0)
    net, optimizer = _adam()  # an instance exists: the class's step is wrapped
    inner = ti.hooked_step_inner(torch.optim.Adam)
    assert callable(inner) and inner is not torch.optim.Adam.step
    reference = nn.Linear(3, 2)
    reference.load_state_dict(net.state_dict())
    plain = torch.optim.Adam(reference.parameters(), lr=0.1)
    _give_gradients(net)
    _give_gradients(reference)
    inner(optimizer)
    plain.step()
    for got, want in zip(net.parameters(), reference.parameters()):
        assert torch.equal(got, want)

    class Replaced(torch.optim.SGD):
        def step(self, closure=None):
            return None

    assert ti.hooked_step_inner(Replaced) is None  # not instantiated: not wrapped yet


def test_undecorated_step_is_the_function_defined_in_the_class():
    _adam()
    step = ti.undecorated_step(torch.optim.Adam)
    assert step.__qualname__ == "Adam.step" and not hasattr(step, "__wrapped__")


def test_mark_stepped_for_schedulers_silences_the_scheduler_order_warning():
    def scheduler_warnings(mark):
        _, optimizer = _adam()
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        if mark:
            ti.mark_stepped_for_schedulers(optimizer)
        assert ti.stepped_for_schedulers(optimizer) is mark
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scheduler.step()
        return [str(w.message) for w in caught if "optimizer.step()" in str(w.message)]

    assert scheduler_warnings(mark=False), "torch no longer warns: the flag may no longer be read"
    assert scheduler_warnings(mark=True) == []


def test_tracing_autograd_ops_lets_a_full_graph_compile_torch_autograd_grad():
    assert ti.can_trace_autograd_ops() is True
    import torch._dynamo

    def loss_and_grad(weight, x):
        loss = (weight * x).sum() ** 2
        grad = torch.autograd.grad(loss, weight)[0]
        return loss.detach(), grad

    compiled = torch.compile(loss_and_grad, backend="eager", fullgraph=True)
    weight = torch.tensor([1.0, 2.0], requires_grad=True)
    x = torch.tensor([3.0, 4.0])
    before = torch._dynamo.config.trace_autograd_ops
    with ti.tracing_autograd_ops():
        assert torch._dynamo.config.trace_autograd_ops is True
        loss, grad = compiled(weight, x)
    assert torch._dynamo.config.trace_autograd_ops is before
    assert loss.item() == pytest.approx(121.0)
    assert torch.allclose(grad, torch.tensor([66.0, 88.0]))  # 2 * 11 * x


def test_is_backend_failure_tells_a_failed_backend_from_other_errors():
    def failing_backend(graph, example_inputs):
        raise RuntimeError("simulated backend failure")

    compiled = torch.compile(lambda x: x + 1, backend=failing_backend)
    with pytest.raises(Exception) as caught:
        compiled(torch.ones(2))
    assert ti.is_backend_failure(caught.value) is True
    assert ti.is_backend_failure(RuntimeError("something else")) is False


def _tagged(x, tag):
    return x + 1 if tag.startswith("plus") else x


def test_each_copy_with_its_own_compile_cache_compiles_past_the_recompile_limit():
    import torch._dynamo

    limit = torch._dynamo.config.recompile_limit
    tags = [f"plus{i}" for i in range(limit + 2)]
    compiled = []

    def counting(graph, example_inputs):
        compiled.append(graph)
        return graph.forward

    torch._dynamo.reset()
    shared = torch.compile(_tagged, backend=counting)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the recompile limit is reported with a warning
        results = [shared(torch.zeros(1), tag).item() for tag in tags]
    assert (
        results == [1.0] * len(tags) and len(compiled) == limit
    )  # one code object: dynamo stopped at the limit
    compiled.clear()
    copies = [
        torch.compile(ti.with_own_compile_cache(_tagged, f"tagged_{i}"), backend=counting)
        for i in range(len(tags))
    ]
    assert [copy(torch.zeros(1), tag).item() for copy, tag in zip(copies, tags)] == [1.0] * len(
        tags
    )
    assert len(compiled) == len(tags)
    assert ti.with_own_compile_cache(_tagged, "renamed").__name__ == "renamed"
    torch._dynamo.reset()


def test_inductor_mode_options_lists_the_options_of_a_mode():
    options = ti.inductor_mode_options("max-autotune")
    assert options.get("max_autotune") is True
    assert ti.inductor_mode_options("default") == {}


def test_foreach_lerp_moves_every_target_as_lerp_does():
    torch.manual_seed(0)
    targets = [torch.randn(3), torch.randn(2, 2)]
    sources = [torch.randn(3), torch.randn(2, 2)]
    expected = [t.clone().lerp_(s, 0.3) for t, s in zip(targets, sources)]
    assert hasattr(torch, "_foreach_lerp_")
    ti.foreach_lerp_(targets, sources, 0.3)
    for got, want in zip(targets, expected):
        assert torch.allclose(got, want)


def test_a_torch_older_than_the_checked_one_falls_back_or_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(ti, "TORCH_VERSION", TorchVersion("2.12.0"))
    assert ti.can_trace_autograd_ops() is False  # compiled steps then take an eager backward pass
    expected = r"trace_autograd_ops.*torch 2\.12\.0.*checked with torch 2\.13"
    with pytest.raises(ti.TorchInternalsError, match=expected), ti.tracing_autograd_ops():
        pass
    monkeypatch.setattr(ti, "TORCH_VERSION", TorchVersion("2.1.0"))
    assert ti.fused_kernel_devices() == frozenset({"cuda"})


def test_mode_sensitive_layer_types_cover_dropout_and_normalisation_layers():
    kinds = ti.mode_sensitive_layer_types()
    for layer in (
        nn.Dropout(),
        nn.AlphaDropout(),
        nn.BatchNorm1d(2),
        nn.LazyBatchNorm1d(),
        nn.InstanceNorm1d(2),
    ):
        assert isinstance(layer, kinds), type(layer).__name__
    assert not isinstance(nn.Linear(1, 1), kinds) and not isinstance(nn.LayerNorm(2), kinds)


def test_a_tensor_written_into_the_parameter_slots_is_what_the_module_computes_with():
    net = nn.Linear(2, 1, bias=False)
    slots = ti.parameter_slots(net)
    assert slots == {"weight": net.weight, "bias": None}  # a removed parameter keeps its slot
    original = slots["weight"]
    slots["weight"] = torch.tensor([[2.0, 3.0]])
    assert net(torch.tensor([[1.0, 1.0]])).item() == 5.0
    slots["weight"] = original
    assert net.weight is original
    norm = nn.BatchNorm1d(2)
    assert ti.buffer_slots(norm)["running_mean"] is norm.running_mean
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.script is deprecated
        scripted = torch.jit.script(nn.Linear(2, 1))
    with pytest.raises(ti.TorchInternalsError, match="_parameters"):
        ti.parameter_slots(scripted)


def test_forward_pre_hooks_lists_the_registered_hooks():
    net = nn.Linear(2, 1)
    assert ti.forward_pre_hooks(net) == []

    def hook(module, args):
        return None

    handle = net.register_forward_pre_hook(hook)
    assert ti.forward_pre_hooks(net) == [hook]
    handle.remove()
    assert ti.forward_pre_hooks(net) == []


def test_a_storage_shared_by_file_name_is_rebuilt_from_its_handle():
    from torch.multiprocessing import reductions

    storage = torch.arange(4.0).untyped_storage()
    assert ti.shared_by_descriptor(storage) is False
    manager, handle, size = ti.share_by_filename(storage)
    assert storage.is_shared() and size == storage.nbytes()
    reductions.shared_cache[handle] = reductions.StorageWeakRef(storage)  # as machin's pickler does
    rebuilt = reductions.rebuild_storage_filename(
        type(storage), manager, handle, size
    )  # drops the reference
    assert torch.equal(torch.tensor([], dtype=torch.float32).set_(rebuilt), torch.arange(4.0))


def test_distribution_checks_off_skips_the_checks_and_restores_the_default():
    def invalid():
        return torch.distributions.Normal(torch.tensor(0.0), torch.tensor(-1.0))

    distribution = torch.distributions.Distribution
    before = distribution._validate_args  # torch.compile's first use turns the checks off
    distribution.set_default_validate_args(True)
    try:
        with ti.distribution_checks_off():
            assert invalid().scale.item() == -1.0
        with pytest.raises(ValueError, match="scale"):
            invalid()  # checked again
        distribution.set_default_validate_args(False)
        with ti.distribution_checks_off():
            pass
        assert invalid().scale.item() == -1.0  # a default of False stays False
    finally:
        distribution.set_default_validate_args(before)


# -- nothing else in machin reaches into torch privates -----------------------------------------
#: Private names of torch objects that machin reads (through torch_internals only).
_PRIVATE_NAMES = {
    "_parameters",
    "_buffers",
    "_forward_pre_hooks",
    "_opt_called",
    "_step_supports_amp_scaling",
    "_optimizer_step_pre_hooks",
    "_optimizer_step_post_hooks",
    "_global_optimizer_pre_hooks",
    "_global_optimizer_post_hooks",
    "_get_shared_fd",
    "_share_filename_cpu_",
    "_shared_incref",
    "_DropoutNd",
    "_NormBase",
    "_foreach_lerp_",
    "_profiler_enabled",
    "_validate_args",
}


def _private_torch_uses(path: pathlib.Path):
    """Private torch imports, ``torch._x`` chains and the names above (attributes or strings) in one file."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "torch"
        ):
            if any(part.startswith("_") for part in node.module.split(".")):
                yield node.lineno, node.module
        elif (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if node.attr in _PRIVATE_NAMES or (isinstance(root, ast.Name) and root.id == "torch"):
                yield node.lineno, node.attr
        elif isinstance(node, ast.Constant) and node.value in _PRIVATE_NAMES:
            yield node.lineno, node.value


def test_the_scan_finds_private_torch_uses(tmp_path):
    source = tmp_path / "example.py"
    source.write_text(
        "import torch\nfrom torch._dynamo import config\nx = torch._C\n"
        "y = module._parameters\nz = getattr(opt, '_opt_called')\n"
    )
    assert [line for line, _ in _private_torch_uses(source)] == [2, 3, 4, 5]


def test_no_other_module_of_machin_reaches_into_torch_privates():
    found = [
        f"{path.relative_to(MACHIN)}:{line}: {what}"
        for path in sorted(MACHIN.rglob("*.py"))
        if path.name != "torch_internals.py"
        for line, what in _private_torch_uses(path)
    ]
    assert found == []

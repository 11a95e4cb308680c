import pytest
import torch
from torch import nn

from machin.parallel.assigner import ModelAssigner, ModelSizeEstimator

MIB = 2**20


def test_size_estimator_counts_parameters_and_buffers_in_mebibytes():
    model = nn.Sequential(nn.Linear(10, 5), nn.BatchNorm1d(4))
    estimator = ModelSizeEstimator(model, size_multiplier=3)
    # Linear: 10*5 weights + 5 biases; BatchNorm: 4 weights + 4 biases (float32).
    assert estimator.get_parameter_sizes() == pytest.approx((55 + 8) * 4 / MIB)
    # BatchNorm buffers: running mean and var (float32) and a counter (int64).
    assert estimator.get_buffer_sizes() == pytest.approx((4 * 4 + 4 * 4 + 8) / MIB)
    expected = (estimator.get_parameter_sizes() + estimator.get_buffer_sizes()) * 3
    assert estimator.estimate_size() == pytest.approx(expected)


def test_size_estimator_counts_shared_parameters_once():
    linear = nn.Linear(4, 4, bias=False)
    model = nn.Sequential(linear, linear)
    assert ModelSizeEstimator(model).get_parameter_sizes() == pytest.approx(16 * 4 / MIB)


def test_size_estimator_rejects_bad_arguments():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got 3 of type int"):
        ModelSizeEstimator(3)
    with pytest.raises(ValueError, match="size_multiplier must be positive, got 0"):
        ModelSizeEstimator(nn.Linear(1, 1), size_multiplier=0)


def models(count=3):
    torch.manual_seed(0)
    return [nn.Linear(8, 8) for _ in range(count)]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only default")
def test_cpu_only_machine_assigns_every_model_to_cpu():
    assigner = ModelAssigner(models(), {(0, 1): 1, (1, 2): 1})
    assert assigner.assignment == [torch.device("cpu")] * 3


def test_explicit_cpu_device_gets_every_model():
    nets = models()
    assigner = ModelAssigner(nets, {(0, 1): 1}, devices=["cpu"])
    assert assigner.assignment == [torch.device("cpu")] * 3
    for net, device in zip(nets, assigner.assignment):
        assert net.weight.device == device
    assigner.assignment.clear()  # a copy: the assigner keeps its own list
    assert len(assigner.assignment) == 3


def test_missing_cuda_devices_are_left_out_with_a_warning():
    # As in Machin 0.3.4: an unavailable GPU is dropped; with nothing left, the CPU is used.
    with pytest.warns(UserWarning, match=r"devices holds 'cuda:99', but this machine has \d+ CUDA"):
        assigner = ModelAssigner(models(2), {}, devices=["cuda:99"])
    assert assigner.assignment == [torch.device("cpu")] * 2
    with pytest.warns(UserWarning, match="removed$"):
        assigner = ModelAssigner(models(2), {}, devices=["cpu", "cuda:99"])
    assert assigner.assignment == [torch.device("cpu")] * 2


def test_models_larger_than_all_allowed_memory_are_refused(monkeypatch):
    monkeypatch.setattr("machin.parallel.assigner._memory_mebibytes", lambda device: 1.0)
    # about 7.6 MiB with the default multiplier, against 0.5 MiB allowed
    with pytest.raises(RuntimeError, match="Estimated model will use 7.64 MB, but only have 0.50"):
        ModelAssigner([nn.Linear(1000, 1000)], {}, devices=["cpu"], max_mem_ratio=0.5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_models_move_to_the_gpu_when_one_is_available():
    nets = models()
    assigner = ModelAssigner(nets, {(0, 1): 1, (1, 2): 1}, iterations=200)
    assert all(device.type == "cuda" for device in assigner.assignment)
    for net, device in zip(nets, assigner.assignment):
        assert net.weight.device == device


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_move_models_false_leaves_models_in_place():
    nets = models(2)
    assigner = ModelAssigner(nets, {}, devices=["cuda:0", "cpu"], move_models=False)
    assert assigner.assignment == [torch.device("cuda", 0)] * 2
    assert all(net.weight.device.type == "cpu" for net in nets)


def search(n, m, steps=300, **overrides):
    """Run optimize_placement on a synthetic problem and return each model's device index."""
    problem = {
        "model_size": torch.ones(1, n),
        "size_capacity": torch.full((1, m), 100.0),
        "model_complexity": torch.ones(1, n),
        "complexity_capacity": torch.ones(1, m),
        "model_connection": torch.zeros(n, n),
        "device_distance": 1 - torch.eye(m),
        "connection_weight": 0.0,
        "size_match_weight": 0.0,
        "complexity_match_weight": 0.0,
        "entropy_weight": 0.1,
    }
    problem.update(overrides)
    generator = torch.Generator().manual_seed(1)
    placement = (torch.randn(n, m, generator=generator) * 0.01).requires_grad_()
    optimizer = torch.optim.Adam([placement], lr=0.05)
    losses = [
        ModelAssigner.optimize_placement(optimizer, placement, **problem) for _ in range(steps)
    ]
    assert losses[-1] < losses[0]
    return placement.argmax(dim=1).tolist()


def test_connected_models_end_on_the_same_device():
    connection = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    first, second = search(2, 3, model_connection=connection, connection_weight=2.0)
    assert first == second


def test_computation_is_spread_by_device_power():
    chosen = search(4, 2, complexity_match_weight=1.0)
    assert sorted(chosen) == [0, 0, 1, 1]


def test_device_without_power_gets_no_model():
    chosen = search(
        3, 2, complexity_capacity=torch.tensor([[1.0, 0.0]]), complexity_match_weight=1.0
    )
    assert chosen == [0, 0, 0]


def test_model_too_large_for_a_device_goes_elsewhere():
    chosen = search(
        2,
        2,
        model_size=torch.tensor([[50.0, 1.0]]),
        size_capacity=torch.tensor([[10.0, 100.0]]),
        size_match_weight=1.0,
    )
    assert chosen[0] == 1


def test_optimize_placement_checks_shapes():
    placement = torch.zeros(2, 3, requires_grad=True)
    with pytest.raises(ValueError, match=r"model_size must have shape \[1, 2\] .* got \[1, 3\]"):
        ModelAssigner.optimize_placement(
            torch.optim.Adam([placement]),
            placement,
            torch.ones(1, 3),
            torch.ones(1, 3),
            torch.ones(1, 2),
            torch.ones(1, 3),
            torch.zeros(2, 2),
            torch.zeros(3, 3),
            1.0,
            1.0,
            1.0,
            1.0,
        )


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"models": []}, ValueError, "models must hold at least one model"),
        ({"models": "net"}, TypeError, "models must be a list of torch.nn.Module, got str"),
        (
            {"models": [nn.Linear(1, 1), 3]},
            TypeError,
            r"models\[1\] must be a torch.nn.Module, got 3",
        ),
        ({"model_connection": [(0, 1)]}, TypeError, "model_connection must be a dict"),
        (
            {"model_connection": {(0, 5): 1}},
            ValueError,
            r"pairs of model indices in \[0, 2\), got \(0, 5\)",
        ),
        (
            {"model_connection": {(0, 1): -1}},
            ValueError,
            r"must not be negative, got -1 for \(0, 1\)",
        ),
        ({"devices": []}, ValueError, "devices must name at least one device"),
        ({"devices": "cpu"}, TypeError, "devices must be a list of devices or None"),
        ({"devices": ["cpu", "cpu:0"]}, ValueError, "devices lists cpu more than once"),
        (
            {"devices": ["meta"]},
            ValueError,
            "devices may only hold cpu and cuda devices, got 'meta'",
        ),
        ({"devices": ["nonsense"]}, ValueError, "devices holds 'nonsense', which is not a device"),
        ({"max_mem_ratio": 1.5}, ValueError, r"max_mem_ratio must be within \(0, 1\], got 1.5"),
        ({"cpu_weight": -1}, ValueError, "cpu_weight must not be negative, got -1"),
        ({"cpu_gpu_distance": 0}, ValueError, "cpu_gpu_distance must be positive, got 0"),
        ({"update_rate": 0}, ValueError, "update_rate must be positive, got 0"),
        ({"iterations": -1}, ValueError, "iterations must be a non-negative int, got -1"),
    ],
)
def test_invalid_assigner_arguments(kwargs, error, message):
    arguments = {"models": [nn.Linear(1, 1), nn.Linear(1, 1)], "model_connection": {}, **kwargs}
    with pytest.raises(error, match=message):
        ModelAssigner(**arguments)

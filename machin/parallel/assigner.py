"""Automatic placement of several models on the devices of one machine.

:class:`ModelAssigner` decides which device (a GPU or the CPU) each of a list of
models should live on, balancing four wishes: connected models close together,
every device's memory respected, computation spread according to each device's
power, and a decisive (low-entropy) choice. It searches with gradient descent
over a soft placement matrix. :class:`ModelSizeEstimator` supplies the memory
figures.

Sizes are in mebibytes throughout: ``bytes / 2**20``.
"""

import math
import warnings
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import psutil
import torch
from torch import nn

__all__ = ["ModelAssigner", "ModelSizeEstimator"]

DeviceLike = Union[torch.device, str]


def _mebibytes(tensors: Iterable[torch.Tensor]) -> float:
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


class ModelSizeEstimator:
    """Estimates how much memory a model needs.

    Only parameters and buffers can be counted; activations, gradients and
    optimizer state are not, which is what ``size_multiplier`` is for: the
    estimate is the counted size times the multiplier.

    Args:
        model: The model to measure.
        size_multiplier: Factor applied to the counted size by
            :meth:`estimate_size`, reserving room for everything not counted.

    Raises:
        TypeError: If ``model`` is not a :class:`torch.nn.Module`.
        ValueError: If ``size_multiplier`` is not positive.
    """

    def __init__(self, model: nn.Module, size_multiplier: float = 2):
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"model must be a torch.nn.Module, got {model!r} of type {type(model).__name__}"
            )
        if not size_multiplier > 0:
            raise ValueError(f"size_multiplier must be positive, got {size_multiplier!r}")
        self.model = model
        self.size_multiplier = size_multiplier

    def get_parameter_sizes(self) -> float:
        """Size of all parameters of the model (each counted once).

        Returns:
            The size in MiB (``bytes / 2**20``).
        """
        return _mebibytes(self.model.parameters())

    def get_buffer_sizes(self) -> float:
        """Size of all buffers of the model (batch norm statistics, for example).

        Returns:
            The size in MiB (``bytes / 2**20``).
        """
        return _mebibytes(self.model.buffers())

    def estimate_size(self) -> float:
        """Estimated memory need: (parameters + buffers) times ``size_multiplier``.

        Returns:
            The size in MiB (``bytes / 2**20``).
        """
        return (self.get_parameter_sizes() + self.get_buffer_sizes()) * self.size_multiplier


def _resolve_devices(devices: Optional[Sequence[DeviceLike]]) -> List[torch.device]:
    if devices is None:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return [torch.device("cuda", index) for index in range(count)] + [torch.device("cpu")]
    if isinstance(devices, (str, torch.device)) or not isinstance(devices, (list, tuple)):
        raise TypeError(
            f"devices must be a list of devices or None, got {devices!r} "
            f"of type {type(devices).__name__}"
        )
    if not devices:
        raise ValueError("devices must name at least one device, got an empty list")
    resolved: List[torch.device] = []
    unavailable = []
    for device in devices:
        try:
            parsed = torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"devices holds {device!r}, which is not a device") from error
        if parsed.type == "cpu":
            parsed = torch.device("cpu")
        elif parsed.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            index = 0 if parsed.index is None else parsed.index
            if index >= count:
                unavailable.append(device)
                continue
            parsed = torch.device("cuda", index)
        else:
            raise ValueError(f"devices may only hold cpu and cuda devices, got {device!r}")
        if parsed in resolved:
            raise ValueError(f"devices lists {parsed} more than once: {devices!r}")
        resolved.append(parsed)
    if unavailable:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        fallback = "" if resolved else "; no device is left, so the CPU is used"
        warnings.warn(
            f"devices holds {', '.join(map(repr, unavailable))}, but this machine has {count} "
            f"CUDA device(s): removed{fallback}",
            stacklevel=3,
        )
    return resolved or [torch.device("cpu")]


def _memory_mebibytes(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device.index).total_memory / 2**20
    return psutil.virtual_memory().total / 2**20


class ModelAssigner:
    """Assigns each model of a list to a device, within a single process.

    All GPUs are assumed equally fast. The CPU counts as ``cpu_weight`` GPUs of
    computing power, so with the default ``cpu_weight=0`` no model is placed on
    the CPU when a GPU is available (unless GPU memory runs out). With only one
    candidate device (a machine without GPUs and ``devices=None``) every model
    goes to it, without any search.

    The search optimizes logits ``L[n_models, n_devices]`` with Adam; the
    placement probabilities are ``P = softmax(L, dim=1)``. The loss minimised by
    :meth:`optimize_placement` is a weighted sum of four terms, each scaled to
    lie roughly within [0, 1]:

    1. connection: expected device distance between connected models, weighted
       by their connection strength;
    2. size match: memory expected on each device beyond its capacity (a ReLU,
       so it only acts when a device overflows);
    3. complexity match: squared gap between each device's expected load and its
       share of the total load according to its computing power;
    4. entropy of each model's placement distribution.

    Each model then goes to its most probable device.

    Note:
        When the models nearly fill the available memory the size term is weak;
        raise ``model_size_multiplier`` or lower ``max_mem_ratio`` to keep room.

    Args:
        models: Models to place.
        model_connection: ``{(i, j): weight}``, the amount of data flowing between
            models ``i`` and ``j`` (indices into ``models``); weights must be
            non-negative.
        devices: Candidate devices (``"cpu"``, ``"cuda:0"``, ...). ``None`` uses
            every CUDA device plus the CPU.
        model_size_multiplier: ``size_multiplier`` of the
            :class:`ModelSizeEstimator` measuring each model.
        max_mem_ratio: Fraction of each device's total memory that models may use.
        cpu_weight: Computing power of the CPU relative to one GPU; must not be
            negative.
        connection_weight: Weight of the connection term.
        size_match_weight: Weight of the size term.
        complexity_match_weight: Weight of the complexity term.
        entropy_weight: Weight of the entropy term.
        iterations: Number of optimizer steps.
        update_rate: Learning rate of the Adam optimizer.
        gpu_gpu_distance: Cost of moving data between two GPUs; must be positive.
        cpu_gpu_distance: Cost of moving data between the CPU and a GPU; must be
            positive.
        move_models: Move every model to its device once assigned.

    Raises:
        TypeError: If ``models`` is not a list of modules or ``devices`` not a list.
        ValueError: For an empty model list, a connection naming a missing model
            or with a negative weight, an unknown device, or a parameter out of its
            range.
        RuntimeError: If the models' estimated sizes exceed the memory allowed on
            all devices together (``max_mem_ratio`` of each).

    Warns:
        UserWarning: For each CUDA device of ``devices`` that this machine does not
            have; it is left out (as in Machin 0.3.4), and when no device is left
            the CPU is used.
    """

    def __init__(
        self,
        models: List[nn.Module],
        model_connection: Dict[Tuple[int, int], int],
        devices: Optional[List[DeviceLike]] = None,
        model_size_multiplier: float = 2,
        max_mem_ratio: float = 0.5,
        cpu_weight: float = 0,
        connection_weight: float = 2,
        size_match_weight: float = 0.01,
        complexity_match_weight: float = 1,
        entropy_weight: float = 1,
        iterations: int = 500,
        update_rate: float = 0.01,
        gpu_gpu_distance: float = 1,
        cpu_gpu_distance: float = 10,
        move_models: bool = True,
    ):
        _check_models(models)
        connection = _connection_matrix(model_connection, len(models))
        if not 0 < max_mem_ratio <= 1:
            raise ValueError(f"max_mem_ratio must be within (0, 1], got {max_mem_ratio!r}")
        if not cpu_weight >= 0:
            raise ValueError(f"cpu_weight must not be negative, got {cpu_weight!r}")
        for name, value in (
            ("model_size_multiplier", model_size_multiplier),
            ("update_rate", update_rate),
            ("gpu_gpu_distance", gpu_gpu_distance),
            ("cpu_gpu_distance", cpu_gpu_distance),
        ):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
            raise ValueError(f"iterations must be a non-negative int, got {iterations!r}")

        self._devices = _resolve_devices(devices)
        estimators = [ModelSizeEstimator(model, model_size_multiplier) for model in models]
        model_size = torch.tensor([[e.estimate_size() for e in estimators]], dtype=torch.float64)
        size_capacity = torch.tensor(
            [[_memory_mebibytes(d) * max_mem_ratio for d in self._devices]], dtype=torch.float64
        )
        if model_size.sum() > size_capacity.sum():
            raise RuntimeError(
                f"Estimated model will use {model_size.sum().item():.2f} MB, but only have "
                f"{size_capacity.sum().item():.2f} MB allowed memory in total "
                f"(max_mem_ratio={max_mem_ratio} of the memory of {self._devices})"
            )
        model_size, size_capacity = model_size.float(), size_capacity.float()
        if len(self._devices) == 1:
            chosen = [0] * len(models)
        else:
            model_complexity = torch.tensor([[e.get_parameter_sizes() for e in estimators]])
            complexity_capacity = torch.tensor(
                [[float(cpu_weight) if d.type == "cpu" else 1.0 for d in self._devices]]
            )
            device_distance = _distance_matrix(self._devices, gpu_gpu_distance, cpu_gpu_distance)
            # Small random logits break the symmetry between identical GPUs; the
            # fixed seed keeps the assignment repeatable.
            generator = torch.Generator().manual_seed(0)
            placement = (
                torch.randn(len(models), len(self._devices), generator=generator) * 0.01
            ).requires_grad_()
            optimizer = torch.optim.Adam([placement], lr=update_rate)
            for _ in range(iterations):
                self.optimize_placement(
                    optimizer,
                    placement,
                    model_size,
                    size_capacity,
                    model_complexity,
                    complexity_capacity,
                    connection,
                    device_distance,
                    connection_weight,
                    size_match_weight,
                    complexity_match_weight,
                    entropy_weight,
                )
            chosen = placement.detach().argmax(dim=1).tolist()

        self._assignment = [self._devices[index] for index in chosen]
        if move_models:
            for model, device in zip(models, self._assignment):
                model.to(device)

    @property
    def assignment(self) -> List[torch.device]:
        """The device assigned to each model, in the order of ``models``."""
        return list(self._assignment)

    @staticmethod
    def optimize_placement(
        optimizer: torch.optim.Optimizer,
        placement: torch.Tensor,
        model_size: torch.Tensor,
        size_capacity: torch.Tensor,
        model_complexity: torch.Tensor,
        complexity_capacity: torch.Tensor,
        model_connection: torch.Tensor,
        device_distance: torch.Tensor,
        connection_weight: float,
        size_match_weight: float,
        complexity_match_weight: float,
        entropy_weight: float,
    ) -> float:
        """Take one optimizer step on the placement logits.

        For ``n`` models and ``m`` devices. See the class notes for the loss.

        Args:
            optimizer: Optimizer owning ``placement``.
            placement: Placement logits, shape ``[n, m]``, with ``requires_grad``.
            model_size: Memory need of each model (MiB), shape ``[1, n]``.
            size_capacity: Memory available on each device (MiB), shape ``[1, m]``.
            model_complexity: Computation cost of each model, shape ``[1, n]``.
            complexity_capacity: Computing power of each device, shape ``[1, m]``;
                at least one entry must be positive.
            model_connection: Connection strength from model ``i`` to ``j``,
                shape ``[n, n]``.
            device_distance: Transfer cost between devices, shape ``[m, m]``.
            connection_weight: Weight of the connection term.
            size_match_weight: Weight of the size term.
            complexity_match_weight: Weight of the complexity term.
            entropy_weight: Weight of the entropy term.

        Returns:
            The loss before the step.

        Raises:
            ValueError: If a tensor does not have the shape above.
        """
        n, m = placement.shape
        for name, tensor, shape in (
            ("model_size", model_size, (1, n)),
            ("size_capacity", size_capacity, (1, m)),
            ("model_complexity", model_complexity, (1, n)),
            ("complexity_capacity", complexity_capacity, (1, m)),
            ("model_connection", model_connection, (n, n)),
            ("device_distance", device_distance, (m, m)),
        ):
            if tuple(tensor.shape) != shape:
                raise ValueError(
                    f"{name} must have shape {list(shape)} for a placement of shape "
                    f"{[n, m]}, got {list(tensor.shape)}"
                )
        tiny = 1e-12
        probability = torch.softmax(placement, dim=1)

        distance = probability @ device_distance @ probability.T
        connection_cost = (model_connection * distance).sum() / (
            model_connection.sum().clamp(min=tiny) * device_distance.max().clamp(min=tiny)
        )

        overflow = torch.relu(model_size @ probability - size_capacity).sum()
        size_cost = overflow / model_size.sum().clamp(min=tiny)

        total_complexity = model_complexity.sum().clamp(min=tiny)
        load = model_complexity @ probability
        share = complexity_capacity / complexity_capacity.sum().clamp(min=tiny)
        complexity_cost = ((load - total_complexity * share) ** 2).sum() / total_complexity**2

        entropy = -(probability * torch.log(probability.clamp(min=tiny))).sum(dim=1).mean()
        entropy_cost = entropy / math.log(m) if m > 1 else entropy

        loss = (
            connection_weight * connection_cost
            + size_match_weight * size_cost
            + complexity_match_weight * complexity_cost
            + entropy_weight * entropy_cost
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()


def _check_models(models: List[nn.Module]) -> None:
    if not isinstance(models, (list, tuple)):
        raise TypeError(f"models must be a list of torch.nn.Module, got {type(models).__name__}")
    if not models:
        raise ValueError("models must hold at least one model, got an empty list")
    for index, model in enumerate(models):
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"models[{index}] must be a torch.nn.Module, got {model!r} "
                f"of type {type(model).__name__}"
            )


def _connection_matrix(model_connection: Dict[Tuple[int, int], int], count: int) -> torch.Tensor:
    if not isinstance(model_connection, dict):
        raise TypeError(
            "model_connection must be a dict {(i, j): weight}, "
            f"got {type(model_connection).__name__}"
        )
    matrix = torch.zeros(count, count)
    for key, weight in model_connection.items():
        if (
            not isinstance(key, tuple)
            or len(key) != 2
            or not all(isinstance(i, int) and 0 <= i < count for i in key)
        ):
            raise ValueError(
                f"model_connection keys must be pairs of model indices in [0, {count}), got {key!r}"
            )
        if not weight >= 0:
            raise ValueError(
                f"model_connection weights must not be negative, got {weight!r} for {key!r}"
            )
        matrix[key] += float(weight)
    return matrix


def _distance_matrix(
    devices: List[torch.device], gpu_gpu_distance: float, cpu_gpu_distance: float
) -> torch.Tensor:
    size = len(devices)
    matrix = torch.zeros(size, size)
    for i in range(size):
        for j in range(size):
            if i != j:
                involves_cpu = "cpu" in (devices[i].type, devices[j].type)
                matrix[i, j] = cpu_gpu_distance if involves_cpu else gpu_gpu_distance
    return matrix

"""Assign models to devices automatically with ModelAssigner.

Four small networks form a chain (0 -> 1 -> 2 -> 3). The assigner places them on
the available devices (every GPU, plus the CPU), keeping connected models close
and spreading computation over the GPUs. On a machine without GPUs every model
goes to the CPU.
"""

import torch
from torch import nn

from machin.parallel.assigner import ModelAssigner, ModelSizeEstimator


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)) for _ in range(4)]
    for index, model in enumerate(models):
        estimator = ModelSizeEstimator(model, size_multiplier=2)
        print(
            f"model {index}: parameters {estimator.get_parameter_sizes():.4f} MiB, "
            f"estimated need {estimator.estimate_size():.4f} MiB"
        )

    connections = {(0, 1): 1, (1, 2): 1, (2, 3): 1}
    assigner = ModelAssigner(models, connections, iterations=300)
    for index, (model, device) in enumerate(zip(models, assigner.assignment)):
        print(f"model {index} -> {device} (parameters now on {next(model.parameters()).device})")


if __name__ == "__main__":
    main()

"""Ape-X DQN on CartPole-v0 with 3 processes on this machine, reusing the distributed tutorial.

Run it with python examples/framework_examples/dqn_apex.py [--episodes N] [--seed S]
(three local processes), or as one rank per process under torchrun::

    torchrun --nproc_per_node 3 examples/framework_examples/dqn_apex.py --episodes 1000

The training loop lives in
examples/tutorials/unleash_distributed_power/dqn_apex.py; this script only loads it
and starts it, so both always show the same code.
"""

import argparse
import importlib.util
from pathlib import Path

from machin.parallel.distributed.launcher import run_script

TUTORIAL = Path(__file__).resolve().parents[1] / "tutorials" / "unleash_distributed_power" / "dqn_apex.py"


def load_tutorial():
    """Import the tutorial script as a module (its directory is not a package)."""
    spec = importlib.util.spec_from_file_location("dqn_apex_tutorial", TUTORIAL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=1000, help="episodes per worker at most")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tutorial = load_tutorial()
    run_script(lambda rank: tutorial.main(rank, args.episodes, args.seed), 3, timeout=3600)

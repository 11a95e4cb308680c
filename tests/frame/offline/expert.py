"""The scripted Pendulum expert of the offline example, for the offline tests (no download).

Loaded from ``examples/framework_examples/_pendulum_expert.py``, so that the example and the
tests record their datasets with the same controller.
"""

import importlib.util
from pathlib import Path

_PATH = (
    Path(__file__).resolve().parents[3] / "examples" / "framework_examples" / "_pendulum_expert.py"
)
_spec = importlib.util.spec_from_file_location("pendulum_expert_example", _PATH)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

expert_action = _module.expert_action
record_dataset = _module.record_dataset

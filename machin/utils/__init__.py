"""Reading, writing and checking helpers shared by the whole library.

Submodules: ``checker``, ``compat``, ``conf``, ``helper_classes``, ``learning_rate``,
``logging``, ``media``, ``prepare``, ``save_env``, ``schedules``, ``tensor_board``
and ``visualize``; ``seed`` (from ``seeding``) seeds every random generator. They are imported on first access (``machin.utils.conf``) or
explicitly (``from machin.utils.conf import Config``), so importing
``machin.utils`` itself is cheap and has no side effects.
"""

import importlib
from typing import Any

__all__ = [
    "checker",
    "compat",
    "conf",
    "helper_classes",
    "learning_rate",
    "logging",
    "media",
    "prepare",
    "save_env",
    "schedules",
    "tensor_board",
    "visualize",
    "seeding",
    "seed",
]


def __getattr__(name: str) -> Any:
    if name == "seed":
        return importlib.import_module(f"{__name__}.seeding").seed
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)

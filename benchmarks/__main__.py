"""Run every benchmark module: ``python -m benchmarks [name ...]``.

A module of this package takes part when it defines ``main()``; with names on the
command line only those modules run.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback
from pathlib import Path
from typing import List, Optional

_SKIP = {"__main__", "__init__", "common"}


def discover() -> List[str]:
    """Names of the benchmark modules beside this file, sorted."""
    here = Path(__file__).resolve().parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name not in _SKIP)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the chosen (default: all) benchmark modules; return the number that failed."""
    names = list(sys.argv[1:] if argv is None else argv) or discover()
    failed = 0
    for name in names:
        module = importlib.import_module(f"{__package__}.{name}")
        entry = getattr(module, "main", None)
        if not callable(entry):
            continue
        print(f"== {name}", flush=True)
        try:
            entry()
        except Exception:  # report and go on with the other benchmarks
            failed += 1
            traceback.print_exc()
    return failed


if __name__ == "__main__":
    sys.exit(1 if main() else 0)

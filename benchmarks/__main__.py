"""Run every benchmark module: ``python -m benchmarks [name ...]``.

A module of this package takes part when it defines ``main()``; with names on the
command line only those modules run. At the end a table sets the rows that have a ceiling
(issues #21 and #42) against it (rows that did not run are marked so).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import pkgutil
import re
import sys
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Tuple

_SKIP = {"__main__", "__init__", "common"}

#: The ceilings each row must stay under (the start of a row's label, the largest ratio to its
#: floor). Issue #42 set those of the buffer rows, the eager loops and the compiled updates
#: (guarded against going back, not chased); the prioritized rows keep issue #21's.
TARGETS: Tuple[Tuple[str, float], ...] = (
    ("buffer append (dict)", 1.5),
    ("buffer sample_batch(256, 'random')", 1.4),
    ("prioritized append (dict, default priority)", 3.0),
    ("update_priority(256)", 1.5),
    ("store_transition inside the DQN, CartPole-v1, loop", 1.7),
    ("DQN, CartPole-v1, loop (CPU time", 1.15),
    ("DDPG, Pendulum-v1, loop (CPU time", 1.2),
    ("compiled DQN update", 0.7),
    ("compiled DDPG update", 0.7),
    ("compiled TD3 update", 0.7),
    ("compiled SAC update", 0.7),
    ("compiled PPO update", 0.7),
)
_ROW = re.compile(r"^(?P<label>[^\n]+?): library .*?, ratio (?P<ratio>\d+(?:\.\d+)?)", re.MULTILINE)


class _Tee(io.TextIOBase):
    """Writes to a stream and keeps a copy of what was written."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def target_table(output: str, every_module: bool = True) -> List[str]:
    """The lines of the target table for the benchmark ``output`` (every row printed with a ratio).

    With ``every_module`` a target without a row is listed as not run (its benchmark failed or
    did not print it); otherwise it is left out, and no row at all gives no lines.
    """
    rows: Dict[str, List[float]] = {}
    for match in _ROW.finditer(output):
        rows.setdefault(match["label"], []).append(float(match["ratio"]))
    lines = ["| row | target | ratio | met |", "| --- | --- | --- | --- |"]
    for start, bound in TARGETS:
        found = [
            (label, ratio)
            for label, ratios in rows.items()
            if label.startswith(start)
            for ratio in ratios
        ]
        if not found and every_module:
            lines.append(f"| {start} | <= {bound:g} | not run | - |")
        for label, ratio in found:
            lines.append(
                f"| {label} | <= {bound:g} | {ratio:.2f} | {'yes' if ratio <= bound else 'no'} |"
            )
    return lines if len(lines) > 2 else []


def discover() -> List[str]:
    """Names of the benchmark modules beside this file, sorted."""
    here = Path(__file__).resolve().parent
    return sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name not in _SKIP)


def main(argv: Optional[List[str]] = None) -> int:
    """Run the chosen (default: all) benchmark modules; return the number that failed."""
    chosen = list(sys.argv[1:] if argv is None else argv)
    names = chosen or discover()
    failed = 0
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
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
    table = target_table(tee.copy.getvalue(), every_module=not chosen)
    if table:
        print("== ceilings (issues #21, #42)")
        print("\n".join(table), flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(1 if main() else 0)

"""Every example and tutorial script runs in a smoke mode (a couple of episodes) and exits 0."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    p for p in (ROOT / "examples").rglob("*.py") if not p.name.startswith("_")
    and not any(part.startswith("_") for part in p.relative_to(ROOT / "examples").parts[:-1])
)
# Scripts that train take --episodes; the others are short demonstrations that run as they are.
TRAINING_DIRS = {"framework_examples", "your_first_program", "unleash_distributed_power"}


def smoke_args(path: Path):
    if TRAINING_DIRS & set(path.parts):
        return ["--episodes", "2"] + (["--plot", ""] if path.parent.name == "your_first_program" else [])
    return []


@pytest.mark.parametrize("script", EXAMPLES, ids=[str(p.relative_to(ROOT / "examples")) for p in EXAMPLES])
def test_example_runs(script, tmp_path):
    # One thread per script: the suite already keeps both cores busy.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "SDL_VIDEODRIVER": "dummy",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(script), *smoke_args(script)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, f"{script.name} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    assert result.stdout or result.stderr, f"{script.name} printed nothing"

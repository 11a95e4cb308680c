"""Every example and tutorial script runs in a smoke mode and exits 0; outputs are read back.

Scripts in ``TRAINING_DIRS`` train an agent and take ``--episodes``: they run two
episodes. Scripts in ``CURVE_DIRS`` must also write exactly one learning-curve PNG into
their working directory by default. Every other script is a short demonstration and runs
as it is. Files and directories whose names start with ``_`` are helpers, not scripts.

The distributed scripts also take ``--backend ray --address ADDR``: one tutorial runs on
the two-node Ray cluster of :mod:`tests.ray_cluster` (127.0.0.1 only; the fixture
``ray_cluster`` comes from ``tests/conftest.py``), and the options' usage errors are
checked.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.script_runner import run_python_script

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = ROOT / "examples"
EXAMPLES = sorted(
    p
    for p in EXAMPLES_DIR.rglob("*.py")
    if not any(part.startswith("_") for part in p.relative_to(EXAMPLES_DIR).parts)
)
# Directories whose scripts train and take --episodes (add new training directories here).
TRAINING_DIRS = {
    "framework_examples",
    "your_first_program",
    "unleash_distributed_power",
    "recurrent_networks",
    "trainer",
    "extending",
}
# Directories whose scripts write a learning-curve PNG into the working directory by default.
CURVE_DIRS = {"framework_examples", "your_first_program", "unleash_distributed_power"}
SMOKE_EPISODES = "2"
# Distributed tutorials whose smoke run uses another number of local processes than the default 3:
# their learner and samplers come from the world size, so any size must work.
NPROC = {"unleash_distributed_power/dqn_apex.py": 5, "unleash_distributed_power/impala.py": 4}
HARD_TIMEOUT = 240  # seconds: a hung script fails the test instead of stalling the suite


def in_dirs(path: Path, names: set) -> bool:
    return path.parent.name in names


def run_script(
    script: Path,
    args,
    cwd: Path,
    env=None,
    expect_success=True,
    timeout=HARD_TIMEOUT,
    fresh_interpreter=False,
) -> subprocess.CompletedProcess:
    """Run ``script args`` in ``cwd``: in a child of the fork server of ``tests.script_runner``
    (no new interpreter to start), or with ``fresh_interpreter`` as a new ``python`` process."""
    # One thread per script: the suite already keeps the cores busy.
    env = {
        "PYTHONPATH": str(ROOT),
        "MPLBACKEND": "Agg",
        "SDL_VIDEODRIVER": "dummy",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        **(env or {}),
    }
    if fresh_interpreter:
        result = subprocess.run(
            [sys.executable, str(script), *args],
            cwd=cwd,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    else:
        result = run_python_script(script, args, cwd, env=env, timeout=timeout)
    if expect_success:
        assert result.returncode == 0, (
            f"{script.name} {' '.join(args)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        )
    return result


def read_png(path: Path):
    with Image.open(path) as image:
        assert image.format == "PNG", f"{path.name} is a {image.format}, not a PNG"
        image.load()  # decodes every pixel: a truncated file raises here
        return image.size


@pytest.mark.parametrize(
    "script", EXAMPLES, ids=[str(p.relative_to(EXAMPLES_DIR)) for p in EXAMPLES]
)
def test_example_runs(script, tmp_path):
    args = ["--episodes", SMOKE_EPISODES] if in_dirs(script, TRAINING_DIRS) else []
    nproc = NPROC.get(f"{script.parent.name}/{script.name}")
    if nproc:
        args += ["--nproc", str(nproc)]
    result = run_script(script, args, tmp_path)
    assert result.stdout or result.stderr, f"{script.name} printed nothing"
    if nproc:  # rank 0 learned; every other process sampled and reported its steps to it
        reported = re.search(r"environment steps reported \{([^}]*)\}", result.stdout)
        assert reported and sorted(
            int(k) for k in re.findall(r"(\d+):", reported.group(1))
        ) == list(range(1, nproc)), result.stdout[-2000:]
    if in_dirs(script, {"your_first_program"}):  # a new user's first run is quiet
        assert "Warning" not in result.stderr, result.stderr
    if in_dirs(script, CURVE_DIRS):
        pngs = sorted(tmp_path.glob("*.png"))
        assert len(pngs) == 1, f"{script.name} should write one learning-curve PNG, wrote {pngs}"
        width, height = read_png(pngs[0])
        assert width > 100 and height > 100


@pytest.mark.parametrize("name, frame_size", [("dqn", (600, 400)), ("ddpg", (500, 500))])
def test_example_writes_gif_and_curve(name, frame_size, tmp_path):
    """``--gif`` records one episode of the trained agent; ``--plot`` chooses the PNG path."""
    out = tmp_path / "out"
    script = EXAMPLES_DIR / "framework_examples" / f"{name}.py"
    result = run_script(
        script,
        [
            "--episodes",
            SMOKE_EPISODES,
            "--plot",
            str(out / "curve.png"),
            "--gif",
            str(out / "episode.gif"),
        ],
        tmp_path,
    )
    assert sorted(p.name for p in out.iterdir()) == ["curve.png", "episode.gif"]
    assert not list(tmp_path.glob("*.png")), (
        "the default PNG path must not be used when --plot is given"
    )

    assert read_png(out / "curve.png") == (
        600,
        350,
    )  # create_learning_curve draws 6 x 3.5 inches at 100 dpi
    recorded = int(re.search(r"\((\d+) frames\) written", result.stdout).group(1))
    with Image.open(out / "episode.gif") as gif:
        assert gif.format == "GIF"
        assert gif.size == frame_size
        # Pillow merges identical consecutive frames, so the file may hold fewer than recorded.
        assert 1 < gif.n_frames <= recorded
        gif.seek(gif.n_frames - 1)  # decodes up to the last frame
        assert gif.convert("RGB").getextrema() != ((0, 0), (0, 0), (0, 0)), (
            "the last frame is black"
        )


def test_plot_can_be_disabled(tmp_path):
    script = EXAMPLES_DIR / "framework_examples" / "ppo.py"
    result = run_script(script, ["--episodes", "1", "--plot", ""], tmp_path)
    assert "episode    1" in result.stdout
    assert list(tmp_path.iterdir()) == []


RECURRENT = EXAMPLES_DIR / "tutorials" / "recurrent_networks"


@pytest.mark.parametrize("name", ["dqn", "drqn", "ppo", "rppo"])
def test_recurrent_tutorial_plays_an_atari_game_from_ram(name, tmp_path):
    """The tutorial's optional Atari path (ale-py, installed by requirements.txt): one short game."""
    result = run_script(
        RECURRENT / f"{name}.py",
        ["--env", "ALE/Breakout-v5", "--episodes", "1", "--plot", "atari.png"],
        tmp_path,
    )
    assert re.search(r"best smoothed return [\d.]+ at episode 1, 1 episodes", result.stdout), (
        result.stdout[-500:]
    )
    assert read_png(tmp_path / "atari.png")[0] > 0


def test_recurrent_tutorial_explains_a_bad_environment_name(tmp_path):
    result = run_script(
        RECURRENT / "dqn.py", ["--env", "Pong", "--episodes", "1"], tmp_path, expect_success=False
    )
    assert result.returncode != 0
    assert (
        "env must be 'CartPole-v0' or an Atari id such as 'ALE/Pong-v5', got 'Pong'"
        in result.stderr
    )


DISTRIBUTED_POWER = EXAMPLES_DIR / "tutorials" / "unleash_distributed_power"
# Every kind of distributed script (a parallel_distributed tutorial, an unleash_distributed_power
# tutorial, a framework example that loads one, one with its own options) with the options that
# ask for Ray; --address alone implies it.
RAY_UNDER_TORCHRUN = [
    (EXAMPLES_DIR / "tutorials" / "parallel_distributed" / "world_start.py", ["--backend", "ray"]),
    (
        EXAMPLES_DIR / "tutorials" / "parallel_distributed" / "world_start.py",
        ["--address", "127.0.0.1:9"],
    ),
    (DISTRIBUTED_POWER / "dqn_apex.py", ["--backend", "ray"]),
    (EXAMPLES_DIR / "framework_examples" / "impala.py", ["--backend", "ray", "--address", "auto"]),
    (EXAMPLES_DIR / "framework_examples" / "ars.py", ["--backend", "ray"]),
]
RAY_RUN_TIMEOUT = 150  # seconds: the Ray run's hard limit (it takes well under a minute)


def usage_error(script: Path, args, cwd: Path, env=None) -> str:
    """Run ``script`` expecting argparse's usage error (exit code 2); return its last stderr line."""
    result = run_script(script, args, cwd, env=env, expect_success=False, timeout=60)
    assert result.returncode == 2, (
        f"exit code {result.returncode}:\n{result.stdout[-1000:]}\n{result.stderr[-2000:]}"
    )
    assert result.stdout == ""
    return result.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "script, options",
    RAY_UNDER_TORCHRUN,
    ids=[f"{p.parent.name}/{p.name} {' '.join(o)}" for p, o in RAY_UNDER_TORCHRUN],
)
def test_ray_backend_under_torchrun_says_to_run_with_python(script, options, tmp_path):
    """Under torchrun (``RANK`` and ``WORLD_SIZE`` set) the Ray options stop the script at once."""
    torchrun_env = {
        "RANK": "1",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "9",
    }
    assert usage_error(script, options, tmp_path, env=torchrun_env) == (
        f"{script.name}: error: --backend ray cannot run under torchrun (this process is rank 1 of 3): "
        f"with ray the script starts its own rank actors, so run it with plain python, "
        f"e.g. 'python {script.name} --backend ray'"
    )
    assert list(tmp_path.iterdir()) == []


def test_launch_options_usage_errors_name_the_option_and_value(tmp_path):
    script = DISTRIBUTED_POWER / "a3c.py"
    assert usage_error(script, ["--backend", "rpc", "--address", "127.0.0.1:6379"], tmp_path) == (
        "a3c.py: error: --address '127.0.0.1:6379' is the address of a Ray cluster and needs --backend ray, "
        "got --backend rpc (leave --backend out or give --backend ray)"
    )
    assert usage_error(script, ["--backend", "mpi"], tmp_path) == (
        "a3c.py: error: argument --backend: invalid choice: 'mpi' (choose from 'rpc', 'ray')"
    )
    assert usage_error(script, ["--address", " "], tmp_path) == (
        "a3c.py: error: argument --address: expected a Ray cluster address such as '127.0.0.1:6379', got ' '"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.multiprocess
def test_apex_tutorial_runs_on_a_ray_cluster(ray_cluster, tmp_path):
    """``--backend ray --address ADDR``: the Ape-X tutorial's three ranks are actors of the running
    two-node cluster; the learner makes its 100 updates from both samplers' steps, and its
    checkpoint and a sampler's curve land in this directory (their paths made absolute)."""
    address = ray_cluster["address"]
    assert address.startswith("127.0.0.1:"), address
    result = run_script(
        DISTRIBUTED_POWER / "dqn_apex.py",
        [
            "--backend",
            "ray",
            "--address",
            address,
            "--episodes",
            "100",
            "--updates",
            "100",
            "--checkpoint-every",
            "100",
        ],
        tmp_path,
        env={"RAY_DEDUP_LOGS": "0"},
        timeout=RAY_RUN_TIMEOUT,
        fresh_interpreter=True,  # a Ray driver of its own, started as a user starts it
    )
    # Ray forwards the actors' output, each line prefixed by "(RankActor pid=...)". The learner
    # prints its summary before it waits for the end of the run, so the line has time to arrive.
    output = result.stdout + result.stderr
    summary = re.search(
        r"RankActor pid=\d+\).* learner: (\d+) updates;.*environment steps reported \{([^}]*)\}",
        output,
    )
    assert summary, output[-3000:]
    assert int(summary.group(1)) == 100
    reported = dict(re.findall(r"(\d+): (\d+)", summary.group(2)))
    assert sorted(reported) == ["1", "2"] and all(int(steps) > 0 for steps in reported.values()), (
        summary.group(0)
    )
    checkpoints = sorted(p.name for p in (tmp_path / "dqn_apex_checkpoints").iterdir())
    assert "learner_state_100.pt" in checkpoints, checkpoints
    assert read_png(tmp_path / "dqn_apex_curve.png")[0] > 100

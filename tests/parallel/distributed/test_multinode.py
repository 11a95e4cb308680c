"""Two torchrun "nodes" on localhost run the Ape-X DQN tutorial as the docs write it; one node dies.

Each node is a ``torchrun --nnodes 2 --nproc_per_node 2`` launch (4 processes in all:
rank 0 learns, ranks 1 to 3 sample; ranks 2 and 3 live on node 1). Once the learner has
written its checkpoint of update 40, every process of node 1 is killed; the learner and
the sampler of node 0 must go on to the bounded number of updates, the learner must say
who left, and node 0's processes must end with exit code 0. The learner's last line tells
how many of the samples it drew came from each node: both nodes must have contributed.
"""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from machin.parallel.distributed.launcher import free_port
from tests.multiprocess import no_children_left  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]

ROOT = Path(__file__).resolve().parents[3]
TUTORIAL = ROOT / "examples" / "tutorials" / "unleash_distributed_power" / "dqn_apex.py"
DOC = ROOT / "docs" / "tutorial_distributed_power.rst"
#: The N-node command of docs/tutorial_distributed_power.rst, with this test's address and port.
NODE_COMMAND = (
    "-m torch.distributed.run --nnodes=2 --nproc_per_node=2 --node_rank={node} "
    "--master_addr=127.0.0.1 --master_port={port} " + str(TUTORIAL)
)
UPDATES, KILL_AT = 400, 40
HARD_TIMEOUT = 200.0  # seconds for the whole run, far above what it needs


def _start_node(node, port, cwd, log):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "LOGLEVEL": "INFO",
    }  # torchrun's agent then logs the final state of its workers
    args = NODE_COMMAND.format(node=node, port=port).split()
    args += [
        "--episodes",
        "100000",
        "--updates",
        str(UPDATES),
        "--checkpoint-every",
        str(KILL_AT),
        "--plot",
        "",
    ]
    return subprocess.Popen(
        [sys.executable, *args], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT
    )


def _kill_node(process):
    """SIGKILL a torchrun agent and every process it started (its workers run in their own sessions)."""
    try:
        family = [
            psutil.Process(process.pid),
            *psutil.Process(process.pid).children(recursive=True),
        ]
    except psutil.NoSuchProcess:
        family = []
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.send_signal(signal.SIGKILL)
    psutil.wait_procs(family, timeout=10)
    process.wait(10)


def _wait(condition, deadline, what, logs):
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(
                f"{what} did not happen in time; logs:\n"
                + "\n".join(p.read_text()[-3000:] for p in logs)
            )
        time.sleep(0.2)


def test_docs_give_the_multi_node_command_this_test_runs():
    text = " ".join(DOC.read_text().split())
    assert (
        "torchrun --nnodes=2 --nproc_per_node=2 --node_rank=0 --master_addr=10.0.0.1 --master_port=29500 "
        "examples/tutorials/unleash_distributed_power/dqn_apex.py"
    ) in text.replace("\\ ", "")


def test_two_nodes_train_one_learner_and_the_run_survives_losing_node_1(tmp_path):
    port = free_port()
    logs = [tmp_path / "node0.log", tmp_path / "node1.log"]
    nodes = []
    with open(logs[0], "w") as log_0, open(logs[1], "w") as log_1:
        try:
            nodes = [
                _start_node(node, port, tmp_path, log) for node, log in enumerate((log_0, log_1))
            ]
            deadline = time.monotonic() + HARD_TIMEOUT
            checkpoint = tmp_path / "dqn_apex_checkpoints" / f"learner_state_{KILL_AT}.pt"
            _wait(
                checkpoint.exists, deadline, f"the learner's checkpoint of update {KILL_AT}", logs
            )
            _kill_node(nodes[1])  # every process of node 1: its agent and both samplers

            def node_0_finished():
                return (
                    "Local worker group finished" in logs[0].read_text()
                    or nodes[0].poll() is not None
                )

            _wait(node_0_finished, deadline, "the end of node 0's workers", logs)
        finally:
            for node in nodes:
                _kill_node(
                    node
                )  # node 0's agent would wait minutes for node 1's at its exit barrier
    out = logs[0].read_text()
    assert "Local worker group finished (WorkerState.SUCCEEDED)" in out, out[
        -4000:
    ]  # both exited with 0
    for rank in (2, 3):
        assert re.search(
            rf"sampler \d \(rank {rank}\) on node 1 \(host [^)]*\) left the run", out
        ), out[-4000:]
    summary = re.search(
        r"learner: (\d+) updates; samples drawn by node \{0: (\d+), 1: (\d+)\}", out
    )
    assert summary, out[-4000:]
    updates, from_node_0, from_node_1 = map(int, summary.groups())
    assert updates == UPDATES
    assert from_node_0 > 0 and from_node_1 > 0
    assert (
        "sampler 0 (rank 1): sampler 1 (rank 2) has left the run" in out
    )  # the survivor knows too

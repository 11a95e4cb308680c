"""Run a Python script as ``python script args`` would, in a child of a fork server.

Starting an interpreter that imports torch, gymnasium and matplotlib costs about 3 s of
CPU, which the example tests paid once per script. Here a fork server imports those
once per test worker; each script then runs in a fresh child of it, as ``__main__``,
with its own arguments, working directory, environment and output files, so that it
sees no state of another script or of pytest. What differs from a new interpreter:
modules the server imported are not imported again (their import-time warnings are not
shown), and the process's random generators start from the server's state.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Optional, Sequence

import psutil

__all__ = ["run_python_script"]

#: What the fork server imports once (used only if this is the first use of the server).
_PRELOAD = [
    "torch",
    "torch._dynamo",  # imported by the first optimizer a process builds: 2 s of CPU
    "gymnasium",
    "matplotlib.pyplot",
    "machin.frame.algorithms",
    "machin.parallel.distributed",
    "tests.script_runner",
]


def _redirect(fd: int, path: str) -> None:
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(target, fd)
    os.close(target)


def _wait_for_threads() -> None:
    """Join the non-daemon threads, as the interpreter does before its exit handlers."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()


def _run_as_main(
    script: str, args: Sequence[str], cwd: str, env: Mapping[str, str], out: str, err: str
) -> None:
    """The child: set up the process as for ``python script args`` and run the script."""
    import torch

    sys.stdout.flush()
    sys.stderr.flush()
    _redirect(1, out)
    _redirect(2, err)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (lives as long as the process)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(script))
    torch.set_num_threads(1)
    try:
        runpy.run_path(script, run_name="__main__")
    finally:  # a SystemExit or an error still ends the process as the interpreter would
        _wait_for_threads()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        family = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for process in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(family, timeout=10)


def run_python_script(
    script: Path,
    args: Sequence[str],
    cwd: Path,
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 240.0,
) -> subprocess.CompletedProcess:
    """Run ``script`` with ``args`` in ``cwd``; return its exit code and output.

    ``env`` is added to the environment. A script still running after ``timeout`` seconds is
    killed with everything it started, and :class:`subprocess.TimeoutExpired` is raised.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    with tempfile.TemporaryDirectory(prefix="script-output-") as outputs:
        out, err = os.path.join(outputs, "stdout"), os.path.join(outputs, "stderr")
        child = context.Process(
            target=_run_as_main,
            args=(str(script), list(args), str(cwd), dict(env or {}), out, err),
            name=f"script {script.name}",
        )
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            _kill_tree(child.pid)
            child.join()
            raise subprocess.TimeoutExpired([script.name, *args], timeout, Path(out).read_text())
        return subprocess.CompletedProcess(
            [str(script), *args], child.exitcode, Path(out).read_text(), Path(err).read_text()
        )

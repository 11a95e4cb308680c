"""What the three distributed tutorials share: options, launching, progress, the end of a run.

* :func:`parse_args` reads the options every tutorial takes (``--nproc``, ``--learners``,
  checkpoints and ``--resume`` among them, and ``--backend`` / ``--address``, shared with
  the tutorials of ``../parallel_distributed``) and :func:`start` runs ``main(rank, args)``
  on ``--nproc`` local processes, as the one rank ``torchrun`` started, or on ``--nproc``
  Ray actors (``--backend ray``; ``--address ADDR`` for a running Ray cluster).
* :class:`Progress` keeps a process's returns, prints a line per episode and says when
  the process has solved CartPole.
* :func:`stop_if_learner_lost` ends a sampler with a clear message when the learner is gone.
* :func:`finish_run` ends the run in every process and lets exactly one write the learning
  curve: the sampler that solved the environment, or the first sampler left if none did.
"""

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Callable, List, Sequence

import gymnasium as gym

from machin.parallel.distributed.launcher import run_script
from machin.parallel.distributed.roles import LearnerLostError, Roles
from machin.utils.media import create_learning_curve

# The launch options (--backend, --address) live with the tutorials that introduce the world.
sys.path.append(str(Path(__file__).resolve().parents[1] / "parallel_distributed"))
from _launch_options import add_launch_options, check_launch_options, launch_kwargs, output_path  # noqa: E402

SOLVED_REWARD, SOLVED_REPEAT = 190.0, 5
RPC_TIMEOUT = 60  # seconds: how long a process waits for an answer before it gives the other up


def make_env():
    """CartPole with 200-step episodes: CartPole-v0's task, without gymnasium's deprecation warning."""
    return gym.make("CartPole-v1", max_episode_steps=200)


def parse_args(
    description: str, name: str, episodes: int = 1000, roles: bool = True
) -> argparse.Namespace:
    """The options of a distributed tutorial (``name`` is the stem of its output files).

    With ``roles`` (learners and samplers) also ``--learners``, ``--updates`` and the
    checkpoint options. ``--address`` implies ``--backend ray``; ``--backend ray`` in a
    process started by torchrun, and ``--backend rpc`` with ``--address``, end the
    script with a usage error.
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--episodes", type=int, default=episodes, help="episodes per playing process at most"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plot", default=f"{name}_curve.png", help="learning-curve PNG ('' for none)"
    )
    parser.add_argument(
        "--nproc",
        type=int,
        default=3,
        help="processes (Ray actors with --backend ray) started by 'python script.py' "
        "(torchrun sets its own)",
    )
    if roles:
        parser.add_argument(
            "--learners",
            type=int,
            default=1,
            help="learners (ranks 0 .. K-1, trained together with DistributedDataParallel)",
        )
        parser.add_argument(
            "--updates",
            type=int,
            default=0,
            help="stop after this many learner updates (0: no limit)",
        )
        parser.add_argument(
            "--checkpoint-every",
            type=int,
            default=1000,
            metavar="K",
            help="the learner writes a checkpoint every K updates (0: never)",
        )
        parser.add_argument("--checkpoint-dir", default=f"{name}_checkpoints", metavar="DIR")
        parser.add_argument(
            "--resume",
            action="store_true",
            help="the learner continues from the newest checkpoint in --checkpoint-dir, if any",
        )
    add_launch_options(parser)
    args = parser.parse_args()
    check_launch_options(parser, args)
    return args


def start(main: Callable, args: argparse.Namespace) -> None:
    """Run ``main(rank, args)``: as one rank under torchrun, else on ``--nproc`` local processes
    (``--backend rpc``) or Ray actors (``--backend ray``).

    With learners and samplers, a sampler that is killed does not end a run this script
    started (local processes or Ray actors: the others go on without it); a learner that
    dies does, once the samplers have noticed it and said so. With Ray the output paths
    are made absolute first: the actors of a cluster run in the cluster's directory.
    """
    learners = getattr(args, "learners", None)
    samplers = (
        () if learners is None else Roles.from_world(args.nproc, 0, learners=learners).samplers
    )
    args.plot = output_path(args.plot, args)
    if learners is not None:
        args.checkpoint_dir = output_path(args.checkpoint_dir, args)
    run_script(
        lambda rank: main(rank, args),
        args.nproc,
        timeout=24 * 3600,
        allow_exit=samplers,
        failure_grace=RPC_TIMEOUT + 10,
        **launch_kwargs(args),
    )


@contextlib.contextmanager
def stop_if_learner_lost(world, control):
    """Around a process's work: if the learner is gone, say so, stop the world here and exit(1).

    A failed call to the learner's model server (or replay) may come first; the run
    control then tells whether the learner is really gone.
    """
    try:
        yield
    except RuntimeError as error:
        if not isinstance(error, LearnerLostError):
            try:
                control.status()
            except LearnerLostError as lost:
                error = lost
            else:
                raise
        print(error, file=sys.stderr, flush=True)
        world.stop(graceful=False)
        sys.exit(1)


class Progress:
    """Per-episode bookkeeping of one playing process.

    The smoothed return is ``0.9 * smoothed + 0.1 * return``, started at 0; the process
    has solved the environment once it stays above ``SOLVED_REWARD`` for
    ``SOLVED_REPEAT`` episodes in a row.

    Args:
        rank: This process's rank.
    """

    def __init__(self, rank: int):
        self.rank = rank
        self.returns: List[float] = []
        self.smoothed, self.streak, self.start = 0.0, 0, time.time()

    def record(self, episode: int, total: float) -> bool:
        """Note one episode's return; ``True`` once this process has solved the environment."""
        self.returns.append(total)
        self.smoothed = 0.9 * self.smoothed + 0.1 * total
        print(
            f"process {self.rank} episode {episode:4d}  return {total:6.1f}  smoothed {self.smoothed:6.1f}  "
            f"{time.time() - self.start:6.1f} s",
            flush=True,
        )
        self.streak = self.streak + 1 if self.smoothed > SOLVED_REWARD else 0
        if self.streak >= SOLVED_REPEAT:
            print(f"process {self.rank}: environment solved at episode {episode}!", flush=True)
            return True
        return False


def write_curve(returns: Sequence[float], path: str, title: str) -> None:
    """Plot ``returns`` to ``path`` (a ``.png`` file name; ``""`` writes nothing)."""
    if not path or not returns:
        return
    directory, filename = os.path.split(path)
    stem, extension = os.path.splitext(filename)
    written = create_learning_curve(
        returns, directory or ".", stem, title=title, extension=extension or ".png"
    )
    print(f"learning curve written to {written}", flush=True)


def learner_summary(updates: int, sampled_from, control) -> None:
    """Print what reached the learner: its updates, and the samples it drew from each node."""
    by_node = {}
    for name, count in sampled_from.items():
        node = control.nodes.get(control.rank_of(name), 0)
        by_node[node] = by_node.get(node, 0) + count
    by_sampler = {name: count for name, count in sorted(sampled_from.items())}
    print(
        f"learner: {updates} updates; samples drawn by node {dict(sorted(by_node.items()))}, "
        f"by process {by_sampler}; environment steps reported {control.steps}",
        flush=True,
    )


def finish_run(world, control, rank: int, returns, path: str, title: str) -> None:
    """Called by every process after its loop: end the run, then one process writes the curve.

    Args:
        world: The running world (stopped here).
        control: The run's :class:`~machin.parallel.distributed.roles.RunControl`.
        rank: This process's rank.
        returns: This process's per-episode returns (ignored unless it writes).
        path: File to write (``""``: none).
        title: Title of the plot.
    """
    status = control.finish(world)  # waits for the learner's verdict, then stops the world
    samplers = [r for r in control.roles.samplers if r not in status.gone]
    writer = status.solved_by if status.solved_by is not None else (samplers or [None])[0]
    if rank == writer:
        write_curve(returns, path, title)

"""What the three distributed tutorials share: progress, stopping, keeping pace, the curve.

* :class:`Progress` keeps a process's returns, prints a line per episode and, once
  the process has solved CartPole-v0, registers ``solved_<rank>`` in the group, which
  tells the other processes to stop.
* :func:`pull_until` makes a sampler wait for the learner.
* :func:`finish_run` lets exactly one process write the learning curve: the first
  sampler that solved the environment, or the first sampler if none did.
"""

import os
import time
from typing import List, Sequence

from machin.utils.media import create_learning_curve

SOLVED_REWARD, SOLVED_REPEAT = 190.0, 5


class Progress:
    """Per-episode bookkeeping of one playing process.

    The smoothed return is ``0.9 * smoothed + 0.1 * return``, started at 0; the process
    has solved the environment once it stays above ``SOLVED_REWARD`` for
    ``SOLVED_REPEAT`` episodes in a row.

    Args:
        group: The RPC group in which ``solved_<rank>`` is registered.
        rank: This process's rank.
        players: Names of every process that plays episodes (this one included).
    """

    def __init__(self, group, rank: int, players: Sequence[str]):
        self.group, self.rank, self.players = group, rank, list(players)
        self.returns: List[float] = []
        self.smoothed, self.streak, self.start = 0.0, 0, time.time()

    def record(self, episode: int, total: float) -> bool:
        """Note one episode's return; ``True`` when this process should stop playing."""
        self.returns.append(total)
        self.smoothed = 0.9 * self.smoothed + 0.1 * total
        print(f"process {self.rank} episode {episode:4d}  return {total:6.1f}  smoothed {self.smoothed:6.1f}  "
              f"{time.time() - self.start:6.1f} s", flush=True)
        self.streak = self.streak + 1 if self.smoothed > SOLVED_REWARD else 0
        if self.streak >= SOLVED_REPEAT:
            print(f"process {self.rank}: environment solved at episode {episode}!", flush=True)
            self.group.register(f"solved_{self.rank}", print)  # any registered name would do
            return True
        return self.someone_solved()

    def someone_solved(self) -> bool:
        """Whether any playing process has registered ``solved_<name>``."""
        return any(self.group.is_registered(f"solved_{name}") for name in self.players)


def pull_until(agent, network, version: int) -> None:
    """Pull the shared network until the learner has made ``version`` updates (one push each)."""
    agent.manual_sync()
    while getattr(network, "pp_version", 0) < version:
        time.sleep(0.01)
        agent.manual_sync()


def write_curve(returns: Sequence[float], path: str, title: str) -> None:
    """Plot ``returns`` to ``path`` (a ``.png`` file name; ``""`` writes nothing)."""
    if not path or not returns:
        return
    directory, filename = os.path.split(path)
    stem, extension = os.path.splitext(filename)
    written = create_learning_curve(returns, directory or ".", stem, title=title, extension=extension or ".png")
    print(f"learning curve written to {written}", flush=True)


def finish_run(world, group, samplers: Sequence[str], rank, returns, path: str, title: str) -> None:
    """Called by every process after its loop, before ``world.stop()``: one of them writes the curve.

    Args:
        world: The running world.
        group: The RPC group in which samplers register ``solved_<name>``.
        samplers: Names of the processes that play episodes, in order of preference.
        rank: This process's rank.
        returns: This process's per-episode returns (ignored unless it writes).
        path: File to write (``""``: none).
        title: Title of the plot.
    """
    world.barrier()  # every process has left its loop: the "solved" registrations are final
    writer = next((name for name in samplers if group.is_registered(f"solved_{name}")), samplers[0])
    world.barrier()  # no process starts stopping the world while another still asks the group
    if str(rank) == writer:
        write_curve(returns, path, title)

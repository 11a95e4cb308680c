"""Learning curves of the distributed tutorials: exactly one process writes the PNG.

Every sampler keeps the return of each of its episodes. At the end of the run the
first sampler that registered ``solved_<name>`` in the group, or the first sampler if
none did, plots its returns with :func:`machin.utils.media.create_learning_curve`.
"""

import os
from typing import Sequence

from machin.utils.media import create_learning_curve


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

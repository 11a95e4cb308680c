"""The two options that say how a distributed example starts its ranks: ``--backend`` and ``--address``.

Every example that builds a world over several processes takes them:

* ``--backend rpc`` (the default): torch RPC. ``python script.py`` starts the ranks as
  local processes; under ``torchrun`` each process is one rank.
* ``--backend ray``: one Ray actor per rank. ``python script.py --backend ray`` starts a
  Ray instance on this machine and the rank actors in it.
* ``--address ADDR``: the address of a Ray cluster that is already running
  (``10.0.0.1:6379``, or ``auto`` for the cluster ``ray start`` made on this machine); the
  ranks become actors of that cluster. ``--address`` alone means ``--backend ray``;
  ``--backend rpc --address ADDR`` is refused.

With Ray the script starts its own rank actors, so it runs under plain ``python``:
``--backend ray`` in a process that ``torchrun`` started is refused with a message
that says so.

:func:`add_launch_options` adds the options to a parser, :func:`check_launch_options`
settles them after parsing, :func:`launch_kwargs` turns them into the keyword arguments
of :func:`~machin.parallel.distributed.run_script`, and :func:`launch_options` does all
three for a script with no other option.
"""

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

BACKENDS = ("rpc", "ray")
#: The folder of every example: the actors of a Ray run import helpers from it.
EXAMPLES = Path(__file__).resolve().parents[2]


def _address(text: str) -> str:
    """``--address``'s type: any non-blank text (Ray checks the address itself)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"expected a Ray cluster address such as '127.0.0.1:6379', got {text!r}"
        )
    return text


def add_launch_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--backend`` and ``--address`` to ``parser`` (as the group "launching")."""
    group = parser.add_argument_group("launching")
    group.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="how the ranks talk: 'rpc' (torch RPC, local processes or torchrun; the "
        "default) or 'ray' (one Ray actor per rank, started by this script)",
    )
    group.add_argument(
        "--address",
        type=_address,
        default=None,
        metavar="ADDR",
        help="address of a running Ray cluster (e.g. 127.0.0.1:6379, or 'auto'); implies "
        "--backend ray. Without it --backend ray starts Ray on this machine",
    )


def started_by_launcher() -> bool:
    """Whether a launcher such as torchrun started this process as one rank (as ``run_script`` decides)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def check_launch_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Settle ``args.backend`` (``"rpc"`` or ``"ray"``); a contradiction ends the script through ``parser.error``.

    Refused: ``--backend rpc`` with ``--address``, and the ray backend in a process
    started by torchrun (``RANK`` and ``WORLD_SIZE`` set).
    """
    if args.address is not None:
        if args.backend == "rpc":
            parser.error(
                f"--address {args.address!r} is the address of a Ray cluster and needs --backend ray, "
                f"got --backend rpc (leave --backend out or give --backend ray)"
            )
        args.backend = "ray"
    args.backend = args.backend or "rpc"
    if args.backend == "ray" and started_by_launcher():
        parser.error(
            f"--backend ray cannot run under torchrun (this process is rank {os.environ['RANK']} of "
            f"{os.environ['WORLD_SIZE']}): with ray the script starts its own rank actors, so run it "
            f"with plain python, e.g. 'python {Path(sys.argv[0]).name} --backend ray'"
        )


def _example_folders() -> List[str]:
    """The example folders on ``sys.path`` (the script's own, and helpers' added by the scripts)."""
    folders = []
    for entry in sys.path:
        folder = Path(entry or ".").resolve()
        if folder == EXAMPLES or EXAMPLES in folder.parents:
            folders.append(str(folder))
    return folders


def share_import_path() -> None:
    """Put the example folders this process imports from on ``PYTHONPATH``.

    The Ray launcher gives its actors this process's ``PYTHONPATH``, so they import the
    same helper modules (``_shared`` and the like) as the script.
    """
    current = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(_example_folders() + current))


def launch_kwargs(args: argparse.Namespace) -> Dict[str, Any]:
    """The ``transport`` and ``address`` keyword arguments of ``run_script`` for the checked options."""
    if args.backend != "ray":
        return {"transport": "rpc"}
    share_import_path()
    return {"transport": "ray", "address": args.address}


def output_path(path: str, args: argparse.Namespace) -> str:
    """``path`` as the rank that writes it must see it: absolute with ``--backend ray``.

    The actors of a running Ray cluster work in the directory the cluster was started in,
    not in this process's; on a cluster of several machines the file lands on the machine
    of the rank that writes it. ``""`` stays ``""``.
    """
    return os.path.abspath(path) if path and args.backend == "ray" else path


def launch_options(description: Optional[str] = None) -> Dict[str, Any]:
    """Parse a script that takes only the launch options; return ``run_script``'s keyword arguments."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_launch_options(parser)
    args = parser.parse_args()
    check_launch_options(parser, args)
    return launch_kwargs(args)

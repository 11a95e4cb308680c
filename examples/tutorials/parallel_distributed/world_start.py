"""Starting a distributed world.

Run it on one machine, three processes started by the script::

    python world_start.py

or with torchrun, on one machine or several (every process runs ``main``)::

    torchrun --nproc_per_node=3 world_start.py
    torchrun --nnodes=2 --nproc_per_node=3 --node_rank=0 \\
        --master_addr=10.0.0.1 --master_port=29500 world_start.py   # on each node

or on Ray, one actor per rank, in a Ray instance the script starts on this machine
or in a cluster that is already running (``--address`` implies ``--backend ray``;
with Ray, run the script with plain ``python``, not torchrun)::

    python world_start.py --backend ray
    python world_start.py --backend ray --address 10.0.0.1:6379

``World()`` with no argument reads ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK`` and
``WORLD_SIZE``, which torchrun (or ``run_script`` here) sets for each process; in a
Ray rank actor it reads ``RANK`` and ``WORLD_SIZE`` and uses the Ray transport. The
same world can be started from arguments instead::

    World(name=str(rank), rank=rank, world_size=3, init_method="tcp://localhost:9100")
"""

import torch
from _launch_options import launch_options

from machin.parallel.distributed import World, get_cur_name, get_cur_rank, get_world, run_script


def main(rank: int) -> None:
    torch.set_num_threads(1)
    with World(rpc_timeout=30) as world:  # stop() runs at the end of the block
        assert get_world() is world
        print(
            f"rank {get_cur_rank()} named {get_cur_name()!r} joined; "
            f"the world has {world.world_size} processes: {world.get_members()}"
        )
        # every process waits here until all have arrived
        world.barrier()
        if rank == 0:
            print("all processes passed the barrier")


if __name__ == "__main__":
    run_script(main, world_size=3, timeout=120, **launch_options(__doc__))

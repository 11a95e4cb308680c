"""A simple key-value server with version tracking.

``OrderedServerSimpleImpl`` runs on one process of an RPC group; every member
reaches it through the ``OrderedServerSimple`` accessor paired in the group. A push
names the version it replaces, so a writer that fell behind is refused instead of
silently overwriting newer data.

    python kv_server_versioned.py               # three local processes
    torchrun --nproc_per_node=3 kv_server_versioned.py
    python kv_server_versioned.py --backend ray # three Ray actors (add --address ADDR for a running cluster)
"""

import torch
from _launch_options import launch_options

from machin.parallel.distributed import World, run_script
from machin.parallel.server import OrderedServerSimpleImpl


def main(rank: int) -> None:
    torch.set_num_threads(1)
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("kv", world.get_members())
    if rank == 0:
        OrderedServerSimpleImpl("server", group, version_depth=2)  # keeps 2 versions per key
    group.barrier()
    server = group.get_paired("server").to_here()

    if rank == 1:
        print("first push:", server.push("weights", torch.zeros(2), version=1, prev_version=0))
        print("push 2 after 1:", server.push("weights", torch.ones(2), version=2, prev_version=1))
        print(
            "stale push after 1 again:",
            server.push("weights", torch.full((2,), 9.0), 2, prev_version=1),
        )
    group.barrier()

    value, version = server.pull("weights")
    print(f"rank {rank}: newest version {version}: {value.tolist()}")
    if rank == 2:
        print("version 1 is still kept:", server.pull("weights", version=1))
    group.barrier()

    # all ranks race to push version 3: exactly one wins
    won = server.push("weights", torch.full((2,), float(rank)), version=3, prev_version=2)
    group.barrier()
    print(
        f"rank {rank}: my push of version 3 {'won' if won else 'was refused'}; "
        f"newest is now {server.pull('weights')}"
    )
    if rank == 0:
        print("version 1 has expired (depth 2):", server.pull("weights", version=1))
    group.barrier()
    world.stop()


if __name__ == "__main__":
    run_script(main, world_size=3, timeout=120, **launch_options(__doc__))

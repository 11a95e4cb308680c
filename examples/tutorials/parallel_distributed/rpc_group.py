"""Distributed world and RPC group.

An RPC group is a namespace shared by its members: ``register`` offers a function
under a name, ``pair`` shares a value, and any member reaches them by name without
knowing which process holds them. Lambdas and local functions may be sent along.

    python rpc_group.py                         # three local processes
    torchrun --nproc_per_node=3 rpc_group.py
    python rpc_group.py --backend ray           # three Ray actors (add --address ADDR for a running cluster)
"""

import torch
from _launch_options import launch_options

from machin.parallel.distributed import World, run_script


def main(rank: int) -> None:
    torch.set_num_threads(1)
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("tutorial", world.get_members())

    if rank == 1:
        counter = {"calls": 0}

        def count(increment):
            counter["calls"] += increment
            return counter["calls"]

        group.register("count", count)  # runs on rank 1 whoever calls it
        group.pair("settings", {"learning_rate": 1e-3, "scale": lambda x: 2 * x})
    group.barrier()  # after this every member sees "count" and "settings"

    total = group.registered_sync("count", args=(1,))
    future = group.registered_async("count", args=(10,))
    print(f"rank {rank}: count -> {total}, then {future.wait()} (calls may interleave)")

    settings = group.get_paired("settings").to_here()  # a copy, fetched from rank 1
    print(f"rank {rank}: settings lr={settings['learning_rate']}, scale(4)={settings['scale'](4)}")

    # plain RPC to a member, with a lambda
    name = group.rpc_sync("2", lambda x: f"rank 2 squared {x} into {x * x}", args=(rank + 2,))
    print(f"rank {rank}: {name}")

    # an error raised remotely is raised again here, with the remote traceback as its cause
    try:
        group.rpc_sync("0", lambda: {}["missing"])
    except KeyError as error:
        print(
            f"rank {rank}: remote KeyError {error} came back; remote traceback attached: "
            f"{error.__cause__ is not None}"
        )

    group.barrier()
    if rank == 1:
        group.deregister("count")
    group.barrier()
    print(f"rank {rank}: 'count' still registered? {group.is_registered('count')}")
    world.stop()


if __name__ == "__main__":
    run_script(main, world_size=3, timeout=120, **launch_options(__doc__))

"""Distributed world and collective group.

Collective groups wrap ``torch.distributed`` collectives (gloo on CPU; nccl for CUDA
tensors) over any subset of the world's ranks; only the members create the group.
Ranks in the calls are world ranks. Receiving from any source returns the sender.

    python collective_group.py                  # three local processes
    torchrun --nproc_per_node=3 collective_group.py
    python collective_group.py --backend ray --address 10.0.0.1:6379   # three actors of a Ray cluster
"""

import torch
from _launch_options import launch_options

from machin.parallel.distributed import World, run_script


def main(rank: int) -> None:
    torch.set_num_threads(1)
    world = World(rpc_timeout=30)
    group = world.create_collective_group(ranks=[0, 1, 2])

    value = torch.tensor([rank + 1.0])
    group.all_reduce(value)
    print(f"rank {rank}: all_reduce of 1 + 2 + 3 = {value.item()}")

    value = torch.tensor([float(rank)])
    group.broadcast(value, src=2)
    print(f"rank {rank}: broadcast from rank 2 gave {value.item()}")

    # point to point: rank 0 receives from whoever sends first
    if rank == 0:
        for _ in range(2):
            received = torch.zeros(1)
            sender = group.recv(received)
            print(f"rank 0: received {received.item()} from rank {sender}")
    else:
        group.send(torch.tensor([rank * 10.0]), dst=0)

    # a group over two ranks only: rank 2 does not take part in creating it
    if rank in (0, 1):
        pair = world.create_collective_group(ranks=[0, 1])
        if rank == 0:
            received = torch.zeros(1)
            request = pair.irecv(received)  # asynchronous, any source
            sender = request.wait()
            print(f"rank 0: irecv got {received.item()} from rank {sender} inside the pair group")
        else:
            pair.isend(torch.tensor([42.0]), dst=0).wait()
        pair.destroy()
    group.barrier()
    group.destroy()
    world.stop()


if __name__ == "__main__":
    run_script(main, world_size=3, timeout=120, **launch_options(__doc__))

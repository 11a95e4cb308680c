"""A3C on CartPole on any number of processes, reusing the distributed tutorial.

Run it with ``python examples/framework_examples/a3c.py`` (``--nproc N`` local processes,
3 by default), or as one rank per process under torchrun, on one node or several::

    torchrun --nproc_per_node 3 examples/framework_examples/a3c.py --episodes 1000
    torchrun --nnodes 2 --nproc_per_node 2 --node_rank 0 --master_addr HOST --master_port 29500 \
        examples/framework_examples/a3c.py

or as Ray actors, one per rank, on a Ray cluster that is already running (without
``--address``, on a Ray instance started on this machine; with Ray use plain ``python``)::

    python examples/framework_examples/a3c.py --nproc 6 --backend ray --address HOST:6379

Every process plays and trains. The training loop lives in
examples/tutorials/unleash_distributed_power/a3c.py; this script only loads it and
starts it, so both always show the same code.

Options: ``--episodes N`` (episodes per process at most), ``--seed S``, ``--nproc N``,
``--backend {rpc,ray}`` (torch RPC, the default, or Ray actors), ``--address ADDR`` (a
running Ray cluster; implies ``--backend ray``) and ``--plot PATH`` (default
``a3c_curve.png``, ``""`` for none): the process that solved the environment (process 0 if
none did) writes its learning curve there. There is no ``--gif``: the trained networks live
in the child processes.
"""

from _common import load_tutorial

if __name__ == "__main__":
    load_tutorial("a3c").cli(__doc__)

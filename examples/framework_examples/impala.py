"""IMPALA on CartPole on any number of processes, reusing the distributed tutorial.

Run it with ``python examples/framework_examples/impala.py`` (``--nproc N`` local processes,
3 by default), or as one rank per process under torchrun, on one node or several::

    torchrun --nproc_per_node 5 examples/framework_examples/impala.py --episodes 1000
    torchrun --nnodes 2 --nproc_per_node 4 --node_rank 0 --master_addr HOST --master_port 29500 \
        examples/framework_examples/impala.py

or as Ray actors, one per rank, on a Ray cluster that is already running (without
``--address``, on a Ray instance started on this machine; with Ray use plain ``python``)::

    python examples/framework_examples/impala.py --nproc 8 --backend ray --address HOST:6379

Process 0 learns and every other process samples (``--learners K``: processes 0 .. K-1
learn together). The training loop lives in
examples/tutorials/unleash_distributed_power/impala.py; this script only loads it and
starts it, so both always show the same code.

Options: ``--episodes N`` (episodes per sampler at most), ``--seed S``, ``--nproc N``,
``--backend {rpc,ray}`` (torch RPC, the default, or Ray actors), ``--address ADDR`` (a
running Ray cluster; implies ``--backend ray``), ``--learners K``, ``--updates N`` (stop
after N learner updates), ``--checkpoint-every K``, ``--checkpoint-dir DIR`` (default
``impala_checkpoints``), ``--resume`` (the learner continues from its newest checkpoint) and
``--plot PATH`` (default ``impala_curve.png``, ``""`` for none): the sampler that solved the
environment (the first sampler if none did) writes its learning curve there. There is no
``--gif``: the trained networks live in the child processes.
"""

from _common import load_tutorial

if __name__ == "__main__":
    load_tutorial("impala").cli(__doc__)

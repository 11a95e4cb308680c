"""A3C on CartPole-v0 with 3 processes on this machine, reusing the distributed tutorial.

Run it with ``python examples/framework_examples/a3c.py`` (three local processes), or
as one rank per process under torchrun::

    torchrun --nproc_per_node 3 examples/framework_examples/a3c.py --episodes 1000

The training loop lives in examples/tutorials/unleash_distributed_power/a3c.py;
this script only loads it and starts it, so both always show the same code.

Options: ``--episodes N`` (episodes per worker at most), ``--seed S`` and ``--plot PATH``
(default ``a3c_curve.png``, ``""`` for none): the process that solved the environment (process 0 if none did) writes its learning curve
there. There is no ``--gif``: the trained networks live in the child processes.
"""

from _common import load_tutorial, parse_args

from machin.parallel.distributed.launcher import run_script

if __name__ == "__main__":
    args = parse_args(__doc__, episodes=1000, gif=False)
    tutorial = load_tutorial("a3c")
    run_script(lambda rank: tutorial.main(rank, args.episodes, args.seed, args.plot), 3, timeout=3600)

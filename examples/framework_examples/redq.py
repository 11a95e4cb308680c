"""REDQ on Pendulum-v1: ``python examples/framework_examples/redq.py``.

An ensemble of 5 critics; each target takes the minimum over 2 of them drawn at random,
and every environment step makes 5 critic steps and one actor step (the paper uses 10
critics and 20 steps, which costs about 8 times as much per environment step). Uses the actor
and critic of sac.py and the training loop of ddpg.py (one ``update()`` per environment
step after a warm-up of random actions, one line per episode, solved once the smoothed
return exceeds -200). droq.py runs DroQ with the same loop.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``redq_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the
trained policy's most likely action, ``act(..., deterministic=True)``, default
``redq_episode.gif``).
"""

import torch
from _common import parse_args
from ddpg import run
from sac import Actor, Critic
from torch import nn

from machin.frame.algorithms import REDQ

#: The options of REDQ and DroQ in these examples.
OPTIONS = dict(
    batch_size=64,
    actor_learning_rate=2e-3,
    critic_learning_rate=2e-3,
    alpha_learning_rate=5e-3,
    update_rate=0.01,
    replay_size=100000,
)


def run_ensemble(agent, args, name):
    """The training loop of ddpg.py, exploring with the sampled policy."""
    run(
        agent,
        episodes=args.episodes,
        seed=args.seed,
        plot=args.plot,
        gif=args.gif,
        name=name,
        explore=lambda agent, state: agent.act({"state": state})[0],
        greedy=lambda agent, state: agent.act({"state": state}, deterministic=True)[0],
        extra=lambda agent: f"alpha {agent.entropy_alpha:.3f}  ",
    )


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    redq = REDQ(
        Actor(),
        [Critic() for _ in range(5)],
        [Critic() for _ in range(5)],
        torch.optim.Adam,
        nn.MSELoss(),
        subset_size=2,
        update_times=5,
        policy_update_delay=5,
        **OPTIONS,
    )
    run_ensemble(redq, args, "REDQ")

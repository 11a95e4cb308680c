"""A new algorithm variant in one module: soft (entropy-regularised) DQN.

The walkthrough of ``docs/guide_algorithm_apis.rst`` ("Adding an algorithm"). Soft
Q-learning replaces the hard maximum of the next state's Q values by a soft maximum,
``V(s') = temperature * logsumexp(Q'(s', .) / temperature)``, which tends to the hard
maximum as the temperature goes to 0. Everything else is DQN's, so the class says only
what differs: one option and one hook. Run it to train on CartPole::

    python examples/extending/soft_dqn.py
"""

import torch
from torch import nn

from machin.frame.algorithms import DQN
from machin.frame.algorithms.options import Option, positive
from machin.frame.algorithms.utils import safe_call


class SoftDQN(DQN):
    """DQN whose target takes a soft maximum over the next state's actions.

    Takes the arguments and options of :class:`~machin.frame.algorithms.dqn.DQN`, plus
    ``temperature``.
    """

    mode = "fixed_target"  # the soft value replaces the double-DQN rule: not an option here
    temperature = Option(
        0.05,
        positive,
        "Temperature of the soft maximum (0 would be DQN's hard maximum).",
        schedulable=True,
    )

    def _next_value(self, batch):
        """``temperature * logsumexp(Q'(s', .) / temperature)`` per sample, ``[B, 1]``."""
        target_q = safe_call(self.qnet_target, batch.next_state)
        target_q = target_q[0] if isinstance(target_q, tuple) else target_q
        return self.temperature * torch.logsumexp(target_q / self.temperature, dim=1, keepdim=True)


class QNet(nn.Module):
    def __init__(self, state_dim: int = 4, action_num: int = 2):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, 64), nn.ReLU(), nn.Linear(64, action_num))

    def forward(self, state):
        return self.net(state)


def main() -> None:
    import argparse

    import gymnasium as gym

    from machin.frame.trainer import Trainer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300, help="training episodes at most")
    episodes = parser.parse_args().episodes
    torch.manual_seed(0)
    soft_dqn = SoftDQN(
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        temperature=0.05,
        update_rate=0.01,
        batch_size=64,
        replay_size=20000,
    )
    env = gym.make("CartPole-v1", max_episode_steps=200)
    result = Trainer(soft_dqn, env, solved_reward=190, seed=0).run(episodes=episodes)
    print(
        f"solved at episode {result.solved_episode}"
        if result.solved_episode
        else f"not solved in {episodes} episodes"
    )


if __name__ == "__main__":
    main()

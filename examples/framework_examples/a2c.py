"""A2C on CartPole-v0: ``python examples/framework_examples/a2c.py``.

Solved once the smoothed return stays above 190 for 5 episodes. Options:
``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG, default
``a2c_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the trained
actor taking its most likely action, default ``a2c_episode.gif``).

The other on-policy examples (ppo.py, trpo.py) reuse the networks and the training
loop defined here.
"""

import gymnasium as gym
import torch
from _common import Progress, parse_args, record_episode
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import A2C

ENV_ID = "CartPole-v0"
torch.set_num_threads(1)  # the networks are tiny: more threads only add synchronisation


class Actor(nn.Module):
    """Samples a discrete action, or scores a given one: ``(action, log_prob, entropy)``."""

    def __init__(self, state_dim=4, action_num=2, hidden=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, action_num),
        )

    def forward(self, state, action=None):
        dist = Categorical(logits=self.net(state))
        action = dist.sample().view(-1, 1) if action is None else action
        return action, dist.log_prob(action.view(-1)), dist.entropy()


class Critic(nn.Module):
    """State value ``V(s)``."""

    def __init__(self, state_dim=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state):
        return self.net(state)


def greedy_action(agent, state):
    """The most likely action of the agent's actor (for the recorded episode)."""
    return agent.actor.net(state).argmax(dim=1, keepdim=True)


def run(
    agent,
    *,
    episodes: int,
    seed: int,
    plot: str = "",
    gif: str = "",
    name: str = "agent",
    solved_reward: float = 190.0,
    solved_repeat: int = 5,
) -> bool:
    """Train an on-policy agent on CartPole-v0: store each episode whole, then update once.

    Prints one line per episode and stops once the smoothed return (0.9 / 0.1, from 0)
    stays above ``solved_reward`` for ``solved_repeat`` episodes. Then writes the learning
    curve to ``plot`` and, if ``gif`` is set, records one episode of the greedy policy.
    Returns whether the run was solved.
    """
    env = gym.make(ENV_ID)
    progress, steps = Progress(name, ENV_ID, solved_reward, solved_repeat), 0
    for episode in range(1, episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total, stored = False, 0.0, []
        while not done:
            action = agent.act({"state": state})[0]
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            # terminal=terminated: a time-limit cut (truncated) is bootstrapped from V(next_state)
            stored.append(
                {
                    "state": {"state": state},
                    "action": {"action": action},
                    "next_state": {"state": next_state},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
            state, total, done, steps = (
                next_state,
                total + reward,
                terminated or truncated,
                steps + 1,
            )
        agent.store_episode(stored)
        agent.update()
        if progress.end_episode(total, steps):
            break
    env.close()
    progress.write_curve(plot)
    if gif:
        record_episode(ENV_ID, lambda s: greedy_action(agent, s), gif, seed=seed)
    return progress.solved


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    a2c = A2C(
        Actor(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=1000,
        actor_update_times=3,
        critic_update_times=5,
        actor_learning_rate=0.003,
        critic_learning_rate=0.003,
        gae_lambda=0.95,
    )
    run(a2c, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="A2C")

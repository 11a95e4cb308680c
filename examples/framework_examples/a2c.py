"""A2C on CartPole-v0: ``python examples/framework_examples/a2c.py [--episodes N] [--seed S]``.

The other on-policy examples (ppo.py, trpo.py) reuse the networks and the training
loop defined here.
"""

import time

import gymnasium as gym
import torch
from _cartpole import parse_args, save_curve
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import A2C

torch.set_num_threads(1)  # the networks are tiny: more threads only add synchronisation


class Actor(nn.Module):
    """Samples a discrete action, or scores a given one: ``(action, log_prob, entropy)``."""

    def __init__(self, state_dim=4, action_num=2, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, action_num))

    def forward(self, state, action=None):
        dist = Categorical(logits=self.net(state))
        action = dist.sample().view(-1, 1) if action is None else action
        return action, dist.log_prob(action.view(-1)), dist.entropy()


class Critic(nn.Module):
    """State value ``V(s)``."""

    def __init__(self, state_dim=4, hidden=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 1))

    def forward(self, state):
        return self.net(state)


def run(agent, *, episodes: int, seed: int, plot: str = "", name: str = "agent",
        solved_reward: float = 190.0, solved_repeat: int = 5) -> bool:
    """Train an on-policy agent on CartPole-v0: store each episode whole, then update once.

    Prints one line per episode and stops once the smoothed return (0.9 / 0.1, from 0)
    stays above ``solved_reward`` for ``solved_repeat`` episodes.
    """
    env = gym.make("CartPole-v0")
    smoothed, streak, steps, curve, start = 0.0, 0, 0, [], time.time()
    for episode in range(1, episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total, stored = False, 0.0, []
        while not done:
            action = agent.act({"state": state})[0]
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            # terminal=terminated: a time-limit cut (truncated) is bootstrapped from V(next_state)
            stored.append({"state": {"state": state}, "action": {"action": action},
                           "next_state": {"state": next_state}, "reward": float(reward),
                           "terminal": terminated})
            state, total, done, steps = next_state, total + reward, terminated or truncated, steps + 1
        agent.store_episode(stored)
        agent.update()
        smoothed = 0.9 * smoothed + 0.1 * total
        curve.append(smoothed)
        print(f"{name} episode {episode:4d}  return {total:6.1f}  smoothed {smoothed:6.1f}  "
              f"steps {steps:6d}  {time.time() - start:6.1f} s", flush=True)
        streak = streak + 1 if smoothed > solved_reward else 0
        if streak >= solved_repeat:
            print(f"Environment solved at episode {episode}!")
            break
    env.close()
    if plot:
        save_curve(curve, plot, name)
    return streak >= solved_repeat


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    a2c = A2C(Actor(), Critic(), torch.optim.Adam, nn.MSELoss(), batch_size=1000, actor_update_times=3,
              critic_update_times=5, actor_learning_rate=0.003, critic_learning_rate=0.003, gae_lambda=0.95)
    run(a2c, episodes=args.episodes, seed=args.seed, plot=args.plot, name="A2C")

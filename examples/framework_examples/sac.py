"""SAC on Pendulum-v1: ``python examples/framework_examples/sac.py [--episodes N] [--seed S]``.

One update per environment step after a warm-up of random actions. One line per
episode shows the smoothed return (0.9 / 0.1, started at the first episode's
return); the run stops once it exceeds -200.
"""

import time

import gymnasium as gym
import torch
from _cartpole import parse_args, save_curve
from torch import nn
from torch.distributions import Normal

from machin.frame.algorithms import SAC

ACTION_RANGE = 2.0  # Pendulum torques lie in [-2, 2]
torch.set_num_threads(1)  # the networks are tiny: more threads only add synchronisation


class Actor(nn.Module):
    """Gaussian policy squashed by tanh into the action range, drawn with ``rsample``.

    Returns ``(action, log_prob, entropy)``; the log-probability accounts for the
    squashing, so actions are never clamped.
    """

    def __init__(self, state_dim=3, action_dim=1, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, action_dim)
        self.log_sigma = nn.Linear(hidden, action_dim)

    def forward(self, state, action=None):
        h = self.body(state)
        dist = Normal(self.mu(h), self.log_sigma(h).clamp(-10, 2).exp())
        raw = dist.rsample() if action is None else torch.atanh((action / ACTION_RANGE).clamp(-0.999, 0.999))
        squashed = torch.tanh(raw)
        log_prob = dist.log_prob(raw) - torch.log(ACTION_RANGE * (1 - squashed.pow(2)) + 1e-6)
        return squashed * ACTION_RANGE, log_prob.sum(dim=1, keepdim=True), dist.entropy()


class Critic(nn.Module):
    """Q(s, a)."""

    def __init__(self, state_dim=3, action_dim=1, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim + action_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


def run(agent, *, episodes: int, seed: int, plot: str = "", warmup_steps: int = 300,
        solved_reward: float = -200.0) -> bool:
    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    smoothed, steps, curve, start = None, 0, [], time.time()
    for episode in range(1, episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total = False, 0.0
        while not done:
            if steps < warmup_steps:
                action = torch.tensor(env.action_space.sample()).view(1, -1)
            else:
                action = agent.act({"state": state})[0]
            obs, reward, terminated, truncated, _ = env.step(action.numpy().reshape(-1))
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            agent.store_transition({"state": {"state": state}, "action": {"action": action},
                                    "next_state": {"state": next_state}, "reward": float(reward),
                                    "terminal": terminated})
            steps += 1
            if steps >= warmup_steps:
                agent.update()
            state, total, done = next_state, total + float(reward), terminated or truncated
        smoothed = total if smoothed is None else 0.9 * smoothed + 0.1 * total
        curve.append(smoothed)
        print(f"SAC episode {episode:4d}  return {total:8.1f}  smoothed {smoothed:8.1f}  "
              f"alpha {agent.entropy_alpha:.3f}  steps {steps:6d}  {time.time() - start:6.1f} s", flush=True)
        if smoothed > solved_reward:
            print(f"Environment solved at episode {episode}!")
            break
    env.close()
    if plot:
        save_curve(curve, plot, "SAC")
    return smoothed is not None and smoothed > solved_reward


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    sac = SAC(Actor(), Critic(), Critic(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss(),
              batch_size=64, actor_learning_rate=2e-3, critic_learning_rate=2e-3, alpha_learning_rate=5e-3,
              update_rate=0.01, replay_size=100000)
    run(sac, episodes=args.episodes, seed=args.seed, plot=args.plot)

"""DDPG on Pendulum-v1: ``python examples/framework_examples/ddpg.py [--episodes N] [--seed S]``.

The other examples of the deterministic-policy family (ddpg_per.py, hddpg.py, td3.py)
reuse the networks and the training loop defined here.
"""

import time

import gymnasium as gym
import torch
from _cartpole import parse_args, save_curve
from torch import nn

from machin.frame.algorithms import DDPG

ACTION_RANGE = 2.0  # Pendulum torques lie in [-2, 2]
torch.set_num_threads(1)  # the networks are tiny: more threads only add synchronisation


class Actor(nn.Module):
    def __init__(self, state_dim=3, action_dim=1, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, action_dim))

    def forward(self, state):
        return torch.tanh(self.net(state)) * ACTION_RANGE


class Critic(nn.Module):
    def __init__(self, state_dim=3, action_dim=1, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(state_dim + action_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


def networks():
    """actor, actor_target, critic, critic_target (targets are overwritten by the framework)."""
    return Actor(), Actor(), Critic(), Critic()


def run(agent, *, episodes: int, seed: int, plot: str = "", name: str = "agent", warmup_steps: int = 300,
        noise_sigma: float = 0.2, solved_reward: float = -200.0) -> bool:
    """Train on Pendulum-v1 (200 steps per episode) with one update per step after a random warm-up.

    Prints one line per episode and stops once the smoothed return (0.9 / 0.1, started at
    the first episode's return) exceeds ``solved_reward``.
    """
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
                action = agent.act_with_noise({"state": state}, noise_param=(0.0, noise_sigma), mode="normal")
                action = action.clamp(-ACTION_RANGE, ACTION_RANGE)
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
        print(f"{name} episode {episode:4d}  return {total:8.1f}  smoothed {smoothed:8.1f}  "
              f"steps {steps:6d}  {time.time() - start:6.1f} s", flush=True)
        if smoothed > solved_reward:
            print(f"Environment solved at episode {episode}!")
            break
    env.close()
    if plot:
        save_curve(curve, plot, name)
    return smoothed is not None and smoothed > solved_reward


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    ddpg = DDPG(*networks(), torch.optim.Adam, nn.MSELoss(), batch_size=64, update_rate=0.005,
                actor_learning_rate=1e-3, critic_learning_rate=1e-3, replay_size=100000)
    run(ddpg, episodes=args.episodes, seed=args.seed, plot=args.plot, name="DDPG")

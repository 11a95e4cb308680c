"""DDPG on Pendulum-v1: ``python examples/framework_examples/ddpg.py``.

Solved once the smoothed return exceeds -200. Options: ``--episodes N`` (cap),
``--seed S``, ``--plot PATH`` (learning-curve PNG, default ``ddpg_curve.png``, ``""``
for none) and ``--gif [PATH]`` (one noise-free episode of the trained actor, default
``ddpg_episode.gif``).

The other examples of the deterministic-policy family (ddpg_per.py, hddpg.py, td3.py)
reuse the networks and the training loop defined here.
"""

import gymnasium as gym
import torch
from _common import Progress, parse_args, record_episode
from torch import nn

from machin.frame.algorithms import DDPG

ENV_ID = "Pendulum-v1"
ACTION_RANGE = 2.0  # Pendulum torques lie in [-2, 2]
torch.set_num_threads(1)  # the networks are tiny: more threads only add synchronisation


class Actor(nn.Module):
    def __init__(self, state_dim=3, action_dim=1, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, action_dim),
        )

    def forward(self, state):
        return torch.tanh(self.net(state)) * ACTION_RANGE


class Critic(nn.Module):
    def __init__(self, state_dim=3, action_dim=1, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim + action_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


def networks():
    """actor, actor_target, critic, critic_target (targets are overwritten by the framework)."""
    return Actor(), Actor(), Critic(), Critic()


def noisy_action(agent, state, noise_sigma=0.2):
    """The actor's action plus Gaussian noise, kept in the action range (exploration)."""
    action = agent.act_with_noise({"state": state}, noise_param=(0.0, noise_sigma), mode="normal")
    return action.clamp(-ACTION_RANGE, ACTION_RANGE)


def run(
    agent,
    *,
    episodes: int,
    seed: int,
    plot: str = "",
    gif: str = "",
    name: str = "agent",
    warmup_steps: int = 300,
    solved_reward: float = -200.0,
    explore=noisy_action,
    greedy=lambda agent, state: agent.act({"state": state}),
    extra=lambda agent: "",
) -> bool:
    """Train on Pendulum-v1 (200 steps per episode) with one update per step after a random warm-up.

    Prints one line per episode and stops once the smoothed return (0.9 / 0.1, started at
    the first episode's return) exceeds ``solved_reward``. Then writes the learning curve
    to ``plot`` and, if ``gif`` is set, records one episode played with ``greedy``.
    ``explore(agent, state)`` chooses the actions after the warm-up, ``greedy(agent, state)``
    those of the recorded episode, and ``extra(agent)`` adds text to the progress lines
    (sac.py passes its own). Returns whether the run was solved.
    """
    env = gym.make(ENV_ID)
    env.action_space.seed(seed)
    progress, steps = Progress(name, ENV_ID, solved_reward, start=None), 0
    for episode in range(1, episodes + 1):
        obs, _ = env.reset(seed=seed + episode)
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        done, total = False, 0.0
        while not done:
            if steps < warmup_steps:
                action = torch.tensor(env.action_space.sample()).view(1, -1)
            else:
                action = explore(agent, state)
            obs, reward, terminated, truncated, _ = env.step(action.numpy().reshape(-1))
            next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
            agent.store_transition(
                {
                    "state": {"state": state},
                    "action": {"action": action},
                    "next_state": {"state": next_state},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
            steps += 1
            if steps >= warmup_steps:
                agent.update()
            state, total, done = next_state, total + float(reward), terminated or truncated
        if progress.end_episode(total, steps, extra=extra(agent)):
            break
    env.close()
    progress.write_curve(plot)
    if gif:
        record_episode(ENV_ID, lambda s: greedy(agent, s), gif, seed=seed)
    return progress.solved


if __name__ == "__main__":
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    ddpg = DDPG(
        *networks(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        update_rate=0.005,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
        replay_size=100000,
    )
    run(ddpg, episodes=args.episodes, seed=args.seed, plot=args.plot, gif=args.gif, name="DDPG")

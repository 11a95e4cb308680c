"""MADDPG on simple_spread_v3: ``python examples/framework_examples/maddpg.py``.

Three agents must cover three landmarks without bumping into each other (the
multi-agent particle environments of PettingZoo, package ``mpe2``). Each agent
acts on its own observation with its own actor; each agent's critic sees the
observations and actions of all three agents. The printed return is the mean
return of the three agents in the episode; the run counts as solved once its
smoothed value (0.9 / 0.1) exceeds -18 after the random warm-up.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning curve of the
mean return, default ``maddpg_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one
noise-free episode of the trained actors, default ``maddpg_episode.gif``).
"""

import numpy as np
import torch
from _common import Progress, parse_args, write_gif
from mpe2 import simple_spread_v3
from torch import nn

from machin.frame.algorithms import MADDPG

torch.set_num_threads(1)  # the networks are tiny: more threads only add synchronisation
AGENTS, STATE_DIM, ACTION_DIM = 3, 18, 5
WARMUP_EPISODES, UPDATE_EVERY, NOISE_SIGMA = 10, 2, 0.1
CRITIC_ONLY_UPDATES = (
    500  # let the critics fit the random warm-up data before the actors follow them
)
SOLVED_RETURN = -18.0  # smoothed mean return per agent


class Actor(nn.Module):
    """A planar push ``(x, y)`` in [-1, 1]^2, written as simple_spread's five action numbers.

    The environment's continuous action is ``[no-op, +x, -x, +y, -y]`` in [0, 1]^5, and only
    the differences ``+x - (-x)`` and ``+y - (-y)`` move the agent.
    """

    def __init__(self, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(STATE_DIM, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 2),
        )

    def forward(self, state):
        push = torch.tanh(self.net(state))
        half = (1 + torch.stack([push[:, 0], -push[:, 0], push[:, 1], -push[:, 1]], dim=1)) / 2
        return torch.cat([torch.zeros_like(push[:, :1]), half], dim=1)


class Critic(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(AGENTS * (STATE_DIM + ACTION_DIM), hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


def as_states(obs, names):
    return [torch.as_tensor(obs[name], dtype=torch.float32).view(1, -1) for name in names]


def make_env(render_mode=None):
    return simple_spread_v3.parallel_env(
        N=AGENTS, local_ratio=0.5, max_cycles=25, continuous_actions=True, render_mode=render_mode
    )


def record(maddpg, path, seed):
    """Play one episode with the noise-free actors and write its frames to ``path``."""
    env = make_env("rgb_array")
    obs, _ = env.reset(seed=seed)
    names = list(env.agents)
    frames, total = [env.render()], 0.0
    with torch.no_grad():
        while env.agents:
            actions = maddpg.act([{"state": s} for s in as_states(obs, names)])
            obs, rewards, *_ = env.step(
                {name: a.view(-1).numpy() for name, a in zip(names, actions)}
            )
            frames.append(env.render())
            total += sum(float(rewards[name]) for name in names) / AGENTS
    env.close()
    print(f"recorded episode: mean return {total:.2f}", flush=True)
    write_gif(frames, path, fps=10)


def main():
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    env = make_env()
    # Every critic sees all agents, its own agent first.
    visible = [[i] + [j for j in range(AGENTS) if j != i] for i in range(AGENTS)]
    maddpg = MADDPG(
        [Actor() for _ in range(AGENTS)],
        [Actor() for _ in range(AGENTS)],
        [Critic() for _ in range(AGENTS)],
        [Critic() for _ in range(AGENTS)],
        visible,
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=128,
        update_rate=0.02,
        actor_learning_rate=1e-3,
        critic_learning_rate=3e-3,
        discount=0.9,
        gradient_max=0.5,
        replay_size=100000,
    )
    warmup = min(
        WARMUP_EPISODES, args.episodes // 2
    )  # random actions first (short runs still train)
    progress, steps, updates = (
        Progress("MADDPG", "simple_spread_v3", SOLVED_RETURN, start=None),
        0,
        0,
    )
    for episode in range(1, args.episodes + 1):
        obs, _ = env.reset(seed=args.seed + episode)
        names = list(env.agents)
        states, total = as_states(obs, names), 0.0
        while env.agents:
            if episode <= warmup:
                actions = [
                    torch.as_tensor(rng.random((1, ACTION_DIM)), dtype=torch.float32) for _ in names
                ]
            else:
                actions = maddpg.act_with_noise(
                    [{"state": s} for s in states], noise_param=(0.0, NOISE_SIGMA), mode="normal"
                )
                actions = [a.clamp(0.0, 1.0) for a in actions]
            obs, rewards, terminated, truncated, _ = env.step(
                {name: a.view(-1).numpy() for name, a in zip(names, actions)}
            )
            next_states = as_states(obs, names)
            maddpg.store_transitions(
                [
                    {
                        "state": {"state": s},
                        "action": {"action": a},
                        "next_state": {"state": n},
                        "reward": float(rewards[name]),
                        "terminal": bool(terminated[name]),
                    }
                    for name, s, a, n in zip(names, states, actions, next_states)
                ]
            )
            steps += 1
            if episode > warmup and steps % UPDATE_EVERY == 0:
                maddpg.update(update_policy=updates >= CRITIC_ONLY_UPDATES)
                updates += 1
            total += sum(float(rewards[name]) for name in names) / AGENTS
            states = next_states
        if progress.end_episode(total, steps, can_solve=episode > warmup):
            break
    env.close()
    progress.write_curve(args.plot)
    if args.gif:
        record(maddpg, args.gif, args.seed)
    maddpg.close()


if __name__ == "__main__":
    main()

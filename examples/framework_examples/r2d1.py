"""R2D1 on CartPole-v0 without velocities: ``python examples/framework_examples/r2d1.py``.

The agent sees only the cart position and the pole angle, so a memoryless Q network
cannot tell which way the pole is moving; R2D1's GRU infers the velocities from the
history. The hidden state given to the network at each step is stored with the step,
and sequences replayed from the buffer start from it (after a burn-in).

Solved once the smoothed return exceeds 150. Options: ``--episodes N`` (cap),
``--seed S`` and ``--plot PATH`` (learning-curve PNG, default ``r2d1_curve.png``,
``""`` for none).
"""

import gymnasium as gym
import torch
from _common import Progress, parse_args
from torch import nn

from machin.frame.algorithms import R2D1
from machin.utils import seed as seed_everything

ENV_ID = "CartPole-v0"
HIDDEN = 32


class MaskVelocity(gym.ObservationWrapper):
    """Keep only the cart position and the pole angle (observation indices 0 and 2)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        low, high = env.observation_space.low[[0, 2]], env.observation_space.high[[0, 2]]
        self.observation_space = gym.spaces.Box(low, high)

    def observation(self, observation):
        return observation[[0, 2]]


class RecurrentQNet(nn.Module):
    """One time step: ``forward(state[B, 2], hidden[B, 32] or None) -> (q[B, 2], new_hidden[B, 32])``."""

    def __init__(self, state_dim: int = 2, action_num: int = 2, size: int = HIDDEN):
        super().__init__()
        self.fc = nn.Linear(state_dim, size)
        self.gru = nn.GRUCell(size, size)
        self.head = nn.Linear(size, action_num)

    def forward(self, state, hidden=None):
        hidden = self.gru(torch.relu(self.fc(state)), hidden)
        return self.head(hidden), hidden


def main():
    args = parse_args(__doc__, episodes=300, gif=False)
    seed_everything(args.seed)
    r2d1 = R2D1(
        RecurrentQNet(),
        RecurrentQNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=64,
        learning_rate=2e-3,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
        sequence_length=8,
        burn_in=4,
        n_step=3,
    )
    env = MaskVelocity(gym.make(ENV_ID))
    progress, steps = Progress("R2D1", f"{ENV_ID} without velocities", solved_reward=150.0), 0
    for episode in range(1, args.episodes + 1):
        obs, _ = env.reset(seed=args.seed + episode)
        state, hidden = torch.tensor(obs).view(1, -1), torch.zeros(1, HIDDEN)
        done, total, stored = False, 0.0, []
        while not done:
            action, next_hidden = r2d1.act_discrete_with_noise({"state": state, "hidden": hidden})
            obs, reward, terminated, truncated, _ = env.step(action.item())
            next_state = torch.tensor(obs).view(1, -1)
            # the state dict records the hidden state the network was given at this step
            stored.append(
                {
                    "state": {"state": state, "hidden": hidden},
                    "action": {"action": action},
                    "next_state": {"state": next_state},
                    "reward": float(reward),
                    "terminal": terminated,
                }
            )
            state, hidden, total, done = (
                next_state,
                next_hidden,
                total + reward,
                terminated or truncated,
            )
            steps += 1
        r2d1.store_episode(stored)
        if steps >= 500:  # warm-up, then one update per two environment steps
            for _ in range(max(1, len(stored) // 2)):
                r2d1.update()
        if progress.end_episode(total, steps):
            break
    env.close()
    progress.write_curve(args.plot)


if __name__ == "__main__":
    main()

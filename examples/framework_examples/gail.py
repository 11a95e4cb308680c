"""GAIL on CartPole-v1: ``python examples/framework_examples/gail.py``.

The learner never sees the environment's reward: it imitates 10 episodes of a scripted
expert (push the cart the way the pole is falling: ``theta + 0.5 * theta_dot > 0``, which
balances the pole for all 500 steps). A discriminator learns to tell the learner's
state-action pairs from the expert's, and PPO trains the learner on the reward
``-log D(s, a)``. The return printed per episode is the environment's, for watching only.

Options: ``--episodes N`` (cap), ``--seed S``, ``--plot PATH`` (learning-curve PNG,
default ``gail_curve.png``, ``""`` for none) and ``--gif [PATH]`` (one episode of the
trained learner taking its most likely action, default ``gail_episode.gif``).
"""

import gymnasium as gym
import torch
from _common import Progress, parse_args, record_episode
from torch import nn
from torch.distributions import Categorical

from machin.frame.algorithms import GAIL, PPO

ENV_ID = "CartPole-v1"
EXPERT_EPISODES = 10
ROLLOUT_STEPS = 2048  # learner steps collected between two updates
torch.set_num_threads(1)  # the networks are tiny: more threads only add synchronisation


def mlp(inputs, outputs, hidden=32):
    return nn.Sequential(
        nn.Linear(inputs, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden),
        nn.Tanh(),
        nn.Linear(hidden, outputs),
    )


class Actor(nn.Module):
    """Samples an action, scores a given one, or (``deterministic=True``) takes the most likely one."""

    def __init__(self, state_dim=4, action_num=2):
        super().__init__()
        self.net = mlp(state_dim, action_num)

    def forward(self, state, action=None, deterministic=False):
        logits = self.net(state)
        dist = Categorical(logits=logits)
        if action is None:
            action = (logits.argmax(dim=1) if deterministic else dist.sample()).view(-1, 1)
        return action, dist.log_prob(action.view(-1)), dist.entropy()


class Critic(nn.Module):
    """State value ``V(s)``."""

    def __init__(self, state_dim=4):
        super().__init__()
        self.net = mlp(state_dim, 1)

    def forward(self, state):
        return self.net(state)


class Discriminator(nn.Module):
    """Probability that a state-action pair comes from the learner rather than the expert."""

    def __init__(self, state_dim=4, action_num=2):
        super().__init__()
        self.action_num = action_num
        self.net = mlp(state_dim + action_num, 1)

    def forward(self, state, action):
        one_hot = nn.functional.one_hot(action.view(-1).long(), self.action_num).to(state.dtype)
        return torch.sigmoid(self.net(torch.cat([state, one_hot], dim=1)))


def expert_action(obs):
    """The scripted expert's action for a CartPole observation."""
    return torch.tensor([[int(obs[2] + 0.5 * obs[3] > 0)]])


def play(env, policy, seed):
    """One episode with ``policy(obs, state)``; returns its steps and its return."""
    obs, _ = env.reset(seed=seed)
    steps, total, done = [], 0.0, False
    while not done:
        state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        action = policy(obs, state)
        obs, reward, terminated, truncated, _ = env.step(int(action.item()))
        next_state = torch.tensor(obs, dtype=torch.float32).view(1, -1)
        # terminal=terminated: a time-limit cut (truncated) is bootstrapped from V(next_state)
        steps.append(
            {
                "state": {"state": state},
                "action": {"action": action},
                "next_state": {"state": next_state},
                "reward": float(reward),
                "terminal": terminated,
            }
        )
        total, done = total + reward, terminated or truncated
    return steps, total


def main():
    args = parse_args(__doc__)
    torch.manual_seed(args.seed)
    env = gym.make(ENV_ID)
    ppo = PPO(
        Actor(),
        Critic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=256,
        actor_update_times=4,
        actor_learning_rate=0.003,
        critic_learning_rate=0.003,
        gae_lambda=0.95,
        value_target="lambda_return",
        joint_update=True,
    )
    gail = GAIL(
        Discriminator(),
        ppo,
        torch.optim.Adam,
        batch_size=256,
        discriminator_update_times=5,
        discriminator_learning_rate=0.002,
    )
    for episode in range(EXPERT_EPISODES):
        steps, total = play(
            env, lambda obs, _: expert_action(obs), seed=args.seed + 100_000 + episode
        )
        gail.store_expert_episode(steps)
    print(f"stored {EXPERT_EPISODES} expert episodes (last return {total:.0f})", flush=True)

    progress, collected, total_steps = Progress("GAIL", ENV_ID, 475.0, 5), 0, 0
    for episode in range(1, args.episodes + 1):
        steps, total = play(
            env, lambda _, state: gail.act({"state": state})[0], args.seed + episode
        )
        gail.store_episode(steps)
        collected, total_steps = collected + len(steps), total_steps + len(steps)
        if collected >= ROLLOUT_STEPS or episode == args.episodes:
            gail.update()
            collected = 0
        if progress.end_episode(total, total_steps):
            break
    env.close()
    progress.write_curve(args.plot)
    if args.gif:
        greedy = lambda state: gail.act({"state": state}, deterministic=True)[0]  # noqa: E731
        record_episode(ENV_ID, greedy, args.gif, seed=args.seed)


if __name__ == "__main__":
    main()

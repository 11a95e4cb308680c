"""Contract cases of DQNApex, DDPGApex, IMPALA and ARS (see ``contract.py``).

Their own test files (``test_apex.py``, ``test_impala.py``, ``test_ars.py``) are to host
these cases later; until then they live here. Each case runs in the one-member RPC world
of the contract suite: ``args`` receives a :class:`~tests.frame.algorithms.contract.WorldContext`
that makes a fresh group and fresh servers for every instance.
"""

import math

import torch
from torch import nn

from machin.frame.algorithms import ARS, IMPALA, DDPGApex, DQNApex

from .contract import ContractCase
from .nets import (
    STATE_DIM,
    Actor,
    CategoricalActor,
    Critic,
    QNet,
    ValueCritic,
    episode_steps,
    random_transition,
    transition,
)


def _sync_off(act):
    """Act with the local networks (no pull from the model server first)."""

    def call(agent, state):
        agent.set_sync(False)
        return act(agent, state)

    return call


class LinearPolicy(nn.Module):
    """A linear ARS policy: continuous outputs of one linear layer."""

    def __init__(self, state_dim: int = 3, outputs: int = 2):
        super().__init__()
        self.fc = nn.Linear(state_dim, outputs)

    def forward(self, state):
        return self.fc(state)


def _impala_episodes():
    return [episode_steps(length, seed=length, action_log_prob=-0.69) for length in (3, 4, 5)]


def _store_rewards(ars, rewards):
    for actor_type, reward in zip(ars.get_actor_types(), rewards):
        ars.store_reward(reward, actor_type)


def _store_nan_rewards(ars, rewards):
    """NaN returns, written where store_reward keeps them (its finite check has no switch)."""
    for actor_type in ars.get_actor_types()[: len(rewards)]:
        index, positive = ars._parse(actor_type, allow_original=False)
        ars.reward[index][positive].append(math.nan)


CONTRACT_CASES = {
    DQNApex: ContractCase(
        args=lambda ctx: (
            QNet(hidden=8),
            QNet(hidden=8),
            torch.optim.Adam,
            nn.MSELoss(reduction="none"),
            ctx.group(),
            ctx.model_servers(1),
        ),
        options={"batch_size": 8, "replay_size": 100},
        act=_sync_off(lambda agent, state: agent.act_discrete(state, use_target=True)),
        explore=_sync_off(lambda agent, state: agent.act_discrete_with_noise(state)),
        state=lambda: {"state": torch.randn(6, 4)},
        experience=lambda: [
            transition(torch.randn(4), i % 2, torch.randn(4), float(i % 3), i == 15)
            for i in range(16)
        ],
        trains={"update_value": ["qnet"]},
        world=True,
    ),
    DDPGApex: ContractCase(
        args=lambda ctx: (
            Actor(hidden=8),
            Actor(hidden=8),
            Critic(hidden=8),
            Critic(hidden=8),
            torch.optim.Adam,
            nn.MSELoss(reduction="none"),
            ctx.group(),
            ctx.model_servers(1),
        ),
        options={"batch_size": 8, "replay_size": 100},
        act=_sync_off(lambda agent, state: agent.act(state, use_target=True)),
        explore=_sync_off(
            lambda agent, state: agent.act_with_noise(state, noise_param=(0.0, 0.5), mode="normal")
        ),
        state=lambda: {"state": torch.randn(5, STATE_DIM)},
        experience=lambda: [random_transition() for _ in range(16)],
        trains={"update_value": ["critic"], "update_policy": ["actor"]},
        world=True,
    ),
    IMPALA: ContractCase(
        args=lambda ctx: (
            CategoricalActor(4, 2, 8),
            ValueCritic(4, 8),
            torch.optim.Adam,
            nn.MSELoss(),
            ctx.group(),
            ctx.model_servers(1),
        ),
        options={"batch_size": 2},
        act=_sync_off(lambda agent, state: agent.act(state)),
        state=lambda: {"state": torch.randn(6, 4)},
        experience=_impala_episodes,
        store=lambda agent, episodes: [agent.store_episode(e) for e in episodes],
        trains={"update_value": ["critic"], "update_policy": ["actor"]},
        world=True,
    ),
    ARS: ContractCase(
        args=lambda ctx: (LinearPolicy(), torch.optim.SGD, ctx.group(), ctx.model_servers(1)),
        options={
            "noise_size": 20000,
            "noise_std_dev": 0.05,
            "rollout_num": 2,
            "used_rollout_num": 2,
        },
        act=lambda agent, state: agent.act(state, "original"),
        state=lambda: {"state": torch.randn(4, 3)},
        experience=lambda: [1.0, 2.0, 0.5, 3.0],  # one return per actor type (2 rollouts, 2 signs)
        store=_store_rewards,
        store_nan_rewards=_store_nan_rewards,
        trains={None: ["actor"]},
        world=True,
    ),
}

"""TD3+BC: the alpha-normalised behaviour-cloning term of the actor; learns Pendulum from a scripted expert."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms.td3_bc import TD3BC
from machin.frame.offline import evaluate_policy, load_minari
from tests.frame.offline.expert import record_dataset

from .contract import ContractCase
from .nets import STATE_DIM, Actor, Critic, random_transition
from .test_td3 import linear_td3

CONTRACT_CASES = {
    TD3BC: ContractCase(
        args=lambda: (
            Actor(),
            Actor(),
            Critic(),
            Critic(),
            Critic(),
            Critic(),
            torch.optim.Adam,
            nn.MSELoss(),
        ),
        options={"batch_size": 8, "policy_update_delay": 1},
        act=lambda agent, state: agent.act(state, use_target=True),
        explore=lambda agent, state: agent.act_with_noise(
            state, noise_param=(0.0, 0.5), mode="normal"
        ),
        state=lambda: {"state": torch.randn(5, STATE_DIM)},
        experience=lambda: [random_transition() for _ in range(16)],
        trains={"update_value": ["critic", "critic2"], "update_policy": ["actor"]},
    ),
}


def test_the_actor_loss_weighs_the_critic_by_alpha_over_its_mean_magnitude():
    # a = 0.5 s, Q1 = s + 2a, dataset (s=1, a=0.25): pi(s) = 0.5, Q = 2, lambda = 2.5 / 2;
    # loss = -1.25 * 2 + (0.5 - 0.25)^2 = -2.4375, d loss / dw = -1.25 * 2 + 2 * 0.25 = -2.
    td3bc = linear_td3(TD3BC, policy_update_delay=1, actor_learning_rate=0.1)
    policy_value, _ = td3bc.update(update_value=False, update_target=False)
    assert policy_value == pytest.approx(2.4375)
    assert td3bc.actor.w.item() == pytest.approx(0.5 + 0.1 * 2.0)


def test_alpha_zero_is_behaviour_cloning_and_alpha_is_checked():
    td3bc = linear_td3(TD3BC, policy_update_delay=1, actor_learning_rate=0.1, alpha=0.0)
    policy_value, _ = td3bc.update(update_value=False, update_target=False)
    assert policy_value == pytest.approx(-0.0625)
    assert td3bc.actor.w.item() == pytest.approx(0.5 - 0.1 * 0.5)
    with pytest.raises(ValueError, match="alpha must be non-negative, got -1"):
        linear_td3(TD3BC, alpha=-1)


@pytest.mark.learning
def test_td3_bc_learns_pendulum_from_a_scripted_expert(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    dataset = record_dataset("pendulum/expert-v0", episodes=10, seed=0)
    torch.manual_seed(0)
    actor, critic, critic2 = Actor(hidden=64), Critic(hidden=64), Critic(hidden=64)
    td3bc = TD3BC(
        actor,
        Actor(hidden=64),
        critic,
        Critic(hidden=64),
        critic2,
        Critic(hidden=64),
        torch.optim.Adam,
        nn.MSELoss(),
        replay_buffer=load_minari(dataset),
        batch_size=256,
        actor_learning_rate=5e-3,
        critic_learning_rate=5e-3,
        policy_update_delay=1,
    )
    for _ in range(800):
        td3bc.update()
    assert evaluate_policy(td3bc, gym.make("Pendulum-v1"), episodes=5, seed=1000) > -400

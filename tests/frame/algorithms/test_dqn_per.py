import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms import DQN, DQNPer
from machin.frame.buffers import PrioritizedBuffer

from .contract import ContractCase
from .loops import train
from .nets import QNet, SummingLoss, transition

CONTRACT_CASES = {
    DQNPer: ContractCase(
        args=lambda: (
            QNet(hidden=16),
            QNet(hidden=16),
            torch.optim.Adam,
            nn.MSELoss(reduction="none"),
        ),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act_discrete(state, use_target=True),
        explore=lambda agent, state: agent.act_discrete_with_noise(state),
        state=lambda: {"state": torch.randn(6, 4)},
        experience=lambda: [
            transition(torch.randn(4), i % 2, torch.randn(4), float(i % 3), i == 15)
            for i in range(16)
        ],
        trains={"update_value": ["qnet"]},
    ),
}


def make(criterion=None, **kwargs):
    torch.manual_seed(0)
    return DQNPer(
        QNet(),
        QNet(),
        torch.optim.Adam,
        criterion or nn.MSELoss(reduction="none"),
        batch_size=8,
        **kwargs,
    )


def fill(agent, n=32):
    for i in range(n):
        agent.store_transition(
            transition(torch.randn(4), i % 2, torch.randn(4), float(i % 3), i % 7 == 0)
        )


def test_is_a_dqn_with_prioritized_buffer():
    agent = make()
    assert isinstance(agent, DQN)
    assert isinstance(agent.replay_buffer, PrioritizedBuffer)


def test_criterion_returning_one_number_is_rejected_with_advice():
    agent = make(SummingLoss())
    fill(agent)
    with pytest.raises(ValueError, match='one loss per sample.*reduction="none"'):
        agent.update()


def test_update_sets_priorities_to_td_errors(monkeypatch):
    agent = make()
    fill(agent)
    seen = {}
    original = agent.replay_buffer.update_priority

    def spy(priorities, indexes):
        seen["priorities"], seen["indexes"] = np.array(priorities), np.array(indexes)
        original(priorities, indexes)

    monkeypatch.setattr(agent.replay_buffer, "update_priority", spy)
    np.random.seed(3)
    batch = agent._sample(True)
    target = agent._bellman_target(batch)
    predicted = agent._predicted_value(batch)
    agent._value_loss(predicted, target, batch)
    expected = (predicted.detach() - target).abs().view(-1).numpy()
    assert np.allclose(seen["priorities"], expected)
    assert np.array_equal(seen["indexes"], batch.index)
    leaf = agent.replay_buffer.wt_tree.get_leaf_weight(batch.index)
    eps, alpha = agent.replay_buffer.epsilon, agent.replay_buffer.alpha
    # when an index was drawn twice, the last priority written wins
    last = {i: p for i, p in zip(batch.index, expected)}
    assert np.allclose(leaf, [(last[i] + eps) ** alpha for i in batch.index])


def test_loss_is_weighted_by_importance_weights():
    agent = make()
    fill(agent)
    batch = agent._sample(True)
    target = agent._bellman_target(batch)
    predicted = agent._predicted_value(batch)
    batch.weight = torch.zeros(batch.size, 1)
    assert agent._value_loss(predicted, target, batch).item() == 0.0
    batch.weight = torch.ones(batch.size, 1)
    expected = ((predicted - target) ** 2).mean().item()
    assert agent._value_loss(predicted, target, batch).item() == pytest.approx(expected, rel=1e-5)


def test_update_returns_float_and_trains():
    agent = make()
    fill(agent)
    before = [p.clone() for p in agent.qnet.parameters()]
    loss = agent.update()
    assert isinstance(loss, float)
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.qnet.parameters()))


@pytest.mark.learning
def test_dqn_per_learns_cartpole():
    torch.manual_seed(0)
    agent = DQNPer(
        QNet(),
        QNet(),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
    )
    result = train(
        agent,
        lambda: gym.make("CartPole-v0"),
        seed=0,
        episodes=400,
        solved_reward=150,
        solved_repeat=5,
        warmup_steps=500,
    )
    print(f"DQNPer solved CartPole-v0 at episode {result.solved_episode} ({result.steps} steps)")
    assert result.solved_episode is not None, (
        "DQNPer did not reach a smoothed return of 150 within 400 episodes"
    )

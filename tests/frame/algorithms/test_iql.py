import math

import pytest
import torch
from torch import nn

from machin.frame.algorithms import IQL, SAC
from machin.frame.algorithms.base import NetworkMismatchError
from machin.frame.algorithms.critics import TwinCritics
from machin.frame.algorithms.iql import IQL as IQLFromModule
from machin.frame.algorithms.iql import advantage_weights, expectile_loss
from machin.frame.algorithms.replay import SampledBatch
from machin.frame.offline import evaluate_policy

from .contract import ContractCase
from .nets import QCritic, TanhGaussianActor, ValueCritic, episode_steps, parameters, same
from .offline_tasks import (
    ConstantQ,
    ConstantV,
    PointReach,
    SquashedGaussianActor,
    point_reach_data,
)


def networks(hidden=16):
    return (
        TanhGaussianActor(hidden=hidden),
        *(QCritic(hidden=hidden) for _ in range(4)),
        ValueCritic(state_dim=3, hidden=hidden),
    )


CONTRACT_CASES = {
    IQL: ContractCase(
        args=lambda: (*networks(), torch.optim.Adam, nn.MSELoss()),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act(state),
        state=lambda: {"state": torch.randn(6, 3)},
        experience=lambda: episode_steps(16, 3, discrete=False),
        trains={"update_value": ["critic", "critic2", "value_net"], "update_policy": ["actor"]},
    ),
}


class UnitGaussianActor(nn.Module):
    """N(mu, 1) over one action number, ``mu`` a parameter; log-probabilities of given actions."""

    def __init__(self):
        super().__init__()
        self.mu = nn.Parameter(torch.zeros(()))

    def forward(self, state, action=None):
        dist = torch.distributions.Normal(self.mu.expand(state.shape[0], 1), 1.0)
        action = dist.sample() if action is None else action
        return action, dist.log_prob(action)


def make(actor=None, critics=None, value_net=None, **options):
    torch.manual_seed(0)
    nets = networks()
    actor = actor or nets[0]
    critics = critics or nets[1:5]
    value_net = value_net or nets[5]
    options = {"batch_size": 8, **options}
    return IQL(actor, *critics, value_net, torch.optim.Adam, nn.MSELoss(), **options)


def fixed(q1, q2, v, **options):
    critics = [ConstantQ(q1), ConstantQ(0.0), ConstantQ(q2), ConstantQ(0.0)]
    return make(UnitGaussianActor(), critics, ConstantV(v), **options)


def hand_batch(size, reward=1.0, terminal=0.0):
    return SampledBatch(
        size,
        {"state": torch.randn(size, 3)},
        {"action": torch.zeros(size, 1)},
        torch.full((size, 1), reward),
        {"state": torch.randn(size, 3)},
        torch.full((size, 1), terminal),
    )


def test_expectile_loss_by_hand():
    difference = torch.tensor([2.0, -1.0, 0.5])
    # weights 0.8 (above), 0.2 (below), 0.8: (0.8 * 4 + 0.2 * 1 + 0.8 * 0.25) / 3
    assert expectile_loss(difference, 0.8).item() == pytest.approx(1.2)
    assert expectile_loss(difference, 0.5).item() == pytest.approx(0.5 * (4 + 1 + 0.25) / 3)


def test_advantage_weights_by_hand():
    weights = advantage_weights(torch.tensor([0.0, 1.0, 10.0, -1.0]), beta=2.0, max_weight=100.0)
    assert weights.tolist() == pytest.approx([1.0, math.e**2, 100.0, math.e**-2])
    assert advantage_weights(torch.tensor([5.0]), beta=0.0, max_weight=3.0).item() == 1.0


def test_class_attributes_defaults_and_targets_start_as_copies():
    assert IQL is IQLFromModule
    assert IQL.get_restorable() == ["actor", "critic_target", "critic2_target", "value_net"]
    agent = make()
    assert (agent.expectile, agent.beta, agent.max_weight) == (0.7, 3.0, 100.0)
    assert same(parameters(agent.critic), parameters(agent.critic_target))
    assert same(parameters(agent.critic2), parameters(agent.critic2_target))
    assert len(agent._optimizers()) == 4


def test_sac_and_iql_set_up_their_twin_critics_in_one_place(monkeypatch):
    calls = []
    shared = TwinCritics._set_up_twin_critics

    def recording(self, *args):
        calls.append(type(self).__name__)
        shared(self, *args)

    monkeypatch.setattr(TwinCritics, "_set_up_twin_critics", recording)
    iql = make()
    sac = SAC(*networks()[:5], torch.optim.Adam, nn.MSELoss(), batch_size=8)
    assert calls == ["IQL", "SAC"]
    for agent in (iql, sac):
        assert agent._online_target_pairs() == [
            (agent.critic, agent.critic_target),
            (agent.critic2, agent.critic2_target),
        ]
    smaller = [QCritic(hidden=16) for _ in range(3)] + [QCritic(hidden=8)]
    with pytest.raises(NetworkMismatchError, match="critic2_target must have the architecture"):
        make(critics=smaller)
    with pytest.raises(TypeError, match="criterion must be a loss callable.*got 'mse'"):
        IQL(*networks(), torch.optim.Adam, "mse")


def test_value_loss_is_the_expectile_loss_of_the_smaller_target_q():
    # targets are copies of the critics: min(Q1', Q2') = min(2, 1) = 1
    agent = fixed(2.0, 1.0, 0.5, expectile=0.8)
    loss, advantage = agent._state_value_loss(hand_batch(4))
    assert advantage.view(-1).tolist() == [0.5] * 4 and not advantage.requires_grad
    assert loss.item() == pytest.approx(0.8 * 0.5**2)  # Q above V: weight 0.8
    agent = fixed(2.0, 1.0, 3.0, expectile=0.8)
    assert agent._state_value_loss(hand_batch(4))[0].item() == pytest.approx(0.2 * 2.0**2)


def test_critic_losses_regress_on_reward_plus_discounted_next_value():
    agent = fixed(2.0, 1.0, 0.5, discount=0.5)
    losses = agent._critic_losses(hand_batch(4, reward=1.0))
    target = 1.0 + 0.5 * 0.5
    assert [loss.item() for loss in losses] == pytest.approx(
        [(target - 2.0) ** 2, (target - 1.0) ** 2]
    )
    terminal = agent._critic_losses(hand_batch(4, reward=1.0, terminal=1.0))
    assert terminal[1].item() == pytest.approx(0.0)  # terminal: the reward alone, Q2 = 1


def test_actor_loss_weighs_the_log_likelihood_of_the_dataset_actions():
    agent = fixed(2.0, 1.0, 0.5, beta=2.0)
    batch = hand_batch(4)
    advantage = agent._state_value_loss(batch)[1]
    loss, policy_value = agent._actor_loss(batch, advantage)
    log_prob = -0.5 * math.log(2 * math.pi)  # N(0, 1) at the stored action 0
    assert loss.item() == pytest.approx(-math.e * log_prob)  # weight exp(2 * 0.5)
    assert policy_value.item() == pytest.approx(math.e * log_prob)
    agent.max_weight = 2.0
    assert agent._actor_loss(batch, advantage)[0].item() == pytest.approx(-2.0 * log_prob)


def test_each_loss_reaches_only_its_network():
    agent = make()
    batch = hand_batch(8)
    critic_losses = agent._critic_losses(batch)
    value_loss, advantage = agent._state_value_loss(batch)
    actor_loss, _ = agent._actor_loss(batch, advantage)
    for losses, trained in (
        (critic_losses, {"critic", "critic2"}),
        ([value_loss], {"value_net"}),
        ([actor_loss], {"actor"}),
    ):
        for name in IQL._is_top:
            for p in getattr(agent, name).parameters():
                p.grad = None
        sum(losses).backward(retain_graph=True)
        reached = {
            name
            for name in IQL._is_top
            if any(p.grad is not None for p in getattr(agent, name).parameters())
        }
        assert reached == trained


def test_update_returns_floats_and_options_are_checked():
    agent = make()
    assert agent.update() is None
    agent.store_episode(episode_steps(16, 3, discrete=False))
    policy_value, value_loss = agent.update()
    assert isinstance(policy_value, float) and isinstance(value_loss, float) and value_loss >= 0
    action, log_prob, _ = agent.act({"state": torch.randn(2, 3)})
    assert action.shape == (2, 1) and log_prob.shape == (2, 1)
    with pytest.raises(ValueError, match=r"expectile must be in \(0, 1\), got 1.0"):
        make(expectile=1.0)
    with pytest.raises(TypeError, match="expectile must be a real number in"):
        make(expectile="high")
    with pytest.raises(ValueError, match="beta must be non-negative, got -1"):
        make(beta=-1)
    with pytest.raises(ValueError, match="max_weight must be positive, got 0"):
        make(max_weight=0)


def test_value_learning_rate_reaches_its_optimizer():
    agent = make(value_learning_rate=0.002)
    assert agent.value_optim.param_groups[0]["lr"] == 0.002
    agent.value_learning_rate = 0.004
    assert agent.value_optim.param_groups[0]["lr"] == 0.004


@pytest.mark.learning
def test_iql_beats_behaviour_cloning_on_half_expert_half_random_data():
    episodes, bc_return = point_reach_data()  # BC -6.7, expert -0.87, random -11.2
    torch.manual_seed(0)
    agent = IQL(
        SquashedGaussianActor(state_dim=1, action_range=1.0, hidden=32),
        *(QCritic(state_dim=1, hidden=32) for _ in range(4)),
        ValueCritic(state_dim=1, hidden=32),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        discount=0.9,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
    )
    for episode in episodes:
        agent.store_episode(episode)
    for _ in range(600):
        agent.update()
    iql_return = evaluate_policy(agent, PointReach(), episodes=20, seed=100)
    print(f"PointReach, 25 expert + 25 random episodes: BC {bc_return:.2f}, IQL {iql_return:.2f}")
    assert iql_return > bc_return + 2.0, (bc_return, iql_return)

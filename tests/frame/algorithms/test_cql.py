import math

import pytest
import torch
from torch import nn

from machin.frame.algorithms import CQLSAC, DQN, SAC, DiscreteCQL
from machin.frame.algorithms.cql import CQLSAC as CQLSACFromModule
from machin.frame.algorithms.cql import conservative_penalty
from machin.frame.algorithms.replay import SampledBatch
from machin.frame.offline import evaluate_policy

from .contract import ContractCase
from .nets import QCritic, QNet, TanhGaussianActor, episode_steps, parameters, same, transition
from .offline_tasks import (
    ConstantQ,
    PointReach,
    SquashedGaussianActor,
    behaviour_cloning,
    cartpole_expert,
    mixed_dataset,
    point_reach_data,
)

CONTRACT_CASES = {
    CQLSAC: ContractCase(
        args=lambda: (
            TanhGaussianActor(hidden=16),
            *(QCritic(hidden=16) for _ in range(4)),
            torch.optim.Adam,
            nn.MSELoss(),
        ),
        options={"batch_size": 8, "cql_samples": 2, "action_low": -2.0, "action_high": 2.0},
        act=lambda agent, state: agent.act(state),
        state=lambda: {"state": torch.randn(6, 3)},
        experience=lambda: episode_steps(16, 3, discrete=False),
        trains={"update_value": ["critic", "critic2"], "update_policy": ["actor"]},
    ),
    DiscreteCQL: ContractCase(
        args=lambda: (QNet(hidden=16), QNet(hidden=16), torch.optim.Adam, nn.MSELoss()),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act_discrete(state, use_target=True),
        explore=lambda agent, state: agent.act_discrete_with_noise(state),
        state=lambda: {"state": torch.randn(6, 4)},
        experience=lambda: [
            transition(torch.randn(4), i % 2, torch.randn(4), 1.0, i == 15) for i in range(16)
        ],
        trains={"update_value": ["qnet"]},
    ),
}


# -- the penalty ------------------------------------------------------------------------------
def test_penalty_is_a_soft_maximum_of_the_proposals_minus_the_data_value():
    proposal_q = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    data_q = torch.tensor([[2.0], [1.0]])
    by_hand = (math.log(math.exp(1) + math.exp(2) + math.exp(3)) - 2.0 + math.log(3.0) - 1.0) / 2
    assert conservative_penalty(proposal_q, data_q).item() == pytest.approx(by_hand, rel=1e-6)
    # importance weights and a temperature: T * log(sum exp((q - log_density) / T)) - q_data
    log_density = torch.tensor([[-1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    row0 = 0.5 * math.log(math.exp(2 / 0.5) + math.exp(2 / 0.5) + math.exp(2 / 0.5)) - 2.0
    row1 = 0.5 * math.log(3.0) - 1.0
    value = conservative_penalty(proposal_q, data_q.view(-1), log_density, temperature=0.5)
    assert value.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)


def test_penalty_gradient_lowers_the_proposals_and_raises_the_data_value():
    proposal_q = torch.tensor([[0.0, 1.0]], requires_grad=True)
    data_q = torch.tensor([[0.5]], requires_grad=True)
    conservative_penalty(proposal_q, data_q).backward()
    softmax = torch.softmax(torch.tensor([0.0, 1.0]), dim=0)
    assert torch.allclose(proposal_q.grad, softmax.view(1, 2))  # descent lowers each proposal
    assert data_q.grad.item() == pytest.approx(-1.0)  # and raises the data value


# -- CQLSAC -----------------------------------------------------------------------------------
class UniformActor(nn.Module):
    """Actions uniform in [-2, 2] (density 1/4) whatever the state; one parameter for the optimizer."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, state, action=None):
        action = torch.rand(state.shape[0], 1) * 4 - 2 + 0 * self.unused
        return action, torch.full((state.shape[0], 1), -math.log(4.0))


class RecordingCritic(QCritic):
    def __init__(self):
        super().__init__(hidden=8)
        self.calls = []

    def forward(self, state, action):
        self.calls.append((state.detach().clone(), action.detach().clone()))
        return super().forward(state, action)


def make_cql(actor=None, critics=None, **options):
    torch.manual_seed(0)
    critics = critics or [QCritic(hidden=16) for _ in range(4)]
    options = {"batch_size": 16, "action_low": -2.0, "action_high": 2.0, **options}
    return CQLSAC(
        actor or TanhGaussianActor(hidden=16), *critics, torch.optim.Adam, nn.MSELoss(), **options
    )


def hand_batch(size, reward=1.0, terminal=0.0):
    return SampledBatch(
        size,
        {"state": torch.randn(size, 3)},
        {"action": torch.zeros(size, 1)},
        torch.full((size, 1), reward),
        {"state": torch.randn(size, 3)},
        torch.full((size, 1), terminal),
    )


def test_class_attributes_and_defaults():
    assert CQLSAC is CQLSACFromModule and issubclass(CQLSAC, SAC)
    assert issubclass(DiscreteCQL, DQN)
    agent = make_cql()
    assert (agent.cql_weight, agent.cql_samples, agent.cql_temperature) == (5.0, 10, 1.0)
    assert CQLSAC.get_restorable() == SAC.get_restorable()
    assert same(parameters(agent.critic), parameters(agent.critic_target))


def test_critic_loss_is_the_soft_bellman_loss_plus_the_weighted_penalty():
    # Q = 3 everywhere and every proposal has density 1/4, so the penalty is
    # T * logsumexp over 3n equal scores (3 + log 4) / T, minus 3: T * log(3n) + log 4
    critics = [ConstantQ(3.0) for _ in range(4)]
    agent = make_cql(
        UniformActor(), critics, cql_weight=2.0, cql_samples=3, cql_temperature=0.5, discount=0.5
    )
    alpha = torch.tensor(0.25)
    losses = agent._critic_losses(hand_batch(4, reward=1.0), alpha)
    # soft target: 1 + 0.5 * (3 - 0.25 * (-log 4)); squared error against Q = 3
    td = (1 + 0.5 * (3 + 0.25 * math.log(4.0)) - 3.0) ** 2
    penalty = 0.5 * math.log(9.0) + math.log(4.0)
    assert [loss.item() for loss in losses] == pytest.approx([td + 2.0 * penalty] * 2, rel=1e-5)
    agent.cql_weight = 0.0
    assert agent._critic_losses(hand_batch(4), alpha)[0].item() == pytest.approx(td, rel=1e-5)


def test_proposals_are_valued_at_the_batch_states_with_uniform_actions_in_the_box():
    critics = [RecordingCritic() for _ in range(4)]
    agent = make_cql(critics=critics, cql_samples=4, action_low=-0.5, action_high=1.5)
    batch = hand_batch(5)
    agent._critic_losses(batch, torch.tensor(1.0))
    proposal_states, proposal_actions = next(
        call for call in agent.critic.calls if call[0].shape[0] == 3 * 5 * 4
    )
    for kind in range(3):  # uniform, actor at s, actor at s': each state repeated 4 times
        rows = proposal_states[kind * 20 : (kind + 1) * 20]
        assert torch.equal(rows, batch.state["state"].repeat_interleave(4, dim=0))
    uniform = proposal_actions[:20]
    assert uniform.min() >= -0.5 and uniform.max() <= 1.5 and uniform.std() > 0.2


def test_penalty_trains_only_the_critics():
    agent = make_cql()
    losses = agent._critic_losses(hand_batch(8), torch.tensor(1.0))
    sum(losses).backward()
    for name in ("critic", "critic2"):
        assert all(p.grad is not None for p in getattr(agent, name).parameters()), name
    for name in ("actor", "critic_target", "critic2_target"):
        assert all(p.grad is None for p in getattr(agent, name).parameters()), name


def test_penalty_raises_the_dataset_actions_above_the_others():
    def gap_after_training(weight):
        agent = make_cql(cql_weight=weight, cql_samples=4, critic_learning_rate=0.01)
        gen = torch.Generator().manual_seed(2)
        agent.store_episode(
            [
                {
                    "state": {"state": torch.randn(1, 3, generator=gen)},
                    "action": {"action": torch.tensor([[1.5]])},  # the dataset always pushes +1.5
                    "next_state": {"state": torch.randn(1, 3, generator=gen)},
                    "reward": 0.0,
                    "terminal": False,
                }
                for _ in range(32)
            ]
        )
        for _ in range(20):
            agent.update(update_policy=False, update_entropy_alpha=False)
        state = {"state": torch.randn(64, 3)}
        with torch.no_grad():
            data = agent.critic(state["state"], torch.full((64, 1), 1.5))
            other = agent.critic(state["state"], torch.full((64, 1), -1.5))
        return (data - other).mean().item()

    plain, conservative = gap_after_training(0.0), gap_after_training(5.0)
    assert conservative > plain + 0.5, (plain, conservative)


def test_bad_options_and_unbatched_states():
    with pytest.raises(
        ValueError,
        match=r"action_high must be above action_low, got action_low=1.0, action_high=1.0",
    ):
        make_cql(action_low=1.0, action_high=1.0)
    with pytest.raises(ValueError, match="cql_samples must be a positive integer, got 0"):
        make_cql(cql_samples=0)
    with pytest.raises(ValueError, match="cql_weight must be non-negative, got -1"):
        make_cql(cql_weight=-1)
    with pytest.raises(ValueError, match="cql_weight must be non-negative"):
        DiscreteCQL(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(), cql_weight=-0.5)
    agent = make_cql()
    agent.store_episode(episode_steps(16, 3, discrete=False))
    with pytest.raises(TypeError, match=r"state\['state'\] must be a tensor"):
        agent.update(concatenate_samples=False)


# -- DiscreteCQL ------------------------------------------------------------------------------
class FixedLinearQ(nn.Module):
    """Q(s) = W s, no bias."""

    def __init__(self, weight):
        super().__init__()
        self.fc = nn.Linear(2, 2, bias=False)
        with torch.no_grad():
            self.fc.weight.copy_(torch.tensor(weight))

    def forward(self, state):
        return self.fc(state)


def test_discrete_loss_is_the_td_loss_plus_logsumexp_minus_the_data_value():
    weight = [[1.0, 0.0], [2.0, 1.0]]  # one row per action: Q([1, 0]) = (1, 2), Q([0, 1]) = (0, 1)
    agent = DiscreteCQL(
        FixedLinearQ(weight),
        FixedLinearQ(weight),
        torch.optim.SGD,
        nn.MSELoss(reduction="sum"),
        batch_size=2,
        cql_weight=0.5,
    )
    agent.store_transition(transition([1.0, 0.0], 0, [0.0, 0.0], 0.5, True))  # Q = (1, 2), took 0
    agent.store_transition(transition([0.0, 1.0], 1, [0.0, 0.0], 2.0, True))  # Q = (0, 1), took 1
    loss = agent._td_loss(agent._sample(True)).item()
    td = (0.5 - 1.0) ** 2 + (2.0 - 1.0) ** 2  # terminal steps: the targets are the rewards
    penalty = (math.log(math.e + math.e**2) - 1.0 + math.log(1 + math.e) - 1.0) / 2
    assert loss == pytest.approx(td + 0.5 * penalty, rel=1e-6)


# -- learning: better than behaviour cloning on half expert, half random data ------------------
@pytest.mark.learning
def test_cqlsac_beats_behaviour_cloning_on_half_expert_half_random_data():
    # expert -0.87, random -11.2: BC averages the expert's actions with random ones (-6.7)
    episodes, bc_return = point_reach_data()
    torch.manual_seed(0)
    agent = CQLSAC(
        SquashedGaussianActor(state_dim=1, action_range=1.0, hidden=32),
        *(QCritic(state_dim=1, hidden=32) for _ in range(4)),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        discount=0.9,
        cql_samples=4,
        initial_entropy_alpha=0.05,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
    )
    for episode in episodes:
        agent.store_episode(episode)
    for _ in range(600):
        agent.update()
    cql_return = evaluate_policy(agent, PointReach(), episodes=20, seed=100)
    print(
        f"PointReach, 25 expert + 25 random episodes: BC {bc_return:.2f}, CQLSAC {cql_return:.2f}"
    )
    assert cql_return > bc_return + 2.0, (bc_return, cql_return)


@pytest.mark.learning
def test_discrete_cql_beats_behaviour_cloning_on_mixed_cartpole_data():
    # 2 expert episodes (1000 steps) and 40 random ones (944 steps): where the expert's label
    # flips, near the upright pole, random labels blur it, and BC falls early
    episodes = mixed_dataset("CartPole-v1", cartpole_expert, 2, 40, seed=0)
    torch.manual_seed(0)
    bc = behaviour_cloning(QNet(hidden=32), episodes, steps=500, batch_size=64)
    bc_return = evaluate_policy(
        lambda s: bc(s["state"]).argmax(1), "CartPole-v1", episodes=5, seed=100
    )
    torch.manual_seed(0)
    agent = DiscreteCQL(
        QNet(hidden=32), QNet(hidden=32), torch.optim.Adam, nn.MSELoss(), batch_size=64
    )
    for episode in episodes:
        agent.store_episode(episode)
    for _ in range(3000):
        agent.update()
    cql_return = evaluate_policy(agent, "CartPole-v1", episodes=5, seed=100)
    print(
        f"CartPole, 2 expert + 40 random episodes: BC {bc_return:.0f}, DiscreteCQL {cql_return:.0f}"
    )
    assert cql_return > bc_return + 150, (bc_return, cql_return)

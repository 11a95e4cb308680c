import gymnasium as gym
import pytest
import torch

from machin.frame.algorithms import IQN, QRDQN
from machin.frame.algorithms.distributional import quantile_huber_loss
from machin.frame.algorithms.utils import MissingArgumentError

from .contract import ContractCase
from .loops import train
from .nets import ImplicitQuantileNet, QuantileQNet, transition

SMALL = {"tau_samples": 8, "target_tau_samples": 6, "policy_tau_samples": 4}

CONTRACT_CASES = {
    IQN: ContractCase(
        args=lambda: (
            ImplicitQuantileNet(hidden=16),
            ImplicitQuantileNet(hidden=16),
            torch.optim.Adam,
        ),
        options={"batch_size": 8, **SMALL},
        act=lambda agent, state: agent.act_discrete(state, use_target=True),
        explore=lambda agent, state: agent.act_discrete_with_noise(state),
        state=lambda: {"state": torch.randn(6, 4)},
        experience=lambda: [
            transition(torch.randn(4), i % 2, torch.randn(4), 1.0, i == 15) for i in range(16)
        ],
        trains={"update_value": ["qnet"]},
    ),
}


class RecordingIQNet(ImplicitQuantileNet):
    """Remembers the fractions of every call."""

    def __init__(self):
        super().__init__()
        self.taus = []

    def forward(self, state, tau):
        self.taus.append(tau.detach().clone())
        return super().forward(state, tau)


def make(qnet=None, qnet_target=None, **kwargs):
    torch.manual_seed(0)
    kwargs = {"batch_size": 4, **SMALL, **kwargs}
    return IQN(
        qnet or ImplicitQuantileNet(),
        qnet_target or ImplicitQuantileNet(),
        torch.optim.Adam,
        **kwargs,
    )


def test_options_and_family():
    assert issubclass(IQN, QRDQN)
    agent = IQN(ImplicitQuantileNet(), ImplicitQuantileNet(), torch.optim.Adam)
    assert (agent.tau_samples, agent.target_tau_samples, agent.policy_tau_samples) == (64, 64, 32)
    assert (agent.kappa, agent.mode) == (1.0, "double")
    with pytest.raises(ValueError, match="policy_tau_samples must be a positive integer, got 0"):
        make(policy_tau_samples=0)


def test_acting_draws_policy_tau_samples_fractions_per_state():
    qnet = RecordingIQNet()
    agent = make(qnet=qnet)
    qnet.taus.clear()
    state = torch.randn(5, 4)
    torch.manual_seed(3)
    action = agent.act_discrete({"state": state})
    (tau,) = qnet.taus
    assert tau.shape == (5, 4) and bool(((tau > 0) & (tau < 1)).all())
    with torch.no_grad():
        expected = ImplicitQuantileNet.forward(qnet, state, tau).mean(-1).argmax(1, keepdim=True)
    assert torch.equal(action, expected)
    torch.manual_seed(3)
    assert torch.equal(agent.act_discrete({"state": state}), action)  # same seed, same fractions


def test_the_update_draws_each_count_of_fractions():
    qnet, qnet_target = RecordingIQNet(), RecordingIQNet()
    agent = make(qnet=qnet, qnet_target=qnet_target, batch_size=3)
    agent.store_episode(
        [transition(torch.randn(4), i % 2, torch.randn(4), 1.0, i == 2) for i in range(3)]
    )
    qnet.taus.clear(), qnet_target.taus.clear()
    agent.update()
    # the online network chooses the double target's next action (K = 4), then predicts (N = 8)
    assert [t.shape for t in qnet.taus] == [(3, 4), (3, 8)]
    assert [t.shape for t in qnet_target.taus] == [(3, 6)]  # N' = 6 target samples


def test_loss_is_the_quantile_huber_loss_at_the_drawn_fractions():
    qnet, qnet_target = RecordingIQNet(), RecordingIQNet()
    agent = make(qnet=qnet, qnet_target=qnet_target, discount=0.5)
    agent.store_transition(transition([0.3] * 4, 1, [1.0] * 4, 1.5, True))
    batch = agent._sample(True)
    qnet.taus.clear()
    loss = agent._td_loss(batch).item()
    tau = qnet.taus[-1]
    with torch.no_grad():
        predicted = ImplicitQuantileNet.forward(qnet, batch.state["state"], tau)[:, 1]
    # terminal: every target sample is the reward
    expected = quantile_huber_loss(predicted, torch.full((1, 6), 1.5), tau).item()
    assert loss == pytest.approx(expected, rel=1e-6)


def test_networks_without_tau_or_of_the_wrong_shape_are_named_in_the_error():
    agent = IQN(QuantileQNet(), QuantileQNet(), torch.optim.Adam)
    with pytest.raises(
        MissingArgumentError, match=r"QuantileQNet.forward requires argument\(s\) \['tau'\]"
    ):
        agent.act_discrete({"state": torch.randn(2, 4)})

    class FixedQuantiles(QuantileQNet):
        def forward(self, state, tau):
            return super().forward(state)

    agent = make(qnet=FixedQuantiles(), qnet_target=FixedQuantiles())
    with pytest.raises(
        ValueError,
        match=r"IQN needs a Q network returning quantiles\[batch_size, action_num, N\] for "
        r"tau\[batch_size, N\], but FixedQuantiles returned shape \[2, 2, 8\] for tau of shape \[2, 4\]",
    ):
        agent.act_discrete({"state": torch.randn(2, 4)})
    with pytest.raises(ValueError, match="the state needs a tensor with a batch dimension"):
        make().act_discrete({"state": 1.0})


def test_update_reduces_the_loss_on_a_fixed_batch():
    agent = make(batch_size=16, tau_samples=32, target_tau_samples=32)
    agent.store_episode(
        [transition(torch.randn(4), i % 2, torch.randn(4), 1.0, i == 15) for i in range(16)]
    )
    losses = [agent.update() for _ in range(80)]
    assert sum(losses[-10:]) < sum(losses[:10]) / 2


@pytest.mark.learning
def test_iqn_learns_cartpole():
    torch.manual_seed(0)
    agent = IQN(
        ImplicitQuantileNet(hidden=32),
        ImplicitQuantileNet(hidden=32),
        torch.optim.Adam,
        batch_size=32,
        epsilon_decay=0.999,
        update_rate=0.02,
        replay_size=20000,
        learning_rate=3e-3,
        tau_samples=8,
        target_tau_samples=8,
        policy_tau_samples=4,
    )
    result = train(
        agent,
        lambda: gym.make("CartPole-v1"),
        seed=0,
        episodes=400,
        solved_reward=150,
        solved_repeat=5,
        warmup_steps=500,
    )
    print(f"IQN solved CartPole-v1 at episode {result.solved_episode} ({result.steps} steps)")
    assert result.solved_episode is not None, (
        "IQN did not reach a smoothed return of 150 within 400 episodes"
    )

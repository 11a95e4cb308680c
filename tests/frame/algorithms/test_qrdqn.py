import gymnasium as gym
import pytest
import torch

from machin.frame.algorithms import QRDQN
from machin.frame.algorithms.distributional import quantile_huber_loss

from .contract import ContractCase
from .loops import train
from .nets import QNet, QuantileQNet, transition

CONTRACT_CASES = {
    QRDQN: ContractCase(
        args=lambda: (QuantileQNet(hidden=16), QuantileQNet(hidden=16), torch.optim.Adam),
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


def make(quantiles=4, **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("batch_size", 4)
    return QRDQN(
        QuantileQNet(quantiles=quantiles),
        QuantileQNet(quantiles=quantiles),
        torch.optim.Adam,
        **kwargs,
    )


def test_options_and_no_criterion():
    agent = make()
    assert (agent.kappa, agent.mode, agent.criterion) == (1.0, "double", None)
    assert make(kappa=0).kappa == 0
    with pytest.raises(ValueError, match="kappa must be non-negative, got -0.5"):
        make(kappa=-0.5)


def test_act_picks_the_largest_mean_quantile():
    agent = make()
    state = torch.randn(8, 4)
    expected = agent.qnet(state).mean(-1).argmax(1, keepdim=True)
    assert torch.equal(agent.act_discrete({"state": state}), expected)


def test_a_network_of_the_wrong_shape_is_named_in_the_error():
    agent = QRDQN(QNet(), QNet(), torch.optim.Adam)
    with pytest.raises(
        ValueError,
        match=r"QRDQN needs a Q network returning quantiles\[batch_size, action_num, quantile_num\]"
        r".*but QNet returned shape \[3, 2\]",
    ):
        agent.act_discrete_with_noise({"state": torch.randn(3, 4)})


@pytest.mark.parametrize("mode", ["double", "fixed_target"])
def test_target_and_loss_by_hand(mode):
    agent = make(discount=0.5, mode=mode, kappa=2.0)
    with torch.no_grad():  # make the networks disagree, so that the mode matters
        for p in agent.qnet_target.parameters():
            p.add_(torch.randn_like(p))
    agent.store_transition(transition([0.3] * 4, 1, [1.0] * 4, 1.5, False))
    batch = agent._sample(True)
    state, next_state = batch.state["state"], batch.next_state["state"]
    with torch.no_grad():
        chooser = agent.qnet if mode == "double" else agent.qnet_target
        action = chooser(next_state).mean(-1).argmax(1).item()
        expected_target = 1.5 + 0.5 * agent.qnet_target(next_state)[0, action]
        predicted = agent.qnet(state)[0, 1]
    target = agent._bellman_target(batch)
    assert torch.allclose(target[0], expected_target)
    taus = torch.tensor([0.125, 0.375, 0.625, 0.875])
    hand = 0.0
    for tau, value in zip(taus, predicted):
        for sample in expected_target:
            u = (sample - value).item()
            core = 0.5 * u * u / 2.0 if abs(u) <= 2.0 else abs(u) - 1.0
            hand += abs(tau.item() - (u < 0)) * core / len(expected_target)
    assert agent._td_loss(batch).item() == pytest.approx(hand, rel=1e-5)
    assert quantile_huber_loss(predicted.view(1, -1), target, taus, 2.0).item() == pytest.approx(
        hand, rel=1e-5
    )


def test_a_terminal_step_targets_the_reward_alone():
    agent = make()
    agent.store_transition(transition([0.0] * 4, 0, [1.0] * 4, 2.0, True))
    assert torch.equal(agent._bellman_target(agent._sample(True)), torch.full((1, 4), 2.0))


def test_update_reduces_the_loss_on_a_fixed_batch():
    agent = make(quantiles=8, batch_size=16)
    agent.store_episode(
        [transition(torch.randn(4), i % 2, torch.randn(4), 1.0, i == 15) for i in range(16)]
    )
    losses = [agent.update() for _ in range(60)]
    assert losses[-1] < losses[0] / 2


@pytest.mark.learning
def test_qrdqn_learns_cartpole():
    torch.manual_seed(0)
    agent = QRDQN(
        QuantileQNet(quantiles=8, hidden=32),
        QuantileQNet(quantiles=8, hidden=32),
        torch.optim.Adam,
        batch_size=32,
        epsilon_decay=0.999,
        update_rate=0.05,
        replay_size=20000,
        learning_rate=3e-3,
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
    print(f"QRDQN solved CartPole-v1 at episode {result.solved_episode} ({result.steps} steps)")
    assert result.solved_episode is not None, (
        "QRDQN did not reach a smoothed return of 150 within 400 episodes"
    )

import gymnasium as gym
import pytest
import torch

from machin.frame.algorithms import C51
from machin.frame.algorithms.c51 import C51 as C51FromModule

from .contract import ContractCase
from .loops import train
from .nets import DistQNet, QNet, transition

CONTRACT_CASES = {
    C51: ContractCase(
        args=lambda: (
            DistQNet(atoms=5, hidden=16),
            DistQNet(atoms=5, hidden=16),
            torch.optim.Adam,
            0.0,
            4.0,
        ),
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


def make(atoms=5, value_min=0.0, value_max=4.0, **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("batch_size", 4)
    return C51(
        DistQNet(atoms=atoms),
        DistQNet(atoms=atoms),
        torch.optim.Adam,
        value_min,
        value_max,
        **kwargs,
    )


def test_constructor_takes_the_atom_range_and_no_criterion():
    assert C51 is C51FromModule
    agent = make()
    assert (agent.value_min, agent.value_max, agent.mode, agent.criterion) == (
        0.0,
        4.0,
        "double",
        None,
    )
    with pytest.raises(ValueError, match="value_min must be below value_max, got 2.0 and 1.0"):
        make(value_min=2.0, value_max=1.0)
    with pytest.raises(TypeError, match="value_max must be a real number, got '4'"):
        make(value_max="4")


def test_act_picks_the_largest_expected_value():
    agent = make()
    state = torch.randn(6, 4)
    dist = agent.qnet(state)
    expected = (dist * torch.linspace(0.0, 4.0, 5)).sum(-1).argmax(1, keepdim=True)
    assert torch.equal(agent.act_discrete({"state": state}), expected)
    assert torch.equal(agent.criticize({"state": state}), dist.detach())


def test_a_network_of_the_wrong_shape_is_named_in_the_error():
    agent = C51(QNet(), QNet(), torch.optim.Adam, 0.0, 1.0)
    with pytest.raises(
        ValueError,
        match=r"C51 needs a Q network returning q_dist\[batch_size, action_num, atom_num\] "
        r"\(the last dimension at least 2\), but QNet returned shape \[1, 2\]",
    ):
        agent.act_discrete({"state": torch.randn(1, 4)})
    one_atom = C51(DistQNet(atoms=1), DistQNet(atoms=1), torch.optim.Adam, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"DistQNet returned shape \[1, 2, 1\]"):
        one_atom.act_discrete({"state": torch.randn(1, 4)})


def _hand_target(probs, reward, discount, atoms=(0.0, 1.0, 2.0, 3.0, 4.0)):
    """Project ``reward + discount * z`` onto the atoms, one atom at a time."""
    expected = torch.zeros(len(atoms))
    for prob, z in zip(probs, atoms):
        tz = min(max(reward + discount * z, atoms[0]), atoms[-1])
        lo, frac = int(tz), tz - int(tz)
        expected[lo] += prob * (1 - frac)
        if frac:
            expected[lo + 1] += prob * frac
    return expected


@pytest.mark.parametrize("mode", ["double", "fixed_target"])
def test_target_is_the_projected_bellman_shift_of_the_chosen_action(mode):
    agent = make(discount=0.5, mode=mode)
    with torch.no_grad():  # make the networks disagree, so that the mode matters
        for p in agent.qnet_target.parameters():
            p.add_(torch.randn_like(p))
    agent.store_transition(transition([0.3] * 4, 0, [1.0] * 4, 1.0, False))
    batch = agent._sample(True)
    next_state = batch.next_state["state"]
    support = torch.linspace(0, 4, 5)
    with torch.no_grad():
        chooser = agent.qnet if mode == "double" else agent.qnet_target
        action = (chooser(next_state) * support).sum(-1).argmax(1).item()
        probs = agent.qnet_target(next_state)[0, action]
    target = agent._bellman_target(batch)
    assert torch.allclose(target[0], _hand_target(probs.tolist(), 1.0, 0.5), atol=1e-6)


def test_terminal_target_collapses_on_the_reward_and_n_step_uses_the_n_step_return():
    agent = make()
    agent.store_transition(transition([0.0] * 4, 0, [1.0] * 4, 2.0, True))
    assert torch.allclose(
        agent._bellman_target(agent._sample(True))[0], torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0])
    )
    # n = 2, discount 0.5: rewards 1, 2 -> step 0's return is 1 + 0.5 * 2 = 2, step 1's is 2;
    # the episode ends after both, so every target puts all its mass on atom 2
    agent = make(n_step=2, discount=0.5, batch_size=2)
    agent.store_episode(
        [
            transition([0.0] * 4, 0, [1.0] * 4, 1.0, False),
            transition([1.0] * 4, 1, [2.0] * 4, 2.0, True),
        ]
    )
    target = agent._bellman_target(agent._sample(True))
    assert torch.allclose(target, torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0]] * 2))


def test_update_reduces_the_cross_entropy_on_a_fixed_batch():
    agent = make(atoms=11, value_min=0.0, value_max=10.0, batch_size=16)
    agent.store_episode(
        [transition(torch.randn(4), i % 2, torch.randn(4), 1.0, i == 15) for i in range(16)]
    )
    losses = [agent.update() for _ in range(60)]
    assert losses[-1] < losses[0]


@pytest.mark.learning
def test_c51_learns_cartpole():
    torch.manual_seed(0)
    agent = C51(
        DistQNet(atoms=21, hidden=32),
        DistQNet(atoms=21, hidden=32),
        torch.optim.Adam,
        0.0,
        100.0,  # returns of discount 0.99 and rewards of 1 stay below 100
        batch_size=32,
        epsilon_decay=0.999,
        update_rate=0.02,
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
    print(f"C51 solved CartPole-v1 at episode {result.solved_episode} ({result.steps} steps)")
    assert result.solved_episode is not None, (
        "C51 did not reach a smoothed return of 150 within 400 episodes"
    )

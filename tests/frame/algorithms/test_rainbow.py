import gymnasium as gym
import pytest
import torch

from machin.frame.algorithms import RAINBOW, DQNPer
from machin.frame.transition import Transition

from .contract import ContractCase
from .loops import train
from .nets import DistQNet, QNet, transition

CONTRACT_CASES = {
    RAINBOW: ContractCase(
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
    return RAINBOW(
        DistQNet(atoms=atoms),
        DistQNet(atoms=atoms),
        torch.optim.Adam,
        value_min,
        value_max,
        **kwargs,
    )


def test_signature_has_no_criterion_and_bad_range_raises():
    assert issubclass(RAINBOW, DQNPer)
    with pytest.raises(ValueError, match="value_min must be below value_max"):
        make(value_min=1.0, value_max=1.0)
    with pytest.raises(ValueError, match="reward_future_steps"):
        make(reward_future_steps=0)


def test_act_picks_largest_expected_value():
    agent = make()
    state = torch.randn(6, 4)
    dist = agent.qnet(state)
    support = torch.linspace(0.0, 4.0, 5)
    expected = (dist * support).sum(-1).argmax(1, keepdim=True)
    assert torch.equal(agent.act_discrete({"state": state}), expected)


def test_non_distributional_network_is_rejected():
    agent = RAINBOW(QNet(), QNet(), torch.optim.Adam, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"q_dist\[batch_size, action_num, atom_num\]"):
        agent.act_discrete({"state": torch.randn(1, 4)})


def test_store_episode_computes_n_step_values_and_next_states():
    agent = make(discount=0.5, reward_future_steps=3)
    episode = [
        transition([float(i)] * 4, 0, [float(i + 1)] * 4, float(i + 1), i == 3) for i in range(4)
    ]
    agent.store_episode(episode)
    size, (next_state, terminal, value, steps) = (
        agent.replay_buffer.sample_batch(
            10,
            sample_attrs=["next_state", "terminal", "value", "steps"],
            additional_concat_attrs=["value", "steps"],
        )
        if False
        else (
            4,
            agent.replay_buffer._gather(
                torch.arange(4),
                True,
                None,
                ["next_state", "terminal", "value", "steps"],
                ["value", "steps"],
            ),
        )
    )
    # rewards 1, 2, 3, 4; gamma 0.5; n = 3
    assert value.view(-1).tolist() == pytest.approx([1 + 1 + 0.75, 2 + 1.5 + 1, 3 + 2, 4])
    assert steps.view(-1).tolist() == [3, 3, 2, 1]
    # step i bootstraps from the state min(i + 3, 4) steps on
    assert next_state["state"][:, 0].tolist() == [3.0, 4.0, 4.0, 4.0]
    assert terminal.view(-1).tolist() == [False, True, True, True]


def test_store_transition_needs_value():
    agent = make()
    with pytest.raises(ValueError, match="value"):
        agent.store_transition(transition([0.0] * 4, 0, [0.0] * 4, 1.0, False))
    agent.store_transition(transition([0.0] * 4, 0, [0.0] * 4, 1.0, False, value=2.5))
    assert agent.replay_buffer.size() == 1


def test_a_transition_object_gets_the_n_step_count():
    agent = make(reward_future_steps=3)
    agent.store_transition(
        Transition(**transition([0.5] * 4, 1, [0.25] * 4, 1.0, False, value=2.5))
    )
    _, (state, value, steps), *_ = agent.replay_buffer.sample_batch(
        1, sample_attrs=["state", "value", "steps"], additional_concat_attrs=["value", "steps"]
    )
    assert state["state"].tolist() == [[0.5] * 4]
    assert value.view(-1).tolist() == [2.5] and steps.view(-1).tolist() == [3]


def test_target_distribution_is_projected_bellman_shift():
    agent = make(atoms=5, value_min=0.0, value_max=4.0, discount=0.5, reward_future_steps=1)
    # value 1 (reward), steps 1, not terminal: Tz = 1 + 0.5 z for z = 0..4 -> 1, 1.5, 2, 2.5, 3
    agent.store_transition(transition([0.0] * 4, 0, [1.0] * 4, 1.0, False, value=1.0))
    batch = agent._sample(True)
    with torch.no_grad():
        online = agent.qnet(batch.next_state["state"])
        nxt = (online * torch.linspace(0, 4, 5)).sum(-1).argmax(1)
        p = agent.qnet_target(batch.next_state["state"])[0, nxt[0].item()]
    expected = torch.zeros(5)
    for prob, tz in zip(p, [1.0, 1.5, 2.0, 2.5, 3.0]):
        lo, frac = int(tz), tz - int(tz)
        expected[lo] += prob * (1 - frac)
        if frac:
            expected[lo + 1] += prob * frac
    target = agent._bellman_target(batch)
    assert torch.allclose(target[0], expected, atol=1e-6)
    assert target[0].sum().item() == pytest.approx(1.0, abs=1e-6)


def test_terminal_target_collapses_on_value():
    agent = make(atoms=5, value_min=0.0, value_max=4.0, reward_future_steps=1)
    agent.store_transition(transition([0.0] * 4, 0, [1.0] * 4, 2.0, True, value=2.0))
    target = agent._bellman_target(agent._sample(True))
    assert torch.allclose(target[0], torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]))


def test_update_reduces_cross_entropy_on_a_fixed_batch():
    agent = make(atoms=11, value_min=0.0, value_max=10.0, batch_size=16)
    agent.store_episode(
        [transition(torch.randn(4), i % 2, torch.randn(4), 1.0, i == 15) for i in range(16)]
    )
    losses = [agent.update() for _ in range(60)]
    assert losses[-1] < losses[0]


@pytest.mark.learning
def test_rainbow_learns_cartpole():
    torch.manual_seed(0)
    agent = RAINBOW(
        DistQNet(),
        DistQNet(),
        torch.optim.Adam,
        0.0,
        100.0,
        batch_size=64,
        epsilon_decay=0.999,
        update_rate=0.02,
        replay_size=20000,
        reward_future_steps=3,
        learning_rate=3e-3,
    )
    # n-step values are computed per episode: store whole episodes, one update per step after each
    result = train(
        agent,
        lambda: gym.make("CartPole-v0"),
        seed=0,
        episodes=400,
        solved_reward=150,
        solved_repeat=5,
        warmup_steps=500,
        store="episode",
        updates_per_step=1,
        updates_per_episode=0,
    )
    print(f"RAINBOW solved CartPole-v0 at episode {result.solved_episode} ({result.steps} steps)")
    assert result.solved_episode is not None, (
        "RAINBOW did not reach a smoothed return of 150 within 400 episodes"
    )


def test_the_trainer_stores_whole_episodes_for_their_n_step_returns():
    import gymnasium as gym

    from machin.frame.trainer import Trainer

    agent = make(atoms=5, value_min=0.0, value_max=10.0)
    trainer = Trainer(agent, gym.make("CartPole-v1"), progress=False, seed=0)
    assert trainer.store == "episode"
    trainer.run(episodes=2)
    assert agent.replay_buffer.size() > 0 and "value" in agent.replay_buffer.attribute_names

import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms import DQN, R2D1, DQNPer
from machin.frame.algorithms.r2d1 import inverse_value_rescale, value_rescale
from machin.frame.buffers import Buffer, SequenceBuffer

from .contract import ContractCase
from .loops import MaskVelocity, smoothed_returns, train
from .nets import GRUQNet, SummingLoss, parameters, same

# tests/frame/test_sampler.py and test_trainer.py import GRUQNet, MaskVelocity and make from here.


class LSTMQNet(GRUQNet):
    def __init__(self, state_dim: int = 2, action_num: int = 2, size: int = 8):
        super().__init__(state_dim, action_num, size)
        self.gru = nn.LSTMCell(size, size)

    def forward(self, state, hidden=None):
        h, c = self.gru(torch.relu(self.fc(state)), hidden)
        return self.head(h), (h, c)


class RecordingGRU(GRUQNet):
    """Remembers, per call, whether gradients were on and the hidden state it was given."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, state, hidden=None):
        self.calls.append((torch.is_grad_enabled(), hidden))
        return super().forward(state, hidden)


class CounterNet(nn.Module):
    """``q = [w * s + h', w * s - h']`` with ``h' = hidden + 1``: greedy action 0, easy targets."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, state, hidden=None):
        hidden = torch.zeros(state.shape[0], 1) if hidden is None else hidden
        new_hidden = hidden + 1
        scaled = state * self.w
        return torch.cat([scaled + new_hidden, scaled - new_hidden], dim=1), new_hidden


class NoHiddenNet(GRUQNet):
    def forward(self, state, hidden=None):
        return super().forward(state, hidden)[0]


def make(net=GRUQNet, criterion=None, **kwargs):
    torch.manual_seed(0)
    options = {"batch_size": 4, "sequence_length": 3, "burn_in": 2, "n_step": 2, **kwargs}
    return R2D1(
        net(), net(), torch.optim.Adam, criterion or nn.MSELoss(reduction="none"), **options
    )


def random_episode(length, size=8, terminal=True, tuple_hidden=False):
    steps = []
    for i in range(length):
        hidden = torch.randn(1, size)
        hidden = (hidden, torch.randn(1, size)) if tuple_hidden else hidden
        steps.append(
            {
                "state": {"state": torch.randn(1, 2), "hidden": hidden},
                "action": {"action": torch.tensor([[i % 2]])},
                "next_state": {"state": torch.randn(1, 2)},
                "reward": 1.0,
                "terminal": terminal and i == length - 1,
            }
        )
    return steps


def fill(agent, episodes=4, tuple_hidden=False):
    torch.manual_seed(1)
    size = agent.qnet.size if hasattr(agent.qnet, "size") else 8
    for e in range(episodes):
        agent.store_episode(
            random_episode(5 + e, size, terminal=e % 2 == 0, tuple_hidden=tuple_hidden)
        )


CONTRACT_CASES = {
    R2D1: ContractCase(
        args=lambda: (GRUQNet(), GRUQNet(), torch.optim.Adam, nn.MSELoss(reduction="none")),
        options={"batch_size": 4, "sequence_length": 3, "burn_in": 2, "n_step": 2},
        act=lambda agent, state: agent.act_discrete(state, use_target=True),
        explore=lambda agent, state: agent.act_discrete_with_noise(state),
        state=lambda: {"state": torch.randn(3, 2), "hidden": torch.randn(3, 8)},
        experience=lambda: [random_episode(5 + e, terminal=e % 2 == 0) for e in range(4)],
        store=lambda agent, episodes: [agent.store_episode(e) for e in episodes],
        trains={"update_value": ["qnet"]},
    ),
}


def counter_episode(terminal):
    """States 0, 1, 2 (final observation 3), rewards 1, 2, 4, stored hidden 10, 11, 12."""
    return [
        {
            "state": {"state": torch.tensor([[float(i)]]), "hidden": torch.tensor([[10.0 + i]])},
            "action": {"action": torch.tensor([[0]])},
            "next_state": {"state": torch.tensor([[i + 1.0]])},
            "reward": r,
            "terminal": terminal and i == 2,
        }
        for i, r in enumerate([1.0, 2.0, 4.0])
    ]


def sample_start(agent, row):
    weights = np.zeros(agent.replay_buffer.buffer_size)
    weights[row] = 1.0
    agent.replay_buffer.wt_tree.update_all_leaves(weights)
    agent.batch_size = 1
    return agent._sample(True)


# -- construction -------------------------------------------------------------------------


def test_is_a_dqn_per_with_a_sequence_buffer_built_from_its_options():
    agent = make(sequence_stride=2, priority_eta=0.5, discount=0.9, replay_size=64)
    assert isinstance(agent, DQNPer) and agent.mode == "double"
    buffer = agent.replay_buffer
    assert isinstance(buffer, SequenceBuffer) and buffer.buffer_size == 64
    assert (buffer.sequence_length, buffer.burn_in, buffer.n_step, buffer.discount) == (
        3,
        2,
        2,
        0.9,
    )
    assert (buffer.sequence_stride, buffer.priority_eta, buffer.hidden_key) == (2, 0.5, "hidden")
    assert same(parameters(agent.qnet), parameters(agent.qnet_target))


def test_a_given_buffer_must_be_a_sequence_buffer_with_the_same_options():
    buffer = SequenceBuffer(100, sequence_length=3, burn_in=2, n_step=2, discount=0.99)
    assert make(replay_buffer=buffer).replay_buffer is buffer
    with pytest.raises(
        ValueError, match="replay_buffer has burn_in=2, but R2D1 was given burn_in=1"
    ):
        make(replay_buffer=buffer, burn_in=1)
    with pytest.raises(
        ValueError, match="R2D1 needs a SequenceBuffer as replay_buffer, got Buffer"
    ):
        make(replay_buffer=Buffer(10))


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("sequence_length", 0, "sequence_length must be a positive integer, got 0"),
        ("burn_in", -2, "burn_in must be a non-negative integer, got -2"),
        ("n_step", 0, "n_step must be a positive integer, got 0"),
        ("rescaling_epsilon", 0.0, "rescaling_epsilon must be positive, got 0.0"),
        ("batch_size", 0, "batch_size must be a positive integer, got 0"),
    ],
)
def test_bad_options_are_rejected(option, value, message):
    with pytest.raises(ValueError, match=message):
        make(**{option: value})


def test_mode_is_not_an_option():
    from machin.utils.compat import ExtraArgumentsWarning

    with pytest.warns(ExtraArgumentsWarning, match="'mode'"):
        r2d1 = make(mode="vanilla")
    assert r2d1.mode == "double"


# -- acting and storing -------------------------------------------------------------------


def test_acting_returns_the_action_and_the_new_hidden_state():
    agent = make()
    state, hidden = torch.randn(3, 2), torch.randn(3, 8)
    action, new_hidden = agent.act_discrete({"state": state, "hidden": hidden})
    q, expected_hidden = agent.qnet(state, hidden)
    assert torch.equal(action, q.argmax(dim=1, keepdim=True))
    assert torch.equal(new_hidden, expected_hidden)
    agent.epsilon = 0.0
    noisy, noisy_hidden = agent.act_discrete_with_noise({"state": state, "hidden": hidden})
    assert torch.equal(noisy, action) and torch.equal(noisy_hidden, expected_hidden)
    agent.epsilon = 1.0
    torch.manual_seed(0)
    actions = torch.cat(
        [agent.act_discrete_with_noise({"state": state}, decay_epsilon=False)[0] for _ in range(20)]
    )
    assert set(actions.view(-1).tolist()) == {0, 1}


def test_lstm_tuple_hidden_states_are_acted_on_stored_and_replayed():
    agent = make(LSTMQNet)
    action, (h, c) = agent.act_discrete({"state": torch.randn(1, 2)})
    assert action.shape == (1, 1) and h.shape == c.shape == (1, 8)
    fill(agent, tuple_hidden=True)
    assert agent.replay_buffer.sample_sequences(2).hidden.shape == (2, 2, 8)  # stored stacked
    original = LSTMQNet.forward
    seen = []

    def spy(net, state, hidden=None):
        seen.append(hidden)
        return original(net, state, hidden)

    LSTMQNet.forward = spy
    try:
        assert isinstance(agent.update(), float)
    finally:
        LSTMQNet.forward = original
    assert isinstance(seen[0], tuple) and seen[0][0].shape == (4, 8)


def test_store_transition_asks_for_whole_episodes():
    agent = make()
    with pytest.raises(RuntimeError, match="store_episode"):
        agent.store_transition(random_episode(1)[0])


# -- the update ---------------------------------------------------------------------------


def test_update_returns_a_float_or_none():
    agent = make()
    assert agent.update() is None
    fill(agent)
    loss = agent.update(update_target=False)
    assert isinstance(loss, float) and loss > 0
    assert all(p.grad is not None for p in agent.qnet.parameters())


def test_burn_in_runs_without_gradient_and_hands_on_a_detached_hidden_state():
    agent = make(RecordingGRU, burn_in=2, sequence_length=3, n_step=1)
    fill(agent)
    agent.qnet.calls.clear()
    agent.qnet_target.calls.clear()
    agent.update()
    online = agent.qnet.calls
    assert [grad for grad, _ in online] == [False, False, True, True, True, True]
    assert not online[2][1].requires_grad  # the hidden state leaving the burn-in
    assert online[3][1].requires_grad
    assert [grad for grad, _ in agent.qnet_target.calls] == [False] * 6


def test_the_stored_hidden_state_starts_each_sequence():
    agent = make(RecordingGRU)
    fill(agent)
    batch = agent._sample(True)
    agent.qnet.calls.clear()
    agent.qnet_target.calls.clear()
    agent._bellman_target(batch)
    assert torch.equal(agent.qnet_target.calls[0][1], batch.hidden)
    assert torch.equal(agent.qnet.calls[0][1], batch.hidden)


@pytest.mark.parametrize(
    "terminal, expected", [(False, [4 + 0.25 * 17, 4 + 0.5 * 17]), (True, [4.0, 4.0])]
)
def test_double_n_step_targets_on_a_hand_computed_sequence(terminal, expected):
    agent = make(
        CounterNet, burn_in=1, sequence_length=2, n_step=2, discount=0.5, value_rescaling=False
    )
    agent.store_episode(counter_episode(terminal))
    batch = sample_start(agent, 1)  # positions: steps 0, 1, 2, the final observation 3, padding
    # the nets start from the stored hidden 10 and add 1 per observed position: q0 = state + hidden,
    # so position 3 (state 3, hidden 14) is worth 17; steps 1 and 2 both bootstrap from there
    assert agent._bellman_target(batch).tolist() == [expected]
    predicted = agent._predicted_value(batch)
    assert predicted.tolist() == [[1 + 12.0, 2 + 13.0]]


def test_value_rescaling_wraps_the_bellman_target():
    agent = make(CounterNet, burn_in=1, sequence_length=2, n_step=2, discount=0.5)
    agent.store_episode(counter_episode(False))
    batch = sample_start(agent, 1)
    inner = 4 + 0.25 * inverse_value_rescale(torch.tensor(17.0))
    assert agent._bellman_target(batch)[0, 0].item() == pytest.approx(
        value_rescale(inner).item(), rel=1e-5
    )


def test_value_rescale_and_its_inverse():
    x = torch.tensor([-1000.0, -3.0, 0.0, 0.5, 3.0, 250.0])
    assert value_rescale(torch.tensor(3.0)).item() == pytest.approx(1.0 + 3e-3)
    assert torch.allclose(inverse_value_rescale(value_rescale(x)), x, rtol=1e-4, atol=1e-4)
    assert value_rescale(torch.tensor(0.0)).item() == 0.0


def test_priorities_become_eta_mixed_td_errors_of_the_training_steps(monkeypatch):
    agent = make(priority_eta=0.9)
    fill(agent)
    seen = {}
    original = agent.replay_buffer.update_priority

    def spy(priorities, indexes):
        seen["priorities"], seen["indexes"] = np.asarray(priorities), np.asarray(indexes)
        original(priorities, indexes)

    monkeypatch.setattr(agent.replay_buffer, "update_priority", spy)
    batch = agent._sample(True)
    target = agent._bellman_target(batch)
    predicted = agent._predicted_value(batch)
    agent._value_loss(predicted, target, batch)
    td = (predicted.detach() - target).abs()
    mask = batch.train_mask
    for row in range(batch.size):
        errors = td[row][mask[row]]
        expected = 0.9 * errors.max() + 0.1 * errors.mean()
        assert seen["priorities"][row] == pytest.approx(expected.item(), rel=1e-5)
    assert np.array_equal(seen["indexes"], batch.index)


def test_loss_is_the_weighted_mean_of_masked_sequence_means():
    agent = make()
    fill(agent)
    batch = agent._sample(True)
    target, predicted = agent._bellman_target(batch), agent._predicted_value(batch)
    batch.weight = torch.tensor([[1.0], [0.0], [0.5], [0.0]])
    mask = batch.train_mask.float()
    per_sequence = (((predicted - target) ** 2) * mask).sum(1) / mask.sum(1)
    expected = (per_sequence * batch.weight.view(-1)).mean()
    assert agent._value_loss(predicted, target, batch).item() == pytest.approx(
        expected.item(), rel=1e-5
    )


def test_sequences_without_stored_hidden_states_start_from_none():
    agent = make(RecordingGRU)
    episode = random_episode(6)
    for step in episode:
        step["state"] = {"state": step["state"]["state"]}
    agent.store_episode(episode)
    agent.qnet.calls.clear()
    assert isinstance(agent.update(), float)
    assert agent.qnet.calls[0][1] is None


def test_reducing_criterion_is_rejected_with_advice():
    agent = make(criterion=SummingLoss())
    fill(agent)
    with pytest.raises(
        ValueError, match=r'element-wise criterion returning shape \[4, 3\].*reduction="none"'
    ):
        agent.update()


def test_network_without_hidden_output_is_rejected():
    agent = make(NoHiddenNet)
    fill(agent)
    with pytest.raises(
        ValueError, match=r"returning \(q_values, new_hidden\); NoHiddenNet returned Tensor"
    ):
        agent.update()


def test_unconcatenated_samples_are_refused():
    agent = make()
    fill(agent)
    with pytest.raises(ValueError, match="concatenate_samples=False is not supported"):
        agent.update(concatenate_samples=False)


def test_mismatched_tuple_hidden_state_is_rejected():
    agent = make(LSTMQNet)
    episode = random_episode(2, tuple_hidden=True)
    episode[0]["state"]["hidden"] = (torch.zeros(1, 8), torch.zeros(1, 4))
    with pytest.raises(
        ValueError, match=r"tensors of one shape, got shapes \[\[1, 8\], \[1, 4\]\]"
    ):
        agent.store_episode(episode)


# -- learning: CartPole without its velocities --------------------------------------------


def train_masked_cartpole(agent, **options):
    """Train on velocity-masked CartPole-v0 (whole episodes stored, one update per two steps after
    500 steps) until the smoothed return passes 150, for at most 150 episodes."""
    return train(
        agent,
        lambda: MaskVelocity(gym.make("CartPole-v0")),
        seed=0,
        episodes=150,
        solved_reward=150,
        warmup_steps=500,
        store="episode",
        updates_per_step=0.5,
        updates_per_episode=0,
        **options,
    )


@pytest.mark.learning
def test_r2d1_learns_cartpole_without_velocities_where_dqn_cannot():
    wall, cpu = time.time(), time.process_time()
    torch.manual_seed(0)
    r2d1 = R2D1(
        GRUQNet(size=32),
        GRUQNet(size=32),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=64,
        learning_rate=3e-3,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
        sequence_length=8,
        burn_in=4,
        n_step=3,
    )
    result = train_masked_cartpole(r2d1, hidden_key="hidden", initial_hidden=torch.zeros(1, 32))
    print(
        f"R2D1 passed a smoothed return of 150 on velocity-masked CartPole-v0 at episode "
        f"{result.solved_episode} ({time.time() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU)"
    )
    assert result.solved_episode is not None, (
        "R2D1 did not reach a smoothed return of 150 within 150 episodes"
    )

    wall, cpu = time.time(), time.process_time()
    torch.manual_seed(0)
    dqn = DQN(
        MLPQNet(),
        MLPQNet(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        learning_rate=3e-3,
        epsilon_decay=0.999,
        update_rate=0.01,
        replay_size=20000,
        n_step=3,
    )
    dqn_result = train_masked_cartpole(dqn)
    dqn_best = max(smoothed_returns(dqn_result.returns))
    print(
        f"memoryless DQN on the same observations and budget: best smoothed return {dqn_best:.1f} "
        f"({time.time() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU)"
    )
    assert dqn_result.solved_episode is None and dqn_best < 75.0


class MLPQNet(nn.Module):
    def __init__(self, state_dim: int = 2, action_num: int = 2, size: int = 64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim, size),
            nn.ReLU(),
            nn.Linear(size, size),
            nn.ReLU(),
            nn.Linear(size, action_num),
        )

    def forward(self, state):
        return self.net(state)


# -- priorities computed when an episode is stored -------------------------------------------


def test_without_priority_on_store_new_sequences_get_the_largest_priority():
    agent = make(sequence_stride=2)
    positions = agent.replay_buffer.store_episode(random_episode(6))
    weights = agent.replay_buffer.wt_tree.get_leaf_weight(positions)
    assert (
        weights.tolist() == [1.0, 0.0] * 3
    )  # every start at the empty buffer's default, others never drawn


def test_priority_on_store_gives_each_new_sequence_the_priority_an_update_would():
    agent = make(priority_on_store=True, sequence_stride=2, priority_eta=0.9)
    before = parameters(agent.qnet)
    torch.manual_seed(3)
    episode = random_episode(7)
    agent.store_episode(episode)
    buffer = agent.replay_buffer
    positions = np.arange(7)  # the first episode fills rows 0..6
    stored = buffer.wt_tree.get_leaf_weight(positions)
    assert stored[1::2].tolist() == [
        0.0,
        0.0,
        0.0,
    ]  # rows that start no sequence stay out of sampling
    assert (
        len(set(stored[0::2].tolist())) == 4
    )  # each start has its own priority, not a shared maximum
    # What an update computes for the same sequence (sampled alone), before its optimizer step:
    for row in (0, 2, 4, 6):
        batch = sample_start(agent, row)
        target, predicted = agent._bellman_target(batch), agent._predicted_value(batch)
        errors = (predicted.detach() - target).abs()[0][batch.train_mask[0]]
        expected = (0.9 * errors.max() + 0.1 * errors.mean()).item()
        normalized = (expected + buffer.epsilon) ** buffer.alpha
        assert stored[row] == pytest.approx(normalized, rel=1e-5)
    assert same(before, parameters(agent.qnet))
    assert all(p.grad is None for p in agent.qnet.parameters())  # storing builds no graph


def test_priority_on_store_keeps_tuple_hidden_states_and_later_episodes_apart():
    agent = make(LSTMQNet, priority_on_store=True)
    fill(agent, episodes=3, tuple_hidden=True)
    weights = agent.replay_buffer.wt_tree.get_leaf_all_weights()[: agent.replay_buffer.size()]
    assert np.all(weights > 0) and len(set(weights.tolist())) > 3
    assert isinstance(agent.update(), float)

import math
import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn
from torch.distributions import Normal

from machin.frame.algorithms import SAC, RecurrentSAC, RecurrentTD3
from machin.frame.buffers import Buffer, SequenceBuffer

from .contract import ContractCase
from .loops import smoothed_returns, train
from .nets import QCritic, TanhGaussianActor

SIZE = 8
OPTIONS = {"batch_size": 4, "sequence_length": 3, "burn_in": 2}


class GRUActor(nn.Module):
    """Tanh-squashed Gaussian policy over a GRU cell: ``(action, log_prob, new_hidden)``."""

    def __init__(self, state_dim: int = 2, action_dim: int = 1, size: int = SIZE):
        super().__init__()
        self.fc = nn.Linear(state_dim, size)
        self.gru = nn.GRUCell(size, size)
        self.mu = nn.Linear(size, action_dim)
        self.log_sigma = nn.Linear(size, action_dim)

    def forward(self, state, hidden=None, deterministic=False):
        hidden = self.gru(torch.relu(self.fc(state)), hidden)
        mu = self.mu(hidden)
        dist = Normal(mu, self.log_sigma(hidden).clamp(-5, 2).exp())
        raw = mu if deterministic else dist.rsample()
        action = torch.tanh(raw)
        log_prob = dist.log_prob(raw) - torch.log(1 - action.pow(2) + 1e-6)
        return action, log_prob.sum(dim=1, keepdim=True), hidden


class GRUDeterministicActor(nn.Module):
    """``(tanh(head(h)), h)`` with ``h`` a GRU cell's new state."""

    def __init__(self, state_dim: int = 2, action_dim: int = 1, size: int = SIZE):
        super().__init__()
        self.fc = nn.Linear(state_dim, size)
        self.gru = nn.GRUCell(size, size)
        self.head = nn.Linear(size, action_dim)

    def forward(self, state, hidden=None):
        hidden = self.gru(torch.relu(self.fc(state)), hidden)
        return torch.tanh(self.head(hidden)), hidden


class GRUCritic(nn.Module):
    """``(q[B, 1], new_hidden)`` from the state and the action."""

    def __init__(self, state_dim: int = 2, action_dim: int = 1, size: int = SIZE):
        super().__init__()
        self.fc = nn.Linear(state_dim + action_dim, size)
        self.gru = nn.GRUCell(size, size)
        self.head = nn.Linear(size, 1)

    def forward(self, state, action, hidden=None):
        hidden = self.gru(torch.relu(self.fc(torch.cat([state, action], dim=1))), hidden)
        return self.head(hidden), hidden


class WindowActor(nn.Module):
    """:class:`GRUActor` over windows (sequence mode), its GRU cell an ``nn.GRU``.

    ``forward(state[B, T, S], hidden[B, H] or None) -> (action[B, T, A], log_prob[B, T, 1],
    hidden states after every step[B, T, H])``; actions in ``[-action_range, action_range]``.
    """

    def __init__(self, state_dim=2, action_dim=1, size=SIZE, action_range=1.0):
        super().__init__()
        self.fc = nn.Linear(state_dim, size)
        self.gru = nn.GRU(size, size, batch_first=True)
        self.mu = nn.Linear(size, action_dim)
        self.log_sigma = nn.Linear(size, action_dim)
        self.action_range = action_range

    def forward(self, state, hidden=None, deterministic=False):
        states = run_gru(self.gru, torch.relu(self.fc(state)), hidden)
        mu = self.mu(states)
        dist = Normal(mu, self.log_sigma(states).clamp(-5, 2).exp())
        raw = mu if deterministic else dist.rsample()
        action = torch.tanh(raw)
        log_prob = dist.log_prob(raw) - torch.log(self.action_range * (1 - action.pow(2)) + 1e-6)
        return action * self.action_range, log_prob.sum(dim=-1, keepdim=True), states


class WindowDeterministicActor(nn.Module):
    """:class:`GRUDeterministicActor` over windows: ``(action[B, T, A], hidden states[B, T, H])``."""

    def __init__(self, state_dim=2, action_dim=1, size=SIZE, action_range=1.0):
        super().__init__()
        self.fc = nn.Linear(state_dim, size)
        self.gru = nn.GRU(size, size, batch_first=True)
        self.head = nn.Linear(size, action_dim)
        self.action_range = action_range

    def forward(self, state, hidden=None):
        states = run_gru(self.gru, torch.relu(self.fc(state)), hidden)
        return torch.tanh(self.head(states)) * self.action_range, states


class WindowCritic(nn.Module):
    """:class:`GRUCritic` over windows: ``(q[B, T, 1], hidden states[B, T, H])``."""

    def __init__(self, state_dim=2, action_dim=1, size=SIZE):
        super().__init__()
        self.fc = nn.Linear(state_dim + action_dim, size)
        self.gru = nn.GRU(size, size, batch_first=True)
        self.head = nn.Linear(size, 1)

    def forward(self, state, action, hidden=None):
        states = run_gru(self.gru, torch.relu(self.fc(torch.cat([state, action], dim=-1))), hidden)
        return self.head(states), states


def run_gru(gru, inputs, hidden):
    """The states of a one-layer batch-first ``nn.GRU`` after every step, from ``hidden[B, H]``."""
    states, _ = gru(inputs, None if hidden is None else hidden.unsqueeze(0).contiguous())
    return states


def cell_twin(window_net, step_cls):
    """The step-mode network ``step_cls`` with the weights of ``window_net`` (GRU as GRU cell)."""
    twin = step_cls()
    twin.load_state_dict({k.replace("_l0", ""): v for k, v in window_net.state_dict().items()})
    return twin


def sac_args(actor=GRUActor, critic=GRUCritic):
    return (actor(), *(critic() for _ in range(4)), torch.optim.Adam, nn.MSELoss())


def td3_args():
    return (
        GRUDeterministicActor(),
        GRUDeterministicActor(),
        *(GRUCritic() for _ in range(4)),
        torch.optim.Adam,
        nn.MSELoss(),
    )


def random_episode(length, terminal=True, flags=()):
    """Random states ``[x, flag]`` (flag 1 at the steps in ``flags``), actions and stored hidden states."""
    return [
        {
            "state": {
                "state": torch.tensor([[float(torch.randn(())), float(i in flags)]]),
                "hidden": torch.randn(1, SIZE),
            },
            "action": {"action": torch.rand(1, 1) * 2 - 1},
            "next_state": {"state": torch.randn(1, 2)},
            "reward": float(torch.randn(())),
            "terminal": terminal and i == length - 1,
        }
        for i in range(length)
    ]


def episodes():
    return [random_episode(5 + e, terminal=e % 2 == 0) for e in range(3)]


def store_all(agent, experience):
    for episode in experience:
        agent.store_episode(episode)


CASE = {
    "options": OPTIONS,
    "state": lambda: {"state": torch.randn(3, 2), "hidden": torch.randn(3, SIZE)},
    "experience": episodes,
    "store": store_all,
    "trains": {"update_value": ["critic", "critic2"], "update_policy": ["actor"]},
}
CONTRACT_CASES = {
    RecurrentSAC: ContractCase(args=sac_args, act=lambda agent, state: agent.act(state), **CASE),
    RecurrentTD3: ContractCase(
        args=td3_args,
        act=lambda agent, state: agent.act(state, use_target=True),
        explore=lambda agent, state: agent.act_with_noise(
            state, noise_param=(0.0, 0.5), mode="normal"
        ),
        **{**CASE, "options": {**OPTIONS, "policy_update_delay": 1}},
    ),
}


def make_sac(actor=GRUActor, critic=GRUCritic, **options):
    torch.manual_seed(0)
    return RecurrentSAC(*sac_args(actor, critic), **{**OPTIONS, **options})


def make_td3(**options):
    torch.manual_seed(0)
    return RecurrentTD3(*td3_args(), **{**OPTIONS, "policy_update_delay": 1, **options})


def fill(agent):
    torch.manual_seed(1)
    store_all(agent, episodes())


def sample_start(agent, row):
    """A batch of one window, the one whose training part starts at storage ``row``."""
    weights = np.zeros(agent.replay_buffer.buffer_size)
    weights[row] = 1.0
    agent.replay_buffer.wt_tree.update_all_leaves(weights)
    agent.batch_size = 1
    return agent._sample(True)


# -- construction -------------------------------------------------------------------------


@pytest.mark.parametrize("make", [make_sac, make_td3])
def test_the_default_buffer_is_a_sequence_buffer_built_from_the_options(make):
    agent = make(sequence_stride=2, discount=0.9, replay_size=64, n_step=2)
    buffer = agent.replay_buffer
    assert isinstance(buffer, SequenceBuffer) and buffer.buffer_size == 64
    assert (buffer.sequence_length, buffer.burn_in, buffer.n_step, buffer.discount) == (
        3,
        2,
        2,
        0.9,
    )
    assert (buffer.sequence_stride, buffer.hidden_key, agent.batch_size) == (2, "hidden", 4)


def test_a_given_buffer_must_be_a_sequence_buffer_with_the_same_options():
    buffer = SequenceBuffer(100, sequence_length=3, burn_in=2, n_step=1, discount=0.99)
    assert make_sac(replay_buffer=buffer).replay_buffer is buffer
    with pytest.raises(
        ValueError, match="replay_buffer has burn_in=2, but RecurrentSAC was given burn_in=1"
    ):
        make_sac(replay_buffer=buffer, burn_in=1)
    with pytest.raises(
        TypeError, match="replay_buffer must be None or a SequenceBuffer, got Buffer"
    ):
        make_td3(replay_buffer=Buffer(10))


@pytest.mark.parametrize(
    "option, value, error, message",
    [
        ("sequence_length", 0, ValueError, "sequence_length must be a positive integer, got 0"),
        ("burn_in", -1, ValueError, "burn_in must be a non-negative integer, got -1"),
        ("sequence_stride", 0, ValueError, "sequence_stride must be a positive integer, got 0"),
        ("hidden_key", 3, TypeError, "hidden_key must be a non-empty string, got 3"),
    ],
)
def test_bad_sequence_options_are_rejected_naming_them(option, value, error, message):
    with pytest.raises(error, match=message):
        make_sac(**{option: value})


def test_store_transition_asks_for_whole_episodes():
    with pytest.raises(RuntimeError, match="call store_episode instead of store_transition"):
        make_td3().store_transition(random_episode(1)[0])


# -- acting and storing -------------------------------------------------------------------


def test_acting_returns_the_actor_output_with_the_new_hidden_state():
    sac, td3 = make_sac(), make_td3()
    state, hidden = torch.randn(3, 2), torch.randn(3, SIZE)
    action, log_prob, new_hidden = sac.act({"state": state, "hidden": hidden})
    assert action.shape == (3, 1) and log_prob.shape == (3, 1)
    assert torch.equal(new_hidden, sac.actor.gru(torch.relu(sac.actor.fc(state)), hidden))
    mean, _, _ = sac.act({"state": state, "hidden": hidden}, deterministic=True)
    assert torch.equal(mean, torch.tanh(sac.actor.mu(new_hidden)))
    action, new_hidden = td3.act({"state": state, "hidden": hidden})
    assert torch.equal(action, td3.actor(state, hidden)[0])
    assert torch.equal(new_hidden, td3.actor(state, hidden)[1])
    noisy, noisy_hidden = td3.act_with_noise({"state": state, "hidden": hidden})
    assert noisy.shape == (3, 1) and torch.equal(noisy_hidden, new_hidden)


def test_storing_runs_each_critic_over_the_episode_and_keeps_its_hidden_states():
    agent = make_sac()
    episode = random_episode(4)
    agent.store_episode(episode)
    assert "hidden_critic" not in episode[0]["state"]  # the caller's dicts are not changed
    window = agent.replay_buffer.read_sequences(np.array([2]))  # steps 0..3 at positions 0..3
    for name in ("critic", "critic2"):
        critic, hidden, expected = getattr(agent, name), torch.zeros(1, SIZE), []
        for step in episode:
            expected.append(hidden)
            _, hidden = critic(step["state"]["state"], step["action"]["action"], hidden)
        stored = window.state[f"hidden_{name}"][0, :4]
        assert torch.allclose(stored, torch.cat(expected), atol=1e-6)


def test_lstm_tuple_hidden_states_are_stacked_for_storage_and_split_for_the_network():
    class LSTMActor(GRUActor):
        def __init__(self):
            super().__init__()
            self.gru = nn.LSTMCell(SIZE, SIZE)

        def forward(self, state, hidden=None, deterministic=False):
            h, c = self.gru(torch.relu(self.fc(state)), hidden)
            action = torch.tanh(Normal(self.mu(h), 1.0).rsample())
            return action, torch.zeros(state.shape[0], 1) + 0 * action, (h, c)

    agent = make_sac(actor=LSTMActor)
    episode = random_episode(5)
    for step in episode:
        step["state"]["hidden"] = (torch.randn(1, SIZE), torch.randn(1, SIZE))
    agent.store_episode(episode)
    batch = agent._sample(True)
    assert batch.hidden.shape == (4, 2, SIZE)
    assert agent.update() is not None
    episode[0]["state"]["hidden"] = (torch.zeros(1, SIZE), torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"one shape, got shapes \[\[1, 8\], \[1, 4\]\]"):
        agent.store_episode(episode)


# -- the update ---------------------------------------------------------------------------


class Recording(GRUActor):
    """Remembers, per call, whether gradients were on and the hidden state it was given."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, state, hidden=None, deterministic=False):
        self.calls.append((torch.is_grad_enabled(), hidden))
        return super().forward(state, hidden, deterministic)


class RecordingCritic(GRUCritic):
    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, state, action, hidden=None):
        self.calls.append((torch.is_grad_enabled(), hidden))
        return super().forward(state, action, hidden)


def test_windows_start_from_the_stored_hidden_states():
    agent = make_sac(actor=Recording, critic=RecordingCritic)
    fill(agent)
    torch.manual_seed(1)
    episode = episodes()[1]  # what fill stored in rows 5..10
    stored_critic = agent.replay_buffer.read_sequences(np.array([9])).state["hidden_critic"][:, 0]
    batch = sample_start(agent, 9)  # a window of episode 1 whose first step is step 4 - burn_in = 2
    assert torch.equal(batch.hidden, episode[2]["state"]["hidden"])
    assert torch.equal(batch.critic_hidden["critic"], stored_critic)
    assert not torch.equal(stored_critic, torch.zeros(1, SIZE))
    for net in (agent.actor, agent.critic, agent.critic_target):
        net.calls.clear()
    agent._critic_losses(batch, torch.tensor(0.1))
    assert torch.equal(agent.actor.calls[0][1], batch.hidden)
    assert torch.equal(agent.critic.calls[0][1], batch.critic_hidden["critic"])
    assert torch.equal(agent.critic_target.calls[0][1], batch.critic_hidden["critic"])


def test_burn_in_runs_without_gradient_and_the_training_steps_with_it():
    agent = make_sac(actor=Recording, critic=RecordingCritic, burn_in=2, sequence_length=3)
    fill(agent)
    agent.actor.calls.clear()
    agent.critic.calls.clear()
    agent.critic_target.calls.clear()
    agent.update()
    # critic step: 2 burn-in + 3 training steps, then the actor's values at the training steps
    assert [grad for grad, _ in agent.critic.calls[:5]] == [False, False, True, True, True]
    # actor: the target's unroll (6 steps, no gradient), then the loss unroll
    assert [grad for grad, _ in agent.actor.calls] == [False] * 6 + [False, False, True, True, True]


class MarkedCritic(GRUCritic):
    """Adds ``marker * flag`` to its hidden state: ``marker`` only counts at flagged steps."""

    def __init__(self):
        super().__init__()
        self.marker = nn.Parameter(torch.ones(SIZE))

    def forward(self, state, action, hidden=None):
        q, hidden = super().forward(state, action, hidden)
        hidden = hidden + self.marker * state[:, 1:2]
        return q, hidden


@pytest.mark.parametrize("flagged, reaches", [((0, 1), False), ((2,), True)])
def test_no_gradient_flows_through_the_burn_in(flagged, reaches):
    agent = make_sac(critic=MarkedCritic, burn_in=2, sequence_length=3)
    torch.manual_seed(2)
    agent.store_episode(random_episode(6, flags=flagged))
    batch = sample_start(agent, 2)  # burn-in: steps 0 and 1; training part: steps 2, 3 and 4
    loss = agent._critic_losses(batch, torch.tensor(0.1))[0]
    loss.backward()
    grad = agent.critic.marker.grad
    assert (grad is not None and bool(grad.abs().sum() > 0)) == reaches


def test_hand_computed_targets_of_a_window():
    agent = make_td3(burn_in=1, sequence_length=2, discount=0.5)
    episode = random_episode(3, terminal=False)
    for step, reward in zip(episode, [1.0, 2.0, 4.0]):
        step["reward"] = reward
    agent.store_episode(episode)
    batch = sample_start(agent, 1)  # positions: step 0 (burn-in), steps 1 and 2, final observation
    training, bootstrap = agent._positions(batch)
    assert training.tolist() == [[1, 2]] and bootstrap.tolist() == [[2, 3]]
    target = agent._sequence_target(batch, torch.tensor([[10.0, 20.0]]))
    assert target.tolist() == [[2 + 0.5 * 10, 4 + 0.5 * 20]]
    batch.terminal[0, 2] = 1.0
    assert agent._sequence_target(batch, torch.tensor([[10.0, 20.0]])).tolist() == [[7.0, 4.0]]


def test_the_target_critic_scores_the_bootstrap_step_from_the_hidden_state_it_had_there():
    class CountingCritic(nn.Module):
        """``q = 10 * h + action`` with ``h`` the hidden state given; it counts the steps."""

        def __init__(self):
            super().__init__()
            self.unused = nn.Parameter(torch.zeros(()))

        def forward(self, state, action, hidden=None):
            hidden = torch.zeros(state.shape[0], 1) if hidden is None else hidden
            return 10 * hidden + action, hidden + 1

    agent = make_sac(critic=CountingCritic, burn_in=1, sequence_length=2)
    agent.store_episode(random_episode(3, terminal=False))
    batch = sample_start(agent, 1)
    assert batch.critic_hidden["critic"].tolist() == [[0.0]]  # stored at step 0
    values = agent._next_value("critic", agent.critic_target, batch, {"action": torch.ones(2, 1)})
    assert values.tolist() == [[21.0, 31.0]]  # bootstrap positions 2 and 3


def test_shapes_of_an_update():
    agent = make_td3(batch_size=5, sequence_length=4, burn_in=1)
    fill(agent)
    batch = agent._sample(True)
    width = 1 + 4 + 1
    assert batch.reward.shape == (5, width) and batch.state["state"].shape == (5, width, 2)
    assert batch.hidden.shape == (5, SIZE) and batch.critic_hidden["critic2"].shape == (5, SIZE)
    values, hidden = agent._critic_values("critic", agent.critic, batch, width)
    assert values.shape == (5, width) and hidden.shape == (5, width, SIZE)
    losses = agent._critic_losses(batch)
    assert len(losses) == 2 and all(loss.dim() == 0 for loss in losses)
    assert agent._actor_loss(batch).dim() == 0
    policy_value, value_loss = agent.update()
    assert isinstance(policy_value, float) and isinstance(value_loss, float)


def test_update_without_experience_returns_none_and_refuses_unconcatenated_samples():
    agent = make_sac()
    assert agent.update() is None
    fill(agent)
    with pytest.raises(ValueError, match="concatenate_samples=False is not supported"):
        agent.update(concatenate_samples=False)


def test_a_network_without_hidden_output_is_refused_naming_it():
    class NoHiddenCritic(GRUCritic):
        def forward(self, state, action, hidden=None):
            return super().forward(state, action, hidden)[0]

    agent = make_sac(critic=NoHiddenCritic)
    with pytest.raises(
        ValueError,
        match=r"RecurrentSAC needs the critic to return \(value, \.\.\., new_hidden\), its new "
        r"hidden state \(\[batch, \.\.\.\] tensors\) last; NoHiddenCritic returned Tensor",
    ):
        fill(agent)


def test_an_actor_without_hidden_output_is_refused_naming_it():
    class NoHiddenActor(GRUActor):
        def forward(self, state, hidden=None, deterministic=False):
            return super().forward(state, hidden, deterministic)[:2]

    agent = make_sac(actor=NoHiddenActor)
    fill(agent)
    with pytest.raises(
        ValueError,
        match=r"needs the actor to return \(action, log_prob, \.\.\., new_hidden\).*"
        r"NoHiddenActor returned a tuple of 2 values",
    ):
        agent.update()


def test_a_network_without_the_hidden_argument_is_refused_naming_it():
    class PlainCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(3, 1)

        def forward(self, state, action):
            return self.net(torch.cat([state, action], dim=1))

    agent = make_td3()
    agent.critic = PlainCritic()
    with pytest.raises(TypeError, match="hidden_key='hidden', but the forward of PlainCritic"):
        fill(agent)


# -- sequence mode --------------------------------------------------------------------------


def window_agents(cls, window_nets, step_classes, **options):
    """Two agents with the same weights and experience: one in step mode over GRU cells, one in
    sequence mode over ``nn.GRU`` (``window_nets``)."""
    step_nets = [cell_twin(net, step_cls) for net, step_cls in zip(window_nets, step_classes)]
    options = {**OPTIONS, **options}
    rest = (torch.optim.Adam, nn.MSELoss())
    agents = (
        cls(*step_nets, *rest, **options),
        cls(*window_nets, *rest, unroll="sequence", **options),
    )
    for agent in agents:
        fill(agent)
    return agents


def window_td3s(**options):
    torch.manual_seed(0)
    nets = [WindowDeterministicActor(), WindowDeterministicActor()]
    nets += [WindowCritic() for _ in range(4)]
    steps = [GRUDeterministicActor] * 2 + [GRUCritic] * 4
    return window_agents(RecurrentTD3, nets, steps, policy_update_delay=1, **options)


def make_window_sac(actor=WindowActor, critic=WindowCritic, **options):
    torch.manual_seed(0)
    nets = [actor(), *(critic() for _ in range(4))]
    return RecurrentSAC(
        *nets, torch.optim.Adam, nn.MSELoss(), **{**OPTIONS, "unroll": "sequence", **options}
    )


def gradients(network):
    """The gradients of ``network`` by parameter name, nn.GRU's names as GRU cells name them."""
    return {name.replace("_l0", ""): p.grad for name, p in network.named_parameters()}


def test_the_unroll_option_is_checked():
    with pytest.raises(
        ValueError, match=r"unroll must be one of \['step', 'sequence'\], got 'window'"
    ):
        make_sac(unroll="window")


def test_sequence_mode_gives_the_losses_and_gradients_of_step_mode():
    step, window = window_td3s(batch_size=32)
    torch.manual_seed(3)
    batch = step._sample(True)
    assert not bool(batch.observed[:, 0].all())  # some windows start before their episode
    losses = []
    for agent in (step, window):
        torch.manual_seed(4)  # the same target smoothing noise
        critic_losses = agent._critic_losses(batch)
        sum(critic_losses).backward()
        actor_loss = agent._actor_loss(batch)
        actor_loss.backward()
        losses.append([loss.item() for loss in [*critic_losses, actor_loss]])
    assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-6)
    for name in ("actor", "critic", "critic2"):
        expected, got = gradients(getattr(step, name)), gradients(getattr(window, name))
        assert expected.keys() == got.keys()
        for key, value in expected.items():
            assert torch.allclose(value, got[key], atol=1e-5), (name, key)


def test_sequence_mode_stores_the_critic_states_and_acts_as_step_mode():
    step, window = window_td3s()
    episode = [step._packed(s) for s in random_episode(6)]
    for name in ("critic", "critic2"):
        expected = step._critic_states(name, getattr(step, name), episode)
        got = window._critic_states(name, getattr(window, name), episode)
        assert torch.allclose(torch.cat(expected), torch.cat(got), atol=1e-6)
    state = {"state": torch.randn(3, 2), "hidden": torch.randn(3, SIZE)}
    (action, hidden), (window_action, window_hidden) = step.act(state), window.act(state)
    assert window_action.shape == (3, 1) and window_hidden.shape == (3, SIZE)
    assert torch.allclose(action, window_action, atol=1e-6)
    assert torch.allclose(hidden, window_hidden, atol=1e-6)


def test_sequence_mode_sac_acts_and_updates():
    agent = make_window_sac()
    fill(agent)
    state = {"state": torch.randn(3, 2), "hidden": torch.zeros(3, SIZE)}
    action, log_prob, hidden = agent.act(state)
    assert (action.shape, log_prob.shape, hidden.shape) == ((3, 1), (3, 1), (3, SIZE))
    mean, _, _ = agent.act(state, deterministic=True)
    expected = agent.actor(state["state"].unsqueeze(1), deterministic=True)[0][:, 0]
    assert torch.equal(mean, expected)
    before = [p.clone() for p in agent.critic.parameters()]
    policy_value, value_loss = agent.update()
    assert math.isfinite(policy_value) and math.isfinite(value_loss)
    assert any(not torch.equal(b, p) for b, p in zip(before, agent.critic.parameters()))


class RecordingWindowCritic(WindowCritic):
    """Remembers, per call, whether gradients were on and how many steps it was given."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, state, action, hidden=None):
        self.calls.append((torch.is_grad_enabled(), state.shape[1]))
        return super().forward(state, action, hidden)


def test_sequence_mode_calls_a_network_once_per_part_of_a_window():
    agent = make_window_sac(critic=RecordingWindowCritic, burn_in=2, sequence_length=3)
    fill(agent)
    agent.critic.calls.clear()
    agent.critic_target.calls.clear()
    agent.update()
    # critic step: the burn-in without gradient, the training steps with it; then the actor's
    # fresh actions at the training steps, scored in one call of one step each
    assert agent.critic.calls == [(False, 2), (True, 3), (True, 1)]
    assert [steps for _, steps in agent.critic_target.calls] == [2 + 3 + 1, 1]


def test_sequence_mode_refuses_a_final_hidden_state_naming_the_network_and_shapes():
    class FinalStateCritic(WindowCritic):
        """Returns the state after the last step only, as ``nn.GRU``'s ``h_n``."""

        def forward(self, state, action, hidden=None):
            q, states = super().forward(state, action, hidden)
            return q, states[:, -1]

    agent = make_window_sac(critic=FinalStateCritic)
    with pytest.raises(
        ValueError,
        match=r"RecurrentSAC runs the critic over windows \(unroll='sequence'\), so "
        r"FinalStateCritic must return outputs of shape \[batch, time, \.\.\.\] = \[1, 5, "
        r"\.\.\.\] and, last, its hidden states after every step.*it returned shapes "
        r"\[\[1, 5, 1\], \[1, 8\]\]",
    ):
        agent.store_episode(random_episode(5))


def test_sequence_mode_refuses_outputs_without_time_or_missing_naming_the_network():
    class LastStepActor(WindowActor):
        def forward(self, state, hidden=None, deterministic=False):
            action, log_prob, states = super().forward(state, hidden, deterministic)
            return action[:, -1], log_prob, states

    class TwoOutputActor(WindowActor):
        def forward(self, state, hidden=None, deterministic=False):
            return super().forward(state, hidden, deterministic)[::2]

    agent = make_window_sac(actor=LastStepActor)
    fill(agent)
    with pytest.raises(
        ValueError, match=r"LastStepActor must return .* it returned shapes \[\[4, 1\], \[4, 6, 1\]"
    ):
        agent.update()
    state = {"state": torch.randn(3, 2), "hidden": torch.zeros(3, SIZE)}
    with pytest.raises(
        ValueError,
        match=r"so TwoOutputActor must return \(action, log_prob, \.\.\., new_hidden\) with its "
        r"hidden states after every step last; it returned a tuple of 2 values",
    ):
        make_window_sac(actor=TwoOutputActor).act(state)
    agent = make_window_sac()
    state["hidden"] = torch.zeros(3, SIZE + 1)
    with pytest.raises(RuntimeError, match="WindowActor"):  # safe_call names the network
        agent.act(state)


# -- learning: a cue to remember ------------------------------------------------------------
# The task the issue names, Pendulum-v1 with the angular velocity hidden, costs far more than a
# learning test may, also in sequence mode: RecurrentSAC (nn.GRU of 32 units, 16 windows of
# 4 + 8 + 1 steps, one update per two steps) met a smoothed -700 at episode 39 (seed 0) after
# about 3700 updates, 68.5 s of CPU on a quiet core of another machine (torch 2.11), and only at
# episode 45, 186 s of CPU, on the shared two-core machine (torch 2.13); memoryless SAC's best
# smoothed return in the same 45 episodes was -758 (see docs/algorithms_recurrent_ac.rst).
# CueRecall needs memory as plainly (no policy without it beats -5 on average) in 6-step episodes.


class CueRecall(gym.Env):
    """A cue, -1 or +1, is shown at the first of ``length`` steps only; each step pays ``-(action - cue)**2``.

    The observation is ``(cue, 1)`` at the first step and ``(0, 0)`` after it, so a policy
    without memory can do no better than action 0 later on: an expected return of
    ``-(length - 1)``. A policy that remembers the cue gets close to 0.
    """

    def __init__(self, length: int = 6):
        self.length = length
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cue, self.steps = float(self.np_random.choice([-1.0, 1.0])), 0
        return np.array([self.cue, 1.0], dtype=np.float32), {}

    def step(self, action):
        reward = -float((np.clip(action, -1.0, 1.0).reshape(-1)[0] - self.cue) ** 2)
        self.steps += 1
        return np.zeros(2, dtype=np.float32), reward, self.steps >= self.length, False, {}


def train_cue_recall(agent, **options):
    """Train on :class:`CueRecall` (one update per step after 60 steps) until the smoothed return
    passes -1.5, for at most 100 episodes."""
    return train(
        agent,
        CueRecall,
        seed=0,
        episodes=100,
        solved_reward=-1.5,
        warmup_steps=60,
        updates_per_step=1.0,
        **options,
    )


def test_the_trainer_drives_recurrent_td3_with_its_hidden_state():
    agent = make_td3(sequence_length=2, burn_in=1)
    result = train(
        agent,
        lambda: CueRecall(length=3),
        seed=0,
        episodes=3,
        solved_reward=None,
        warmup_steps=3,
        updates_per_step=1.0,
        hidden_key="hidden",
        initial_hidden=torch.zeros(1, SIZE),
        updates_per_episode=0,
    )
    assert len(result.returns) == 3 and agent.updates_done == 6
    assert agent.replay_buffer.size() == 9


@pytest.mark.learning
def test_recurrent_sac_remembers_a_cue_that_sac_cannot():
    options = {
        "batch_size": 16,
        "actor_learning_rate": 5e-3,
        "critic_learning_rate": 5e-3,
        "alpha_learning_rate": 5e-3,
        "update_rate": 0.02,
        "discount": 0.5,
    }
    wall, cpu = time.time(), time.process_time()
    torch.manual_seed(0)
    agent = RecurrentSAC(
        GRUActor(size=16),
        *(GRUCritic(size=16) for _ in range(4)),
        torch.optim.Adam,
        nn.MSELoss(),
        sequence_length=3,
        burn_in=1,
        **options,
    )
    result = train_cue_recall(
        agent,
        hidden_key="hidden",
        initial_hidden=torch.zeros(1, 16),
        store="episode",
        updates_per_episode=0,
    )
    print(
        f"RecurrentSAC passed a smoothed return of -1.5 on CueRecall at episode "
        f"{result.solved_episode} ({time.time() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU)"
    )
    assert result.solved_episode is not None, (
        "RecurrentSAC did not reach a smoothed return of -1.5 within 100 episodes"
    )

    wall, cpu = time.time(), time.process_time()
    torch.manual_seed(0)
    sac = SAC(
        TanhGaussianActor(2, 1, 1.0, 16),
        *(QCritic(2, 1, 16) for _ in range(4)),
        torch.optim.Adam,
        nn.MSELoss(),
        **options,
    )
    sac_result = train_cue_recall(sac)
    best = max(smoothed_returns(sac_result.returns))
    print(
        f"memoryless SAC, same budget: best smoothed return {best:.2f} "
        f"({time.time() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s CPU)"
    )
    assert sac_result.solved_episode is None and best < -3.0

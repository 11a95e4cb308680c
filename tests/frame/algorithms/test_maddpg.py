"""MADDPG: construction, acting, storing, critic inputs, per-agent training, pools, save/load, learning."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms.maddpg import MADDPG, SHMBuffer
from machin.frame.algorithms.worker_copy import WorkerCopy
from machin.frame.buffers import Buffer, PrioritizedBuffer
from machin.frame.transition import Transition
from machin.parallel.pickle import dumps, loads
from machin.parallel.pool import Pool
from tests.multiprocess import no_children_left  # noqa: F401

from .contract import ContractCase
from .loops import run_spread
from .nets import (
    SPREAD_AGENTS,
    ActorDiscrete,
    Critic,
    RecordingCritic,
    SigmoidActorWithExtra,
    make_networks,
    parameters,
    random_step,
    same,
    spread_maddpg,
)

# Heterogeneous agents: different state and action sizes; critic i sees agents VISIBLE[i].
STATE_DIMS, ACTION_DIMS = [3, 4, 5], [2, 1, 3]
VISIBLE = [[0, 1], [1, 2], [2, 0]]


CONTRACT_CASES = {
    MADDPG: ContractCase(
        args=lambda: (
            *make_networks(STATE_DIMS, ACTION_DIMS, VISIBLE),
            VISIBLE,
            torch.optim.Adam,
            nn.MSELoss(),
        ),
        options={"batch_size": 8, "pool_size": 1, "sub_policy_num": 1},
        act=lambda agent, states: agent.act(states, use_target=True),
        explore=lambda agent, states: agent.act_with_noise(states, mode="normal"),
        state=lambda: [{"state": torch.randn(5, s)} for s in STATE_DIMS],
        experience=lambda: [random_step(STATE_DIMS, ACTION_DIMS) for _ in range(16)],
        store=lambda agent, steps: [agent.store_transitions(step) for step in steps],
        trains={"update_value": ["critics"], "update_policy": ["actors"]},
    ),
}


def make_maddpg(
    nets=None, visible=VISIBLE, optimizer=torch.optim.Adam, criterion=None, **kwargs
) -> MADDPG:
    torch.manual_seed(0)
    nets = nets or make_networks(STATE_DIMS, ACTION_DIMS, visible)
    kwargs.setdefault("batch_size", 8)
    kwargs.setdefault("pool_size", 1)
    return MADDPG(*nets, visible, optimizer, criterion or nn.MSELoss(), **kwargs)


def fill(maddpg: MADDPG, steps: int = 32, seed: int = 1) -> None:
    torch.manual_seed(seed)
    for _ in range(steps):
        maddpg.store_transitions(random_step(STATE_DIMS, ACTION_DIMS))


def states(batch: int = 5):
    return [{"state": torch.randn(batch, s)} for s in STATE_DIMS]


def all_parameters(maddpg: MADDPG):
    return [
        p.detach().clone() for name in MADDPG._is_top for p in getattr(maddpg, name).parameters()
    ]


# -- construction -------------------------------------------------------------------------
def test_class_attributes_name_the_networks():
    assert MADDPG._is_top == ["actors", "actor_targets", "critics", "critic_targets"]
    assert MADDPG.get_restorable() == ["actor_targets", "critic_targets"]


def test_ensembles_have_sub_policy_num_plus_one_actors_and_targets_are_copies():
    maddpg = make_maddpg(sub_policy_num=2)
    assert [len(agent) for agent in maddpg.actors] == [3, 3, 3]
    assert [len(agent) for agent in maddpg.actor_targets] == [3, 3, 3]
    assert len(maddpg.critics) == len(maddpg.critic_targets) == 3
    for agent, targets in zip(maddpg.actors, maddpg.actor_targets):
        assert agent[1] is not agent[0] and same(parameters(agent[1]), parameters(agent[0]))
        for actor, target in zip(agent, targets):
            assert same(parameters(actor), parameters(target))
    for critic, target in zip(maddpg.critics, maddpg.critic_targets):
        assert same(parameters(critic), parameters(target))
    assert [len(optims) for optims in maddpg.actor_optims] == [3, 3, 3]


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("update_rate", 0.0, "update_rate must be in"),
        ("discount", 1.5, "discount must be in"),
        ("batch_size", 0, "batch_size must be a positive integer"),
        ("sub_policy_num", -1, "sub_policy_num must be"),
        ("pool_type", "fork", r"pool_type must be one of \['thread', 'process'\], got 'fork'"),
        ("pool_size", 0, "pool_size must be a positive integer, got 0"),
    ],
)
def test_bad_options_raise(option, value, message):
    with pytest.raises(ValueError, match=message):
        make_maddpg(**{option: value})


@pytest.mark.parametrize(
    "visible, message",
    [
        ([[0, 1], [1, 2]], r"one list of agent indexes per critic \(3 here\)"),
        ([[1], [1, 2], [2, 0]], r"critic_visible_actors\[0\] must be .* includes 0"),
        ([[0, 3], [1, 2], [2, 0]], r"critic_visible_actors\[0\] must be .* in \[0, 2\]"),
        ([[0, 0], [1, 2], [2, 0]], r"critic_visible_actors\[0\] must be a list of distinct"),
    ],
)
def test_bad_critic_visible_actors_raise(visible, message):
    with pytest.raises(ValueError, match=message):
        make_maddpg(make_networks(STATE_DIMS, ACTION_DIMS, VISIBLE), visible=visible)


def test_network_lists_of_different_lengths_raise():
    actors, actor_targets, critics, critic_targets = make_networks(STATE_DIMS, ACTION_DIMS, VISIBLE)
    with pytest.raises(ValueError, match=r"one network per agent each, got lengths .*'critics': 2"):
        MADDPG(
            actors,
            actor_targets,
            critics[:2],
            critic_targets,
            VISIBLE,
            torch.optim.Adam,
            nn.MSELoss(),
        )
    with pytest.raises(ValueError, match=r"actors\[1\] must be an nn.Module, got str"):
        MADDPG(
            [actors[0], "actor", actors[2]],
            actor_targets,
            critics,
            critic_targets,
            VISIBLE,
            torch.optim.Adam,
            nn.MSELoss(),
        )


def test_replay_buffer_must_be_a_buffer_and_is_copied_per_agent():
    with pytest.raises(TypeError, match="replay_buffer must be None or a Buffer, got list"):
        make_maddpg(replay_buffer=[])
    with pytest.raises(ValueError, match="replay_buffer must be a Buffer without priorities"):
        make_maddpg(replay_buffer=PrioritizedBuffer(50))
    template = Buffer(50)
    maddpg = make_maddpg(replay_buffer=template)
    assert maddpg.replay_buffers[0] is template
    assert len({id(b) for b in maddpg.replay_buffers}) == 3
    assert all(type(b) is Buffer and b.buffer_size == 50 for b in maddpg.replay_buffers)


def test_default_buffers_are_shared_memory_buffers_for_a_process_pool_only():
    assert all(type(b) is Buffer for b in make_maddpg().replay_buffers)
    assert all(type(b) is SHMBuffer for b in make_maddpg(pool_type="process").replay_buffers)


# -- acting -------------------------------------------------------------------------------
def test_act_returns_one_action_per_agent_from_its_actor():
    maddpg = make_maddpg()
    inputs = states()
    actions = maddpg.act(inputs)
    assert [a.shape for a in actions] == [(5, 2), (5, 1), (5, 3)]
    for agent, (action, state) in enumerate(zip(actions, inputs)):
        assert torch.equal(action, maddpg.actors[agent][0](state["state"]))


def test_act_use_target_uses_the_target_actors():
    maddpg = make_maddpg()
    with torch.no_grad():
        maddpg.actor_targets[1][0].net[0].bias.add_(1.0)
    inputs = states()
    assert torch.equal(
        maddpg.act(inputs, use_target=True)[1], maddpg.actor_targets[1][0](inputs[1]["state"])
    )
    assert not torch.equal(maddpg.act(inputs)[1], maddpg.act(inputs, use_target=True)[1])


def test_act_draws_a_random_sub_policy_for_each_agent():
    maddpg = make_maddpg(sub_policy_num=1)
    with torch.no_grad():
        maddpg.actors[0][1].net[-1].bias.fill_(50.0)  # sub-policy 1 of agent 0 saturates at 1
    torch.manual_seed(3)
    inputs = states(1)
    picks = [bool(torch.all(maddpg.act(inputs)[0] > 0.999)) for _ in range(40)]
    assert 5 < sum(picks) < 35  # both sub-policies are used


def test_act_passes_extra_outputs_back():
    nets = make_networks(STATE_DIMS, ACTION_DIMS, VISIBLE, actor_class=SigmoidActorWithExtra)
    maddpg = make_maddpg(nets)
    results = maddpg.act(states())
    assert all(isinstance(r, tuple) and r[1].shape == (5, 2) for r in results)
    noisy = maddpg.act_with_noise(states(), noise_param=(0.0, 0.1), mode="normal")
    assert all(isinstance(r, tuple) and r[0].shape == (5, a) for r, a in zip(noisy, ACTION_DIMS))


def test_states_must_hold_one_entry_per_agent():
    with pytest.raises(
        ValueError, match=r"states must be a list with one entry per agent \(3\), got 2 entries"
    ):
        make_maddpg().act(states()[:2])


def test_uniform_noise_stays_within_bounds_times_ratio():
    maddpg = make_maddpg()
    inputs = states(50)
    clean = maddpg.act(inputs)
    noisy = maddpg.act_with_noise(inputs, noise_param=(-0.1, 0.1), ratio=0.5)
    for c, n in zip(clean, noisy):
        assert n.shape == c.shape and 0 < (n - c).abs().max() <= 0.05 + 1e-6


@pytest.mark.parametrize("mode", ["normal", "clipped_normal", "ou"])
def test_other_noise_modes_work_with_the_default_noise_param(mode):
    maddpg = make_maddpg()
    inputs = states()
    noisy = maddpg.act_with_noise(inputs, mode=mode)
    assert [n.shape for n in noisy] == [(5, 2), (5, 1), (5, 3)]
    assert not torch.equal(noisy[0], maddpg.act(inputs)[0])


def test_ou_noise_keeps_one_process_per_agent():
    maddpg = make_maddpg()
    inputs = states(2)
    maddpg.act_with_noise(inputs, noise_param={"sigma": 0.5}, mode="ou")
    processes = dict(maddpg._ou_noise)
    maddpg.act_with_noise(inputs, noise_param={"sigma": 0.5}, mode="ou")
    assert sorted(processes) == [0, 1, 2]
    assert all(maddpg._ou_noise[agent] is processes[agent] for agent in range(3))  # not re-created
    assert [tuple(p.shape) for p in processes.values()] == [(2, 2), (2, 1), (2, 3)]


def test_unknown_noise_mode_and_bad_noise_param_raise():
    maddpg = make_maddpg()
    with pytest.raises(
        ValueError,
        match=r"Unknown noise type: .*mode must be one of \['uniform', 'normal', 'clipped_normal', 'ou'\]",
    ):
        maddpg.act_with_noise(states(), mode="gaussian")
    with pytest.raises(ValueError, match=r"act_with_noise\(mode='normal'\)"):
        maddpg.act_with_noise(states(), noise_param=(0.0,), mode="normal")
    with pytest.raises(
        ValueError, match=r"act_with_noise\(mode='ou'\): noise_param must be None or a dict"
    ):
        maddpg.act_with_noise(states(), noise_param=(0.0, 1.0), mode="ou")


def test_act_discrete_returns_argmax_and_probabilities_per_agent():
    nets = make_networks(STATE_DIMS, [4, 2, 3], VISIBLE, actor_class=ActorDiscrete)
    maddpg = make_maddpg(nets)
    inputs = states()
    results = maddpg.act_discrete(inputs)
    for agent, (action, probs) in enumerate(results):
        assert action.shape == (5, 1) and action.dtype == torch.long
        assert torch.equal(probs, maddpg.actors[agent][0](inputs[agent]["state"]))
        assert torch.equal(action, probs.argmax(dim=1, keepdim=True))
    torch.manual_seed(0)
    sampled = maddpg.act_discrete_with_noise([{"state": torch.zeros(400, s)} for s in STATE_DIMS])
    counts = torch.bincount(sampled[0][0].view(-1), minlength=4)
    assert torch.all(counts > 0)  # sampled, not the argmax


def test_act_discrete_rejects_an_output_that_is_not_probabilities():
    with pytest.raises(ValueError, match="expected action probabilities"):
        make_maddpg().act_discrete(states())


# -- storing ------------------------------------------------------------------------------
def test_store_transitions_stores_one_step_for_every_agent():
    maddpg = make_maddpg()
    maddpg.store_transitions(random_step(STATE_DIMS, ACTION_DIMS))
    assert [b.size() for b in maddpg.replay_buffers] == [1, 1, 1]
    maddpg.store_transition(random_step(STATE_DIMS, ACTION_DIMS))
    maddpg.store_episodes([[t] * 4 for t in random_step(STATE_DIMS, ACTION_DIMS)])
    maddpg.store_episode([[t] * 2 for t in random_step(STATE_DIMS, ACTION_DIMS)])
    assert [b.size() for b in maddpg.replay_buffers] == [8, 8, 8]
    assert MADDPG.store_transition is MADDPG.store_transitions
    assert MADDPG.store_episode is MADDPG.store_episodes


def test_store_accepts_dicts():
    maddpg = make_maddpg()
    maddpg.store_transitions(
        [
            {
                "state": {"state": torch.randn(1, s)},
                "action": {"action": torch.rand(1, a)},
                "next_state": {"state": torch.randn(1, s)},
                "reward": 1.0,
                "terminal": False,
            }
            for s, a in zip(STATE_DIMS, ACTION_DIMS)
        ]
    )
    assert [b.size() for b in maddpg.replay_buffers] == [1, 1, 1]


def test_store_errors_leave_every_buffer_unchanged():
    maddpg = make_maddpg()
    fill(maddpg, 2)
    step = random_step(STATE_DIMS, ACTION_DIMS)
    with pytest.raises(
        ValueError, match=r"transitions must be a list with one entry per agent \(3\), got 2"
    ):
        maddpg.store_transitions(step[:2])
    bad = step[:2] + [
        {
            "state": {"state": torch.randn(1, 5)},
            "action": {"action": torch.rand(1, 3)},
            "next_state": {"state": torch.randn(1, 5)},
            "reward": 0.0,
        }
    ]
    with pytest.raises(ValueError, match=r"agent 2: cannot build a Transition .*'terminal'"):
        maddpg.store_transitions(bad)
    with pytest.raises(
        TypeError, match=r"agent 1: transition must be a Transition or a dict, got int"
    ):
        maddpg.store_transitions([step[0], 3, step[2]])
    wrong_shape = step[:2] + random_step([6], [3])
    with pytest.raises(
        ValueError, match=r"agent 2: attribute state\['state'\] must have shape \[1, 5\]"
    ):
        maddpg.store_transitions(wrong_shape)
    with pytest.raises(ValueError, match=r"equal lengths; got lengths \[2, 2, 1\]"):
        maddpg.store_episodes([[step[0]] * 2, [step[1]] * 2, [step[2]]])
    assert [b.size() for b in maddpg.replay_buffers] == [2, 2, 2]


def test_update_refuses_buffers_that_are_out_of_step():
    maddpg = make_maddpg()
    fill(maddpg, 4)
    maddpg.replay_buffers[1].append(random_step(STATE_DIMS, ACTION_DIMS)[1])
    with pytest.raises(RuntimeError, match=r"different numbers of transitions \[4, 5, 4\]"):
        maddpg.update()


# -- critic inputs and targets ------------------------------------------------------------
def tagged_step(t: int):
    """Agent j's state at step t is filled with 100 * j + t (next state: + 0.5), its action with -(100 * j + t)."""
    return [
        Transition(
            state={"state": torch.full((1, s), 100.0 * j + t)},
            action={"action": torch.full((1, a), -(100.0 * j + t))},
            next_state={"state": torch.full((1, s), 100.0 * j + t + 0.5)},
            reward=float(t),
            terminal=False,
        )
        for j, (s, a) in enumerate(zip(STATE_DIMS, ACTION_DIMS))
    ]


def test_critic_inputs_are_the_visible_agents_rows_concatenated_in_visible_order():
    nets = make_networks(STATE_DIMS, ACTION_DIMS, VISIBLE, critic_class=RecordingCritic)
    maddpg = make_maddpg(nets, batch_size=6)
    for t in range(20):
        maddpg.store_transitions(tagged_step(t))
    maddpg.update(update_policy=False)
    # Critic 2 sees agents [2, 0]: state = [s_2 | s_0] (5 + 3 columns), action = [a_2 | a_0] (3 + 2).
    (target_state, target_action), (state, action), (policy_state, policy_action) = (
        maddpg.critic_targets[2].calls[:1] + maddpg.critics[2].calls[:2]
    )
    steps = state[:, 0] - 200
    assert state.shape == (6, 8) and action.shape == (6, 5)
    assert len(set(steps.tolist())) == 6  # six distinct stored steps
    expected_state = torch.cat(
        [(200 + steps).view(-1, 1).expand(6, 5), steps.view(-1, 1).expand(6, 3)], dim=1
    )
    assert torch.equal(state, expected_state)  # both agents' rows come from the same steps
    assert torch.equal(
        action,
        -torch.cat([(200 + steps).view(-1, 1).expand(6, 3), steps.view(-1, 1).expand(6, 2)], 1),
    )
    # The target critic sees the next states and the target actors' actions in [0, 1] (sigmoid).
    assert torch.equal(target_state, expected_state + 0.5)
    assert target_action.shape == (6, 5) and torch.all((target_action >= 0) & (target_action <= 1))
    # The actor term: agent 2's own action comes from its actor; agent 0's from the buffer.
    assert torch.equal(policy_state, expected_state)
    own = maddpg.actors[2][0](expected_state[:, :5])
    assert torch.allclose(policy_action[:, :3], own) and torch.equal(
        policy_action[:, 3:], action[:, 3:]
    )


def test_overridden_concat_functions_build_the_critic_inputs():
    class SummingMADDPG(MADDPG):
        @staticmethod
        def state_concat_function(states, *_):
            return {"state": torch.cat([s["state"][:, :3] for s in states], dim=1)}

    actors, actor_targets, _, _ = make_networks(STATE_DIMS, ACTION_DIMS, VISIBLE)
    critics = [RecordingCritic(6, sum(ACTION_DIMS[j] for j in v)) for v in VISIBLE]
    torch.manual_seed(0)
    maddpg = SummingMADDPG(
        actors,
        actor_targets,
        critics,
        copy.deepcopy(critics),
        VISIBLE,
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=4,
        pool_size=1,
    )
    fill(maddpg, 8)
    maddpg.update()
    assert maddpg.critics[1].calls[0][0].shape == (4, 6)


def test_default_concat_needs_the_same_keys_for_every_visible_agent():
    with pytest.raises(
        ValueError, match=r"override state_concat_function for agents with different keys"
    ):
        MADDPG.state_concat_function([{"state": torch.ones(1, 2)}, {"obs": torch.ones(1, 2)}])
    joined = MADDPG.action_concat_function(
        [{"action": torch.ones(2, 1)}, {"action": torch.zeros(2, 3)}]
    )
    assert torch.equal(joined["action"], torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 0]]))


class LinearActor(nn.Module):
    """``a = w * s`` for one-dimensional states and actions."""

    def __init__(self, w: float):
        super().__init__()
        self.w = nn.Parameter(torch.tensor([[w]]))

    def forward(self, state):
        return state @ self.w


class LinearCritic(nn.Module):
    """``Q = state @ u + action @ v`` on the concatenated inputs."""

    def __init__(self, u, v):
        super().__init__()
        self.u = nn.Parameter(torch.tensor(u).view(-1, 1))
        self.v = nn.Parameter(torch.tensor(v).view(-1, 1))

    def forward(self, state, action):
        return state @ self.u + action @ self.v


class RecordingMSE(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, target, predicted):
        self.calls.append((target.detach().clone(), predicted.detach().clone()))
        return nn.functional.mse_loss(predicted, target)


def test_targets_and_policy_values_against_hand_computed_values():
    criterion = RecordingMSE()
    actors = [LinearActor(0.5), LinearActor(-1.0)]
    critics = [LinearCritic([1.0, 2.0], [3.0, 4.0]), LinearCritic([0.5, -1.0], [2.0, 1.0])]
    visible = [[0, 1], [1, 0]]
    maddpg = MADDPG(
        actors,
        [LinearActor(0.0), LinearActor(0.0)],
        critics,
        [LinearCritic([0.0, 0.0], [0.0, 0.0]), LinearCritic([0.0, 0.0], [0.0, 0.0])],
        visible,
        torch.optim.SGD,
        criterion,
        batch_size=1,
        discount=0.5,
        pool_size=1,
    )
    s, a, s2, r = [1.0, 2.0], [0.3, -0.2], [3.0, -1.0], [1.0, -2.0]
    maddpg.store_transitions(
        [
            Transition(
                state={"state": torch.tensor([[s[j]]])},
                action={"action": torch.tensor([[a[j]]])},
                next_state={"state": torch.tensor([[s2[j]]])},
                reward=r[j],
                terminal=False,
            )
            for j in range(2)
        ]
    )
    policy_value, value_loss = maddpg.update(update_value=False, update_policy=False)
    next_a = [0.5 * s2[0], -1.0 * s2[1]]
    target0 = r[0] + 0.5 * (1.0 * s2[0] + 2.0 * s2[1] + 3.0 * next_a[0] + 4.0 * next_a[1])
    q0 = 1.0 * s[0] + 2.0 * s[1] + 3.0 * a[0] + 4.0 * a[1]
    # Critic 1 sees [agent 1, agent 0].
    target1 = r[1] + 0.5 * (0.5 * s2[1] - 1.0 * s2[0] + 2.0 * next_a[1] + 1.0 * next_a[0])
    q1 = 0.5 * s[1] - 1.0 * s[0] + 2.0 * a[1] + 1.0 * a[0]
    assert [(t.item(), p.item()) for t, p in criterion.calls] == [
        pytest.approx((target0, q0)),
        pytest.approx((target1, q1)),
    ]
    policy0 = 1.0 * s[0] + 2.0 * s[1] + 3.0 * (0.5 * s[0]) + 4.0 * a[1]
    policy1 = 0.5 * s[1] - 1.0 * s[0] + 2.0 * (-1.0 * s[1]) + 1.0 * a[0]
    assert policy_value == pytest.approx((policy0 + policy1) / 2)
    assert value_loss == pytest.approx(((target0 - q0) ** 2 + (target1 - q1) ** 2) / 2)


def test_terminal_zeroes_the_bootstrap():
    assert torch.equal(
        MADDPG.reward_function(
            torch.tensor([[1.0]]), 0.9, torch.tensor([[5.0]]), torch.tensor([[1.0]]), {}
        ),
        torch.tensor([[1.0]]),
    )


# -- training -----------------------------------------------------------------------------
def test_update_on_an_empty_buffer_returns_none_and_otherwise_floats():
    maddpg = make_maddpg()
    assert maddpg.update() is None
    fill(maddpg)
    policy_value, value_loss = maddpg.update()
    assert isinstance(policy_value, float) and isinstance(value_loss, float) and value_loss > 0


class ActionBlindCritic(Critic):
    """A critic whose value ignores the action: it gives its actor no gradient."""

    def forward(self, state, action):
        return super().forward(state, torch.zeros_like(action))


def test_each_actor_is_trained_by_its_own_critic_only():
    # Critic 0 ignores actions, so actor 0 gets no gradient from its own loss, while critic 2
    # (which sees agent 0) does depend on agent 0's action: actor 0 must still not move.
    actors, actor_targets, critics, critic_targets = make_networks(STATE_DIMS, ACTION_DIMS, VISIBLE)
    critics[0] = ActionBlindCritic(3 + 4, 2 + 1)
    critic_targets[0] = ActionBlindCritic(3 + 4, 2 + 1)
    maddpg = make_maddpg(
        (actors, actor_targets, critics, critic_targets),
        optimizer=torch.optim.SGD,
        actor_learning_rate=0.1,
    )
    fill(maddpg)
    before = [parameters(agent[0]) for agent in maddpg.actors]
    maddpg.update(update_value=False)
    after = [parameters(agent[0]) for agent in maddpg.actors]
    assert same(before[0], after[0])
    assert not same(before[1], after[1]) and not same(before[2], after[2])


def test_targets_move_by_tau_towards_the_online_networks():
    maddpg = make_maddpg(update_rate=0.25)
    fill(maddpg)
    old_target = parameters(maddpg.critic_targets[1])
    maddpg.update()
    online = parameters(maddpg.critics[1])
    for t_old, t_new, o in zip(old_target, parameters(maddpg.critic_targets[1]), online):
        assert torch.allclose(t_new, 0.75 * t_old + 0.25 * o, atol=1e-6)


def test_sub_policies_train_on_their_own_batches_and_drift_apart():
    maddpg = make_maddpg(sub_policy_num=2)
    fill(maddpg)
    for _ in range(3):
        maddpg.update()
    first, second, third = (parameters(a) for a in maddpg.actors[1])
    assert not same(first, second) and not same(second, third)


def test_same_seed_gives_the_same_numbers_and_use_jit_changes_nothing():
    def run(**kwargs):
        maddpg = make_maddpg(**kwargs)
        fill(maddpg)
        torch.manual_seed(2)
        return [maddpg.update() for _ in range(3)], all_parameters(maddpg)

    (values, params), (jit_values, jit_params) = run(), run(use_jit=False)
    assert values == jit_values and same(params, jit_params)


def test_thread_pool_gives_the_same_result_as_sequential_updates():
    def run(**kwargs):
        maddpg = make_maddpg(sub_policy_num=1, **kwargs)
        fill(maddpg)
        torch.manual_seed(2)
        try:
            return [maddpg.update() for _ in range(3)], all_parameters(maddpg)
        finally:
            maddpg.close()

    values, params = run(pool_size=1)
    pooled_values, pooled_params = run(pool_type="thread", pool_size=3)
    assert values == pooled_values and same(params, pooled_params)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.usefixtures("no_children_left")
def test_process_pool_gives_the_same_result_as_sequential_updates():
    def run(**kwargs):
        maddpg = make_maddpg(
            sub_policy_num=1,
            lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
            lr_scheduler_args=((lambda e: 0.5**e,), (lambda e: 0.5**e,)),
            **kwargs,
        )
        fill(maddpg)
        torch.manual_seed(2)
        try:
            values = []
            for _ in range(3):
                values.append(maddpg.update())
                maddpg.update_lr_scheduler()
            fill(maddpg, 1500, seed=3)  # the buffers grow (new shared storage) between updates
            values.append(maddpg.update())
            maddpg.close()  # brings the workers' optimizer states back
            return values, all_parameters(maddpg), maddpg.critic_optims[2].state_dict()
        finally:
            maddpg.close()

    values, params, optim_state = run(pool_size=1)
    pooled_values, pooled_params, pooled_optim_state = run(pool_type="process", pool_size=2)
    assert values == pooled_values and same(params, pooled_params)
    # The critic takes one step per sub-policy and update: 2 x 4.
    assert pooled_optim_state["state"][0]["step"] == optim_state["state"][0]["step"] == 8
    assert torch.equal(
        pooled_optim_state["state"][0]["exp_avg"], optim_state["state"][0]["exp_avg"]
    )


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.usefixtures("no_children_left")
def test_a_process_pool_update_with_nan_rewards_changes_no_network_and_counts_the_skips():
    maddpg = make_maddpg(pool_type="process", pool_size=2)
    with (
        torch.no_grad()
    ):  # targets apart from the online networks, so that a soft update would show
        for p in [*maddpg.actor_targets.parameters(), *maddpg.critic_targets.parameters()]:
            p.add_(0.25)
    for buffer in maddpg.replay_buffers:
        buffer.check_finite = False  # NaN rewards in, as a buggy pipeline would store them
    torch.manual_seed(1)
    for _ in range(16):
        step = random_step(STATE_DIMS, ACTION_DIMS)
        for transition in step:
            transition["reward"] = float("nan")
        maddpg.store_transitions(step)
    before = all_parameters(maddpg)
    try:
        maddpg.update()  # the workers skip the steps (and warn in their own processes)
    finally:
        maddpg.close()
    assert (
        maddpg.skipped_updates == 3
    )  # each agent's first critic step, which ends that agent's steps
    assert same(all_parameters(maddpg), before)


def test_a_spawned_workers_context_unpickles_as_a_working_framework():
    # Spawned workers (CUDA networks) receive the framework through dill, optimizers included.
    maddpg = make_maddpg(
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
        lr_scheduler_args=((lambda e: 1.0,), (lambda e: 1.0,)),
    )
    fill(maddpg)
    rebuilt = loads(dumps(WorkerCopy(maddpg)))
    assert type(rebuilt) is MADDPG and rebuilt._pool is None and rebuilt._lr_schedulers == []
    assert rebuilt.critic_optims[1].param_groups[0]["params"][0] is next(
        rebuilt.critics[1].parameters()
    )
    torch.manual_seed(4)
    expected = maddpg.update()
    torch.manual_seed(4)
    assert rebuilt.update() == expected and same(all_parameters(rebuilt), all_parameters(maddpg))


def _sample_everything(buffer: SHMBuffer):
    return buffer.sample_batch(-1, sample_method="all", sample_attrs=["state", "reward"])


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
@pytest.mark.usefixtures("no_children_left")
def test_shm_buffer_columns_live_in_shared_memory_and_a_worker_samples_them():
    buffer = SHMBuffer(3000)
    torch.manual_seed(0)
    buffer.extend([random_step([3], [2])[0] for _ in range(1500)])  # grows past the first capacity
    assert all(column.tensor.is_shared() for column in buffer._columns())
    with Pool(1, is_copy_tensor=False, share_method="cpu") as pool:
        size, (state, reward) = pool.apply(_sample_everything, (buffer,))
    assert size == 1500
    _, (own_state, own_reward) = _sample_everything(buffer)
    assert torch.equal(state["state"], own_state["state"]) and torch.equal(reward, own_reward)


def test_lr_schedulers_use_the_actor_and_critic_arguments():
    maddpg = make_maddpg(
        sub_policy_num=1,
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
        lr_scheduler_args=((lambda e: 0.5**e,), (lambda e: 0.1**e,)),
    )
    fill(maddpg)
    maddpg.update()
    maddpg.update_lr_scheduler()
    assert all(
        o.param_groups[0]["lr"] == pytest.approx(0.0005 / 2)
        for agent in maddpg.actor_optims
        for o in agent
    )
    assert all(o.param_groups[0]["lr"] == pytest.approx(0.001 / 10) for o in maddpg.critic_optims)


def test_lr_scheduler_args_need_an_actor_and_a_critic_entry():
    with pytest.raises(
        ValueError, match=r"lr_scheduler_args must hold two entries, the first for the actor"
    ):
        make_maddpg(
            lr_scheduler=torch.optim.lr_scheduler.LambdaLR, lr_scheduler_args=((lambda e: 1.0,),)
        )


def test_close_stops_the_pool_and_a_later_update_starts_a_new_one():
    maddpg = make_maddpg(pool_type="thread", pool_size=2)
    fill(maddpg)
    maddpg.update()
    assert maddpg._pool is not None
    maddpg.close()
    assert maddpg._pool is None
    assert maddpg.update() is not None
    maddpg.close()


# -- checkpoints ----------------------------------------------------------------------------
def test_save_and_load_follow_the_network_map(tmp_path):
    maddpg = make_maddpg(sub_policy_num=1)
    fill(maddpg)
    maddpg.update()
    maddpg.save(str(tmp_path), network_map={"critic_targets": "critics_t"}, version=3)
    assert sorted(os.listdir(tmp_path)) == [
        "actor_targets_3.manifest.json",
        "actor_targets_3.pt",
        "critics_t_3.pt",
    ]

    torch.manual_seed(5)
    fresh = MADDPG(
        *make_networks(STATE_DIMS, ACTION_DIMS, VISIBLE),
        VISIBLE,
        torch.optim.Adam,
        nn.MSELoss(),
        sub_policy_num=1,
        pool_size=1,
    )
    fresh.load(str(tmp_path), network_map={"critic_targets": "critics_t"})
    for agent in range(3):
        assert same(
            parameters(fresh.critic_targets[agent]), parameters(maddpg.critic_targets[agent])
        )


# -- learning -------------------------------------------------------------------------------
@pytest.mark.learning
def test_maddpg_beats_a_random_policy_on_simple_spread():
    seed, episodes = 0, 160
    torch.manual_seed(seed)
    np.random.seed(seed)
    # The random policy plays the same 20 starting positions as the last 20 training episodes.
    random_returns = run_spread(None, episodes=20, seed=seed + episodes - 20).returns
    maddpg = spread_maddpg(
        batch_size=128,
        update_rate=0.02,
        actor_learning_rate=1e-3,
        critic_learning_rate=3e-3,
        discount=0.9,
        gradient_max=0.5,
    )
    result = run_spread(
        maddpg,
        episodes=episodes,
        seed=seed,
        update_every=2,
        noise_sigma=0.1,
        critic_only_updates=500,
    )
    returns, seconds = result.returns, result.seconds
    random_mean, trained_mean = float(np.mean(random_returns)), float(np.mean(returns[-20:]))
    print(
        f"MADDPG simple_spread ({SPREAD_AGENTS} agents): mean return of the last 20 of {len(returns)} "
        f"episodes {trained_mean:.2f}, random policy on the same starts {random_mean:.2f}, {seconds:.1f} s"
    )
    assert trained_mean > random_mean + 3.0

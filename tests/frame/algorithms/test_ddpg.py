"""DDPG: acting, noise modes, targets, isolated update switches, soft updates, save/load, learning."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from machin.frame.algorithms.ddpg import DDPG
from machin.frame.transition import Transition

from .contract import ContractCase
from .loops import learns_pendulum, pendulum_failure
from .nets import (
    ACTION_RANGE,
    STATE_DIM,
    Actor,
    ActorDiscrete,
    ActorWithExtra,
    Critic,
    LinearActor,
    LinearCritic,
    fill,
    parameters,
    pendulum_nets,
    random_transition,
    same,
)

CONTRACT_CASES = {
    DDPG: ContractCase(
        args=lambda: (Actor(), Actor(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss()),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act(state, use_target=True),
        explore=lambda agent, state: agent.act_with_noise(
            state, noise_param=(0.0, 0.5), mode="normal"
        ),
        state=lambda: {"state": torch.randn(5, STATE_DIM)},
        experience=lambda: [random_transition() for _ in range(16)],
        trains={"update_value": ["critic"], "update_policy": ["actor"]},
    ),
}


def make_ddpg(actor=None, critic=None, criterion=None, **kwargs) -> DDPG:
    torch.manual_seed(0)
    actor = actor or Actor()
    critic = critic or Critic()
    kwargs.setdefault("batch_size", 8)
    return DDPG(
        actor,
        copy.deepcopy(actor),
        critic,
        copy.deepcopy(critic),
        torch.optim.Adam,
        criterion or nn.MSELoss(),
        **kwargs,
    )


class RecordingMSE(nn.Module):
    """MSE loss that remembers the ``(target, predicted)`` it was called with."""

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.calls = []
        self.loss = nn.MSELoss(reduction=reduction)

    def forward(self, target, predicted):
        self.calls.append((target.detach().clone(), predicted.detach().clone()))
        return self.loss(target, predicted)


def linear_ddpg(w=0.5, u=1.0, v=2.0, discount=0.5, **kwargs) -> DDPG:
    actor, critic = LinearActor(w), LinearCritic(u, v)
    kwargs.setdefault("criterion", RecordingMSE())
    return DDPG(
        actor,
        LinearActor(0.0),
        critic,
        LinearCritic(0.0, 0.0),
        torch.optim.SGD,
        kwargs.pop("criterion"),
        batch_size=1,
        discount=discount,
        **kwargs,
    )


def scalar_transition(s, a, s2, r, terminal) -> Transition:
    return Transition(
        state={"state": torch.tensor([[s]])},
        action={"action": torch.tensor([[a]])},
        next_state={"state": torch.tensor([[s2]])},
        reward=r,
        terminal=terminal,
    )


STATE = {"state": torch.randn(5, STATE_DIM)}


# -- construction -------------------------------------------------------------------------
def test_class_attributes_name_the_networks():
    assert DDPG._is_top == ["actor", "critic", "actor_target", "critic_target"]
    assert DDPG.get_restorable() == ["actor_target", "critic_target"]


def test_targets_are_hard_copied_at_construction():
    ddpg = DDPG(Actor(), Actor(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss())
    assert same(parameters(ddpg.actor), parameters(ddpg.actor_target))
    assert same(parameters(ddpg.critic), parameters(ddpg.critic_target))


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("update_rate", 0.0, "update_rate must be in"),
        ("update_rate", 1.5, "update_rate must be in"),
        ("discount", -0.1, "discount must be in"),
        ("batch_size", 0, "batch_size must be a positive integer"),
        ("actor_learning_rate", 0, "actor_learning_rate must be positive"),
    ],
)
def test_bad_options_raise(option, value, message):
    with pytest.raises(ValueError, match=message):
        make_ddpg(**{option: value})


# -- acting -------------------------------------------------------------------------------
def test_act_returns_actor_output_with_shape_and_bounds():
    ddpg = make_ddpg()
    action = ddpg.act(STATE)
    assert action.shape == (5, 1)
    assert torch.all(action.abs() <= ACTION_RANGE)
    assert torch.equal(action, ddpg.actor(STATE["state"]))
    assert not action.requires_grad


def test_act_passes_extra_outputs_back():
    ddpg = make_ddpg(actor=ActorWithExtra())
    action, extra = ddpg.act(STATE)
    assert action.shape == (5, 1) and torch.equal(extra, torch.ones(5, 2))
    noisy, extra = ddpg.act_with_noise(STATE, noise_param=(0.0, 0.1), mode="normal")
    assert noisy.shape == (5, 1) and torch.equal(extra, torch.ones(5, 2))


def test_act_use_target_uses_the_target_actor():
    ddpg = make_ddpg()
    with torch.no_grad():
        for p in ddpg.actor_target.parameters():
            p.add_(0.5)
    assert torch.equal(ddpg.act(STATE, use_target=True), ddpg.actor_target(STATE["state"]))
    assert not torch.equal(ddpg.act(STATE, use_target=True), ddpg.act(STATE))


def test_uniform_noise_stays_within_bounds_times_ratio():
    ddpg = make_ddpg()
    clean = ddpg.act(STATE)
    noisy = ddpg.act_with_noise(STATE, noise_param=(0.1, 0.2), ratio=2.0, mode="uniform")
    diff = noisy - clean
    assert noisy.shape == clean.shape
    assert torch.all(diff >= 0.2 - 1e-6) and torch.all(diff <= 0.4 + 1e-6)


def test_normal_noise_changes_the_action():
    ddpg = make_ddpg()
    noisy = ddpg.act_with_noise(STATE, noise_param=(0.0, 1.0), mode="normal")
    assert noisy.shape == (5, 1) and not torch.equal(noisy, ddpg.act(STATE))


def test_clipped_normal_noise_is_clipped():
    ddpg = make_ddpg()
    noisy = ddpg.act_with_noise(STATE, noise_param=(0.0, 5.0, -0.1, 0.1), mode="clipped_normal")
    assert torch.all((noisy - ddpg.act(STATE)).abs() <= 0.1 + 1e-6)


def test_per_column_noise_param():
    ddpg = make_ddpg()
    diff = ddpg.act_with_noise(STATE, noise_param=[(0.3, 0.3)], mode="uniform") - ddpg.act(STATE)
    assert torch.allclose(diff, torch.full((5, 1), 0.3))


@pytest.mark.parametrize("mode", ["clipped_normal", "ou"])
def test_modes_with_other_forms_work_with_the_default_noise_param(mode):
    ddpg = make_ddpg()
    noisy = ddpg.act_with_noise(STATE, mode=mode)
    assert noisy.shape == (5, 1) and not torch.equal(noisy, ddpg.act(STATE))


def test_ou_noise_takes_a_dict():
    ddpg = make_ddpg()
    noisy = ddpg.act_with_noise(STATE, noise_param={"sigma": 0.5}, mode="ou")
    assert noisy.shape == (5, 1)


def test_unknown_noise_mode_raises():
    with pytest.raises(
        ValueError,
        match=r"Unknown noise type: 'gauss'; mode must be one of \['uniform', 'normal', 'clipped_normal', 'ou'\]",
    ):
        make_ddpg().act_with_noise(STATE, mode="gauss")


@pytest.mark.parametrize(
    "mode, param, expected",
    [
        ("clipped_normal", (0.0, 1.0), "clip_min, clip_max"),
        ("uniform", (0.0,), "uniform_min, uniform_max"),
        ("normal", "wide", "normal_mean, normal_sigma"),
        ("ou", (0.0, 1.0), "dict"),
    ],
)
def test_wrong_noise_param_form_raises_naming_the_expected_form(mode, param, expected):
    with pytest.raises(ValueError, match=rf"act_with_noise\(mode='{mode}'\).*{expected}"):
        make_ddpg().act_with_noise(STATE, noise_param=param, mode=mode)


def test_act_discrete_returns_argmax_and_probabilities():
    ddpg = make_ddpg(actor=ActorDiscrete())
    action, probs = ddpg.act_discrete(STATE)
    assert action.shape == (5, 1) and action.dtype == torch.long
    assert torch.equal(probs, ddpg.actor(STATE["state"]))
    assert torch.equal(action, probs.argmax(dim=1, keepdim=True))


class FixedProbs(nn.Module):
    def __init__(self, probs):
        super().__init__()
        self.probs = nn.Parameter(torch.tensor([probs]))

    def forward(self, state):
        return self.probs.expand(state.shape[0], -1)


def test_act_discrete_with_noise_samples_from_the_probabilities():
    torch.manual_seed(0)
    ddpg = make_ddpg(actor=FixedProbs([0.0, 0.0, 1.0, 0.0]))
    action, probs = ddpg.act_discrete_with_noise(STATE)
    assert action.shape == (5, 1) and torch.all(action == 2) and probs.shape == (5, 4)
    ddpg = make_ddpg(actor=FixedProbs([0.25, 0.25, 0.25, 0.25]))
    many = ddpg.act_discrete_with_noise({"state": torch.randn(400, STATE_DIM)})[0]
    assert set(many.view(-1).tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize("method", ["act_discrete", "act_discrete_with_noise"])
def test_act_discrete_rejects_an_output_that_is_not_probabilities(method):
    with pytest.raises(ValueError, match="probabilities"):
        getattr(make_ddpg(), method)(STATE)


def test_criticize_calls_the_critic_with_state_and_action():
    ddpg = make_ddpg()
    action = {"action": torch.randn(5, 1)}
    value = ddpg.criticize(STATE, action)
    assert value.shape == (5, 1)
    assert torch.equal(value, ddpg.critic(STATE["state"], action["action"]))
    assert torch.equal(
        ddpg.criticize(STATE, action, use_target=True),
        ddpg.critic_target(STATE["state"], action["action"]),
    )


def test_action_transform_function_feeds_the_critic_action_argument():
    raw = torch.randn(3, 1)
    assert DDPG.action_transform_function(raw, {"state": None}, {})["action"] is raw


def test_reward_function_zeroes_the_bootstrap_at_terminal():
    reward, next_value = torch.tensor([[1.0], [1.0]]), torch.tensor([[4.0], [4.0]])
    terminal = torch.tensor([[0.0], [1.0]])
    out = DDPG.reward_function(reward, 0.5, next_value, terminal, {})
    assert torch.equal(out, torch.tensor([[3.0], [1.0]]))


# -- storing ------------------------------------------------------------------------------
def test_store_transition_and_episode():
    ddpg = make_ddpg()
    ddpg.store_transition(random_transition())
    assert ddpg.replay_buffer.size() == 1
    ddpg.store_episode([random_transition() for _ in range(7)])
    assert ddpg.replay_buffer.size() == 8


def test_store_transition_without_terminal_raises():
    t = random_transition()
    incomplete = {"state": t.state, "action": t.action, "next_state": t.next_state, "reward": 1.0}
    with pytest.raises(ValueError, match="terminal"):
        make_ddpg().store_transition(incomplete)


# -- update -------------------------------------------------------------------------------
def test_update_on_an_empty_buffer_returns_none():
    assert make_ddpg().update() is None


def test_update_returns_policy_value_and_value_loss_as_floats():
    ddpg = make_ddpg()
    fill(ddpg)
    policy_value, value_loss = ddpg.update()
    assert type(policy_value) is float and type(value_loss) is float
    assert value_loss >= 0


def test_target_and_prediction_against_hand_computed_values():
    # a' = w s' = 1, Q'(s', a') = u s' + v a' = 2 + 2 = 4, y = r + 0.5 * 4 = 3
    ddpg = linear_ddpg()
    ddpg.store_transition(scalar_transition(1.0, 0.25, 2.0, 1.0, False))
    ddpg.update(update_value=False, update_policy=False, update_target=False)
    target, predicted = ddpg.criterion.calls[-1]
    assert target.shape == (1, 1) and predicted.shape == (1, 1)
    assert torch.allclose(target, torch.tensor([[3.0]]))
    assert torch.allclose(predicted, torch.tensor([[1.0 + 2.0 * 0.25]]))


def test_terminal_transition_target_is_the_reward():
    ddpg = linear_ddpg()
    ddpg.store_transition(scalar_transition(1.0, 0.25, 2.0, 1.0, True))
    ddpg.update(update_value=False, update_policy=False, update_target=False)
    assert torch.allclose(ddpg.criterion.calls[-1][0], torch.tensor([[1.0]]))


def test_n_step_transitions_bootstrap_with_discount_to_the_steps():
    # a transition rewritten by returns.n_step_episode carries ``steps``: y = r + 0.5 ** 2 * 4 = 2
    ddpg = linear_ddpg()
    t = scalar_transition(1.0, 0.25, 2.0, 1.0, False)
    ddpg.store_transition(
        Transition(
            state=t.state,
            action=t.action,
            next_state=t.next_state,
            reward=1.0,
            terminal=False,
            steps=2,
        )
    )
    ddpg.update(update_value=False, update_policy=False, update_target=False)
    assert torch.allclose(ddpg.criterion.calls[-1][0], torch.tensor([[2.0]]))


def test_policy_value_is_the_critic_value_of_the_actor_action():
    ddpg = linear_ddpg()  # Q(s, w s) = u s + v w s = 1 + 1 = 2 at s = 1
    ddpg.store_transition(scalar_transition(1.0, 0.25, 2.0, 1.0, False))
    policy_value, _ = ddpg.update(update_value=False, update_policy=False, update_target=False)
    assert policy_value == pytest.approx(2.0)


def test_targets_move_by_tau():
    ddpg = make_ddpg(update_rate=0.1)
    fill(ddpg)
    actor_target, critic_target = parameters(ddpg.actor_target), parameters(ddpg.critic_target)
    ddpg.update()
    for old, new, online in zip(
        actor_target + critic_target,
        parameters(ddpg.actor_target) + parameters(ddpg.critic_target),
        parameters(ddpg.actor) + parameters(ddpg.critic),
    ):
        assert torch.allclose(new, 0.9 * old + 0.1 * online, atol=1e-7)


def test_critic_with_a_wrong_output_shape_raises():
    class WideCritic(Critic):
        def forward(self, state, action):
            return super().forward(state, action).expand(-1, 2)

    ddpg = make_ddpg(critic=WideCritic())
    fill(ddpg)
    with pytest.raises(
        ValueError,
        match=r"critic_target output must hold one value per sample, shape \[8\] or \[8, 1\], got \[8, 2\]",
    ):
        ddpg.update()


def test_gradient_max_bounds_the_step():
    torch.manual_seed(0)
    actor, critic = Actor(), Critic()
    ddpg = DDPG(
        actor,
        copy.deepcopy(actor),
        critic,
        copy.deepcopy(critic),
        torch.optim.SGD,
        nn.MSELoss(),
        batch_size=8,
        critic_learning_rate=1.0,
        gradient_max=1e-3,
    )
    fill(ddpg)
    before = torch.cat([p.view(-1) for p in parameters(ddpg.critic)])
    ddpg.update(update_policy=False)
    after = torch.cat([p.view(-1) for p in parameters(ddpg.critic)])
    assert 0 < (after - before).norm() <= 1e-3 + 1e-7


def test_same_seed_gives_the_same_numbers():
    def run():
        ddpg = make_ddpg()
        torch.manual_seed(1)
        fill(ddpg)
        return [ddpg.update() for _ in range(3)]

    assert run() == run()


def test_lr_schedulers_step_both_optimizers():
    halve = (lambda epoch: 0.5**epoch,)
    ddpg = make_ddpg(
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR, lr_scheduler_args=(halve, halve)
    )
    fill(ddpg)
    ddpg.update()
    ddpg.update_lr_scheduler()
    assert ddpg.actor_optim.param_groups[0]["lr"] == pytest.approx(0.0005 / 2)
    assert ddpg.critic_optim.param_groups[0]["lr"] == pytest.approx(0.001 / 2)


def test_lr_scheduler_args_need_one_entry_per_optimizer():
    with pytest.raises(ValueError, match=r"one tuple of arguments per optimizer \(2 here\)"):
        make_ddpg(
            lr_scheduler=torch.optim.lr_scheduler.LambdaLR, lr_scheduler_args=((lambda e: 1.0,),)
        )


# -- learning -----------------------------------------------------------------------------
@pytest.mark.learning
def test_ddpg_learns_pendulum():
    torch.manual_seed(0)
    actor, actor_target, critic, critic_target = pendulum_nets(hidden=64)
    ddpg = DDPG(
        actor,
        actor_target,
        critic,
        critic_target,
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        update_rate=0.005,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
    )
    result = learns_pendulum(ddpg, "DDPG")
    assert result.solved_episode is not None, pendulum_failure("DDPG", result)


def test_n_step_episodes_bootstrap_with_discount_to_the_power_of_steps():
    from machin.frame.algorithms.returns import n_step_episode

    torch.manual_seed(0)
    ddpg = DDPG(
        *pendulum_nets(),
        torch.optim.Adam,
        nn.MSELoss(reduction="sum"),
        batch_size=4,
        discount=0.5,
        n_step=3,
    )
    episode = [random_transition(reward=1.0) for _ in range(4)]
    with pytest.raises(RuntimeError, match="store_episode"):
        ddpg.store_transition(episode[0])
    ddpg.store_episode(episode)
    expected_rewards = sorted(t.reward for t in n_step_episode(episode, 3, 0.5))
    batch = ddpg._sample(True)
    assert sorted(batch.reward.view(-1).tolist()) == expected_rewards == [1.0, 1.5, 1.75, 1.75]
    steps = torch.tensor(batch.others["steps"], dtype=torch.float32).view(-1, 1)
    with torch.no_grad():
        next_action = ddpg.action_transform_function(ddpg.actor_target(batch.next_state["state"]))
        next_value = ddpg.critic_target(batch.next_state["state"], next_action["action"])
    expected = batch.reward + 0.5**steps * (1 - batch.terminal) * next_value
    assert torch.allclose(ddpg._bellman_target(batch), expected, atol=1e-6)
    with pytest.raises(ValueError, match="n_step must be a positive integer"):
        DDPG(*pendulum_nets(), torch.optim.Adam, nn.MSELoss(), n_step=0)

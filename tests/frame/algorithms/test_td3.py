"""TD3: clipped double-Q target, target policy smoothing, delayed policy updates, three optimizers."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from machin.frame.algorithms.td3 import TD3
from machin.frame.transition import Transition

from .contract import ContractCase
from .loops import learns_pendulum, pendulum_failure
from .nets import (
    STATE_DIM,
    Actor,
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
    TD3: ContractCase(
        args=lambda: (
            Actor(),
            Actor(),
            Critic(),
            Critic(),
            Critic(),
            Critic(),
            torch.optim.Adam,
            nn.MSELoss(),
        ),
        options={"batch_size": 8, "policy_update_delay": 1},
        act=lambda agent, state: agent.act(state, use_target=True),
        explore=lambda agent, state: agent.act_with_noise(
            state, noise_param=(0.0, 0.5), mode="normal"
        ),
        state=lambda: {"state": torch.randn(5, STATE_DIM)},
        experience=lambda: [random_transition() for _ in range(16)],
        trains={"update_value": ["critic", "critic2"], "update_policy": ["actor"]},
    ),
}

STATE = {"state": torch.randn(5, STATE_DIM)}


def make_td3(**kwargs) -> TD3:
    torch.manual_seed(0)
    actor, critic, critic2 = Actor(), Critic(), Critic()
    kwargs.setdefault("batch_size", 8)
    return TD3(
        actor,
        copy.deepcopy(actor),
        critic,
        copy.deepcopy(critic),
        critic2,
        copy.deepcopy(critic2),
        torch.optim.Adam,
        nn.MSELoss(),
        **kwargs,
    )


class RecordingMSE(nn.MSELoss):
    def __init__(self):
        super().__init__()
        self.targets = []

    def forward(self, target, predicted):
        self.targets.append(target.detach().clone())
        return super().forward(target, predicted)


def linear_td3(cls=TD3, **kwargs) -> TD3:
    """Critics Q1 = s + 2a and Q2 = 3s + a; one transition s=1, a=0.25, s'=2, r=1 (discount 0.5)."""
    td3 = cls(
        LinearActor(0.5),
        LinearActor(0.0),
        LinearCritic(1.0, 2.0),
        LinearCritic(0.0, 0.0),
        LinearCritic(3.0, 1.0),
        LinearCritic(0.0, 0.0),
        torch.optim.SGD,
        RecordingMSE(),
        batch_size=1,
        discount=0.5,
        **kwargs,
    )
    td3.store_transition(
        Transition(
            state={"state": torch.ones(1, 1)},
            action={"action": torch.full((1, 1), 0.25)},
            next_state={"state": torch.full((1, 1), 2.0)},
            reward=1.0,
            terminal=False,
        )
    )
    return td3


def test_class_attributes_include_the_second_critic():
    assert TD3._is_top == [
        "actor",
        "critic",
        "actor_target",
        "critic_target",
        "critic2",
        "critic2_target",
    ]
    assert TD3.get_restorable() == ["actor_target", "critic_target", "critic2_target"]


def test_second_target_is_hard_copied_and_has_its_own_optimizer():
    td3 = TD3(
        Actor(), Actor(), Critic(), Critic(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss()
    )
    assert same(parameters(td3.critic2), parameters(td3.critic2_target))
    assert {id(p) for p in td3.critic2_optim.param_groups[0]["params"]} == {
        id(p) for p in td3.critic2.parameters()
    }


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("policy_update_delay", 0, "policy_update_delay must be a positive integer, got 0"),
        (
            "policy_update_delay",
            1.5,
            "policy_update_delay must be a positive integer, got 1.5 of type float",
        ),
        ("policy_noise", -0.1, "policy_noise must be non-negative, got -0.1"),
        ("noise_clip", -1.0, "noise_clip must be non-negative, got -1.0"),
    ],
)
def test_bad_options_raise(option, value, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make_td3(**{option: value})


def test_target_uses_the_smaller_target_critic():
    # a' = 0.5 * 2 = 1; Q1'(2, 1) = 2 + 2 = 4; Q2'(2, 1) = 6 + 1 = 7; y = 1 + 0.5 * 4 = 3
    td3 = linear_td3(policy_noise=0.0)
    td3.update(update_value=False, update_policy=False, update_target=False)
    assert len(td3.criterion.targets) == 2  # one loss per critic, same target
    assert all(torch.allclose(t, torch.tensor([[3.0]])) for t in td3.criterion.targets)


def test_policy_noise_function_override_is_used_for_the_target():
    class ShiftedTD3(TD3):
        @staticmethod
        def policy_noise_function(actions, *_):
            return actions + 1.0

    # a' = 1 + 1 = 2; Q1' = 2 + 4 = 6; Q2' = 6 + 2 = 8; y = 1 + 0.5 * 6 = 4
    td3 = linear_td3(ShiftedTD3)
    td3.update(update_value=False, update_policy=False, update_target=False)
    assert torch.allclose(td3.criterion.targets[0], torch.tensor([[4.0]]))


def test_default_smoothing_noise_is_gaussian_and_clipped():
    torch.manual_seed(0)
    actions = torch.zeros(20000, 1)
    noise = TD3.policy_noise_function(actions, 0.2, 0.5)
    assert noise.abs().max() <= 0.5
    assert noise.std().item() == pytest.approx(0.2, rel=0.05)
    clipped = TD3.policy_noise_function(actions, 1.0, 0.1)
    assert clipped.abs().max() <= 0.1 and (clipped.abs() == 0.1).float().mean() > 0.8
    assert torch.equal(actions, torch.zeros(20000, 1))


def test_smoothing_noise_reaches_the_target():
    torch.manual_seed(0)
    td3 = linear_td3(policy_noise=0.2, noise_clip=0.5)
    for _ in range(4):
        td3.update(update_value=False, update_policy=False, update_target=False)
    targets = torch.cat(td3.criterion.targets[::2]).view(-1)
    # y = 1 + 0.5 * min(2 + 2 a', 6 + a') = 3 + a' - 1 with a' = 1 + noise, noise in [-0.5, 0.5]
    assert not torch.allclose(targets, torch.full_like(targets, 3.0))
    assert torch.all((targets - 3.0).abs() <= 0.5 + 1e-6)


@pytest.mark.parametrize("delay", [2, 3])
def test_actor_and_targets_update_only_every_delay_steps(delay):
    td3 = make_td3(policy_update_delay=delay)
    fill(td3)

    def targets():
        return (
            parameters(td3.actor_target)
            + parameters(td3.critic_target)
            + parameters(td3.critic2_target)
        )

    for step in range(1, 2 * delay + 1):
        actor, critic, critic2, target = (
            parameters(td3.actor),
            parameters(td3.critic),
            parameters(td3.critic2),
            targets(),
        )
        policy_value, value_loss = td3.update()
        assert type(policy_value) is float and type(value_loss) is float
        assert not same(critic, parameters(td3.critic)) and not same(
            critic2, parameters(td3.critic2)
        )
        due = step % delay == 0
        assert same(actor, parameters(td3.actor)) != due
        assert same(target, targets()) != due


def test_policy_update_delay_one_updates_every_time():
    td3 = make_td3(policy_update_delay=1)
    fill(td3)
    actor = parameters(td3.actor)
    td3.update()
    assert not same(actor, parameters(td3.actor))


def test_three_lr_scheduler_slots():
    halve = (lambda epoch: 0.5**epoch,)
    td3 = make_td3(
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR, lr_scheduler_args=(halve, halve, halve)
    )
    fill(td3)
    td3.update()
    td3.update()  # the actor steps on the second (delayed) update
    td3.update_lr_scheduler()
    lrs = [o.param_groups[0]["lr"] for o in (td3.actor_optim, td3.critic_optim, td3.critic2_optim)]
    assert lrs == pytest.approx([0.0005 / 2, 0.001 / 2, 0.001 / 2])
    with pytest.raises(ValueError, match=r"\(3 here\)"):
        make_td3(lr_scheduler=torch.optim.lr_scheduler.LambdaLR, lr_scheduler_args=(halve, halve))


@pytest.mark.learning
def test_td3_learns_pendulum():
    torch.manual_seed(0)
    actor, actor_target, critic, critic_target = pendulum_nets(hidden=64)
    td3 = TD3(
        actor,
        actor_target,
        critic,
        critic_target,
        Critic(hidden=64),
        Critic(hidden=64),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        update_rate=0.02,
        actor_learning_rate=3e-3,
        critic_learning_rate=3e-3,
    )
    result = learns_pendulum(td3, "TD3")
    assert result.solved_episode is not None, pendulum_failure("TD3", result)


def test_action_range_clamps_exploration_and_smoothed_target_actions():
    td3 = make_td3(action_range=(-0.1, 0.1), policy_noise=5.0, noise_clip=5.0)
    noisy = td3.act_with_noise(
        {"state": torch.zeros(64, 3)}, noise_param=(0.0, 10.0), mode="normal"
    )
    assert noisy.min().item() == pytest.approx(-0.1) and noisy.max().item() == pytest.approx(0.1)
    fill(td3, 32)
    batch = td3._sample(True)
    smoothed = td3._target_action(batch)
    assert smoothed.abs().max().item() <= 0.1 + 1e-7
    unclamped = make_td3(policy_noise=5.0, noise_clip=5.0)
    fill(unclamped, 32)
    assert unclamped._target_action(unclamped._sample(True)).abs().max().item() > 0.1
    with pytest.raises(ValueError, match="action_range must have low < high"):
        make_td3(action_range=(1.0, -1.0))
    with pytest.raises(
        TypeError, match=r"action_range must be None or a \(low, high\) pair, got 3"
    ):
        make_td3(action_range=3)

"""DDPGPer: prioritized buffer, per-sample criterion check, IS weighting, priority updates."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from machin.frame.algorithms.ddpg_per import DDPGPer
from machin.frame.buffers import Buffer, PrioritizedBuffer
from machin.frame.transition import Transition

from .contract import ContractCase
from .loops import learns_pendulum, pendulum_failure
from .nets import (
    STATE_DIM,
    Actor,
    Critic,
    LinearActor,
    LinearCritic,
    SummingLoss,
    fill,
    pendulum_nets,
    random_transition,
)

CONTRACT_CASES = {
    DDPGPer: ContractCase(
        args=lambda: (
            Actor(),
            Actor(),
            Critic(),
            Critic(),
            torch.optim.Adam,
            nn.MSELoss(reduction="none"),
        ),
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


def make_per(criterion=None, **kwargs) -> DDPGPer:
    torch.manual_seed(0)
    actor, critic = Actor(), Critic()
    kwargs.setdefault("batch_size", 8)
    return DDPGPer(
        actor,
        copy.deepcopy(actor),
        critic,
        copy.deepcopy(critic),
        torch.optim.Adam,
        criterion or nn.MSELoss(reduction="none"),
        **kwargs,
    )


def zero_value_per(rewards, **kwargs) -> DDPGPer:
    """Linear nets in zero states and actions: Q = 0 and the target equals the reward."""
    per = DDPGPer(
        LinearActor(0.5),
        LinearActor(0.0),
        LinearCritic(1.0, 2.0),
        LinearCritic(0.0, 0.0),
        torch.optim.SGD,
        nn.MSELoss(reduction="none"),
        batch_size=len(rewards),
        **kwargs,
    )
    zero = torch.zeros(1, 1)
    per.store_episode(
        [
            Transition(
                state={"state": zero},
                action={"action": zero},
                next_state={"state": zero},
                reward=r,
                terminal=False,
            )
            for r in rewards
        ]
    )
    return per


def test_default_buffer_is_prioritized():
    assert isinstance(make_per().replay_buffer, PrioritizedBuffer)


def test_a_plain_buffer_is_rejected():
    with pytest.raises(
        TypeError, match="replay_buffer must be None or a PrioritizedBuffer, got Buffer"
    ):
        make_per(replay_buffer=Buffer(100))


def test_a_criterion_returning_one_number_raises_asking_for_reduction_none():
    per = make_per(criterion=SummingLoss())
    fill(per)
    with pytest.raises(ValueError, match=r'one loss per sample.*got shape \[\].*reduction="none"'):
        per.update()


def test_priorities_become_the_absolute_td_errors():
    rewards = [0.5, -2.0, 1.5, 3.0]
    per = zero_value_per(rewards)
    calls = []
    original = per.replay_buffer.update_priority
    per.replay_buffer.update_priority = lambda p, i: (
        calls.append((np.array(p), np.array(i))),
        original(p, i),
    )
    per.update(update_value=False, update_policy=False, update_target=False)

    ((priorities, indexes),) = calls
    assert np.allclose(priorities, np.abs(np.array(rewards)[indexes]))
    buffer = per.replay_buffer
    expected_weights = (np.abs(np.array(rewards)[indexes]) + buffer.epsilon) ** buffer.alpha
    assert np.allclose(buffer.wt_tree.get_leaf_weight(indexes), expected_weights)


def test_value_loss_is_weighted_by_the_importance_sampling_weights():
    rewards = [0.5, -2.0, 1.5, 3.0]
    per = zero_value_per(rewards)
    per.replay_buffer.update_priority(
        np.array([0.1, 5.0, 1.0, 0.2]), np.arange(4)
    )  # unequal weights
    sampled = []
    original = per.replay_buffer.sample_batch

    def recording_sample(*args, **kwargs):
        result = original(*args, **kwargs)
        sampled.append(result)
        return result

    per.replay_buffer.sample_batch = recording_sample
    _, value_loss = per.update(update_value=False, update_policy=False, update_target=False)

    ((_, _, indexes, is_weights),) = sampled
    assert not np.allclose(is_weights, is_weights[0])
    per_sample = np.array(rewards)[indexes] ** 2  # (target - 0) ** 2
    assert value_loss == pytest.approx(float(np.mean(is_weights * per_sample)), rel=1e-5)


def test_update_trains_with_prioritized_samples():
    per = make_per()
    fill(per)
    critic = [p.detach().clone() for p in per.critic.parameters()]
    policy_value, value_loss = per.update()
    assert type(policy_value) is float and type(value_loss) is float
    assert not all(torch.equal(a, b) for a, b in zip(critic, per.critic.parameters()))


@pytest.mark.learning
def test_ddpg_per_learns_pendulum():
    torch.manual_seed(0)
    actor, actor_target, critic, critic_target = pendulum_nets(hidden=64)
    per = DDPGPer(
        actor,
        actor_target,
        critic,
        critic_target,
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=64,
        update_rate=0.005,
        actor_learning_rate=1e-3,
        critic_learning_rate=1e-3,
    )
    result = learns_pendulum(per, "DDPGPer")
    assert result.solved_episode is not None, pendulum_failure("DDPGPer", result)

"""HDDPG: asymmetric scaling of TD errors, and equality with DDPG when both rates are 1."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from machin.frame.algorithms.ddpg import DDPG
from machin.frame.algorithms.hddpg import HDDPG
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
    pendulum_nets,
    random_transition,
)

CONTRACT_CASES = {
    HDDPG: ContractCase(
        args=lambda: (Actor(), Actor(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss()),
        options={"batch_size": 8, "q_decrease_rate": 0.5},
        act=lambda agent, state: agent.act(state, use_target=True),
        explore=lambda agent, state: agent.act_with_noise(
            state, noise_param=(0.0, 0.5), mode="normal"
        ),
        state=lambda: {"state": torch.randn(5, STATE_DIM)},
        experience=lambda: [random_transition() for _ in range(16)],
        trains={"update_value": ["critic"], "update_policy": ["actor"]},
    ),
}


class RecordingMSE(nn.MSELoss):
    def __init__(self):
        super().__init__(reduction="sum")
        self.targets = []

    def forward(self, target, predicted):
        self.targets.append(target.detach().clone())
        return super().forward(target, predicted)


def linear_hddpg(reward: float, **rates) -> HDDPG:
    """One transition with Q(s, a) = 1 * 1 + 2 * 0.5 = 2 and target = reward (discount 0)."""
    hddpg = HDDPG(
        LinearActor(0.5),
        LinearActor(0.0),
        LinearCritic(1.0, 2.0),
        LinearCritic(0.0, 0.0),
        torch.optim.SGD,
        RecordingMSE(),
        batch_size=1,
        discount=0.0,
        critic_learning_rate=0.1,
        **rates,
    )
    hddpg.store_transition(
        Transition(
            state={"state": torch.ones(1, 1)},
            action={"action": torch.full((1, 1), 0.5)},
            next_state={"state": torch.ones(1, 1)},
            reward=reward,
            terminal=False,
        )
    )
    return hddpg


def critic_step(hddpg: HDDPG) -> torch.Tensor:
    before = torch.stack([hddpg.critic.u.detach().clone(), hddpg.critic.v.detach().clone()])
    hddpg.update(update_policy=False, update_target=False)
    return torch.stack([hddpg.critic.u.detach(), hddpg.critic.v.detach()]) - before


@pytest.mark.parametrize("name", ["q_increase_rate", "q_decrease_rate"])
def test_negative_rates_raise(name):
    with pytest.raises(ValueError, match=f"{name} must be non-negative, got -0.5"):
        HDDPG(Actor(), Actor(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss(), **{name: -0.5})


@pytest.mark.parametrize(
    "reward, rate_name, rate",
    [
        (5.0, "q_increase_rate", 0.25),  # positive TD error: target 5 > Q 2
        (-1.0, "q_decrease_rate", 0.25),  # negative TD error: target -1 < Q 2
    ],
)
def test_td_errors_are_scaled_by_the_rate_of_their_sign(reward, rate_name, rate):
    hddpg = linear_hddpg(reward, **{rate_name: rate})
    step = critic_step(hddpg)
    assert torch.allclose(
        hddpg.criterion.targets[-1], torch.tensor([[2.0 + rate * (reward - 2.0)]])
    )
    full_step = critic_step(linear_hddpg(reward))
    assert torch.allclose(step, rate * full_step)


@pytest.mark.parametrize(
    "reward, rates",
    [
        (5.0, {"q_decrease_rate": 0.0}),  # a negative-only rate does not touch a positive error
        (-1.0, {"q_increase_rate": 0.0}),  # and the other way round
    ],
)
def test_the_other_rate_does_not_apply(reward, rates):
    assert torch.allclose(
        critic_step(linear_hddpg(reward, **rates)), critic_step(linear_hddpg(reward))
    )


def test_zero_rate_freezes_the_critic_on_errors_of_that_sign():
    assert torch.count_nonzero(critic_step(linear_hddpg(-1.0, q_decrease_rate=0.0))) == 0


def test_with_both_rates_one_it_matches_ddpg():
    torch.manual_seed(0)
    actor, critic = Actor(), Critic()
    results = []
    for cls in (DDPG, HDDPG):
        a, c = copy.deepcopy(actor), copy.deepcopy(critic)
        algorithm = cls(
            a,
            copy.deepcopy(a),
            c,
            copy.deepcopy(c),
            torch.optim.Adam,
            nn.MSELoss(),
            batch_size=8,
            update_rate=0.1,
        )
        torch.manual_seed(1)
        fill(algorithm)
        losses = [algorithm.update() for _ in range(4)]
        results.append(
            (
                losses,
                [p.detach() for n in algorithm._is_top for p in getattr(algorithm, n).parameters()],
            )
        )
    (ddpg_losses, ddpg_params), (hddpg_losses, hddpg_params) = results
    # update() returns (policy value, value loss) per call: compare them as one flat list,
    # which pytest.approx accepts on every pytest version.
    assert len(ddpg_losses) == len(hddpg_losses) == 4
    assert all(len(pair) == 2 for pair in ddpg_losses + hddpg_losses)
    flat = [float(x) for pair in hddpg_losses for x in pair]
    assert [float(x) for pair in ddpg_losses for x in pair] == pytest.approx(flat, rel=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ddpg_params, hddpg_params))


@pytest.mark.learning
def test_hddpg_learns_pendulum():
    torch.manual_seed(0)
    actor, actor_target, critic, critic_target = pendulum_nets(hidden=64)
    hddpg = HDDPG(
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
        q_increase_rate=1.0,
        q_decrease_rate=0.5,
    )
    result = learns_pendulum(hddpg, "HDDPG")
    assert result.solved_episode is not None, pendulum_failure("HDDPG", result)

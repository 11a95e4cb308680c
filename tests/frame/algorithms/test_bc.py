"""BC: deterministic, stochastic and discrete actors cloned from a buffer; learns Pendulum from a scripted expert."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms.bc import BC
from machin.frame.offline import evaluate_policy, load_minari
from machin.frame.transition import Transition
from tests.frame.offline.expert import record_dataset

from .contract import ContractCase
from .nets import (
    STATE_DIM,
    Actor,
    CategoricalActor,
    LinearActor,
    parameters,
    random_transition,
    same,
    transition,
)


def _store_nan_actions(agent, experience):
    """BC reads no rewards: its loss goes non-finite through NaN actions (stored past the check)."""
    agent.replay_buffer.check_finite = False
    for step in experience:
        step.action["action"] = torch.full_like(step.action["action"], math.nan)
    agent.store_episode(experience)


CONTRACT_CASES = {
    BC: ContractCase(
        args=lambda: (Actor(), torch.optim.Adam),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act(state),
        state=lambda: {"state": torch.randn(5, STATE_DIM)},
        experience=lambda: [random_transition() for _ in range(16)],
        trains={"update_policy": ["actor"]},
        store_nan_rewards=_store_nan_actions,
    ),
}


def one_step_bc(**options) -> BC:
    """``a = 0.5 s`` learning the one transition s = 1, a = 0.25 with SGD (lr 0.1)."""
    bc = BC(LinearActor(0.5), torch.optim.SGD, batch_size=1, learning_rate=0.1, **options)
    bc.store_transition(
        Transition(
            state={"state": torch.ones(1, 1)},
            action={"action": torch.full((1, 1), 0.25)},
            next_state={"state": torch.ones(1, 1)},
            reward=0.0,
            terminal=False,
        )
    )
    return bc


def test_a_deterministic_actor_takes_a_gradient_step_on_the_squared_error():
    bc = one_step_bc()
    assert bc.update() == pytest.approx(0.0625)  # (0.5 - 0.25)^2
    assert bc.actor.w.item() == pytest.approx(0.5 - 0.1 * 2 * 0.25)
    assert bc.updates_done == 1


def test_update_policy_false_computes_the_loss_and_changes_nothing():
    bc = one_step_bc()
    assert bc.update(update_policy=False) == pytest.approx(0.0625)
    assert bc.actor.w.item() == 0.5 and bc.actor.w.grad is None


def test_an_empty_buffer_trains_nothing():
    assert BC(Actor(), torch.optim.Adam).update() is None


def test_the_criterion_is_called_with_target_then_prediction():
    calls = []

    def criterion(target, predicted):
        calls.append((target.item(), predicted.item()))
        return (target - predicted).abs().mean()

    bc = one_step_bc()
    bc.criterion = criterion
    assert bc.update() == pytest.approx(0.25)
    assert calls == [(0.25, 0.5)]


def test_a_discrete_actor_learns_by_cross_entropy_and_acts_greedily():
    torch.manual_seed(0)
    logits = nn.Linear(4, 3)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = logits

        def forward(self, state):
            return self.fc(state)

    bc = BC(Net(), torch.optim.Adam, policy_type="discrete", batch_size=4)
    steps = [transition(torch.randn(4), i % 3, torch.randn(4), 0.0, False) for i in range(4)]
    bc.store_episode(steps)
    states = torch.cat([s["state"]["state"] for s in steps])
    actions = torch.tensor([0, 1, 2, 0])
    expected = nn.functional.cross_entropy(logits(states), actions).item()
    assert bc.update(update_policy=False) == pytest.approx(expected, rel=1e-5)
    action, probs = bc.act_discrete({"state": states})
    assert torch.equal(action, logits(states).argmax(dim=1, keepdim=True))
    assert torch.allclose(probs.sum(dim=1), torch.ones(4))
    assert bc.eval_act_method == "act_discrete"


def test_a_stochastic_actor_maximises_the_likelihood_of_the_dataset_actions():
    torch.manual_seed(0)
    actor = CategoricalActor(state_dim=4, action_num=2)
    bc = BC(actor, torch.optim.Adam, policy_type="stochastic", batch_size=6)
    steps = [transition(torch.randn(4), i % 2, torch.randn(4), 0.0, False) for i in range(6)]
    bc.store_episode(steps)
    states = torch.cat([s["state"]["state"] for s in steps])
    actions = torch.tensor([[0], [1], [0], [1], [0], [1]])
    _, log_prob, _ = actor(states, actions)
    assert bc.update(update_policy=False) == pytest.approx(-log_prob.mean().item(), rel=1e-5)
    before = parameters(actor)
    bc.update()
    assert not same(before, parameters(actor))
    assert not bc.can_act_deterministically()  # CategoricalActor takes no deterministic flag


def test_a_criterion_is_refused_for_actors_with_their_own_loss_and_options_are_checked():
    with pytest.raises(
        ValueError, match="criterion is the loss of a deterministic actor; a stochastic actor"
    ):
        BC(CategoricalActor(), torch.optim.Adam, nn.MSELoss(), policy_type="stochastic")
    with pytest.raises(
        ValueError,
        match=r"policy_type must be one of \['deterministic', 'stochastic', 'discrete'\], got 'greedy'",
    ):
        BC(Actor(), torch.optim.Adam, policy_type="greedy")
    with pytest.raises(ValueError, match="act_discrete needs policy_type='discrete'"):
        BC(Actor(), torch.optim.Adam).act_discrete({"state": torch.zeros(1, STATE_DIM)})
    with pytest.raises(TypeError, match="Trainer has no defaults for BC"):
        from machin.frame.trainer import Trainer

        Trainer(BC(Actor(), torch.optim.Adam), gym.make("Pendulum-v1"))


@pytest.mark.learning
def test_bc_learns_pendulum_from_a_scripted_expert(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    dataset = record_dataset("pendulum/expert-v0", episodes=10, seed=0)
    torch.manual_seed(0)
    bc = BC(
        Actor(hidden=64),
        torch.optim.Adam,
        replay_buffer=load_minari(dataset),
        batch_size=256,
        learning_rate=5e-3,
    )
    for _ in range(1000):
        bc.update()
    assert evaluate_policy(bc, gym.make("Pendulum-v1"), episodes=5, seed=1000) > -400

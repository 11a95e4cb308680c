import math

import pytest
import torch
from torch import nn

from machin.frame.algorithms import SAC
from machin.frame.algorithms.sac import SAC as SACFromModule

from .contract import ContractCase
from .loops import pendulum_failure
from .nets import (
    CategoricalActor,
    QCritic,
    TanhGaussianActor,
    episode_steps,
    parameters,
    same,
    step_dict,
)
from .sac_family import learn_pendulum

CONTRACT_CASES = {
    SAC: ContractCase(
        args=lambda: (
            TanhGaussianActor(hidden=16),
            *(QCritic(hidden=16) for _ in range(4)),
            torch.optim.Adam,
            nn.MSELoss(),
        ),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act(state),
        state=lambda: {"state": torch.randn(6, 3)},
        experience=lambda: episode_steps(16, 3, discrete=False),
        trains={"update_value": ["critic", "critic2"], "update_policy": ["actor"]},
    ),
}


class FixedQ(nn.Module):
    """Q(s, a) = -(a - 1)^2 summed over action dimensions; one unused parameter for the optimizer."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, state, action):
        return -(action - 1.0).pow(2).sum(dim=1, keepdim=True) + 0 * self.unused


class DiscreteQ(nn.Module):
    """Q(s, a) = a for integer actions in {0, 1}."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, state, action):
        return action.view(-1, 1).float() + 0 * self.unused


class BareActor(TanhGaussianActor):
    def forward(self, state, action=None):
        return super().forward(state, action)[0]


def make(actor=None, critic_cls=QCritic, action_dim=1, **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("batch_size", 16)
    actor = actor or TanhGaussianActor(action_dim=action_dim, hidden=16)
    critics = [
        critic_cls(action_dim=action_dim, hidden=16) if critic_cls is QCritic else critic_cls()
        for _ in range(4)
    ]
    return SAC(actor, *critics, torch.optim.Adam, nn.MSELoss(), **kwargs)


def fill(agent, n=32, action_dim=1, discrete=False):
    gen = torch.Generator().manual_seed(1)
    for i in range(n):
        action = [[i % 2]] if discrete else torch.rand(1, action_dim, generator=gen) * 4 - 2
        agent.store_transition(
            step_dict(
                torch.randn(3, generator=gen),
                action,
                torch.randn(3, generator=gen),
                float(i % 3),
                i % 8 == 7,
            )
        )


def test_class_attributes_and_targets_start_as_copies():
    assert SAC is SACFromModule
    assert SAC._is_top == ["actor", "critic", "critic2", "critic_target", "critic2_target"]
    assert SAC.get_restorable() == ["actor", "critic_target", "critic2_target"]
    sac = make()
    assert same(parameters(sac.critic), parameters(sac.critic_target))
    assert same(parameters(sac.critic2), parameters(sac.critic2_target))
    assert sac.entropy_alpha == pytest.approx(1.0)


def test_act_returns_actor_outputs_and_sets_default_target_entropy():
    sac = make(action_dim=2)
    assert sac.target_entropy is None
    out = sac.act({"state": torch.randn(5, 3)})
    assert isinstance(out, tuple) and len(out) == 3
    assert out[0].shape == (5, 2) and out[1].shape == (5, 1) and not out[1].requires_grad
    assert sac.target_entropy == -2.0
    assert make(target_entropy=0.5).target_entropy == 0.5


def test_the_actor_acts_in_evaluation_mode():
    actor = TanhGaussianActor(hidden=16)
    actor.body = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 16), nn.ReLU())
    sac = make(actor)
    assert not actor.training  # built: in evaluation mode
    actor.train()  # put back into training mode by the user: acting switches it again
    action, log_prob, _ = sac.act({"state": torch.randn(1, 3)})  # one state: no batch statistics
    assert action.shape == (1, 1) and log_prob.shape == (1, 1)
    assert not actor.training and actor.body[0].num_batches_tracked.item() == 0


def test_discrete_actions_need_an_explicit_target_entropy():
    sac = make(CategoricalActor(state_dim=3), critic_cls=DiscreteQ)
    with pytest.raises(ValueError, match="target_entropy cannot be derived from discrete actions"):
        sac.act({"state": torch.randn(2, 3)})


def test_update_trains_every_part_and_returns_floats():
    sac = make(initial_entropy_alpha=0.5)
    fill(sac)
    before = {name: parameters(getattr(sac, name)) for name in SAC._is_top}
    policy_value, value_loss = sac.update()
    assert isinstance(policy_value, float) and isinstance(value_loss, float) and value_loss >= 0
    for name in SAC._is_top:
        assert not same(parameters(getattr(sac, name)), before[name]), name
    assert sac.entropy_alpha != pytest.approx(0.5)


def test_targets_move_by_update_rate():
    sac = make(update_rate=0.25)
    fill(sac)
    target_before = parameters(sac.critic_target)
    sac.update()
    for old, new, online in zip(
        target_before, parameters(sac.critic_target), parameters(sac.critic)
    ):
        assert torch.allclose(new, 0.75 * old + 0.25 * online, atol=1e-6)


def test_entropy_alpha_moves_towards_target_entropy():
    for target, direction in ((50.0, 1), (-50.0, -1)):  # unreachable high / low targets
        sac = make(initial_entropy_alpha=1.0, target_entropy=target, alpha_learning_rate=0.05)
        fill(sac)
        alphas = [sac.entropy_alpha]
        for _ in range(5):
            sac.update()
            alphas.append(sac.entropy_alpha)
        assert all(direction * (b - a) > 0 for a, b in zip(alphas, alphas[1:])), alphas
    sac = make(initial_entropy_alpha=0.3)
    fill(sac)
    sac.update(update_entropy_alpha=False)
    assert sac.entropy_alpha == pytest.approx(0.3)


def mean_action(sac, state):
    torch.manual_seed(3)
    return sac.act({"state": state})[0].float().mean().item()


def test_reparameterised_actor_gradient_flows_through_the_critic():
    # Q is best at a = 1; with a negligible alpha the actor can only learn that through Q(s, rsample())
    sac = make(
        critic_cls=FixedQ, initial_entropy_alpha=1e-6, actor_learning_rate=0.01, batch_size=32
    )
    fill(sac)
    state = torch.randn(256, 3)
    before = mean_action(sac, state)
    for _ in range(30):
        sac.update(update_value=False, update_target=False, update_entropy_alpha=False)
    after = mean_action(sac, state)
    assert abs(after - 1.0) < abs(before - 1.0) - 0.2


def test_discrete_actor_learns_with_score_function_gradient():
    sac = make(
        CategoricalActor(state_dim=3),
        critic_cls=DiscreteQ,
        target_entropy=0.1,
        initial_entropy_alpha=0.01,
        actor_learning_rate=0.02,
        batch_size=32,
    )
    fill(sac, discrete=True)
    state = torch.randn(256, 3)
    before = mean_action(sac, state)  # fraction of action 1, the better one
    for _ in range(30):
        sac.update(update_value=False, update_target=False)
    assert mean_action(sac, state) > before + 0.2


def test_static_hooks():
    action = torch.ones(2, 1)
    assert SAC.action_transform_function(action)["action"] is action
    target = SAC.reward_function(
        torch.tensor([[1.0], [1.0]]),
        0.5,
        torch.tensor([[4.0], [4.0]]),
        torch.tensor([[0.0], [1.0]]),
        {},
    )
    assert target.view(-1).tolist() == [3.0, 1.0]


def test_storing_and_empty_update():
    sac = make()
    assert sac.update() is None
    step = step_dict([0.0, 0.0, 0.0], [[0.5]], [0.0, 0.0, 0.0], 1.0, False)
    sac.store_episode([step, step])
    assert sac.replay_buffer.size() == 2
    del step["terminal"]
    with pytest.raises(ValueError, match=r"missing .*'terminal'"):
        sac.store_transition(step)


def test_bad_actor_output_and_options():
    sac = make(BareActor(hidden=16))
    fill(sac)
    with pytest.raises(
        ValueError, match=r"actor of SAC must return \(action, log_prob, \.\.\.\), got Tensor"
    ):
        sac.update()
    with pytest.raises(ValueError, match="initial_entropy_alpha must be positive"):
        make(initial_entropy_alpha=0)
    with pytest.raises(ValueError, match=r"update_rate must be in \(0, 1\], got 0"):
        make(update_rate=0)
    with pytest.raises(ValueError, match=r"discount must be in \[0, 1\], got 2"):
        make(discount=2)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        make(batch_size=0)
    with pytest.raises(ValueError, match="target_entropy must be a number"):
        make(target_entropy="high")


def test_three_scheduler_slots():
    sac = make(
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
        lr_scheduler_args=((lambda e: 0.5,), (lambda e: 0.25,), (lambda e: 0.125,)),
        actor_learning_rate=1.0,
        critic_learning_rate=1.0,
    )
    sac.store_episode(episode_steps(16, 3, discrete=False))
    sac.update()  # the optimizers step before their schedulers, the documented order
    sac.update_lr_scheduler()
    lrs = [
        opt.param_groups[0]["lr"] for opt in (sac.actor_optim, sac.critic_optim, sac.critic2_optim)
    ]
    assert lrs == pytest.approx([0.5, 0.25, 0.125])


@pytest.mark.learning
def test_sac_learns_pendulum():
    torch.manual_seed(0)
    critics = [QCritic(hidden=64) for _ in range(4)]
    agent = SAC(
        TanhGaussianActor(hidden=64),
        *critics,
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=64,
        actor_learning_rate=0.002,
        critic_learning_rate=0.002,
        alpha_learning_rate=0.005,
        update_rate=0.01,
    )
    result = learn_pendulum(agent, "SAC", episodes=60)
    assert result.solved_episode is not None, pendulum_failure("SAC", result)
    assert math.isfinite(agent.entropy_alpha)

import math

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms import PPO
from machin.frame.algorithms.a2c import A2C
from machin.frame.algorithms.ppo import PPO as PPOFromModule

from .contract import ContractCase
from .loops import train
from .nets import CategoricalActor, ValueCritic, episode_steps, step_dict

CONTRACT_CASES = {
    PPO: ContractCase(
        args=lambda: (
            CategoricalActor(hidden=16),
            ValueCritic(hidden=16),
            torch.optim.Adam,
            nn.MSELoss(),
        ),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act(state),
        state=lambda: {"state": torch.randn(6, 4)},
        experience=lambda: episode_steps(12),
        trains={"update_value": ["critic"], "update_policy": ["actor"]},
    ),
}


class RatioSpy(PPO):
    """Records the log-probabilities every policy-loss call sees."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def _policy_loss(self, log_prob, old_log_prob, advantage):
        self.calls.append((log_prob.detach().clone(), old_log_prob.clone()))
        return super()._policy_loss(log_prob, old_log_prob, advantage)


def make(cls=PPO, **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("batch_size", 100)
    return cls(CategoricalActor(), ValueCritic(), torch.optim.Adam, nn.MSELoss(), **kwargs)


def episode(length=20, seed=0):
    gen = torch.Generator().manual_seed(seed)
    states = torch.randn(length + 1, 4, generator=gen)
    return [
        step_dict(states[i], [[i % 2]], states[i + 1], 1.0, i == length - 1) for i in range(length)
    ]


def test_ppo_is_a_small_a2c_subclass():
    assert PPO is PPOFromModule and issubclass(PPO, A2C)
    assert "update" not in PPO.__dict__
    assert PPO.get_restorable() == ["actor", "critic"]


def test_clipped_objective_on_a_hand_made_example():
    ppo = make(surrogate_loss_clip=0.2)
    old_log_prob = torch.full((4, 1), math.log(0.5))
    ratio = torch.tensor([[1.5], [1.1], [0.5], [0.5]])
    advantage = torch.tensor([[1.0], [1.0], [-1.0], [1.0]])
    log_prob = (old_log_prob + ratio.log()).requires_grad_()
    loss = ppo._policy_loss(log_prob, old_log_prob, advantage)
    # min(r A, clip(r) A) = [min(1.5, 1.2), 1.1, min(-0.5, -0.8), min(0.5, 0.8)] = [1.2, 1.1, -0.8, 0.5]
    assert loss.item() == pytest.approx(-(1.2 + 1.1 - 0.8 + 0.5) / 4)
    loss.backward()
    # a ratio outside [0.8, 1.2] on the side the advantage favours gives no gradient;
    # elsewhere d(-r A / 4) / d(log_prob) = -r A / 4
    assert log_prob.grad.view(-1).tolist() == pytest.approx([0.0, -1.1 / 4, 0.0, -0.5 / 4])


def test_old_log_prob_is_fixed_for_the_whole_update():
    ppo = make(cls=RatioSpy, actor_update_times=4, actor_learning_rate=0.01)
    ppo.store_episode(episode())
    ppo.update()
    assert len(ppo.calls) == 4
    first_log_prob, first_old = ppo.calls[0]
    assert torch.allclose(first_log_prob, first_old)  # ratio 1 before the first step
    for log_prob, old in ppo.calls[1:]:
        assert torch.equal(old, first_old)
        assert not torch.allclose(log_prob, old)  # the policy moved, the reference did not


def test_update_counts_and_clears_buffer():
    ppo = make(actor_update_times=3, critic_update_times=2, batch_size=8)
    counts = [0, 0]
    ppo.actor_optim.register_step_post_hook(lambda *_: counts.__setitem__(0, counts[0] + 1))
    ppo.critic_optim.register_step_post_hook(lambda *_: counts.__setitem__(1, counts[1] + 1))
    ppo.store_episode(episode())
    policy_value, value_loss = ppo.update()
    assert isinstance(policy_value, float) and isinstance(value_loss, float)
    assert counts == [3, 2]
    assert ppo.replay_buffer.size() == 0


def test_bad_clip_is_rejected():
    with pytest.raises(ValueError, match="surrogate_loss_clip must be positive, got 0"):
        make(surrogate_loss_clip=0)


@pytest.mark.learning
def test_ppo_learns_cartpole():
    torch.manual_seed(0)
    agent = PPO(
        CategoricalActor(),
        ValueCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=1000,
        actor_update_times=10,
        critic_update_times=20,
        actor_learning_rate=0.003,
        critic_learning_rate=0.005,
        gae_lambda=0.95,
    )
    result = train(agent, lambda: gym.make("CartPole-v0"), seed=0, episodes=400, solved_reward=150)
    print(
        f"PPO reached a smoothed return of 150 on CartPole-v0 at episode {result.solved_episode} "
        f"({result.steps} steps)"
    )
    assert result.solved_episode is not None, (
        "PPO did not reach a smoothed return of 150 within 400 episodes"
    )


# -- tuned-setup options: lambda-return target and joint minibatch epochs (issue 25) ------------
class IdentityCritic(nn.Module):
    """V(s) = s[:, 0]: values chosen by the test through the states."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Linear(1, 1)

    def forward(self, state):
        return state[:, :1] + 0 * self.unused.weight.sum()


def stored_targets(ppo):
    _, (value, gae) = ppo.replay_buffer.sample_batch(
        0,
        True,
        sample_method="all",
        sample_attrs=["value", "gae"],
        additional_concat_attrs=["value", "gae"],
    )
    return value.view(-1).tolist(), gae.view(-1).tolist()


@pytest.mark.parametrize(
    "value_target, expected",
    [
        # discounted return, bootstrapped from V(s3) = 2 at the cut end: 4.8, 2 + 0.9 * 4.8, 1 + 0.9 * 6.32
        ("return", [6.688, 6.32, 4.8]),
        # GAE lambda-return A + V(s) with gamma 0.9, lambda 0.5 (deltas 1.4, 2.35, 3.3)
        ("lambda_return", [3.12575 + 0.5, 3.835 + 1.0, 3.3 + 1.5]),
    ],
)
def test_value_target_on_a_hand_computed_episode(value_target, expected):
    ppo = PPO(
        CategoricalActor(state_dim=1),
        IdentityCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        discount=0.9,
        gae_lambda=0.5,
        value_target=value_target,
    )
    values = [0.5, 1.0, 1.5, 2.0]
    ppo.store_episode(
        [step_dict([values[t]], [[0]], [values[t + 1]], float(t + 1), False) for t in range(3)]
    )
    value, gae = stored_targets(ppo)
    assert value == pytest.approx(expected)
    assert gae == pytest.approx([3.12575, 3.835, 3.3])  # the advantages do not depend on the target


def test_value_target_is_checked():
    with pytest.raises(
        ValueError, match=r"value_target must be one of \['return', 'lambda_return'\], got 'gae'"
    ):
        make(value_target="gae")


class CountingPPO(PPO):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.minibatches = []

    def _actor_objective(self, batch):
        self.minibatches.append((batch.size, batch.advantage.detach().clone()))
        return super()._actor_objective(batch)


def test_joint_update_runs_epochs_over_shuffled_minibatches_of_one_loss():
    ppo = make(
        CountingPPO, joint_update=True, actor_update_times=3, batch_size=8, critic_update_times=99
    )
    ppo.store_episode(episode(20))
    actor_before = [p.detach().clone() for p in ppo.actor.parameters()]
    critic_before = [p.detach().clone() for p in ppo.critic.parameters()]
    policy_value, value_loss = ppo.update()
    # 3 epochs x ceil(20 / 8) minibatches, every sample once per epoch; critic_update_times is not used
    assert [size for size, _ in ppo.minibatches] == [8, 8, 4] * 3
    for _, advantage in ppo.minibatches:  # standardized per minibatch
        assert advantage.mean().item() == pytest.approx(0.0, abs=1e-5)
        assert advantage.std(correction=0).item() == pytest.approx(1.0, abs=1e-3)
    assert math.isfinite(policy_value) and value_loss > 0
    assert not all(torch.equal(a, b) for a, b in zip(actor_before, ppo.actor.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(critic_before, ppo.critic.parameters()))
    assert ppo.replay_buffer.size() == 0


def test_joint_update_respects_the_switches():
    ppo = make(joint_update=True, actor_update_times=2, batch_size=8)
    ppo.store_episode(episode(16))
    actor_before = [p.detach().clone() for p in ppo.actor.parameters()]
    critic_before = [p.detach().clone() for p in ppo.critic.parameters()]
    ppo.update(update_policy=False)
    assert all(torch.equal(a, b) for a, b in zip(actor_before, ppo.actor.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(critic_before, ppo.critic.parameters()))


def test_joint_update_clips_the_norm_of_the_joint_gradient():
    # SGD with learning rate 1 steps by minus the clipped gradient, so the steps show the clipping
    ppo = make(
        joint_update=True,
        actor_update_times=1,
        gradient_max=1e-3,
        actor_learning_rate=1.0,
        critic_learning_rate=1.0,
    )
    ppo.actor_optim = torch.optim.SGD(ppo.actor.parameters(), lr=1.0)
    ppo.critic_optim = torch.optim.SGD(ppo.critic.parameters(), lr=1.0)
    ppo.store_episode(episode(16))
    networks = (ppo.actor, ppo.critic)
    before = [[p.detach().clone() for p in net.parameters()] for net in networks]
    ppo.update()
    norms = [
        torch.linalg.vector_norm(
            torch.stack([(p - q).norm() for p, q in zip(net.parameters(), old)])
        ).item()
        for net, old in zip(networks, before)
    ]
    assert min(norms) > 0  # both networks moved ...
    assert math.hypot(*norms) == pytest.approx(1e-3, rel=1e-4)  # ... by one clipped joint gradient
    # clipping each network alone would move each by 1e-3; here the critic's large gradient
    # takes most of the joint norm and the actor's step shrinks with it
    assert min(norms) < 0.5e-3


def test_joint_update_compiles_to_the_same_numbers():
    def build():
        torch.manual_seed(0)
        return make(joint_update=True, actor_update_times=2, batch_size=8, gradient_max=0.5)

    eager, compiled = build(), build().compile(backend="aot_eager")
    for agent in (eager, compiled):
        agent.store_episode(episode(16))
        torch.manual_seed(2)
        agent.update()
        agent.store_episode(episode(16, seed=1))
        torch.manual_seed(3)
        agent.update(update_policy=False)  # a joint step of the critic alone
    for a, b in ((eager.actor, compiled.actor), (eager.critic, compiled.critic)):
        assert all(torch.allclose(p, q, atol=1e-5) for p, q in zip(a.parameters(), b.parameters()))

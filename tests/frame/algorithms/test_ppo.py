import math

import pytest
import torch
from torch import nn

from machin.frame.algorithms import PPO
from machin.frame.algorithms.a2c import A2C
from machin.frame.algorithms.ppo import PPO as PPOFromModule

from .pg_nets import CategoricalActor, ValueCritic, step_dict, train_on_policy_cartpole


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
    return [step_dict(states[i], [[i % 2]], states[i + 1], 1.0, i == length - 1) for i in range(length)]


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
    agent = PPO(CategoricalActor(), ValueCritic(), torch.optim.Adam, nn.MSELoss(), batch_size=1000,
                actor_update_times=10, critic_update_times=20, actor_learning_rate=0.003,
                critic_learning_rate=0.005, gae_lambda=0.95)
    episode_count, steps, seconds, cpu = train_on_policy_cartpole(agent, seed=0)
    print(f"PPO reached a smoothed return of 150 on CartPole-v0 at episode {episode_count} "
          f"({steps} steps, {seconds:.1f} s, {cpu:.1f} s CPU)")
    assert episode_count is not None, "PPO did not reach a smoothed return of 150 within 400 episodes"

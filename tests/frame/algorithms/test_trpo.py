import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms import TRPO
from machin.frame.algorithms.a2c import A2C
from machin.frame.algorithms.trpo import TRPO as TRPOFromModule
from machin.frame.algorithms.trpo import conjugate_gradient, kl_from_log_probs

from .contract import ContractCase
from .loops import train
from .nets import CategoricalActor, ValueCritic, episode_steps, parameters, same, step_dict

CONTRACT_CASES = {
    TRPO: ContractCase(
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


def make(**kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("batch_size", 1000)
    return TRPO(CategoricalActor(), ValueCritic(), torch.optim.Adam, nn.MSELoss(), **kwargs)


def episode(length=60, seed=0):
    gen = torch.Generator().manual_seed(seed)
    states = torch.randn(length + 1, 4, generator=gen)
    # reward the action that matches the sign of the first state feature
    return [
        step_dict(states[i], [[int(states[i, 0] > 0)]], states[i + 1], 1.0, i == length - 1)
        if i % 2
        else step_dict(states[i], [[int(states[i, 0] <= 0)]], states[i + 1], -1.0, i == length - 1)
        for i in range(length)
    ]


def stored_log_prob(agent, steps):
    state = torch.cat([s["state"]["state"] for s in steps])
    action = torch.cat([s["action"]["action"] for s in steps])
    with torch.no_grad():
        return agent.actor(state, action)[1].view(-1, 1)


def test_trpo_is_a_small_a2c_subclass_without_actor_optimizer():
    assert TRPO is TRPOFromModule and issubclass(TRPO, A2C)
    assert "update" not in TRPO.__dict__
    agent = make()
    assert agent.actor_optim is None and agent.actor_update_times == 1


def test_conjugate_gradient_solves_a_positive_definite_system():
    gen = torch.Generator().manual_seed(0)
    m = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    a = m @ m.T + 0.5 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(6, generator=gen, dtype=torch.float64)
    x = conjugate_gradient(lambda v: a @ v, b, iterations=20, residual_threshold=1e-20)
    assert torch.allclose(x, torch.linalg.solve(a, b), atol=1e-8)


def test_kl_estimate_hessian_is_the_sample_fisher_matrix():
    torch.manual_seed(0)
    actor = CategoricalActor(hidden=4)
    state = torch.randn(10, 4)
    action = torch.randint(0, 2, (10, 1))
    params_ = list(actor.parameters())
    log_prob = actor(state, action)[1]
    kl = kl_from_log_probs(log_prob, log_prob.detach())
    assert kl.item() == pytest.approx(0.0, abs=1e-7)
    grad = torch.autograd.grad(kl, params_, create_graph=True)
    flat_grad = torch.cat([g.reshape(-1) for g in grad])
    vector = torch.randn(flat_grad.numel())
    hvp = torch.cat([g.reshape(-1) for g in torch.autograd.grad(flat_grad @ vector, params_)])
    per_sample = torch.stack(
        [
            torch.cat(
                [
                    g.reshape(-1)
                    for g in torch.autograd.grad(
                        actor(state[i : i + 1], action[i : i + 1])[1].sum(), params_
                    )
                ]
            )
            for i in range(10)
        ]
    )
    fisher = per_sample.T @ per_sample / 10
    assert torch.allclose(hvp, fisher @ vector, atol=1e-5)


def test_kl_estimate_is_non_negative():
    x = torch.linspace(-3, 3, 13).view(-1, 1)
    assert kl_from_log_probs(x, torch.zeros_like(x)).item() > 0
    assert (torch.expm1(x) - x).min().item() >= 0


@pytest.mark.parametrize("kl_max_delta", [1e-3, 1e-2])
def test_step_respects_kl_bound_and_improves_surrogate(kl_max_delta):
    agent = make(kl_max_delta=kl_max_delta, normalize_advantage=False)
    steps = episode()
    agent.store_episode(steps)
    _, gae = agent.replay_buffer.sample_batch(
        0, sample_method="all", sample_attrs=["gae"], additional_concat_attrs=["gae"]
    )
    advantage = gae[0].view(-1, 1)
    before = stored_log_prob(agent, steps)
    agent.update()
    after = stored_log_prob(agent, steps)
    kl = kl_from_log_probs(after, before).item()
    assert 0 < kl <= kl_max_delta
    surrogate_after = (torch.exp(after - before) * advantage).mean().item()
    assert surrogate_after > advantage.mean().item()  # the surrogate was mean(A) before the step


def test_failed_line_search_restores_parameters():
    agent = make()
    agent.store_episode(episode())
    batch = agent._actor_minibatch(agent._sample_all(True))
    trainable = list(agent.actor.parameters())
    before = parameters(agent.actor)
    log_prob, entropy = agent._evaluate_policy(batch)
    loss, _ = agent._actor_loss(batch, log_prob, entropy)
    grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, trainable)])
    uphill = grad / grad.norm() * 1e-3  # increases the loss at every step size
    assert agent._line_search(batch, trainable, uphill, loss.item()) is False
    assert same(parameters(agent.actor), before)
    assert agent._line_search(batch, trainable, -uphill, loss.item()) is True
    assert not same(parameters(agent.actor), before)


def test_update_counts_critic_steps_and_clears_the_buffer():
    agent = make(critic_update_times=4)
    critic_steps = [0]
    agent.critic_optim.register_step_post_hook(
        lambda *_: critic_steps.__setitem__(0, critic_steps[0] + 1)
    )
    agent.store_episode(episode())
    agent.update(update_value=False)
    assert critic_steps[0] == 0 and agent.replay_buffer.size() == 0
    agent.store_episode(episode())
    policy_value, value_loss = agent.update(update_policy=False)
    assert critic_steps[0] == 4
    assert isinstance(policy_value, float) and isinstance(value_loss, float)


def test_one_scheduler_slot_for_the_critic_and_option_errors():
    agent = make(
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
        lr_scheduler_args=((lambda e: 0.5,),),
        critic_learning_rate=0.1,
    )
    agent.store_episode(episode())
    agent.update()  # the optimizers step before their schedulers, the documented order
    agent.update_lr_scheduler()
    assert agent.critic_optim.param_groups[0]["lr"] == pytest.approx(0.05)
    with pytest.raises(ValueError, match=r"one tuple of arguments per optimizer \(1 here\)"):
        make(
            lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
            lr_scheduler_args=((lambda e: 1.0,), (lambda e: 1.0,)),
        )
    with pytest.raises(ValueError, match="kl_max_delta must be positive, got 0"):
        make(kl_max_delta=0)
    with pytest.raises(ValueError, match="damping must be non-negative, got -1"):
        make(damping=-1)
    with pytest.raises(ValueError, match="conjugate_iterations must be a positive integer, got 0"):
        make(conjugate_iterations=0)
    from machin.utils.compat import ExtraArgumentsWarning

    with pytest.warns(ExtraArgumentsWarning, match="'actor_update_times'"):
        assert make(actor_update_times=3).actor_update_times == 1


@pytest.mark.learning
def test_trpo_learns_cartpole():
    torch.manual_seed(0)
    agent = TRPO(
        CategoricalActor(),
        ValueCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=1000,
        critic_update_times=20,
        critic_learning_rate=0.005,
        gae_lambda=0.95,
        kl_max_delta=0.02,
    )
    result = train(agent, lambda: gym.make("CartPole-v0"), seed=0, episodes=400, solved_reward=150)
    print(
        f"TRPO reached a smoothed return of 150 on CartPole-v0 at episode {result.solved_episode} "
        f"({result.steps} steps)"
    )
    assert result.solved_episode is not None, (
        "TRPO did not reach a smoothed return of 150 within 400 episodes"
    )

import math
import warnings

import pytest
import torch
from torch import nn

from machin.frame.algorithms import REDQ, DroQ
from machin.frame.algorithms.redq import REDQ as REDQFromModule
from machin.frame.algorithms.replay import SampledBatch

from .contract import ContractCase
from .loops import pendulum_failure
from .nets import QCritic, TanhGaussianActor, episode_steps, parameters, same
from .sac_family import learn_pendulum


class DropoutCritic(nn.Module):
    """DroQ's critic: each hidden layer followed by dropout and layer normalisation; records its mode."""

    def __init__(self, state_dim=3, action_dim=1, hidden=16, rate=0.01):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(state_dim + action_dim, hidden),
            nn.Dropout(rate),
            nn.LayerNorm(hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.Dropout(rate),
            nn.LayerNorm(hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )
        self.modes = []

    def forward(self, state, action):
        self.modes.append(self.training)
        return self.net(torch.cat([state, action], dim=1))


class ConstantCritic(nn.Module):
    """Q = value everywhere (kept apart from the parameters, so a target keeps its own); counts calls."""

    def __init__(self, value):
        super().__init__()
        self.value = value
        self.unused = nn.Parameter(torch.zeros(()))
        self.calls = 0

    def forward(self, state, action):
        self.calls += 1
        return torch.full((state.shape[0], 1), float(self.value)) + 0 * self.unused


def critics(count=3, cls=QCritic, hidden=16):
    return [cls(hidden=hidden) for _ in range(count)]


def case(cls, critic_cls):
    return ContractCase(
        args=lambda: (
            TanhGaussianActor(hidden=16),
            critics(cls=critic_cls),
            critics(cls=critic_cls),
            torch.optim.Adam,
            nn.MSELoss(),
        ),
        options={"batch_size": 8, "update_times": 2, "policy_update_delay": 2},
        act=lambda agent, state: agent.act(state),
        state=lambda: {"state": torch.randn(6, 3)},
        experience=lambda: episode_steps(16, 3, discrete=False),
        trains={"update_value": ["critics"], "update_policy": ["actor"]},
    )


CONTRACT_CASES = {REDQ: case(REDQ, QCritic), DroQ: case(DroQ, DropoutCritic)}


def make(cls=REDQ, online=None, targets=None, **options):
    torch.manual_seed(0)
    options.setdefault("batch_size", 8)
    return cls(
        TanhGaussianActor(hidden=16),
        online if online is not None else critics(),
        targets if targets is not None else critics(),
        torch.optim.Adam,
        nn.MSELoss(),
        **options,
    )


def constant(values, **options):
    return make(
        REDQ,
        [ConstantCritic(v) for v in values],
        [ConstantCritic(v) for v in values],
        discount=1.0,
        **options,
    )


def next_state_batch(size=2):
    return SampledBatch(
        size,
        {"state": torch.randn(size, 3)},
        {"action": torch.zeros(size, 1)},
        torch.zeros(size, 1),
        {"state": torch.randn(size, 3)},
        torch.zeros(size, 1),
    )


def targets_seen(redq, draws=60):
    batch = next_state_batch()
    torch.manual_seed(1)
    seen = []
    for _ in range(draws):
        target = redq._bellman_target(batch, torch.tensor(0.0))
        assert target.shape == (2, 1)
        seen.append(target[0].item())
    return seen


def test_class_attributes_defaults_and_targets_start_as_copies():
    assert REDQ is REDQFromModule
    assert REDQ._is_top == ["actor", "critics", "critic_targets"]
    assert REDQ.get_restorable() == ["actor", "critic_targets"]
    redq = make()
    assert (redq.update_times, redq.policy_update_delay, redq.subset_size) == (20, 20, 2)
    for critic, target in zip(redq.critics, redq.critic_targets):
        assert same(parameters(critic), parameters(target))


def test_target_takes_the_minimum_over_a_random_subset_of_targets():
    values = [1.0, 2.0, 3.0, 4.0]
    # the whole ensemble: always the smallest; one critic: any of them
    assert set(targets_seen(constant(values, subset_size=4))) == {1.0}
    assert set(targets_seen(constant(values, subset_size=1))) == set(values)
    # two of four: the minimum of a pair is never 4, and is 3 for the pair (3, 4)
    seen = targets_seen(constant(values, subset_size=2))
    assert set(seen) == {1.0, 2.0, 3.0}
    assert seen.count(1.0) > seen.count(3.0)  # probabilities 3/6 and 1/6


def test_only_the_drawn_targets_are_evaluated():
    redq = constant([1.0, 2.0, 3.0, 4.0, 5.0], subset_size=2)
    targets_seen(redq, draws=10)
    assert sum(t.calls for t in redq.critic_targets) == 20
    assert all(c.calls == 0 for c in redq.critics)


def test_actor_ascends_the_mean_over_every_critic():
    redq = constant([1.0, 2.0, 3.0, 6.0])
    q = redq._policy_q({"state": torch.zeros(3, 3)}, {"action": torch.zeros(3, 1)}, 3)
    assert q.view(-1).tolist() == [3.0] * 3


def test_subset_size_cannot_exceed_the_ensemble():
    with pytest.raises(
        ValueError, match=r"subset_size must be at most the number of critics \(3\), got 4"
    ):
        make(subset_size=4)
    redq = make(update_times=1, policy_update_delay=1)
    redq.store_episode(episode_steps(16, 3, discrete=False))
    redq.subset_size = 5
    with pytest.raises(ValueError, match=r"number of critics \(3\), got 5"):
        redq.update()


def step_count(optimizer, tensor):
    return int(optimizer.state[tensor]["step"].item())


def test_update_takes_update_times_critic_steps_and_one_policy_step():
    redq = make(update_times=5, policy_update_delay=5)
    redq.store_episode(episode_steps(16, 3, discrete=False))
    for _ in range(2):
        policy_value, value_loss = redq.update()
        assert isinstance(policy_value, float) and isinstance(value_loss, float)
    assert redq.critic_steps == 10
    assert step_count(redq.critic_optim, next(redq.critics[2].parameters())) == 10
    assert step_count(redq.actor_optim, next(redq.actor.parameters())) == 2
    assert step_count(redq.alpha_optim, redq.log_alpha) == 2


def test_targets_follow_after_every_critic_step():
    redq = make(update_times=3, policy_update_delay=3, update_rate=0.5)
    redq.store_episode(episode_steps(16, 3, discrete=False))
    online_before = parameters(redq.critics[0])
    redq.update()
    # three soft updates by 0.5 of a target that started equal to its critic: not equal to
    # the start, not equal to the critic (which moved on each step)
    target = parameters(redq.critic_targets[0])
    assert not same(target, online_before) and not same(target, parameters(redq.critics[0]))


def test_critic_outputs_are_checked():
    class Wide(QCritic):
        def forward(self, state, action):
            return super().forward(state, action).expand(-1, 2)

    redq = make(online=[QCritic(hidden=16), Wide(hidden=16)], targets=critics(2))
    redq.store_episode(episode_steps(16, 3, discrete=False))
    with pytest.raises(
        ValueError, match=r"critics\[1\] \(Wide\) output must hold one value per sample"
    ):
        redq.update()


def test_discrete_actors_are_refused_with_a_clear_error():
    from .nets import CategoricalActor

    redq = REDQ(
        CategoricalActor(state_dim=3),
        critics(2),
        critics(2),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=8,
        update_times=1,
        policy_update_delay=1,
        target_entropy=0.1,
    )
    redq.store_episode(episode_steps(16, 3, discrete=True))
    with pytest.raises(ValueError, match="the actor's action must carry a gradient"):
        redq.update()


def test_droq_warns_without_dropout_and_runs_dropout_in_every_update_call():
    with pytest.warns(UserWarning, match="DroQ's critics are meant to use dropout"):
        make(DroQ, critics(2), critics(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        droq = make(
            DroQ,
            critics(2, DropoutCritic),
            critics(2, DropoutCritic),
            update_times=2,
            policy_update_delay=2,
        )
    droq.store_episode(episode_steps(16, 3, discrete=False))
    droq.update()
    modes = [mode for net in [*droq.critics, *droq.critic_targets] for mode in net.modes]
    assert modes and all(modes)  # the critics and their targets, in training mode
    assert [c.training for c in droq.critics] == [False, False]  # back to evaluation after it


@pytest.mark.learning
def test_redq_learns_pendulum():
    # DroQ is this algorithm with other critics (checked above without learning), so REDQ
    # alone learns here: 3 critics, targets from 2 of them, 2 critic steps per environment step.
    torch.manual_seed(0)
    agent = REDQ(
        TanhGaussianActor(hidden=64),
        critics(3, hidden=64),
        critics(3, hidden=64),
        torch.optim.Adam,
        nn.MSELoss(),
        subset_size=2,
        update_times=2,
        policy_update_delay=2,
        batch_size=128,
        actor_learning_rate=0.003,
        critic_learning_rate=0.003,
        alpha_learning_rate=0.005,
        update_rate=0.02,
    )
    result = learn_pendulum(agent, "REDQ", episodes=12)
    assert result.solved_episode is not None, pendulum_failure("REDQ", result)
    assert math.isfinite(agent.entropy_alpha)

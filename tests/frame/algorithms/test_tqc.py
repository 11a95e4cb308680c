import math

import pytest
import torch
from torch import nn

from machin.frame.algorithms import TQC
from machin.frame.algorithms.replay import SampledBatch
from machin.frame.algorithms.tqc import TQC as TQCFromModule

from .contract import ContractCase
from .loops import pendulum_failure
from .nets import TanhGaussianActor, episode_steps, mlp, parameters, same
from .sac_family import learn_pendulum


class QuantileCritic(nn.Module):
    """``quantiles[B, M]`` of ``(state, action)``."""

    def __init__(self, state_dim=3, action_dim=1, quantiles=5, hidden=16, relu=False):
        super().__init__()
        if relu:
            self.net = nn.Sequential(
                nn.Linear(state_dim + action_dim, hidden),
                nn.ReLU(),
                nn.Linear(hidden, hidden),
                nn.ReLU(),
                nn.Linear(hidden, quantiles),
            )
        else:
            self.net = mlp(state_dim + action_dim, quantiles, hidden)

    def forward(self, state, action):
        return self.net(torch.cat([state, action], dim=1))


class FixedQuantiles(nn.Module):
    """The same quantiles for every sample (kept apart from the parameters, so a target keeps its own)."""

    def __init__(self, values):
        super().__init__()
        self.values = torch.tensor(values, dtype=torch.float32)
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, state, action):
        return self.values.expand(state.shape[0], -1) + 0 * self.unused


class WrongShape(QuantileCritic):
    def forward(self, state, action):
        return super().forward(state, action).unsqueeze(1)


def quantile_critics(count=2, quantiles=5, hidden=16):
    return [QuantileCritic(quantiles=quantiles, hidden=hidden) for _ in range(count)]


CONTRACT_CASES = {
    TQC: ContractCase(
        args=lambda: (
            TanhGaussianActor(hidden=16),
            quantile_critics(),
            quantile_critics(),
            torch.optim.Adam,
        ),
        options={"batch_size": 8},
        act=lambda agent, state: agent.act(state),
        state=lambda: {"state": torch.randn(6, 3)},
        experience=lambda: episode_steps(16, 3, discrete=False),
        trains={"update_value": ["critics"], "update_policy": ["actor"]},
    ),
}


def make(critics=None, targets=None, **options):
    torch.manual_seed(0)
    options.setdefault("batch_size", 8)
    return TQC(
        TanhGaussianActor(hidden=16),
        critics if critics is not None else quantile_critics(),
        targets if targets is not None else quantile_critics(),
        torch.optim.Adam,
        **options,
    )


def hand_batch(reward, terminal):
    size = len(reward)
    return SampledBatch(
        size,
        {"state": torch.randn(size, 3)},
        {"action": torch.zeros(size, 1)},
        torch.tensor(reward).view(size, 1),
        {"state": torch.randn(size, 3)},
        torch.tensor(terminal, dtype=torch.float32).view(size, 1),
    )


def fixed(critic_values, target_values, **options):
    return make(
        [FixedQuantiles(v) for v in critic_values],
        [FixedQuantiles(v) for v in target_values],
        **options,
    )


def test_class_attributes_and_targets_start_as_copies():
    assert TQC is TQCFromModule
    assert TQC._is_top == ["actor", "critics", "critic_targets"]
    assert TQC.get_restorable() == ["actor", "critic_targets"]
    tqc = make()
    for critic, target in zip(tqc.critics, tqc.critic_targets):
        assert same(parameters(critic), parameters(target))
    assert (tqc.top_quantiles_to_drop_per_net, tqc.kappa, tqc.update_times) == (2, 1.0, 1)
    assert len(tqc._optimizers()) == 2


def test_truncation_keeps_the_smallest_pooled_quantiles():
    # pooled target quantiles 0, 1, 2, 3, 10, 20; dropping one per net (2 of 6) keeps 0..3
    tqc = fixed([[0.0, 0.0, 0.0]] * 2, [[0.0, 1.0, 10.0], [2.0, 3.0, 20.0]], discount=0.5)
    tqc.top_quantiles_to_drop_per_net = 1
    batch = hand_batch([0.5, 1.0], [0, 1])
    target = tqc._bellman_target(batch, torch.tensor(0.0))
    assert target.shape == (2, 4)
    assert target[0].tolist() == [0.5, 1.0, 1.5, 2.0]  # 0.5 + 0.5 * [0, 1, 2, 3]
    assert target[1].tolist() == [1.0] * 4  # terminal: the reward alone
    tqc.top_quantiles_to_drop_per_net = 0
    assert tqc._bellman_target(batch, torch.tensor(0.0))[0].tolist() == [
        0.5,
        1.0,
        1.5,
        2.0,
        5.5,
        10.5,
    ]
    tqc.top_quantiles_to_drop_per_net = 3
    with pytest.raises(
        ValueError,
        match=r"top_quantiles_to_drop_per_net must be smaller than the critics' number of "
        r"quantiles \(3\), got 3",
    ):
        tqc._bellman_target(batch, torch.tensor(0.0))


def test_target_subtracts_alpha_times_the_next_log_prob():
    tqc = fixed([[0.0, 0.0]], [[1.0, 3.0]], discount=1.0, top_quantiles_to_drop_per_net=0)
    batch = hand_batch([0.0], [0])
    torch.manual_seed(5)
    plain = tqc._bellman_target(batch, torch.tensor(0.0))
    torch.manual_seed(5)
    next_log_prob = tqc._sample_action(batch.next_state, 1)[1]
    torch.manual_seed(5)
    soft = tqc._bellman_target(batch, torch.tensor(0.5))
    assert plain.tolist() == [[1.0, 3.0]]
    assert torch.allclose(soft, plain - 0.5 * next_log_prob)


def test_critic_loss_is_the_quantile_huber_loss_averaged_per_critic():
    # quantiles (0, 0) at fractions 1/4, 3/4 against target atoms (1, 1): every pair is below
    # its target by 1, Huber 0.5, weights 1/4 and 3/4: mean over quantiles and atoms 0.25
    tqc = fixed([[0.0, 0.0]], [[1.0, 1.0]], discount=1.0, top_quantiles_to_drop_per_net=0)
    batch = hand_batch([0.0, 0.0], [0, 0])
    assert tqc._critic_loss(batch, torch.tensor(0.0)).item() == pytest.approx(0.25)
    # quantiles above the target by 2: Huber 1.5, weights 3/4 and 1/4; two critics add up
    tqc = fixed(
        [[3.0, 3.0], [3.0, 3.0]], [[1.0, 1.0]] * 2, discount=1.0, top_quantiles_to_drop_per_net=0
    )
    assert tqc._critic_loss(batch, torch.tensor(0.0)).item() == pytest.approx(2 * 0.75)


def test_actor_ascends_the_mean_of_every_quantile():
    tqc = fixed([[0.0, 1.0, 10.0], [2.0, 3.0, 20.0]], [[0.0] * 3] * 2)
    q = tqc._policy_q({"state": torch.zeros(4, 3)}, {"action": torch.zeros(4, 1)}, 4)
    assert q.shape == (4, 1) and q.view(-1).tolist() == [6.0] * 4


def test_update_trains_every_part_and_returns_floats():
    tqc = make(update_times=3)
    tqc.store_episode(episode_steps(16, 3, discrete=False))
    actor_before = parameters(tqc.actor)
    policy_value, value_loss = tqc.update()
    assert isinstance(policy_value, float) and isinstance(value_loss, float) and value_loss >= 0
    assert tqc.critic_steps == 3
    assert not same(actor_before, parameters(tqc.actor))
    assert tqc.critic_optim.state[next(tqc.critics[0].parameters())]["step"].item() == 3
    assert tqc.actor_optim.state[next(tqc.actor.parameters())]["step"].item() == 3


def test_bad_critics_are_named():
    tqc = make([WrongShape(), QuantileCritic()], quantile_critics())
    tqc.store_episode(episode_steps(16, 3, discrete=False))
    with pytest.raises(
        ValueError,
        match=r"critics\[0\] \(WrongShape\) must return quantiles of shape "
        r"\[batch_size, n_quantiles\] = \[8, M\], got \[8, 1, 5\]",
    ):
        tqc.update()
    tqc = make(*([QuantileCritic(), QuantileCritic(quantiles=4)] for _ in range(2)))
    tqc.store_episode(episode_steps(16, 3, discrete=False))
    with pytest.raises(
        ValueError, match=r"critic_targets\[1\] \(QuantileCritic\) returned 4 quantiles"
    ):
        tqc.update()


def test_network_lists_are_checked():
    critic = QuantileCritic()
    with pytest.raises(TypeError, match="critics must be a list of networks"):
        make(critic, quantile_critics())
    with pytest.raises(ValueError, match="critics must hold at least one network"):
        make([], [])
    with pytest.raises(ValueError, match=r"critic_targets must hold one network per critic \(2\)"):
        make(quantile_critics(), quantile_critics(3))
    with pytest.raises(ValueError, match=r"critics\[1\] is the same network as critics\[0\]"):
        make([critic, critic], quantile_critics())
    with pytest.raises(ValueError, match=r"critic_targets\[0\] is critics\[0\] itself"):
        make([critic], [critic])
    with pytest.raises(TypeError, match="TQC needs critic_targets"):
        TQC(TanhGaussianActor(hidden=16), quantile_critics(), None, torch.optim.Adam)


@pytest.mark.learning
def test_tqc_learns_pendulum():
    torch.manual_seed(0)
    agent = TQC(
        TanhGaussianActor(hidden=64),
        [QuantileCritic(quantiles=10, hidden=64, relu=True) for _ in range(2)],
        [QuantileCritic(quantiles=10, hidden=64, relu=True) for _ in range(2)],
        torch.optim.Adam,
        batch_size=128,
        actor_learning_rate=0.002,
        critic_learning_rate=0.002,
        alpha_learning_rate=0.005,
        update_rate=0.02,
    )
    result = learn_pendulum(agent, "TQC", episodes=15, warmup_steps=200)
    assert result.solved_episode is not None, pendulum_failure("TQC", result)
    assert math.isfinite(agent.entropy_alpha)

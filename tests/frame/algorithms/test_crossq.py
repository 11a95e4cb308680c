import functools
import inspect
import math

import pytest
import torch
from torch import nn

from machin.frame.algorithms import CrossQ
from machin.frame.algorithms.crossq import CrossQ as CrossQFromModule
from machin.utils.compat import ExtraArgumentsWarning

from .contract import ContractCase
from .loops import pendulum_failure
from .nets import TanhGaussianActor, episode_steps, parameters, same
from .sac_family import learn_pendulum


class BNCritic(nn.Module):
    """Q(s, a) with its input and hidden layers batch-normalised; optionally records its calls."""

    def __init__(self, state_dim=3, action_dim=1, hidden=16, record=False):
        super().__init__()
        self.input_norm = nn.BatchNorm1d(state_dim + action_dim)
        self.net = nn.Sequential(
            nn.Linear(state_dim + action_dim, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )
        self.record = record
        self.calls = []

    def forward(self, state, action):
        joined = torch.cat([state, action], dim=1)
        if self.record:
            self.calls.append((self.training, joined.detach().clone()))
        return self.net(self.input_norm(joined))


class ModeActor(TanhGaussianActor):
    """Records ``(training, rows)`` of every call; declares itself mode-sensitive so modes are switched."""

    mode_sensitive = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = []

    def forward(self, state, action=None):
        self.calls.append((self.training, state.shape[0]))
        return super().forward(state, action)


class BNActor(TanhGaussianActor):
    """A squashed Gaussian policy on batch-normalised states, with a greedy (mean) action."""

    def __init__(self):
        super().__init__(hidden=16)
        self.body = nn.Sequential(nn.BatchNorm1d(3), nn.Linear(3, 16), nn.ReLU())

    def forward(self, state, action=None, deterministic=False):
        if not deterministic:
            return super().forward(state, action)
        mean = torch.tanh(self.mu(self.body(state))) * self.action_range
        return mean, torch.zeros(state.shape[0], 1)


CONTRACT_CASES = {
    CrossQ: ContractCase(
        args=lambda: (
            TanhGaussianActor(hidden=16),
            [BNCritic(), BNCritic()],
            torch.optim.Adam,
            nn.MSELoss(),
        ),
        options={"batch_size": 8, "policy_update_delay": 1},
        act=lambda agent, state: agent.act(state),
        state=lambda: {"state": torch.randn(6, 3)},
        experience=lambda: episode_steps(16, 3, discrete=False),
        trains={"update_value": ["critics"], "update_policy": ["actor"]},
    ),
}


def make(actor=None, **options):
    torch.manual_seed(0)
    options.setdefault("batch_size", 8)
    return CrossQ(
        actor or TanhGaussianActor(hidden=16),
        [BNCritic(record=True), BNCritic(record=True)],
        torch.optim.Adam,
        nn.MSELoss(),
        **options,
    )


def test_no_target_networks():
    assert CrossQ is CrossQFromModule
    assert CrossQ._is_top == ["actor", "critics"]
    assert CrossQ.get_restorable() == ["actor", "critics"]
    parameters_shown = inspect.signature(CrossQ).parameters
    assert "update_rate" not in parameters_shown and "critic_targets" not in parameters_shown
    crossq = make()
    assert crossq.critic_targets is None and crossq._online_target_pairs() == []
    assert crossq.policy_update_delay == 3 and crossq.update_times == 1
    with pytest.warns(ExtraArgumentsWarning, match="does not use keyword argument.*'update_rate'"):
        make(update_rate=0.1)


def test_critics_see_the_joined_batch_in_training_mode_and_the_actor_loss_in_eval_mode():
    size = 8
    crossq = make(ModeActor(hidden=16), batch_size=size, policy_update_delay=1)
    steps = episode_steps(size, 3, discrete=False)
    crossq.store_episode(steps)
    next_of = {
        tuple(s["state"]["state"].view(-1).tolist()): s["next_state"]["state"] for s in steps
    }
    crossq.update()

    # the actor: next actions from its running statistics, the actor's loss in training mode
    assert crossq.actor.calls == [(False, size), (True, size)]
    for critic in crossq.critics:
        (joint_mode, joint), (policy_mode, policy_input) = critic.calls
        assert joint_mode and not policy_mode
        assert joint.shape == (2 * size, 4) and policy_input.shape == (size, 4)
        for row in range(size):  # row i + B is the next state of row i's transition
            expected = next_of[tuple(joint[row, :3].tolist())]
            assert torch.equal(joint[size + row, :3], expected.view(-1))
        # the batch statistics are the joined batch's (momentum 0.1 from mean 0 and variance 1)
        norm = critic.input_norm
        assert torch.allclose(norm.running_mean, 0.1 * joint.mean(dim=0), atol=1e-6)
        assert torch.allclose(norm.running_var, 0.9 + 0.1 * joint.var(dim=0), atol=1e-5)
    assert not crossq.actor.training and not any(c.training for c in crossq.critics)


def test_acting_uses_the_running_statistics_of_the_actor():
    crossq = make(BNActor())  # the first policy step comes with the third critic step
    norm = crossq.actor.body[0]
    states = torch.randn(4, 3) * 5 + 3
    for _ in range(2):  # fresh, then after the actor was put into training mode by hand
        action, log_prob, *_ = crossq.act({"state": states[:1]})  # one state: no batch statistics
        assert action.shape == (1, 1) and log_prob.shape == (1, 1)
        greedy, _ = crossq.act({"state": states}, deterministic=True)
        alone, _ = crossq.act({"state": states[2:3]}, deterministic=True)
        assert torch.allclose(alone, greedy[2:3], atol=1e-6)  # a row's action ignores the others
        assert not crossq.actor.training
        assert norm.num_batches_tracked.item() == 0
        assert torch.equal(norm.running_mean, torch.zeros(3))
        crossq.actor.train()
    crossq.store_episode(episode_steps(16, 3, discrete=False))
    for tracked in (0, 0, 1):  # the policy value reported before it moves no statistics
        assert math.isfinite(crossq.update()[0])
        assert norm.num_batches_tracked.item() == tracked and not crossq.actor.training


def test_policy_steps_are_delayed():
    crossq = make()
    crossq.store_episode(episode_steps(16, 3, discrete=False))
    for _ in range(6):
        policy_value, value_loss = crossq.update()
        assert math.isfinite(policy_value) and math.isfinite(value_loss)
    first = next(crossq.critics[1].parameters())
    assert crossq.critic_optim.state[first]["step"].item() == 6
    assert crossq.actor_optim.state[next(crossq.actor.parameters())]["step"].item() == 2


def test_running_statistics_are_saved(tmp_path):
    crossq = make()
    crossq.store_episode(episode_steps(16, 3, discrete=False))
    crossq.update()
    crossq.save(str(tmp_path))
    fresh = make()
    fresh.load(str(tmp_path))
    for mine, theirs in zip(fresh.critics, crossq.critics):
        assert same(list(mine.buffers()), list(theirs.buffers()))
        assert same(parameters(mine), parameters(theirs))


def test_actions_that_cannot_be_joined_are_named():
    class Renamed(CrossQ):
        action_transform_function = staticmethod(lambda raw, *_: {"other": raw})

    torch.manual_seed(0)
    crossq = Renamed(
        TanhGaussianActor(hidden=16),
        [BNCritic(), BNCritic()],
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=8,
    )
    crossq.store_episode(episode_steps(16, 3, discrete=False))
    with pytest.raises(
        ValueError, match=r"the sampled action has no key 'other' \(it has \['action'\]\)"
    ):
        crossq.update()


@pytest.mark.learning
def test_crossq_learns_pendulum():
    torch.manual_seed(0)
    agent = CrossQ(
        TanhGaussianActor(hidden=64),
        [BNCritic(hidden=64) for _ in range(2)],
        functools.partial(torch.optim.Adam, betas=(0.5, 0.999)),
        nn.MSELoss(),
        batch_size=64,
        actor_learning_rate=0.002,
        critic_learning_rate=0.002,
        alpha_learning_rate=0.005,
    )  # the policy steps after every third critic step (the default, as in the paper)
    result = learn_pendulum(agent, "CrossQ", episodes=20)
    assert result.solved_episode is not None, pendulum_failure("CrossQ", result)
    assert math.isfinite(agent.entropy_alpha)

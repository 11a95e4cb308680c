import math

import gymnasium as gym
import pytest
import torch
from torch import nn

from machin.frame.algorithms import A2C
from machin.frame.algorithms.a2c import A2C as A2CFromModule
from machin.frame.algorithms.a2c import returns_and_advantages
from machin.frame.transition import Transition

from .contract import ContractCase
from .loops import train
from .nets import (
    CategoricalActor,
    ColumnCategoricalActor,
    ValueCritic,
    episode_steps,
    parameters,
    same,
    step_dict,
)

CONTRACT_CASES = {
    A2C: ContractCase(
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


class LinearValue(nn.Module):
    """V(s) = s[:, 0]: a critic with known outputs for hand-computed targets."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, state):
        return (self.scale * state[:, :1]).detach()


class RecordingActor(CategoricalActor):
    """Records the ``action`` argument of every call."""

    def __init__(self):
        super().__init__()
        self.seen_actions = []

    def forward(self, state, action=None):
        self.seen_actions.append(None if action is None else action.clone())
        return super().forward(state, action)


class TwoOutputActor(CategoricalActor):
    """Returns only ``(action, log_prob)``."""

    def forward(self, state, action=None):
        return super().forward(state, action)[:2]


def make(actor=None, critic=None, cls=A2C, **kwargs):
    torch.manual_seed(0)
    kwargs.setdefault("batch_size", 8)
    return cls(
        actor or CategoricalActor(),
        critic or ValueCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        **kwargs,
    )


def episode(length=10, terminal_at_end=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    states = torch.randn(length + 1, 4, generator=gen)
    return [
        step_dict(states[i], [[i % 2]], states[i + 1], 1.0, terminal_at_end and i == length - 1)
        for i in range(length)
    ]


def stored(agent, *attrs):
    _, values = agent.replay_buffer.sample_batch(
        0, sample_method="all", sample_attrs=list(attrs), additional_concat_attrs=list(attrs)
    )
    return [v.view(-1).tolist() for v in values]


def count_steps(optimizer):
    counter = [0]
    optimizer.register_step_post_hook(lambda *_: counter.__setitem__(0, counter[0] + 1))
    return counter


def test_import_paths_and_class_attributes():
    assert A2C is A2CFromModule
    assert A2C._is_top == ["actor", "critic"] and A2C.get_restorable() == ["actor", "critic"]


def test_act_returns_actor_outputs_as_they_are():
    agent = make(ColumnCategoricalActor())
    torch.manual_seed(1)
    out = agent.act({"state": torch.randn(5, 4), "unused_key": 3})
    assert len(out) == 4 and out[3] == "extra"
    action, log_prob, entropy, _ = out
    assert action.shape == (5, 1) and log_prob.shape == (5, 1) and entropy.shape == (5, 1)
    assert not log_prob.requires_grad  # acting runs without gradient
    value = agent.criticize({"state": torch.randn(5, 4)})
    assert value.shape == (5, 1)


# -- returns and advantages -------------------------------------------------------------
# Three steps, V(s) = [1, 2, 3], V(s') = [2, 3, 4], rewards [1, 0, 2], gamma = lambda = 0.5.
HAND_STATES = [1.0, 2.0, 3.0, 4.0]
HAND_REWARDS = [1.0, 0.0, 2.0]


def hand_episode(last_terminal, **custom):
    return [
        step_dict(
            [HAND_STATES[i]],
            [[0]],
            [HAND_STATES[i + 1]],
            HAND_REWARDS[i],
            last_terminal and i == 2,
            **custom,
        )
        for i in range(3)
    ]


def hand_agent(**kwargs):
    return make(critic=LinearValue(), discount=0.5, gae_lambda=0.5, **kwargs)


def test_store_episode_terminated_matches_hand_computation():
    agent = hand_agent()
    agent.store_episode(hand_episode(last_terminal=True))
    value, gae = stored(agent, "value", "gae")
    # G = [1 + .5 * 1, 0 + .5 * 2, 2]; deltas [1, -0.5, -1]; A_t = delta_t + 0.25 * A_{t+1}
    assert value == pytest.approx([1.5, 1.0, 2.0])
    assert gae == pytest.approx([0.8125, -0.75, -1.0])


def test_store_episode_truncated_bootstraps_from_last_next_state():
    agent = hand_agent()
    agent.store_episode(hand_episode(last_terminal=False))
    value, gae = stored(agent, "value", "gae")
    # last step bootstraps 0.5 * V(s'=4): G_2 = 2 + 2 = 4, delta_2 = 2 + 2 - 3 = 1
    assert value == pytest.approx([2.0, 2.0, 4.0])
    assert gae == pytest.approx([0.9375, -0.25, 1.0])


def test_truncated_attribute_overrides_terminal_and_cuts_the_chain():
    agent = hand_agent()
    # two copies of the episode in one list; each marked truncated at its end although terminal
    steps = hand_episode(last_terminal=True, truncated=False) * 2
    steps[2] = {**steps[2], "truncated": True}
    steps[5] = {**steps[5], "truncated": True}
    agent.store_episode(steps)
    value, gae = stored(agent, "value", "gae")
    assert value == pytest.approx([2.0, 2.0, 4.0] * 2)
    assert gae == pytest.approx([0.9375, -0.25, 1.0] * 2)
    truncated = agent.replay_buffer.sample_batch(
        0, sample_method="all", sample_attrs=["truncated"]
    )[1][0]
    assert truncated == [False, False, True] * 2


def test_gae_lambda_one_is_monte_carlo_advantage():
    agent = make(critic=LinearValue(), discount=0.5, gae_lambda=1.0)
    agent.store_episode(hand_episode(last_terminal=True))
    value, gae = stored(agent, "value", "gae")
    assert gae == pytest.approx([v - s for v, s in zip(value, HAND_STATES)])


def test_gae_lambda_zero_is_one_step_td_error():
    reward, value, next_value = [1.0, 0.0, 2.0], [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]
    _, adv = returns_and_advantages(reward, value, next_value, [False] * 3, [False] * 3, 0.5, 0.0)
    assert adv == pytest.approx([1.0, -0.5, 1.0])


def test_store_episode_accepts_transition_objects_and_does_not_change_them():
    agent = hand_agent()
    steps = [Transition(**d) for d in hand_episode(last_terminal=True)]
    agent.store_episode(steps)
    assert agent.replay_buffer.size() == 3
    assert "value" not in steps[0]
    assert stored(agent, "value")[0] == pytest.approx([1.5, 1.0, 2.0])
    # dict and Transition inputs give the same stored layout; dicts are not changed either
    dicts = hand_episode(last_terminal=True)
    agent.store_episode(dicts)
    assert agent.replay_buffer.size() == 6
    assert all("value" not in d and "gae" not in d for d in dicts)


def test_store_transition_requires_value_and_gae():
    agent = make()
    step = episode(1)[0]
    with pytest.raises(
        ValueError, match=r"needs the custom attribute\(s\) \['value', 'gae'\].*store_episode"
    ):
        agent.store_transition(step)
    with pytest.raises(ValueError, match=r"\['gae'\]"):
        agent.store_transition({**step, "value": 1.0})
    agent.store_transition({**step, "value": 1.0, "gae": 0.5})
    assert agent.replay_buffer.size() == 1


def test_store_episode_errors():
    agent = make()
    with pytest.raises(ValueError, match="at least one transition"):
        agent.store_episode([])
    bad = episode(3)
    del bad[1]["terminal"]
    with pytest.raises(
        ValueError, match=r"episode\[1\] is missing required attribute\(s\) \['terminal'\]"
    ):
        agent.store_episode(bad)
    with pytest.raises(TypeError, match=r"episode\[0\] must be a Transition or a dict, got int"):
        agent.store_episode([3])
    assert agent.replay_buffer.size() == 0


class WideCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(()))

    def forward(self, state):
        return state  # [B, 4] instead of [B, 1]


def test_critic_with_wrong_output_shape_is_rejected():
    agent = make(critic=WideCritic())
    with pytest.raises(
        ValueError, match=r"critic output must hold one value per sample, shape \[6\]"
    ):
        agent.store_episode(episode(3))


# -- update -----------------------------------------------------------------------------
def test_update_counts_returns_floats_and_clears_buffer():
    agent = make(actor_update_times=3, critic_update_times=7)
    actor_steps, critic_steps = count_steps(agent.actor_optim), count_steps(agent.critic_optim)
    agent.store_episode(episode(20))
    policy_value, value_loss = agent.update()
    assert isinstance(policy_value, float) and isinstance(value_loss, float)
    assert math.isfinite(policy_value) and value_loss >= 0
    assert (actor_steps[0], critic_steps[0]) == (3, 7)
    assert agent.replay_buffer.size() == 0
    assert agent.update() is None


def test_actor_is_given_the_stored_actions():
    actor = RecordingActor()
    agent = make(actor, batch_size=100, actor_update_times=2)
    steps = episode(12)
    agent.store_episode(steps)
    actor.seen_actions.clear()
    agent.update()
    expected = torch.cat([s["action"]["action"] for s in steps])
    assert len(actor.seen_actions) == 2
    for seen in actor.seen_actions:  # the whole buffer, oldest first, as stored
        assert torch.equal(seen, expected)


def test_log_prob_of_shape_b_or_b1_both_work():
    for actor in (CategoricalActor(), ColumnCategoricalActor()):
        agent = make(actor, entropy_weight=-0.01)
        agent.store_episode(episode(10))
        policy_value, _ = agent.update()
        assert math.isfinite(policy_value)


class AdvantageSpy(A2C):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.advantages = []

    def _policy_loss(self, log_prob, old_log_prob, advantage):
        self.advantages.append(advantage.clone())
        return super()._policy_loss(log_prob, old_log_prob, advantage)


def test_normalize_advantage_standardizes_each_batch():
    agent = make(cls=AdvantageSpy, batch_size=16, actor_update_times=3)
    agent.store_episode(episode(40))
    agent.update()
    assert len(agent.advantages) == 3
    for adv in agent.advantages:
        assert adv.shape == (16, 1)
        assert adv.mean().item() == pytest.approx(0.0, abs=1e-5)
        assert adv.std(correction=0).item() == pytest.approx(1.0, abs=1e-4)

    raw = make(cls=AdvantageSpy, batch_size=100, normalize_advantage=False, actor_update_times=1)
    raw.store_episode(episode(40))
    gae = stored(raw, "gae")[0]
    raw.update()
    assert raw.advantages[0].view(-1).tolist() == pytest.approx(gae)


def entropy_after_training(entropy_weight):
    agent = make(
        entropy_weight=entropy_weight,
        normalize_advantage=False,
        actor_update_times=20,
        actor_learning_rate=0.01,
    )
    for step in episode(20):  # zero advantages: only the entropy term moves the actor
        agent.store_transition({**step, "value": 0.0, "gae": 0.0})
    state = torch.randn(64, 4, generator=torch.Generator().manual_seed(3))
    before = agent.act({"state": state})[2].mean().item()
    agent.update()
    return before, agent.act({"state": state})[2].mean().item()


def test_entropy_weight_sign_and_none():
    before, maximised = entropy_after_training(-1.0)
    _, minimised = entropy_after_training(1.0)
    _, ignored = entropy_after_training(None)
    assert maximised > before > minimised
    assert ignored == pytest.approx(before)
    # without entropy_weight the actor may return (action, log_prob) only
    agent = make(TwoOutputActor())
    agent.store_episode(episode(10))
    assert math.isfinite(agent.update()[0])
    agent = make(TwoOutputActor(), entropy_weight=-0.1)
    agent.store_episode(episode(10))
    with pytest.raises(
        ValueError,
        match=r"must return \(action, log_prob, entropy, \.\.\.\) because entropy_weight",
    ):
        agent.update()


class BareActor(CategoricalActor):
    def forward(self, state, action=None):
        return super().forward(state, action)[1]


class WideLogProbActor(CategoricalActor):
    def forward(self, state, action=None):
        action, log_prob, entropy = super().forward(state, action)
        return action, log_prob.view(-1, 1).expand(-1, 2), entropy


def test_bad_actor_outputs_are_rejected():
    agent = make(BareActor())
    agent.store_episode(episode(5))
    with pytest.raises(
        ValueError, match=r"actor of A2C must return \(action, log_prob, \.\.\.\), got Tensor"
    ):
        agent.update()
    agent = make(WideLogProbActor())
    agent.store_episode(episode(5))
    with pytest.raises(
        ValueError,
        match=r"log_prob output must hold one value per sample, shape \[5\] or \[5, 1\], got \[5, 2\]",
    ):
        agent.update()


class ListActor(CategoricalActor):
    """Accepts per-sample lists (``concatenate_samples=False``)."""

    def forward(self, state, action=None):
        state = torch.cat(state) if isinstance(state, list) else state
        action = torch.cat(action) if isinstance(action, list) else action
        return super().forward(state, action)


class ListCritic(ValueCritic):
    def forward(self, state):
        return super().forward(torch.cat(state) if isinstance(state, list) else state)


def test_update_without_concatenation_hands_lists_to_the_networks():
    agent = make(ListActor(), ListCritic())
    agent.store_episode(episode(12))
    policy_value, value_loss = agent.update(concatenate_samples=False)
    assert math.isfinite(policy_value) and math.isfinite(value_loss)


def test_same_seed_same_numbers():
    results = []
    for _ in range(2):
        agent = make()
        agent.store_episode(episode(30))
        torch.manual_seed(5)
        results.append((agent.update(), parameters(agent.actor)))
    assert results[0][0] == results[1][0] and same(results[0][1], results[1][1])


def test_lr_schedulers_one_per_optimizer():
    agent = make(
        lr_scheduler=torch.optim.lr_scheduler.LambdaLR,
        lr_scheduler_args=((lambda e: 0.5**e,), (lambda e: 0.1**e,)),
        actor_learning_rate=0.1,
        critic_learning_rate=0.1,
    )
    agent.store_episode(episode(10))
    agent.update()
    agent.update_lr_scheduler()
    assert agent.actor_optim.param_groups[0]["lr"] == pytest.approx(0.05)
    assert agent.critic_optim.param_groups[0]["lr"] == pytest.approx(0.01)


def test_bad_options_raise_clear_errors():
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        make(batch_size=0)
    with pytest.raises(TypeError, match="actor_update_times must be a positive integer, got 1.5"):
        make(actor_update_times=1.5)
    with pytest.raises(ValueError, match=r"gae_lambda must be in \[0, 1\], got 1.5"):
        make(gae_lambda=1.5)
    with pytest.raises(ValueError, match=r"discount must be in \[0, 1\], got -0.1"):
        make(discount=-0.1)
    with pytest.raises(ValueError, match="critic_learning_rate must be positive"):
        make(critic_learning_rate=0)
    with pytest.raises(ValueError, match="value_weight must be non-negative"):
        make(value_weight=-1)


@pytest.mark.learning
def test_a2c_learns_cartpole():
    torch.manual_seed(0)
    agent = A2C(
        CategoricalActor(),
        ValueCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=1000,
        actor_update_times=3,
        critic_update_times=5,
        actor_learning_rate=0.003,
        critic_learning_rate=0.003,
        gae_lambda=0.95,
    )
    result = train(agent, lambda: gym.make("CartPole-v0"), seed=0, episodes=400, solved_reward=150)
    print(
        f"A2C reached a smoothed return of 150 on CartPole-v0 at episode {result.solved_episode} "
        f"({result.steps} steps)"
    )
    assert result.solved_episode is not None, (
        "A2C did not reach a smoothed return of 150 within 400 episodes"
    )

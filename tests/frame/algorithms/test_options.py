"""Constructor options declared once (machin.frame.algorithms.options) and scheduled options."""

import inspect
import math
import pydoc

import pytest
import torch
from torch import nn

from machin.frame.algorithms import A2C, DDPG, DQN, PPO, RAINBOW, TD3, DDPGPer
from machin.frame.algorithms.base import TorchFramework
from machin.frame.algorithms.options import Option, option_specs, positive, positive_int
from machin.utils.compat import ExtraArgumentsWarning
from machin.utils.schedules import ExponentialSchedule, LinearSchedule


class QNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, state):
        return self.fc(state)


def make_dqn(**options):
    return DQN(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(), replay_size=100, **options)


# -- declaration and signature -------------------------------------------------------------------
def test_a_subclass_declares_only_what_differs_and_shows_every_option():
    assert "__init__" not in vars(DDPGPer)  # DDPG's constructor serves it unchanged
    signature = inspect.signature(DDPGPer)
    assert signature.parameters["update_rate"].default == 0.005
    assert inspect.signature(DDPG).parameters["update_rate"].default == 0.001
    names = list(signature.parameters)
    assert names[:6] == [
        "actor",
        "actor_target",
        "critic",
        "critic_target",
        "optimizer",
        "criterion",
    ]
    assert names[6] == "_" and names[-1] == "__"  # 0.3.4's ``*_, **__``
    assert {"batch_size", "discount", "gradient_max", "replay_size", "visualize", "n_step"} <= set(
        names
    )
    # help() shows the signature and every option's documentation with its default.
    text = pydoc.render_doc(DDPGPer, renderer=pydoc.plaintext)
    assert "update_rate=0.005" in text
    for name, spec in option_specs(DDPGPer).items():
        assert (
            f"(keyword option, default ``{spec.default!r}``)" in spec.__doc__ and spec.doc in text
        ), name


def test_a_bad_option_is_reported_from_its_check_alone():
    with pytest.raises(ValueError, match=r"discount must be in \[0, 1\], got 2") as caught:
        make_dqn(discount=2)
    frames = [entry for entry in caught.traceback if entry.path.name == "options.py"]
    assert [entry.name for entry in frames] == ["__set__", "probability"]


def test_a_plain_class_attribute_fixes_an_inherited_option():
    assert "mode" not in option_specs(RAINBOW) and "n_step" not in option_specs(RAINBOW)
    assert RAINBOW.mode == "double"
    assert "reward_future_steps" in inspect.signature(RAINBOW).parameters


def test_options_become_checked_attributes_and_extras_warn():
    dqn = make_dqn(batch_size=7, discount=0.5)
    assert (dqn.batch_size, dqn.discount, dqn.mode) == (7, 0.5, "double")
    with pytest.raises(ValueError, match=r"discount must be in \[0, 1\], got 2"):
        dqn.discount = 2
    assert dqn.discount == 0.5
    with pytest.raises(
        TypeError, match="batch_size must be a positive integer, got 2.5 of type float"
    ):
        make_dqn(batch_size=2.5)
    with pytest.warns(ExtraArgumentsWarning, match="'bogus'"):
        make_dqn(bogus=1)
    # The replay_buffer option's attribute holds the buffer in use.
    assert dqn.replay_buffer.buffer_size == 100
    with pytest.raises(TypeError, match="replay_buffer must be None or a Buffer, got list"):
        dqn.replay_buffer = [1, 2]


def test_subclass_constructor_adds_positionals_and_keeps_the_options_it_was_given():
    nets = [nn.Linear(3, 1) for _ in range(6)]

    class Critic(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)

        def forward(self, state, action):
            return self.fc(torch.cat([state, action], 1))

    critics = [Critic() for _ in range(4)]
    td3 = TD3(
        nets[0],
        nets[1],
        *critics,
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=3,
        policy_update_delay=4,
        lr_scheduler=torch.optim.lr_scheduler.StepLR,
        lr_scheduler_args=((1,), (1,), (1,)),
    )
    assert (td3.batch_size, td3.policy_update_delay, td3.update_rate) == (3, 4, 0.005)
    assert (
        len(td3._lr_schedulers) == 3
    )  # one per optimizer, created after every part of the constructor


def test_a_user_subclass_written_the_0_3_4_way_still_works():
    class MyDQN(DQN):
        def __init__(self, *args, my_option=3, **kwargs):
            super().__init__(*args, **kwargs)
            self.my_option = my_option

    dqn = MyDQN(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(), batch_size=9, my_option=4)
    assert (dqn.batch_size, dqn.my_option) == (9, 4)


def test_a_new_framework_declares_its_options_as_class_attributes():
    class Tiny(TorchFramework):
        _is_top = _is_restorable = ["net"]
        learning_rate = Option(0.1, positive, "Learning rate.")
        steps = Option(2, positive_int, "Steps per update.")

        def __init__(self, net, *_, **options):
            super().__init__(*_, **options)
            self.net = net
            self.optim = self._make_optimizer(torch.optim.SGD, net, self.learning_rate)

        def _optimizers(self):
            return [self.optim]

    tiny = Tiny(nn.Linear(1, 1), steps=5, learning_rate=0.5)
    assert (tiny.steps, tiny.optim.param_groups[0]["lr"], tiny.gradient_max) == (5, 0.5, math.inf)
    params = inspect.signature(Tiny).parameters
    assert (
        params["steps"].default == 2
        and params["net"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    )
    with pytest.raises(ValueError, match="steps must be a positive integer, got 0"):
        Tiny(nn.Linear(1, 1), steps=0)


# -- schedules --------------------------------------------------------------------------------------
def test_epsilon_schedule_follows_progress_and_replaces_the_multiplicative_decay():
    dqn = make_dqn(epsilon=LinearSchedule(1.0, 0.04, end_fraction=0.16))
    state = {"state": torch.zeros(1, 4)}
    assert dqn.epsilon == 1.0
    dqn.act_discrete_with_noise(state)
    assert dqn.epsilon == 1.0  # no multiplicative decay while scheduled
    dqn.set_progress(0.08)
    assert dqn.epsilon == pytest.approx(0.52)
    dqn.set_progress(0.5)
    assert dqn.epsilon == pytest.approx(0.04)
    dqn.epsilon = 0.3  # a plain value ends the schedule; the 0.3.4 decay applies again
    dqn.set_progress(0.9)
    assert dqn.epsilon == 0.3
    dqn.act_discrete_with_noise(state)
    assert dqn.epsilon == pytest.approx(0.3 * 0.9999)


def test_multiplicative_epsilon_decay_stops_at_its_floor():
    dqn = make_dqn(epsilon_decay=0.5, epsilon_min=0.2)
    for _ in range(5):
        dqn.act_discrete_with_noise({"state": torch.zeros(1, 4)})
    assert dqn.epsilon == 0.2
    assert make_dqn().epsilon_min == 0.0  # 0.3.4's behaviour by default


def test_a_scheduled_learning_rate_reaches_the_optimizer_and_may_decay_to_zero():
    dqn = make_dqn(learning_rate=LinearSchedule(1e-3, 0.0))
    dqn.set_progress(0.5)
    assert dqn.qnet_optim.param_groups[0]["lr"] == pytest.approx(5e-4)
    dqn.set_progress(1.0)
    assert dqn.learning_rate == 0.0 and dqn.qnet_optim.param_groups[0]["lr"] == 0.0
    with pytest.raises(ValueError, match="learning_rate must be positive, got 0"):
        dqn.learning_rate = 0  # a value given directly must still be positive
    dqn.learning_rate = 0.01  # an assignment reaches the optimizer too
    assert dqn.qnet_optim.param_groups[0]["lr"] == 0.01


def test_ppo_clip_range_and_entropy_weight_take_schedules():
    actor, critic = nn.Linear(4, 2), nn.Linear(4, 1)
    ppo = PPO(
        actor,
        critic,
        torch.optim.Adam,
        nn.MSELoss(),
        surrogate_loss_clip=LinearSchedule(0.2, 0.0),
        entropy_weight=ExponentialSchedule(-0.01, -0.001),
        actor_learning_rate=LinearSchedule(3e-4, 0.0),
    )
    ppo.set_progress(0.5)
    assert ppo.surrogate_loss_clip == pytest.approx(0.1)
    assert ppo.entropy_weight == pytest.approx(-0.01 * 0.1**0.5)
    assert ppo.actor_optim.param_groups[0]["lr"] == pytest.approx(1.5e-4)
    assert ppo.critic_optim.param_groups[0]["lr"] == 0.001  # not scheduled


def test_a_scheduled_value_that_fails_its_check_raises_and_progress_is_checked():
    a2c = A2C(
        nn.Linear(4, 2),
        nn.Linear(4, 1),
        torch.optim.Adam,
        nn.MSELoss(),
        critic_learning_rate=LinearSchedule(1e-3, -1e-3),
    )
    with pytest.raises(ValueError, match="critic_learning_rate must be non-negative"):
        a2c.set_progress(1.0)
    with pytest.raises(ValueError, match="progress"):
        a2c.set_progress(1.5)


# -- named update results ---------------------------------------------------------------------------
def test_actor_critic_updates_return_a_named_pair_that_unpacks_like_0_3_4():
    from machin.frame.algorithms.base import UpdateResult

    from .nets import CategoricalActor, ValueCritic, episode_steps

    a2c = A2C(
        CategoricalActor(hidden=8),
        ValueCritic(hidden=8),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=4,
    )
    a2c.store_episode(episode_steps(8))
    result = a2c.update()
    assert isinstance(result, UpdateResult) and isinstance(result, tuple)
    policy_value, value_loss = result
    assert (policy_value, value_loss) == (result.policy_value, result.value_loss)
    assert value_loss > 0

"""Machin 0.3.4 behaviour of the algorithms, restored: extra arguments, PER criteria, modes,
network maps, old checkpoints, safe_call's errors and helpers."""

import copy
import os
import warnings

import pytest
import torch
from torch import nn

from machin.frame.algorithms import (
    A2C,
    DDPG,
    DQN,
    HDDPG,
    MADDPG,
    PPO,
    RAINBOW,
    SAC,
    TD3,
    DDPGPer,
    DQNPer,
)
from machin.frame.algorithms.utils import (
    MissingArgumentError,
    assert_output_is_probs,
    determine_device,
    safe_call,
    safe_return,
)
from machin.utils.compat import ExtraArgumentsWarning
from tests.frame.algorithms.nets import (
    Actor,
    CategoricalActor,
    Critic,
    DistQNet,
    QCritic,
    QNet,
    TanhGaussianActor,
    ValueCritic,
    make_networks,
    step_dict,
    transition,
)
from tests.frame.algorithms.nets import fill as fill_ddpg


def _ddpg_nets():
    actor, critic = Actor(), Critic()
    return actor, copy.deepcopy(actor), critic, copy.deepcopy(critic)


BUILDERS = {
    "DQN": lambda **kw: DQN(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(), batch_size=8, **kw),
    "DQNPer": lambda **kw: DQNPer(
        QNet(), QNet(), torch.optim.Adam, nn.MSELoss(reduction="none"), batch_size=8, **kw
    ),
    "RAINBOW": lambda **kw: RAINBOW(
        DistQNet(), DistQNet(), torch.optim.Adam, 0.0, 1.0, batch_size=8, **kw
    ),
    "DDPG": lambda **kw: DDPG(*_ddpg_nets(), torch.optim.Adam, nn.MSELoss(), batch_size=8, **kw),
    "DDPGPer": lambda **kw: DDPGPer(
        *_ddpg_nets(), torch.optim.Adam, nn.MSELoss(reduction="none"), batch_size=8, **kw
    ),
    "HDDPG": lambda **kw: HDDPG(*_ddpg_nets(), torch.optim.Adam, nn.MSELoss(), batch_size=8, **kw),
    "TD3": lambda **kw: TD3(
        *_ddpg_nets(), Critic(), Critic(), torch.optim.Adam, nn.MSELoss(), batch_size=8, **kw
    ),
    "SAC": lambda **kw: SAC(
        TanhGaussianActor(),
        QCritic(),
        QCritic(),
        QCritic(),
        QCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=8,
        **kw,
    ),
    "A2C": lambda **kw: A2C(
        CategoricalActor(), ValueCritic(), torch.optim.Adam, nn.MSELoss(), batch_size=8, **kw
    ),
    "MADDPG": lambda **kw: MADDPG(
        *make_networks([3, 3], [2, 2], [[0, 1], [0, 1]]),
        [[0, 1], [0, 1]],
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=4,
        pool_size=1,
        **kw,
    ),
    "PPO": lambda **kw: PPO(
        CategoricalActor(), ValueCritic(), torch.optim.Adam, nn.MSELoss(), batch_size=8, **kw
    ),
}


# -- extra arguments ------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_constructors_ignore_unknown_keywords_and_name_them_in_a_warning(name):
    with pytest.warns(
        ExtraArgumentsWarning,
        match=rf"{name}.__init__\(\) does not use keyword argument\(s\) "
        r"'lerning_rate'; ignored",
    ):
        agent = BUILDERS[name](lerning_rate=0.5)
    assert type(agent).__name__ == name


@pytest.mark.parametrize(
    "name, keyword, advice",
    [
        ("PPO", "gamma", "'gamma' is 'discount' in machin"),
        ("DDPG", "tau", "'tau' is 'update_rate' in machin"),
        ("DQN", "buffer_size", "'buffer_size' is 'replay_size' in machin"),
        (
            "A2C",
            "learning_rate",
            "'learning_rate' is 'actor_learning_rate' / 'critic_learning_rate' in machin",
        ),
        ("PPO", "max_grad_norm", "'max_grad_norm' is 'gradient_max' in machin"),
        ("PPO", "ent_coef", r"'ent_coef' is 'entropy_weight' \(negated\) in machin"),
        ("SAC", "ent_coef", "'ent_coef' is 'initial_entropy_alpha' in machin"),
        ("DQN", "train_freq", r"'train_freq' is a setting of the loop: Trainer\(train_freq=...\)"),
        (
            "SAC",
            "learning_starts",
            r"'learning_starts' is a setting of the loop: Trainer\(warmup_steps=...\)",
        ),
        ("PPO", "n_steps", r"'n_steps' is a setting of the loop: Trainer\(rollout_steps=...\)"),
    ],
)
def test_a_keyword_of_another_library_is_ignored_with_machins_name_for_it(name, keyword, advice):
    with pytest.warns(
        ExtraArgumentsWarning,
        match=rf"does not use keyword argument\(s\) '{keyword}'; ignored .*"
        rf"Note: {advice}\.",
    ):
        agent = BUILDERS[name](**{keyword: 0.5})
    assert type(agent).__name__ == name


def test_an_unknown_keyword_gets_no_note():
    with pytest.warns(ExtraArgumentsWarning) as record:
        BUILDERS["DQN"](lerning_rate=0.5)
    assert "Note:" not in str(record[0].message)


def test_update_accepts_the_flags_of_other_algorithms():
    # the 0.3.4 idiom: one update call for every algorithm
    a2c = BUILDERS["A2C"]()
    a2c.store_episode(
        [step_dict([0.1 * i] * 4, [[i % 2]], [0.1 * i + 0.1] * 4, 1.0, i == 9) for i in range(10)]
    )
    with pytest.warns(
        ExtraArgumentsWarning,
        match=r"A2C.update\(\) does not use keyword argument\(s\) 'update_target'",
    ):
        result = a2c.update(update_value=True, update_policy=True, update_target=True)
    assert len(result) == 2 and all(isinstance(v, float) for v in result)

    dqn = BUILDERS["DQN"]()
    for i in range(8):
        dqn.store_transition(transition([0.1 * i] * 4, i % 2, [0.1 * i] * 4, 1.0, False))
    with pytest.warns(
        ExtraArgumentsWarning,
        match=r"DQN.update\(\) does not use keyword argument\(s\) 'update_policy'",
    ):
        loss = dqn.update(update_value=True, update_policy=True, update_target=True)
    assert isinstance(loss, float)


def test_extra_positional_arguments_are_counted_in_the_warning():
    dqn = BUILDERS["DQN"]()
    with pytest.warns(
        ExtraArgumentsWarning, match=r"act_discrete\(\) does not use 2 positional argument\(s\)"
    ):
        action = dqn.act_discrete({"state": torch.zeros(3, 4)}, False, "x", "y")
    assert action.shape == (3, 1)


def test_the_warning_is_shown_once_per_calling_line():
    ddpg = BUILDERS["DDPG"]()
    fill_ddpg(ddpg, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            ddpg.update(
                update_value=False,
                update_policy=False,
                update_target=False,
                concatenate_samples=True,
                extra_flag=1,
            )
    assert [type(w.message) for w in caught] == [ExtraArgumentsWarning]
    assert caught[0].filename == __file__


def test_calls_without_extras_do_not_warn():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dqn = BUILDERS["DQN"](learning_rate=0.01)
        action = dqn.act_discrete_with_noise({"state": torch.zeros(1, 4)})
    assert caught == [] and dqn.learning_rate == 0.01 and action.shape == (1, 1)


def test_rainbow_ignores_mode_as_0_3_4_did():
    with pytest.warns(ExtraArgumentsWarning, match="RAINBOW.__init__.*'mode'"):
        agent = BUILDERS["RAINBOW"](mode="vanilla")
    assert agent.mode == "double"


def test_lr_scheduler_args_default_is_an_empty_tuple_and_works():
    from torch.optim.lr_scheduler import LambdaLR

    ppo = BUILDERS["PPO"](
        lr_scheduler=LambdaLR, lr_scheduler_args=((lambda epoch: 0.5,), (lambda epoch: 0.5,))
    )
    assert len(ppo._lr_schedulers) == 2
    assert BUILDERS["PPO"](lr_scheduler_args=(), lr_scheduler_kwargs=())._lr_schedulers == []


# -- prioritized replay criteria and modes -------------------------------------------------------
@pytest.mark.parametrize("name", ["DQNPer", "DDPGPer"])
def test_per_switches_a_reducing_criterion_to_none_with_a_warning(name):
    criterion = nn.MSELoss(reduction="sum")
    build = BUILDERS[name]
    with pytest.warns(
        UserWarning,
        match=rf"reduction property of criterion is not 'none' \(it is 'sum'\); "
        rf"{name} needs one loss per sample",
    ):
        if name == "DQNPer":
            agent = DQNPer(QNet(), QNet(), torch.optim.Adam, criterion, batch_size=8)
        else:
            agent = DDPGPer(*_ddpg_nets(), torch.optim.Adam, criterion, batch_size=8)
    assert criterion.reduction == "none" and agent.criterion is criterion
    if name == "DQNPer":
        for i in range(8):
            agent.store_transition(transition([0.1 * i] * 4, i % 2, [0.1 * i] * 4, 1.0, False))
        assert isinstance(agent.update(), float)
    else:
        fill_ddpg(agent, 16)
        assert all(isinstance(v, float) for v in agent.update())
    del build


@pytest.mark.parametrize("name", ["DQNPer", "DDPGPer"])
def test_per_refuses_a_criterion_without_reduction(name):
    def criterion(a, b):
        return (a - b) ** 2

    with pytest.raises(RuntimeError, match="Criterion does not have the 'reduction' property"):
        if name == "DQNPer":
            DQNPer(QNet(), QNet(), torch.optim.Adam, criterion)
        else:
            DDPGPer(*_ddpg_nets(), torch.optim.Adam, criterion)


def test_dqnper_honours_another_mode_but_warns_that_0_3_4_did_not():
    with pytest.warns(
        UserWarning, match="Machin 0.3.4's DQNPer ignored `mode` and always trained in 'double'"
    ):
        agent = BUILDERS["DQNPer"](mode="fixed_target")
    assert agent.mode == "fixed_target"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert BUILDERS["DQNPer"]().mode == "double"


# -- checkpoints ------------------------------------------------------------------------------
def test_a_0_3_4_whole_module_checkpoint_loads_only_when_trusted(tmp_path):
    source = BUILDERS["DQN"]()
    torch.save(source.qnet_target, tmp_path / "qnet_target_3.pt")  # what 0.3.4's save wrote
    target = BUILDERS["DQN"]()
    with pytest.raises(Exception, match="trusted=True"):
        target.load(str(tmp_path))
    target.load(str(tmp_path), trusted=True)
    state = torch.zeros(2, 4)
    assert torch.equal(
        target.act_discrete(state_dict := {"state": state}, use_target=True),
        source.act_discrete(state_dict, use_target=True),
    )
    assert torch.equal(target.qnet_target.net[0].weight, source.qnet_target.net[0].weight)


VISIBLE = [[0, 1], [0, 1]]


def _maddpg():
    torch.manual_seed(0)
    return MADDPG(
        *make_networks([3, 3], [2, 2], VISIBLE),
        VISIBLE,
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=4,
        pool_size=1,
    )


def _write_0_3_4_maddpg(source, directory, version):
    """The files 0.3.4 wrote: whole modules named all_*_target with children actor_i_j / critic_i."""
    actors, critics = nn.Module(), nn.Module()
    for i, policies in enumerate(source.actor_targets):
        for j, policy in enumerate(policies):
            actors.add_module(f"actor_{i}_{j}", policy)
    for i, critic in enumerate(source.critic_targets):
        critics.add_module(f"critic_{i}", critic)
    torch.save(actors, os.path.join(directory, f"all_actor_target_{version}.pt"))
    torch.save(critics, os.path.join(directory, f"all_critic_target_{version}.pt"))


def test_maddpg_reads_the_0_3_4_file_names_and_layout_when_trusted(tmp_path):
    source = _maddpg()
    with torch.no_grad():
        for p in source.actor_targets.parameters():
            p.add_(1.0)
    _write_0_3_4_maddpg(source, tmp_path, 2)
    target = _maddpg()
    with pytest.raises(
        RuntimeError, match=r"Machin 0.3.4 checkpoint .*load\(\.\.\., trusted=True\)"
    ):
        target.load(str(tmp_path))
    target.load(str(tmp_path), trusted=True)
    for mine, theirs in zip(target.actor_targets.parameters(), source.actor_targets.parameters()):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(target.critic_targets.parameters(), source.critic_targets.parameters()):
        assert torch.equal(mine, theirs)
    # the online networks are copies of the loaded targets
    assert torch.equal(next(target.actors.parameters()), next(source.actor_targets.parameters()))


def test_maddpg_accepts_the_0_3_4_names_in_network_map(tmp_path):
    source = _maddpg()
    source.save(
        str(tmp_path),
        network_map={"all_actor_target": "actors_file", "all_critic_target": "critics_file"},
    )
    assert sorted(os.listdir(tmp_path)) == [
        "actors_file_0.manifest.json",
        "actors_file_0.pt",
        "critics_file_0.pt",
    ]
    target = _maddpg()
    with torch.no_grad():
        for p in target.actor_targets.parameters():
            p.zero_()
    target.load(
        str(tmp_path),
        network_map={"all_actor_target": "actors_file", "all_critic_target": "critics_file"},
    )
    for mine, theirs in zip(target.actor_targets.parameters(), source.actor_targets.parameters()):
        assert torch.equal(mine, theirs)


def test_maddpg_reward_function_takes_0_3_4_arguments():
    reward, next_value = torch.ones(2, 1), torch.full((2, 1), 2.0)
    terminal = torch.tensor([[0.0], [1.0]])
    expected = torch.tensor([[2.0], [1.0]])
    assert torch.equal(MADDPG.reward_function(reward, 0.5, next_value, terminal), expected)
    with pytest.warns(ExtraArgumentsWarning):
        assert torch.equal(
            MADDPG.reward_function(reward, 0.5, next_value, terminal, {}, "extra"), expected
        )
    assert torch.equal(DQN.reward_function(reward, 0.5, next_value, terminal, None), expected)


# -- utils ------------------------------------------------------------------------------------
def test_safe_call_missing_argument_is_a_runtime_error_with_the_0_3_4_phrase():
    with pytest.raises(RuntimeError, match="Missing required arguments") as info:
        safe_call(QNet(), {"obs": torch.zeros(1, 4)})
    assert isinstance(info.value, TypeError) and isinstance(info.value, MissingArgumentError)


def test_determine_device_and_safe_return():
    assert determine_device(QNet()) == ["cpu"]
    assert safe_return((5,)) == 5
    assert safe_return((1, 2)) == (1, 2)


def test_error_phrases_of_0_3_4():
    with pytest.raises(ValueError, match="Unknown DQN mode: 'bogus'"):
        BUILDERS["DQN"](mode="bogus")
    dqn = BUILDERS["DQN"]()
    # 0.3.4 raised at the next update(); machin refuses the assignment itself
    with pytest.raises(ValueError, match="Unknown DQN mode: 'bogus'"):
        dqn.mode = "bogus"
    assert dqn.mode == "double"
    ddpg = BUILDERS["DDPG"]()
    with pytest.raises(ValueError, match="Unknown noise type: 'bogus'"):
        ddpg.act_with_noise({"state": torch.zeros(1, 3)}, mode="bogus")
    with pytest.raises(ValueError, match="Input tensor is not a probability tensor"):
        assert_output_is_probs(torch.tensor([[0.5, 0.7]]))


# -- Machin 0.3.4's overridable helpers ------------------------------------------------------
def test_the_0_3_4_helpers_compute_what_they_did():
    torch.manual_seed(0)
    state = {"state": torch.randn(5, 4)}
    dqn = BUILDERS["DQN"]()
    assert torch.equal(dqn._criticize(state), dqn.qnet(state["state"]))
    assert torch.equal(dqn._criticize(state, True), dqn.qnet_target(state["state"]))
    assert torch.equal(
        dqn._act_discrete(state), dqn.qnet(state["state"]).argmax(dim=1, keepdim=True)
    )
    a2c = BUILDERS["A2C"]()
    assert torch.equal(a2c._criticize(state), a2c.critic(state["state"]))

    ddpg, td3, sac = BUILDERS["DDPG"](), BUILDERS["TD3"](), BUILDERS["SAC"]()
    pendulum = {"state": torch.randn(5, 3)}
    action = {"action": torch.rand(5, 1)}
    assert torch.equal(ddpg._act(pendulum), ddpg.actor(pendulum["state"]))
    assert torch.equal(ddpg._act(pendulum, True), ddpg.actor_target(pendulum["state"]))
    assert torch.equal(
        ddpg._criticize(pendulum, action, True),
        ddpg.critic_target(pendulum["state"], action["action"]),
    )
    assert torch.equal(
        td3._criticize2(pendulum, action), td3.critic2(pendulum["state"], action["action"])
    )
    assert torch.equal(
        sac._criticize2(pendulum, action, True),
        sac.critic2_target(pendulum["state"], action["action"]),
    )


def _counting(base, hook):
    """A subclass of ``base`` (written the 0.3.4 way) whose override of ``hook`` counts its calls."""

    def counted(self, *args, **kwargs):
        self.calls += 1
        return getattr(super(subclass, self), hook)(*args, **kwargs)

    subclass = type(f"Counting{base.__name__}", (base,), {hook: counted, "calls": 0})
    return subclass


def test_an_override_of_a_0_3_4_helper_is_what_the_update_uses():
    dqn = _counting(DQN, "_criticize")(QNet(), QNet(), torch.optim.Adam, nn.MSELoss(), batch_size=8)
    for i in range(8):
        dqn.store_transition(transition([0.1 * i] * 4, i % 2, [0.1 * i] * 4, 1.0, False))
    dqn.update()
    assert dqn.calls == 3  # the predicted Q values, the target Q values, the double-DQN next action

    ddpg = _counting(DDPG, "_act")(*_ddpg_nets(), torch.optim.Adam, nn.MSELoss(), batch_size=8)
    fill_ddpg(ddpg, 16)
    ddpg.update()
    assert ddpg.calls == 2  # the target actor's next actions, the actor loss

    a2c = _counting(A2C, "_criticize")(
        CategoricalActor(),
        ValueCritic(),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=8,
        actor_update_times=1,
        critic_update_times=1,
    )
    a2c.store_episode(
        [step_dict([0.1 * i] * 4, [[i % 2]], [0.1 * i + 0.1] * 4, 1.0, i == 9) for i in range(10)]
    )
    calls_when_stored = a2c.calls
    a2c.update()
    assert (
        calls_when_stored > 0 and a2c.calls > calls_when_stored
    )  # the episode's values, the critic loss


@pytest.mark.parametrize(
    "base, hook, replacement",
    [
        (DDPG, "_criticize", "_critic_value"),
        (TD3, "_criticize2", "_critic_value"),
        (SAC, "_criticize", "_critic_value"),
        (RAINBOW, "_criticize", "_predicted_value"),
    ],
)
def test_an_override_the_update_does_not_use_is_named_when_the_class_is_made(
    base, hook, replacement
):
    with pytest.warns(
        UserWarning,
        match=rf"Mine overrides {hook}, a Machin 0.3.4 helper that the update of "
        rf"{base.__name__} does not call in machin; override {replacement}",
    ):
        type("Mine", (base,), {hook: lambda self, *args, **kwargs: None})


def test_overrides_the_update_uses_are_not_warned_about():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        type("Mine", (DQN,), {"_criticize": DQN._criticize, "_act_discrete": DQN._act_discrete})
        type("Mine", (DDPG,), {"_act": DDPG._act})
        type("Mine", (A2C,), {"_criticize": A2C._criticize, "_eval_act": A2C._eval_act})
    assert [str(w.message) for w in caught] == []

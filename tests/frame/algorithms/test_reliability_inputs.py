"""Bad constructor arguments and bad inputs give errors that name the argument, what was
expected and what was given (instead of failing later inside torch)."""

import copy

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
    R2D1,
    RAINBOW,
    SAC,
    TD3,
    TRPO,
    DDPGPer,
    DQNPer,
)
from machin.frame.algorithms.base import NetworkMismatchError
from machin.frame.algorithms.dqn import BatchDimensionError
from tests.frame.algorithms.nets import (
    Actor,
    CategoricalActor,
    Critic,
    DistQNet,
    GRUQNet,
    QCritic,
    QNet,
    TanhGaussianActor,
    ValueCritic,
    make_networks,
    transition,
)

MSE = nn.MSELoss
PER_MSE = lambda: nn.MSELoss(reduction="none")  # noqa: E731


def _ddpg(cls, loss=MSE):
    def build(optimizer=torch.optim.Adam, criterion="default", **kw):
        actor, critic = Actor(), Critic()
        return cls(
            actor,
            copy.deepcopy(actor),
            critic,
            copy.deepcopy(critic),
            optimizer,
            loss() if criterion == "default" else criterion,
            **kw,
        )

    return build


def _simple(cls, *nets, loss=MSE):
    def build(optimizer=torch.optim.Adam, criterion="default", **kw):
        return cls(
            *(net() for net in nets),
            optimizer,
            loss() if criterion == "default" else criterion,
            **kw,
        )

    return build


def _td3(optimizer=torch.optim.Adam, criterion="default", **kw):
    actor, critic = Actor(), Critic()
    return TD3(
        actor,
        copy.deepcopy(actor),
        critic,
        copy.deepcopy(critic),
        Critic(),
        Critic(),
        optimizer,
        MSE() if criterion == "default" else criterion,
        **kw,
    )


def _maddpg(optimizer=torch.optim.Adam, criterion="default", **kw):
    kw.setdefault("pool_size", 1)
    return MADDPG(
        *make_networks([3, 3], [2, 2], [[0, 1], [0, 1]]),
        [[0, 1], [0, 1]],
        optimizer,
        MSE() if criterion == "default" else criterion,
        **kw,
    )


def _rainbow(optimizer=torch.optim.Adam, criterion="default", **kw):
    return RAINBOW(DistQNet(), DistQNet(), optimizer, 0.0, 1.0, **kw)


#: name -> (builder(optimizer=..., criterion=..., **options), whether it takes a criterion)
BUILDERS = {
    "DQN": (_simple(DQN, QNet, QNet), True),
    "DQNPer": (_simple(DQNPer, QNet, QNet, loss=PER_MSE), True),
    "R2D1": (_simple(R2D1, GRUQNet, GRUQNet, loss=PER_MSE), True),
    "RAINBOW": (_rainbow, False),
    "DDPG": (_ddpg(DDPG), True),
    "DDPGPer": (_ddpg(DDPGPer, PER_MSE), True),
    "HDDPG": (_ddpg(HDDPG), True),
    "TD3": (_td3, True),
    "SAC": (_simple(SAC, TanhGaussianActor, QCritic, QCritic, QCritic, QCritic), True),
    "A2C": (_simple(A2C, CategoricalActor, ValueCritic), True),
    "PPO": (_simple(PPO, CategoricalActor, ValueCritic), True),
    "TRPO": (_simple(TRPO, CategoricalActor, ValueCritic), True),
    "MADDPG": (_maddpg, True),
}
NAMES = sorted(BUILDERS)
WITH_CRITERION = [name for name in NAMES if BUILDERS[name][1]]


def build(name, **kw):
    return BUILDERS[name][0](**kw)


@pytest.mark.parametrize("name", NAMES)
def test_the_registry_builds_every_algorithm(name):
    assert type(build(name)).__name__ == name


# -- integer options ------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("value, shown", [(2.5, "2.5"), ("32", "'32'"), (True, "True")])
def test_batch_size_of_a_wrong_type_is_a_type_error_naming_it(name, value, shown):
    with pytest.raises(TypeError, match=rf"batch_size must be a positive integer, got {shown}"):
        build(name, batch_size=value)


@pytest.mark.parametrize("name", NAMES)
def test_batch_size_zero_is_still_a_value_error(name):
    with pytest.raises(ValueError, match=r"batch_size must be .*positive.*got 0"):
        build(name, batch_size=0)


@pytest.mark.parametrize("name", ["DQN", "R2D1", "RAINBOW"])
def test_update_steps_of_a_wrong_type_is_a_type_error(name):
    with pytest.raises(
        TypeError, match=r"update_steps must be None or a positive integer, got 1.5"
    ):
        build(name, update_rate=None, update_steps=1.5)


@pytest.mark.parametrize("option", ["actor_update_times", "critic_update_times"])
def test_a2c_update_times_of_a_wrong_type_is_a_type_error(option):
    with pytest.raises(TypeError, match=rf"{option} must be a positive integer, got 1.5"):
        build("A2C", **{option: 1.5})


# -- real-valued options --------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, option",
    [
        ("DQN", "learning_rate"),
        ("DDPG", "actor_learning_rate"),
        ("SAC", "critic_learning_rate"),
        ("A2C", "actor_learning_rate"),
        ("MADDPG", "critic_learning_rate"),
        ("TD3", "gradient_max"),
    ],
)
@pytest.mark.parametrize("value, shown", [("0.01", "'0.01'"), (True, "True"), (None, "None")])
def test_rates_of_a_wrong_type_are_type_errors(name, option, value, shown):
    with pytest.raises(TypeError, match=rf"{option} must be a positive real number, got {shown}"):
        build(name, **{option: value})


def test_numpy_numbers_are_accepted():
    np = pytest.importorskip("numpy")
    dqn = build("DQN", batch_size=np.int64(4), learning_rate=np.float32(0.01))
    assert dqn.batch_size == 4


# -- optimizer ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_an_optimizer_instance_is_a_type_error(name):
    instance = torch.optim.Adam(nn.Linear(1, 1).parameters())
    with pytest.raises(
        TypeError,
        match=r"optimizer must be an optimizer class such as torch.optim.Adam.*"
        r"got an instance of Adam",
    ):
        build(name, optimizer=instance)


@pytest.mark.parametrize("name", NAMES)
def test_an_optimizer_name_is_a_type_error(name):
    with pytest.raises(TypeError, match=r"optimizer must be an optimizer class .*got 'adam'"):
        build(name, optimizer="adam")


def test_an_optimizer_factory_is_still_accepted():
    dqn = build("DQN", optimizer=lambda params, lr: torch.optim.SGD(params, lr=lr, momentum=0.9))
    assert isinstance(dqn.qnet_optim, torch.optim.SGD)


# -- criterion ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", WITH_CRITERION)
@pytest.mark.parametrize("value, shown", [(None, "None"), ("mse", "'mse'")])
def test_a_criterion_that_is_not_callable_is_a_type_error(name, value, shown):
    with pytest.raises(TypeError, match=rf"criterion must be a loss callable .*got {shown}"):
        build(name, criterion=value)


# -- target networks ------------------------------------------------------------------------
def _mismatch_cases():
    adam, mse = torch.optim.Adam, nn.MSELoss()
    return {
        "DQN": (lambda: DQN(QNet(4, 2), QNet(8, 2), adam, mse), "qnet_target"),
        "DDPG-actor": (
            lambda: DDPG(Actor(), Actor(hidden=8), Critic(), Critic(), adam, mse),
            "actor_target",
        ),
        "DDPG-critic": (
            lambda: DDPG(Actor(), Actor(), Critic(), Critic(hidden=8), adam, mse),
            "critic_target",
        ),
        "TD3": (
            lambda: TD3(
                Actor(), Actor(), Critic(), Critic(), Critic(), Critic(hidden=8), adam, mse
            ),
            "critic2_target",
        ),
        "SAC": (
            lambda: SAC(
                TanhGaussianActor(), QCritic(), QCritic(hidden=8), QCritic(), QCritic(), adam, mse
            ),
            "critic_target",
        ),
        "MADDPG": (
            lambda: MADDPG(
                *make_networks([3, 3], [2, 2], [[0, 1], [0, 1]])[:3],
                make_networks([3, 3], [2, 2], [[0], [0, 1]])[3],
                [[0, 1], [0, 1]],
                adam,
                mse,
                pool_size=1,
            ),
            r"critic_targets\[0\]",
        ),
    }


@pytest.mark.parametrize("case", sorted(_mismatch_cases()))
def test_a_target_network_of_another_architecture_is_refused(case):
    make, argument = _mismatch_cases()[case]
    with pytest.raises(
        NetworkMismatchError,
        match=rf"{argument} must have the architecture of its online "
        r"network .*differing .* in .*weight: \[",
    ) as info:
        make()
    # a ValueError, and the RuntimeError that copying the parameters raised in 0.3.4
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)


def test_a_target_of_the_same_architecture_but_another_class_is_accepted():
    class OtherQNet(QNet):
        pass

    dqn = DQN(QNet(), OtherQNet(), torch.optim.Adam, nn.MSELoss())
    assert all(
        torch.equal(a, b) for a, b in zip(dqn.qnet.parameters(), dqn.qnet_target.parameters())
    )


# -- acting ---------------------------------------------------------------------------------
ACT_CASES = {
    "DQN.act_discrete": ("DQN", lambda a, s: a.act_discrete(s), torch.zeros(1, 4)),
    "DQN.act_discrete_with_noise": (
        "DQN",
        lambda a, s: a.act_discrete_with_noise(s),
        torch.zeros(1, 4),
    ),
    "DQN.criticize": ("DQN", lambda a, s: a.criticize(s), torch.zeros(1, 4)),
    "DDPG.act": ("DDPG", lambda a, s: a.act(s), torch.zeros(1, 3)),
    "DDPG.act_with_noise": ("DDPG", lambda a, s: a.act_with_noise(s), torch.zeros(1, 3)),
    "A2C.act": ("A2C", lambda a, s: a.act(s), torch.zeros(1, 4)),
    "SAC.act": ("SAC", lambda a, s: a.act(s), torch.zeros(1, 3)),
}


@pytest.mark.parametrize("case", sorted(ACT_CASES))
def test_a_bare_tensor_state_is_a_type_error_naming_state(case):
    name, act, tensor = ACT_CASES[case]
    agent = build(name)
    with pytest.raises(
        TypeError, match=r"state must be a Dict\[str, Tensor\] .*got a Tensor of shape \[1, "
    ):
        act(agent, tensor)
    act(agent, {"state": tensor})  # the dict works


def test_maddpg_names_the_agent_whose_state_is_not_a_dict():
    maddpg = build("MADDPG")
    with pytest.raises(
        TypeError,
        match=r"states\[1\] must be a Dict\[str, Tensor\] .*got a Tensor of shape \[1, 3\]",
    ):
        maddpg.act([{"state": torch.zeros(1, 3)}, torch.zeros(1, 3)])


def test_a_dqn_state_without_batch_dimension_names_the_shapes():
    dqn = build("DQN")
    with pytest.raises(
        BatchDimensionError,
        match=r"QNet returned shape \[2\] for state \{'state': \[4\]\}, "
        r"expected \[B, action_num\].*batch dimension",
    ):
        dqn.act_discrete({"state": torch.zeros(4)})
    assert issubclass(BatchDimensionError, IndexError)  # what 0.3.4 raised


def test_safe_call_refuses_a_non_dict_naming_the_network():
    from machin.frame.algorithms.utils import safe_call

    with pytest.raises(
        TypeError,
        match=r"inputs of QNet must be given as a Dict\[str, Tensor\].*got Tensor\[2, 4\]",
    ):
        safe_call(QNet(), torch.zeros(2, 4))


# -- shape mismatches found during update ---------------------------------------------------
def test_a_wrong_state_width_is_reported_with_the_network_and_input_shapes():
    dqn = build("DQN", batch_size=4)
    for i in range(8):
        dqn.store_transition(transition([0.1 * i] * 5, i % 2, [0.1 * i + 0.1] * 5, 1.0, False))
    with pytest.raises(
        RuntimeError,
        match=r"QNet failed on inputs \(state: Tensor\[4, 5\]\).*"
        r"mat1 and mat2 shapes cannot be multiplied",
    ) as info:
        dqn.update()
    assert isinstance(info.value.__cause__, RuntimeError)  # the original error is chained


def test_a_wrong_action_width_names_the_critic_and_both_inputs():
    ddpg = build("DDPG")
    with pytest.raises(
        RuntimeError,
        match=r"Critic failed on inputs \(state: Tensor\[2, 3\], "
        r"action: Tensor\[2, 4\]\)",
    ):
        ddpg.criticize({"state": torch.zeros(2, 3)}, {"action": torch.zeros(2, 4)})

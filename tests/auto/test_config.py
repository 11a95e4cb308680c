"""Algorithm configs (machin.frame.algorithms.config) and launcher configs (machin.auto.config)."""

import json

import pytest
import torch
from torch import nn

import machin.frame.algorithms as algorithms
from machin.auto import config as auto_config
from machin.auto import networks
from machin.frame.algorithms.config import ConfigError, resolve_class
from machin.frame.algorithms.options import option_specs
from machin.frame.buffers import Buffer

CASES = [(algo, "CartPole-v1") for algo in auto_config.DISCRETE_ONLY + auto_config.BOTH_SPACES]
CASES += [(algo, "Pendulum-v1") for algo in auto_config.BOX_ONLY + auto_config.BOTH_SPACES]


def as_json(value):
    return json.loads(json.dumps(value))


def normalised(value):
    """An attribute value as JSON would give it back (tuples as lists)."""
    if isinstance(value, (list, tuple)):
        return [normalised(item) for item in value]
    return value


def small_config(algo, env):
    """A generated config through JSON, with non-default options so that they are seen."""
    config = as_json(auto_config.generate(algo, env))
    frame_config = config["frame_config"]
    frame_config["batch_size"] = 7
    frame_config["discount"] = 0.9
    frame_config["gradient_max"] = 2.5
    for kwargs in frame_config["model_kwargs"]:
        kwargs["hidden"] = 8
    return config


@pytest.mark.parametrize("algo,env", CASES)
def test_round_trip_builds_the_config(algo, env):
    config = small_config(algo, env)
    cls = getattr(algorithms, algo)
    framework = cls.init_from_config(config)
    # networks: the classes and sizes the config names, in the constructor's order
    layout_networks = [
        name for name in cls._is_top if isinstance(getattr(framework, name, None), nn.Module)
    ]
    built = [type(getattr(framework, name)).__name__ for name in layout_networks]
    assert sorted(built) == sorted(
        path.rsplit(".", 1)[1] for path in config["frame_config"]["models"]
    )
    for name in layout_networks:  # the config's hidden size reached every network
        first_layer = next(
            m for m in getattr(framework, name).modules() if isinstance(m, nn.Linear)
        )
        assert first_layer.out_features == 8, name
    # options: every option equals the config's value (replay_buffer None means "make one")
    for name in option_specs(cls):
        if name == "replay_buffer":
            assert isinstance(framework.replay_buffer, Buffer)
            continue
        assert normalised(getattr(framework, name)) == config["frame_config"][name], name
    assert framework.batch_size == 7 and framework.discount == 0.9 and framework.gradient_max == 2.5
    # generate again from the config: nothing changes
    assert as_json(cls.generate_config(config)) == config


def test_generate_config_keeps_given_values_and_fills_the_rest():
    config = algorithms.DQN.generate_config({"frame_config": {"batch_size": 3}, "note": "kept"})
    assert config["frame"] == "DQN" and config["note"] == "kept"
    frame_config = config["frame_config"]
    assert frame_config["batch_size"] == 3
    assert frame_config["models"] == ["QNet", "QNet"]  # 0.4's placeholders
    assert frame_config["optimizer"] == "Adam" and frame_config["criterion"] == "MSELoss"
    assert frame_config["mode"] == "double" and frame_config["epsilon_decay"] == 0.9999
    assert set(option_specs(algorithms.DQN)) <= set(frame_config)


def test_generated_configs_name_0_4_keys():
    rainbow = algorithms.RAINBOW.generate_config({})["frame_config"]
    assert (
        rainbow["value_min"] == -1.0 and rainbow["value_max"] == 1.0 and "criterion" not in rainbow
    )
    assert (
        algorithms.TD3.generate_config({})["frame_config"]["models"]
        == ["Actor"] * 2 + ["Critic"] * 4
    )
    assert algorithms.DQNPer.generate_config({})["frame_config"]["criterion_kwargs"] == {
        "reduction": "none"
    }


def test_class_objects_and_dotted_paths_are_accepted():
    config = algorithms.DQN.generate_config(
        {
            "frame_config": {
                "models": [networks.QNet, "machin.auto.networks.QNet"],
                "model_kwargs": [{"state_dim": 3, "action_num": 2}] * 2,
                "optimizer": "torch.optim.SGD",
                "criterion": "SmoothL1Loss",
                "learning_rate": 0.1,
                "lr_scheduler": "StepLR",
                "lr_scheduler_args": [[5]],
            }
        }
    )
    dqn = algorithms.DQN.init_from_config(config)
    assert isinstance(dqn.qnet, networks.QNet) and isinstance(dqn.criterion, nn.SmoothL1Loss)
    assert isinstance(dqn.qnet_optim, torch.optim.SGD)
    assert dqn.lr_scheduler is torch.optim.lr_scheduler.StepLR


def dqn_config(**frame_config):
    config = as_json(auto_config.generate("DQN", "CartPole-v1"))
    config["frame_config"].update(frame_config)
    return config


@pytest.mark.parametrize(
    "change,message",
    [
        ({"bogus": 1}, "unknown key frame_config.bogus for DQN"),
        (
            {"models": ["nowhere_at_all.Net", "machin.auto.networks.QNet"]},
            "frame_config.models[0]: 'nowhere_at_all.Net' does not import",
        ),
        (
            {"models": ["machin.auto.networks.Nothing", "machin.auto.networks.QNet"]},
            "module 'machin.auto.networks' has no 'Nothing'",
        ),
        (
            {"models": ["QNet", "QNet"]},
            "frame_config.models[0]: 'QNet' is not an importable class path",
        ),
        (
            {"models": ["machin.auto.networks.QNet"]},
            "frame_config.models must be a list of 2 entries",
        ),
        (
            {"models": ["torch.optim.Adam", "machin.auto.networks.QNet"]},
            "frame_config.models[0]: 'torch.optim.Adam' is not a torch.nn.Module class",
        ),
        (
            {"model_kwargs": [{"state_dim": 4}, {"state_dim": 4, "action_num": 2}]},
            "frame_config.models[0]: QNet(*[], **{'state_dim': 4}) failed",
        ),
        (
            {"optimizer": "Adamm"},
            "frame_config.optimizer: 'Adamm' is not an importable class path (a name of torch.optim",
        ),
        (
            {"criterion": "NoLoss"},
            "frame_config.criterion: 'NoLoss' is not an importable class path",
        ),
        (
            {"lr_scheduler": "nowhere_at_all.Sched"},
            "frame_config.lr_scheduler: 'nowhere_at_all.Sched' does not import",
        ),
        ({"batch_size": "a"}, "batch_size must be a positive integer, got 'a'"),
        ({"mode": "sideways"}, "Unknown DQN mode: 'sideways'"),
    ],
)
def test_bad_frame_config_names_the_key(change, message):
    with pytest.raises(ConfigError) as info:
        algorithms.DQN.init_from_config(dqn_config(**change))
    assert message in str(info.value)


def test_missing_keys_are_named():
    config = dqn_config()
    del config["frame_config"]["models"]
    with pytest.raises(ConfigError, match=r"DQN lacks the key frame_config\.models"):
        algorithms.DQN.init_from_config(config)
    with pytest.raises(ConfigError, match="lacks the key 'frame_config'"):
        algorithms.DQN.init_from_config({"frame": "DQN"})
    with pytest.raises(ConfigError, match=r"config\['frame'\] is 'PPO'"):
        algorithms.DQN.init_from_config({"frame": "PPO", "frame_config": {}})
    with pytest.raises(ConfigError, match="frame_config must be a dict, got 3"):
        algorithms.DQN.generate_config({"frame_config": 3})


@pytest.mark.parametrize("name", ["A3C", "ARS", "IMPALA", "DQNApex", "DDPGApex", "MADDPG"])
def test_distributed_algorithms_say_they_are_not_supported(name):
    with pytest.raises(NotImplementedError, match=f"{name} cannot be built from a config yet"):
        getattr(algorithms, name).generate_config({})


def test_resolve_class_passes_classes_through():
    assert resolve_class(nn.MSELoss, "k") is nn.MSELoss
    with pytest.raises(
        ConfigError, match="k must be a class name or an importable class path, got 3"
    ):
        resolve_class(3, "k")


# -- launcher configs ---------------------------------------------------------------------
def test_generate_sizes_the_networks_for_the_spaces():
    ppo = auto_config.generate("PPO", "CartPole-v1")
    assert ppo["frame_config"]["model_kwargs"] == [
        {"state_dim": 4, "action_num": 2},
        {"state_dim": 4},
    ]
    sac = auto_config.generate("SAC", "Pendulum-v1")
    assert sac["frame_config"]["models"][0] == "machin.auto.networks.SquashedGaussianActor"
    assert sac["frame_config"]["model_kwargs"][0] == {
        "state_dim": 3,
        "action_dim": 1,
        "low": [-2.0],
        "high": [2.0],
    }
    assert ppo["env"] == "CartPole-v1" and ppo["max_steps"] == 50000 and ppo["seed"] == 0
    assert auto_config.validate(as_json(ppo)) == as_json(ppo)


@pytest.mark.parametrize(
    "algo,env,message",
    [
        ("DQN", "Pendulum-v1", "env: DQN needs a Discrete action space, 'Pendulum-v1' has Box"),
        ("SAC", "CartPole-v1", "env: SAC needs a Box action space, 'CartPole-v1' has Discrete(2)"),
        ("R2D1", "CartPole-v1", "--algo: generate supports"),
        ("PPO", "NoSuchEnv-v0", "env: gymnasium cannot make 'NoSuchEnv-v0'"),
    ],
)
def test_generate_refuses_what_it_cannot_build(algo, env, message):
    with pytest.raises(ConfigError) as info:
        auto_config.generate(algo, env)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "change,message",
    [
        ({"extra": 1}, "unknown key 'extra'"),
        ({"env": None}, "env must be of type str, got None"),
        ({"frame": "Nope"}, "frame: 'Nope' is not an algorithm of machin.frame.algorithms"),
        ({"max_steps": None}, "sets neither 'max_episodes' nor 'max_steps'"),
        ({"max_steps": "10"}, "max_steps must be of type int, got '10'"),
        ({"trainer_config": {"log_dir": "x"}}, "unknown key trainer_config.log_dir"),
    ],
)
def test_bad_launcher_config_names_the_key(change, message):
    config = {**as_json(auto_config.generate("PPO", "CartPole-v1")), **change}
    with pytest.raises(ConfigError) as info:
        auto_config.validate(config)
    assert message in str(info.value)
    missing = as_json(auto_config.generate("PPO", "CartPole-v1"))
    del missing["env"]
    with pytest.raises(ConfigError, match="the config lacks the key 'env'"):
        auto_config.validate(missing)


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_save_and_load_round_trip(tmp_path, suffix):
    config = auto_config.generate("TD3", "Pendulum-v1")
    path = str(tmp_path / f"td3{suffix}")
    auto_config.save(config, path)
    loaded = auto_config.load(path)
    assert loaded == as_json(config)
    assert loaded["frame_config"]["gradient_max"] == float("inf")


def test_load_reports_bad_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="bad.json: not valid JSON"):
        auto_config.load(str(path))

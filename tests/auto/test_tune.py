"""python -m machin.auto tune: the search space, the study, pruning, failed trials, the results."""

import csv
import json
import sys

import pytest
from torch import nn

from machin.auto import config as auto_config
from machin.auto import launcher
from machin.auto import tune as tuning
from machin.auto.__main__ import main
from machin.frame.algorithms.config import ConfigError

SPACE = {
    "frame_config.actor_learning_rate": {"type": "log_float", "low": 1e-4, "high": 1e-2},
    "frame_config.discount": {"type": "categorical", "choices": [0.9, 0.99]},
    "frame_config.model_kwargs.0.hidden": {"type": "int", "low": 4, "high": 16, "step": 4},
}


def tiny_config(steps=120, space=SPACE):
    """PPO on CartPole with tiny networks, one update pass per episode and an evaluation
    (one episode) after every training episode: well under a second per trial."""
    config = json.loads(
        json.dumps(auto_config.generate("PPO", "CartPole-v1", max_steps=steps, seed=3))
    )
    config["frame_config"].update(batch_size=16, actor_update_times=1, critic_update_times=1)
    for kwargs in config["frame_config"]["model_kwargs"]:
        kwargs["hidden"] = 8
    config["trainer_config"].update(
        progress=False, tensorboard=False, eval_interval=1, eval_episodes=1
    )
    if space is not None:
        config["tune"] = json.loads(json.dumps(space))
    return config


def value_at(config, path):
    node = config
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def read_csv(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


# -- the search space (no Optuna needed) -----------------------------------------------------
@pytest.mark.parametrize(
    "space,message",
    [
        ({}, "tune: the search space is empty"),
        (
            {"frame_config.learning_rat": {"type": "float", "low": 0, "high": 1}},
            "tune entry 'frame_config.learning_rat': unknown path; PPO has no key "
            "frame_config.learning_rat",
        ),
        (
            {"policy.lr": {"type": "float", "low": 0, "high": 1}},
            "tune entry 'policy.lr': unknown path; a path starts with one of",
        ),
        (
            {"trainer_config.log_dir": {"type": "categorical", "choices": ["a"]}},
            "tune entry 'trainer_config.log_dir': unknown path; trainer_config may set",
        ),
        (
            {"frame_config.model_kwargs.5.hidden": {"type": "int", "low": 4, "high": 8}},
            "frame_config.model_kwargs is a list of 2 entries, '5' is not an index of it",
        ),
        (
            {"frame_config.discount.x": {"type": "float", "low": 0, "high": 1}},
            "frame_config.discount is 0.99, not a dict or a list",
        ),
        (
            {"frame_config.criterion_kwargs.x.y": {"type": "float", "low": 0, "high": 1}},
            "frame_config.criterion_kwargs has no key 'x'",
        ),
        (
            {"frame_config.discount": {"type": "uniform", "low": 0.9, "high": 1}},
            "tune entry 'frame_config.discount': unknown type 'uniform'; types are",
        ),
        (
            {"frame_config.discount": 0.9},
            "tune entry 'frame_config.discount' must be a dict with a 'type'",
        ),
        (
            {"frame_config.discount": {"type": "float", "low": 0.99, "high": 0.9}},
            "tune entry 'frame_config.discount': low (0.99) must be below high (0.9)",
        ),
        (
            {"frame_config.discount": {"type": "float", "low": 0.9, "high": 0.9}},
            "low (0.9) must be below high (0.9)",
        ),
        (
            {"frame_config.discount": {"type": "float", "low": 0.9}},
            "type 'float' needs the key 'high'",
        ),
        (
            {"frame_config.batch_size": {"type": "int", "low": 1.5, "high": 8}},
            "tune entry 'frame_config.batch_size': low must be a finite int, got 1.5",
        ),
        (
            {"frame_config.discount": {"type": "float", "low": "0.9", "high": 1}},
            "low must be a finite number, got '0.9' of type str",
        ),
        (
            {"frame_config.actor_learning_rate": {"type": "log_float", "low": 0, "high": 1}},
            "type 'log_float' needs low > 0, got 0",
        ),
        (
            {"frame_config.batch_size": {"type": "int", "low": 8, "high": 64, "step": 0}},
            "step must be positive, got 0",
        ),
        (
            {"frame_config.discount": {"type": "float", "low": 0.9, "high": 1, "log": True}},
            "unknown key 'log' for type 'float'",
        ),
        (
            {"frame_config.batch_size": {"type": "categorical", "choices": []}},
            "tune entry 'frame_config.batch_size': choices must be a non-empty list, got []",
        ),
        (
            {"frame_config.batch_size": {"type": "categorical", "choices": [[64, 64]]}},
            "a choice must be a number, a string, a boolean or null, got [64, 64]",
        ),
    ],
)
def test_a_bad_search_space_names_the_entry(space, message):
    with pytest.raises(ConfigError) as info:
        tuning.search_space(tiny_config(space=space))
    assert message in str(info.value)


def test_tune_must_be_a_dict():
    config = tiny_config()
    config["tune"] = ["frame_config.discount"]
    with pytest.raises(ConfigError, match="tune must be of type dict, got"):
        auto_config.validate(config)


def test_a_declared_space_is_kept_and_new_kwargs_keys_are_allowed():
    space = {
        **SPACE,
        "frame_config.model_kwargs.1.layers": {"type": "int", "low": 1, "high": 3},
        "env_kwargs.max_episode_steps": {"type": "categorical", "choices": [100, 200]},
        "trainer_config.rollout_steps": {"type": "categorical", "choices": [64, None]},
    }
    assert tuning.search_space(tiny_config(space=space)) == space


def test_default_space_per_family():
    assert tuning.search_space(tiny_config(space=None)) == tuning.default_space("PPO")
    names = {
        algo: {path.split(".")[1] for path in tuning.default_space(algo)}
        for algo in ["DQN", "SAC", "PPO", "TRPO"]
    }
    assert names["DQN"] == {"learning_rate", "discount", "batch_size", "update_rate"}
    assert names["SAC"] == {
        "actor_learning_rate",
        "critic_learning_rate",
        "discount",
        "batch_size",
        "update_rate",
    }
    assert names["PPO"] == {
        "actor_learning_rate",
        "critic_learning_rate",
        "discount",
        "batch_size",
        "gae_lambda",
        "surrogate_loss_clip",
    }
    assert names["TRPO"] == {
        "critic_learning_rate",
        "discount",
        "batch_size",
        "gae_lambda",
        "kl_max_delta",
    }
    for algo in auto_config.SUPPORTED:  # every default space passes its own checks
        env = "Pendulum-v1" if algo in auto_config.BOX_ONLY else "CartPole-v1"
        config = auto_config.generate(algo, env)
        config["tune"] = tuning.default_space(algo)
        assert tuning.search_space(config) == config["tune"]


def test_without_optuna_the_error_names_the_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna now raises ImportError
    with pytest.raises(ImportError, match=r"pip install machin\[tune\]"):
        tuning.tune(tiny_config(), trials=1, out_dir=str(tmp_path))
    path = tmp_path / "ppo.json"
    auto_config.save(tiny_config(), str(path))
    assert main(["tune", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "error: tune needs the optuna package" in capsys.readouterr().err


# -- studies ----------------------------------------------------------------------------------
def test_a_study_writes_the_best_config_and_the_trials(tmp_path):
    optuna = pytest.importorskip("optuna")
    result = tuning.tune(tiny_config(), trials=3, out_dir=str(tmp_path), seed=5)
    trials = result.study.trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 3
    for trial in trials:  # the objective is the last evaluation's return
        assert len(trial.intermediate_values) >= 2
        assert trial.value == trial.intermediate_values[max(trial.intermediate_values)]
        assert trial.user_attrs["steps"] >= 120
    assert result.best_value == max(t.value for t in trials)
    assert result.best_params == trials[result.best_trial].params

    best = auto_config.load(str(tmp_path / tuning.BEST_FILE))
    assert best == result.best_config
    assert "tune" not in best and best["seed"] == 5 and best["max_steps"] == 120
    for path, value in result.best_params.items():
        assert value_at(best, path) == value
    framework = launcher.build_framework(best)  # the launcher builds it, with the best values
    first_layer = next(m for m in framework.actor.modules() if isinstance(m, nn.Linear))
    assert first_layer.out_features == result.best_params["frame_config.model_kwargs.0.hidden"]
    assert framework.discount == result.best_params["frame_config.discount"]

    rows = read_csv(tmp_path / tuning.TRIALS_CSV)
    assert [row["number"] for row in rows] == ["0", "1", "2"]
    assert {row["state"] for row in rows} == {"COMPLETE"}
    for row, trial in zip(rows, trials):
        assert float(row["value"]) == pytest.approx(trial.value)
        assert float(row["frame_config.discount"]) == trial.params["frame_config.discount"]
        assert int(row["steps"]) == trial.user_attrs["steps"]
    table = json.loads((tmp_path / tuning.TRIALS_JSON).read_text())
    assert [entry["params"] for entry in table] == [t.params for t in trials]


def test_a_pruned_trial_stops_its_run_early(tmp_path):
    optuna = pytest.importorskip("optuna")

    class PruneTheSecondTrial(optuna.pruners.BasePruner):
        def prune(self, study, trial):
            return trial.number == 1

    result = tuning.tune(
        tiny_config(steps=200), trials=3, out_dir=str(tmp_path), pruner=PruneTheSecondTrial()
    )
    states = [t.state.name for t in result.study.trials]
    assert states == ["COMPLETE", "PRUNED", "COMPLETE"]
    pruned = result.study.trials[1]
    assert len(pruned.intermediate_values) == 1  # stopped at its first evaluation
    assert pruned.user_attrs["steps"] < 200
    assert all(result.study.trials[n].user_attrs["steps"] >= 200 for n in (0, 2))
    assert result.best_trial in (0, 2)
    assert [row["state"] for row in read_csv(tmp_path / tuning.TRIALS_CSV)] == states


def test_a_failing_trial_does_not_stop_the_study(tmp_path, monkeypatch):
    pytest.importorskip("optuna")
    build, calls = launcher.build_framework, []

    def diverging_second_trial(config):
        calls.append(config)
        if len(calls) == 2:
            raise FloatingPointError("the losses diverged")
        return build(config)

    monkeypatch.setattr(launcher, "build_framework", diverging_second_trial)
    result = tuning.tune(tiny_config(), trials=3, out_dir=str(tmp_path))
    assert [t.state.name for t in result.study.trials] == ["COMPLETE", "FAIL", "COMPLETE"]
    rows = read_csv(tmp_path / tuning.TRIALS_CSV)
    assert rows[1]["error"] == "FloatingPointError: the losses diverged"
    assert rows[1]["value"] == "" and rows[0]["error"] == ""
    assert result.best_trial in (0, 2)


def test_a_study_without_a_completed_trial_names_the_first_error(tmp_path, monkeypatch):
    pytest.importorskip("optuna")

    def diverging(config):
        raise FloatingPointError("the losses diverged")

    monkeypatch.setattr(launcher, "build_framework", diverging)
    with pytest.raises(ConfigError) as info:
        tuning.tune(tiny_config(), trials=2, out_dir=str(tmp_path))
    assert "no trial of the study completed (2 trials" in str(info.value)
    assert "the first error: FloatingPointError: the losses diverged" in str(info.value)
    assert not (tmp_path / tuning.BEST_FILE).exists()
    assert len(read_csv(tmp_path / tuning.TRIALS_CSV)) == 2


@pytest.mark.parametrize("trials,steps,name", [(0, None, "trials"), (2, -5, "steps")])
def test_bad_trials_or_steps(tmp_path, trials, steps, name):
    pytest.importorskip("optuna")
    with pytest.raises(ConfigError, match=f"{name} must be a positive integer, got"):
        tuning.tune(tiny_config(), trials=trials, out_dir=str(tmp_path), steps=steps)


def test_a_stored_study_is_resumed(tmp_path):
    pytest.importorskip("optuna")
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    out = str(tmp_path / "out")
    first = tuning.tune(tiny_config(), trials=1, out_dir=out, steps=40, storage=storage)
    first_params = [trial.params for trial in first.study.trials]
    second = tuning.tune(tiny_config(), trials=1, out_dir=out, steps=40, storage=storage)
    assert len(first_params) == 1 and len(second.study.trials) == 2
    assert second.study.trials[0].params == first_params[0]
    assert second.study.trials[1].params != first_params[0]  # it draws on, not again
    assert [row["number"] for row in read_csv(tmp_path / "out" / tuning.TRIALS_CSV)] == ["0", "1"]


def test_command_line_tune_then_train_the_best_config(tmp_path, capsys):
    pytest.importorskip("optuna")
    path = tmp_path / "ppo.json"
    auto_config.save(tiny_config(steps=80), str(path))
    out = tmp_path / "found"
    argv = ["tune", str(path), "--trials", "2", "--steps", "40", "--seed", "1", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "best trial " in printed and f"wrote {out / tuning.BEST_FILE}" in printed
    best = auto_config.load(str(out / tuning.BEST_FILE))
    assert best["max_steps"] == 80 and best["seed"] == 1  # the config's run length, --seed
    assert len(read_csv(out / tuning.TRIALS_CSV)) == 2
    assert main(["train", str(out / tuning.BEST_FILE), "--log-dir", str(tmp_path / "run")]) == 0
    assert json.loads((tmp_path / "run" / "result.json").read_text())["steps"] >= 80

    bad = tiny_config(space={"frame_config.discount": {"type": "float", "low": 1, "high": 0}})
    auto_config.save(bad, str(path))
    assert main(["tune", str(path), "--out", str(out)]) == 2
    assert "error: tune entry 'frame_config.discount': low (1) must be below" in (
        capsys.readouterr().err
    )

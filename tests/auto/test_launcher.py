"""python -m machin.auto: generate, train and enjoy, in-process and end to end."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from machin.auto import config as auto_config
from machin.auto import launcher
from machin.auto.__main__ import main
from machin.frame.algorithms.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def tiny_config(algo="PPO", env="CartPole-v1", steps=150):
    config = json.loads(json.dumps(auto_config.generate(algo, env, max_steps=steps, seed=3)))
    config["frame_config"]["batch_size"] = 16
    for kwargs in config["frame_config"]["model_kwargs"]:
        kwargs["hidden"] = 16
    config["trainer_config"].update(
        progress=False,
        tensorboard=False,
        eval_interval=2,
        eval_episodes=1,
        warmup_steps=20 if algo not in auto_config.BOTH_SPACES else 0,
    )
    return config


def test_train_writes_the_run_directory_and_enjoy_plays_it(tmp_path):
    run_dir, result = launcher.train(tiny_config(), str(tmp_path / "run"))
    files = set(os.listdir(run_dir))
    assert {
        "config.json",
        "progress.csv",
        "checkpoints",
        "final",
        "learning_curve.png",
        "result.json",
    } <= files
    assert auto_config.load(os.path.join(run_dir, "config.json")) == tiny_config()
    summary = json.loads(Path(run_dir, "result.json").read_text())
    assert summary["steps"] == result.steps >= 150 and summary["episodes"] == result.episodes
    with open(os.path.join(run_dir, "progress.csv")) as file:
        assert len(list(csv.DictReader(file))) == result.episodes
    _, framework = launcher.load_run(run_dir)
    saved = torch.load(os.path.join(run_dir, "final", "actor_0.pt"), weights_only=True)
    for name, tensor in framework.actor.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    returns = launcher.enjoy(run_dir, episodes=2, gif=str(tmp_path / "play.gif"))
    assert len(returns) == 2 and all(value >= 1 for value in returns)
    assert (tmp_path / "play.gif").stat().st_size > 0


def test_same_seed_same_run(tmp_path):
    first = launcher.train(tiny_config("DQN", steps=120), str(tmp_path / "a"))[1]
    second = launcher.train(tiny_config("DQN", steps=120), str(tmp_path / "b"))[1]
    assert first.returns == second.returns


def test_a_stopped_run_resumes_into_the_uninterrupted_one(tmp_path):
    def config(steps):
        result = tiny_config("DQN", steps=steps)
        result["trainer_config"]["save_every"] = 50
        return result

    whole = launcher.train(config(300), str(tmp_path / "whole"))[1]
    first = launcher.train(config(150), str(tmp_path / "parts"))[1]
    rest = launcher.train(config(300), str(tmp_path / "parts"), resume=True)[1]
    assert first.steps < whole.steps and first.returns == whole.returns[: len(first.returns)]
    assert rest.steps == whole.steps and rest.returns == whole.returns


def test_trainer_options_are_checked_by_the_trainer(tmp_path):
    config = tiny_config()
    config["trainer_config"]["eval_episodes"] = 0
    with pytest.raises(ConfigError, match="trainer_config refused by Trainer: .*eval_episodes"):
        launcher.train(config, str(tmp_path / "run"))


def test_enjoy_needs_a_run_directory(tmp_path):
    with pytest.raises(ConfigError, match="holds no config.json"):
        launcher.enjoy(str(tmp_path))


def test_command_line_errors_exit_2(tmp_path, capsys):
    assert main(["generate", "--algo", "DQN", "--env", "Pendulum-v1"]) == 2
    assert "error: env: DQN needs a Discrete action space" in capsys.readouterr().err
    assert main(["train", "x.json", "--resume"]) == 2
    assert "error: --resume needs --log-dir" in capsys.readouterr().err
    assert main(["list"]) == 0
    assert capsys.readouterr().out.split() == list(auto_config.SUPPORTED)


def run_cli(*args, cwd):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "SDL_VIDEODRIVER": "dummy",
        "MPLBACKEND": "Agg",
    }
    done = subprocess.run(
        [sys.executable, "-m", "machin.auto", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.multiprocess
def test_command_line_generate_train_enjoy(tmp_path):
    """The three commands, each in its own process with a hard timeout (about 30 s in all)."""
    out = run_cli(
        "generate",
        "--algo",
        "PPO",
        "--env",
        "CartPole-v1",
        "-o",
        "ppo.json",
        "--steps",
        "200",
        cwd=tmp_path,
    )
    assert "wrote ppo.json" in out
    config = json.loads((tmp_path / "ppo.json").read_text())
    assert (
        config["frame"] == "PPO" and config["env"] == "CartPole-v1" and config["max_steps"] == 200
    )
    out = run_cli("train", "ppo.json", "--log-dir", "run", cwd=tmp_path)
    assert "run directory: run" in out
    run = tmp_path / "run"
    assert {
        "config.json",
        "progress.csv",
        "tensorboard",
        "checkpoints",
        "final",
        "result.json",
    } <= set(os.listdir(run))
    assert json.loads((run / "result.json").read_text())["steps"] >= 200
    assert (run / "final" / "actor_0.pt").is_file() and (run / "final" / "critic_0.pt").is_file()
    out = run_cli("enjoy", "run", "--episodes", "2", "--gif", "play.gif", cwd=tmp_path)
    assert out.count("return") == 2 and (tmp_path / "play.gif").stat().st_size > 0

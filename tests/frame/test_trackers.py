"""The experiment-tracker loggers: MLflow's local store and W&B's offline files, read back.

Every run is a short DQN run on CartPole through the :class:`~machin.frame.trainer.Trainer`;
what a tracker holds is compared with the run's ``progress.csv``. No test reaches the
network: W&B runs offline, in a temporary directory, and its service process is ended
after each test. The trackers are optional packages (in requirements.txt): a test that needs
one is skipped where it is not installed (CI's lower-bounds run).
"""

import csv
import glob
import json
import os
import shutil
import sys

import gymnasium as gym
import psutil
import pytest
import torch
from torch import nn

from machin.auto import config as auto_config
from machin.auto import launcher
from machin.frame.algorithms import DQN
from machin.frame.algorithms.config import ConfigError
from machin.frame.trackers import MLflowLogger, WandbLogger, _log_records, offline_history
from machin.frame.trainer import Trainer
from tests.frame.algorithms.nets import QNet

SEED = 7
SAVE_EVERY = 30


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """W&B offline, silent and inside ``tmp_path``; no W&B service process left after the test."""
    for name, folder in (
        ("WANDB_DIR", "dir"),
        ("WANDB_CACHE_DIR", "cache"),
        ("WANDB_CONFIG_DIR", "config"),
        ("WANDB_DATA_DIR", "data"),
    ):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / folder))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    if sys.modules.get("wandb") is not None:
        sys.modules["wandb"].teardown()  # ends the service process
    services = [
        child
        for child in psutil.Process().children(recursive=True)
        if "wandb" in " ".join(_command_line(child))
    ]
    _, alive = psutil.wait_procs(services, timeout=10)
    for child in alive:
        child.kill()
    assert not alive, f"W&B service processes left behind: {[c.pid for c in alive]}"


@pytest.fixture(scope="module")
def mlflow():
    return pytest.importorskip("mlflow")


@pytest.fixture
def wandb():
    return pytest.importorskip("wandb")


@pytest.fixture(scope="module")
def mlflow_store(tmp_path_factory, mlflow):
    """Copies an empty MLflow store into ``<directory>/mlruns``, where the logger looks by default.

    Making a new SQLite store runs MLflow's schema migrations (seconds); they run once here.
    """
    template = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()

    def copy_into(directory):
        os.makedirs(os.path.join(directory, "mlruns"), exist_ok=True)
        shutil.copy(template, os.path.join(directory, "mlruns", "mlflow.db"))

    return copy_into


def _command_line(process):
    try:
        return [process.name(), *process.cmdline()]
    except psutil.Error:
        return []


def _dqn():
    torch.manual_seed(0)
    return DQN(
        QNet(hidden=16),
        QNet(hidden=16),
        torch.optim.Adam,
        nn.MSELoss(),
        batch_size=8,
        replay_size=200,
    )


def _trainer(directory, logger, **options):
    return Trainer(
        _dqn(),
        lambda: gym.make("CartPole-v1", max_episode_steps=25),
        log_dir=str(directory),
        tensorboard=False,
        progress=False,
        eval_interval=2,
        eval_episodes=1,
        warmup_steps=16,
        seed=SEED,
        callbacks=[logger],
        **options,
    )


def _csv(directory):
    """``(steps, episode, return, smoothed)`` of every row and ``(steps, eval_return)`` of the evaluated ones."""
    with open(os.path.join(directory, "progress.csv")) as handle:
        rows = list(csv.DictReader(handle))
    episodes = [
        (int(r["steps"]), float(r["episode"]), float(r["return"]), float(r["smoothed"]))
        for r in rows
    ]
    evaluations = [(int(r["steps"]), float(r["eval_return"])) for r in rows if r["eval_return"]]
    return episodes, evaluations


# -- MLflow ------------------------------------------------------------------------------------
def _mlflow_history(logger, trainer):
    """What the MLflow store holds for the logger's run, read with MLflow's client."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=logger.uri(trainer))

    def history(key):
        return sorted((m.step, m.value) for m in client.get_metric_history(logger.run_id, key))

    episodes = [
        (step, episode, value, smoothed)
        for (step, episode), (_, value), (_, smoothed) in zip(
            history("train/episode"), history("train/return"), history("train/smoothed_return")
        )
    ]
    return client.get_run(logger.run_id), episodes, history("eval/return")


def test_mlflow_holds_what_the_csv_holds(tmp_path, mlflow, mlflow_store):
    mlflow_store(tmp_path)
    logger = MLflowLogger(experiment="trackers-test")
    with _trainer(tmp_path, logger) as trainer:
        result = trainer.run(episodes=6)
    assert logger.uri(trainer) == f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    run, episodes, evaluations = _mlflow_history(logger, trainer)
    assert run.info.status == "FINISHED"
    assert run.data.params["algorithm"] == "DQN"
    assert run.data.params["batch_size"] == "8" and run.data.params["discount"] == "0.99"
    assert "train/loss" in run.data.metrics
    csv_episodes, csv_evaluations = _csv(tmp_path)
    assert len(episodes) == result.episodes == 6 and len(evaluations) == 3
    assert episodes == csv_episodes
    assert evaluations == csv_evaluations
    experiment = mlflow.MlflowClient(tracking_uri=logger.uri(trainer)).get_experiment(
        run.info.experiment_id
    )
    assert experiment.name == "trackers-test"


# -- W&B ---------------------------------------------------------------------------------------
def _written():
    """Make W&B's service write out every finished run: it closes their files only when it ends
    (``run.finish()`` may return before), as it does when the training process ends."""
    if sys.modules.get("wandb") is not None:
        sys.modules["wandb"].teardown()


def _wandb_history(directory, run_id):
    _written()
    rows = offline_history(str(directory), run_id)
    episodes = [
        (r["steps"], r["train/episode"], r["train/return"], r["train/smoothed_return"])
        for r in rows
        if "train/return" in r
    ]
    evaluations = [(r["steps"], r["eval/return"]) for r in rows if "eval/return" in r]
    return episodes, evaluations


def _wandb_config(folder, run_id):
    """The config an offline run logged, from the records of its ``.wandb`` file."""
    from wandb.proto import wandb_internal_pb2

    config = {}
    for data in _log_records(os.path.join(folder, f"run-{run_id}.wandb")):
        record = wandb_internal_pb2.Record.FromString(data)
        kind = record.WhichOneof("record_type")
        if kind in ("run", "config"):  # the run record holds the config given to wandb.init
            updates = record.run.config.update if kind == "run" else record.config.update
            config.update({item.key: json.loads(item.value_json) for item in updates})
    return config


def test_wandb_offline_run_holds_what_the_csv_holds(tmp_path, wandb):
    logger = WandbLogger(project="trackers-test")
    with _trainer(tmp_path, logger) as trainer:
        trainer.run(episodes=6)
    assert logger.run is None  # finished
    folders = glob.glob(str(tmp_path / "wandb" / f"offline-run-*-{logger.run_id}"))
    assert len(folders) == 1
    episodes, evaluations = _wandb_history(tmp_path, logger.run_id)
    assert os.path.isfile(os.path.join(folders[0], f"run-{logger.run_id}.wandb"))
    csv_episodes, csv_evaluations = _csv(tmp_path)
    config = _wandb_config(folders[0], logger.run_id)
    assert config.get("algorithm") == "DQN" and config.get("batch_size") == 8, (config, episodes)
    assert len(episodes) == 6 and len(evaluations) == 3
    assert episodes == csv_episodes
    assert evaluations == csv_evaluations


# -- resuming ----------------------------------------------------------------------------------
def _tracker_rows(kind, directory, logger, trainer):
    if kind == "mlflow":
        return _mlflow_history(logger, trainer)[1:]
    return _wandb_history(directory, logger.run_id)


@pytest.mark.parametrize("kind", ["mlflow", "wandb"])
def test_a_resumed_run_continues_the_tracker_run_without_logging_a_step_twice(
    kind, tmp_path, request
):
    make = {"mlflow": MLflowLogger, "wandb": WandbLogger}[kind]
    request.getfixturevalue(kind)  # skipped without the package
    killed, full = tmp_path / "killed", tmp_path / "full"
    if kind == "mlflow":
        mlflow_store = request.getfixturevalue("mlflow_store")
        mlflow_store(killed)
        mlflow_store(full)
    first = make()
    with _trainer(killed, first, save_every=SAVE_EVERY) as trainer:
        trainer.run(steps=2 * SAVE_EVERY + 10)  # saved at 30, 60 and its end
    _written()  # as when its process ended
    for save in os.listdir(killed / "saves"):
        if save != f"steps_{SAVE_EVERY}":
            shutil.rmtree(killed / "saves" / save)
    # as if killed after step 70: episodes after the step-30 save are in the tracker already
    resumed = make()
    with _trainer(killed, resumed, save_every=SAVE_EVERY) as trainer:
        trainer.run(steps=4 * SAVE_EVERY, resume=True)
    assert trainer.resumed_from.endswith(f"steps_{SAVE_EVERY}")
    assert resumed.run_id == first.run_id
    reference = make()
    with _trainer(full, reference, save_every=SAVE_EVERY) as full_trainer:
        full_trainer.run(steps=4 * SAVE_EVERY)
    episodes, evaluations = _tracker_rows(kind, killed, resumed, trainer)
    assert (episodes, evaluations) == _tracker_rows(kind, full, reference, full_trainer)
    assert (episodes, evaluations) == _csv(killed)
    steps = [row[0] for row in episodes]
    assert len(set(steps)) == len(steps) > 4  # each episode's step once
    if kind == "mlflow":
        assert _mlflow_history(resumed, trainer)[0].info.status == "FINISHED"
    else:
        assert len(glob.glob(str(killed / "wandb" / f"offline-run-*-{resumed.run_id}"))) == 2


# -- missing packages --------------------------------------------------------------------------
@pytest.mark.parametrize("logger, module", [(MLflowLogger, "mlflow"), (WandbLogger, "wandb")])
def test_a_missing_package_says_how_to_install_it(logger, module, monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(
        ImportError, match=rf"needs the {module} package.*pip install machin\[{module}\]"
    ):
        logger()


def _config(tmp_path, trackers):
    config = auto_config.generate("DQN", "CartPole-v1", max_steps=60, root_dir=str(tmp_path))
    config["frame_config"].update(batch_size=8)
    config["frame_config"]["model_kwargs"] = [{"state_dim": 4, "action_num": 2, "hidden": 16}] * 2
    config["trainer_config"].update(
        warmup_steps=16, eval_interval=2, eval_episodes=1, progress=False, tensorboard=False
    )
    config["trackers"] = trackers
    return config


def test_the_launcher_reports_a_missing_tracker_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(ConfigError, match=r"trackers: .*pip install machin\[mlflow\]"):
        launcher.train(_config(tmp_path, ["mlflow"]), str(tmp_path / "run"))


# -- the launcher config -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "trackers, message",
    [
        (
            ["mlflow", "tensorboard"],
            r"trackers: unknown tracker 'tensorboard'; the known trackers are \['mlflow', 'wandb'\]",
        ),
        ("mlflow", r"trackers must be a list of tracker names, got 'mlflow' of type str"),
        (["wandb", "wandb"], r"a tracker is named twice"),
    ],
)
def test_the_trackers_key_is_checked(trackers, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        auto_config.validate(_config(tmp_path, trackers))


def test_the_launcher_logs_to_both_trackers(tmp_path, mlflow, mlflow_store, wandb):
    config = _config(tmp_path, ["mlflow", "wandb"])
    mlflow_store(tmp_path / "run")
    run_dir, result = launcher.train(config, str(tmp_path / "run"))
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{run_dir}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("DQN_CartPole-v1")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.params["frame"] == "DQN" and run.data.params["frame_config.batch_size"] == "8"
    assert run.data.params["trainer_config.eval_interval"] == "2"
    returns = sorted(
        (m.step, m.value) for m in client.get_metric_history(run.info.run_id, "train/return")
    )
    assert [value for _, value in returns] == result.returns
    (folder,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*"))
    run_id = folder.rsplit("-", 1)[1]
    episodes, _ = _wandb_history(run_dir, run_id)
    assert [row[2] for row in episodes] == result.returns

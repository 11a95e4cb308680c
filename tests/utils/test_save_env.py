import datetime
import json
import os

import pytest

from machin.utils.conf import Config
from machin.utils.save_env import SaveEnv

FORMAT = "%Y_%m_%d_%H_%M_%S"


def _trial_name(delta: datetime.timedelta) -> str:
    return (datetime.datetime.now() - delta).strftime(FORMAT)


def test_creates_the_trial_layout(tmp_path):
    env = SaveEnv(str(tmp_path))
    started = env.get_trial_time()
    assert isinstance(started, datetime.datetime) and started is env.env_create_time
    assert abs((datetime.datetime.now() - started).total_seconds()) < 60
    trial = started.strftime(FORMAT)
    assert env.env_root == str(tmp_path) and env.time_format == FORMAT
    root = os.path.join(str(tmp_path), trial)
    assert env.get_trial_root() == root
    assert env.get_trial_config_dir() == os.path.join(root, "config")
    assert env.get_trial_model_dir() == os.path.join(root, "model")
    assert env.get_trial_image_dir() == os.path.join(root, "log", "images")
    assert env.get_trial_train_log_dir() == os.path.join(root, "log", "train_log")
    for path in (
        env.get_trial_config_dir(),
        env.get_trial_model_dir(),
        env.get_trial_image_dir(),
        env.get_trial_train_log_dir(),
    ):
        assert os.path.isdir(path)
    assert os.listdir(str(tmp_path)) == [trial]


def test_custom_time_format(tmp_path):
    env = SaveEnv(tmp_path, time_format="trial_%Y%m%d_%H%M%S")
    name = env.get_trial_time().strftime("trial_%Y%m%d_%H%M%S")
    assert os.path.basename(env.get_trial_root()) == name
    assert os.path.isdir(os.path.join(str(tmp_path), name, "model"))


def test_restart_reuses_the_existing_trial(tmp_path):
    name = _trial_name(datetime.timedelta(days=3))
    old_model_dir = tmp_path / name / "model"
    old_model_dir.mkdir(parents=True)
    (old_model_dir / "qnet_1.pt").write_bytes(b"x")
    env = SaveEnv(str(tmp_path), restart_from_trial=name)
    assert env.get_trial_time() == datetime.datetime.strptime(name, FORMAT)
    assert env.get_trial_model_dir() == str(old_model_dir)
    assert (old_model_dir / "qnet_1.pt").read_bytes() == b"x"
    assert os.path.isdir(env.get_trial_image_dir())
    assert sorted(os.listdir(str(tmp_path))) == [name]


def test_restart_errors(tmp_path):
    with pytest.raises(ValueError, match="restart_from_trial must be a trial name in the format"):
        SaveEnv(str(tmp_path), restart_from_trial="yesterday")


def test_restart_from_a_missing_trial_creates_it(tmp_path):
    # As in Machin 0.3.4 the trial is created (machin also logs a warning).
    missing = _trial_name(datetime.timedelta(days=1))
    env = SaveEnv(str(tmp_path), restart_from_trial=missing)
    assert os.path.isdir(os.path.join(str(tmp_path), missing, "model"))
    assert env.get_trial_root() == os.path.join(str(tmp_path), missing)


def test_remove_trials_older_than(tmp_path):
    old = _trial_name(datetime.timedelta(hours=2))
    recent = _trial_name(datetime.timedelta(minutes=30))
    for name in (old, recent, "notes"):
        (tmp_path / name).mkdir()
    (tmp_path / "2000_01_01_00_00_00").write_text("a file, not a trial")
    env = SaveEnv(str(tmp_path))
    assert env.remove_trials_older_than(diff_hour=1) == [old]
    remaining = sorted(os.listdir(str(tmp_path)))
    current = os.path.basename(env.get_trial_root())
    assert remaining == sorted([recent, "notes", "2000_01_01_00_00_00", current])
    assert env.remove_trials_older_than(diff_hour=0, diff_minute=10) == [recent]
    assert os.path.isdir(env.get_trial_root())


def test_remove_never_deletes_the_current_trial(tmp_path):
    name = _trial_name(datetime.timedelta(days=2))
    (tmp_path / name).mkdir()
    env = SaveEnv(str(tmp_path), restart_from_trial=name)
    assert env.remove_trials_older_than() == []
    assert os.path.isdir(env.get_trial_model_dir())


def test_clear_methods_empty_their_directories(tmp_path):
    env = SaveEnv(str(tmp_path))
    getters = [
        (env.clear_trial_config_dir, env.get_trial_config_dir()),
        (env.clear_trial_model_dir, env.get_trial_model_dir()),
        (env.clear_trial_image_dir, env.get_trial_image_dir()),
        (env.clear_trial_train_log_dir, env.get_trial_train_log_dir()),
    ]
    for _, directory in getters:
        with open(os.path.join(directory, "f.txt"), "w") as file:
            file.write("x")
    for index, (clear, directory) in enumerate(getters):
        clear()
        assert os.listdir(directory) == []
        assert os.path.isdir(directory)
        for _, later in getters[index + 1 :]:
            assert os.listdir(later) == ["f.txt"]


def test_create_dirs_inside_the_trial(tmp_path):
    env = SaveEnv(str(tmp_path))
    paths = env.create_dirs(["extra", "log/videos"])
    assert paths == [
        os.path.join(env.get_trial_root(), "extra"),
        os.path.join(env.get_trial_root(), "log/videos"),
    ]
    assert all(os.path.isdir(path) for path in paths)
    with pytest.raises(ValueError, match="must be relative to the trial directory"):
        env.create_dirs([str(tmp_path / "abs")])
    with pytest.raises(TypeError, match="got the single path 'extra'"):
        env.create_dirs("extra")


def test_config_form_saves_and_restores_the_config(tmp_path):
    conf = Config(root_dir=str(tmp_path), model_save_int=100, restart_from_trial=None)
    env = SaveEnv(conf)
    saved = os.path.join(env.get_trial_config_dir(), "config.json")
    with open(saved) as file:
        assert json.load(file)["model_save_int"] == 100

    restarted_conf = Config(
        root_dir=str(tmp_path), model_save_int=5, restart_from_trial=env.get_trial_time()
    )
    restarted = SaveEnv(restarted_conf)
    assert restarted.get_trial_root() == env.get_trial_root()
    assert restarted_conf.model_save_int == 100
    assert restarted_conf.restart_from_trial == env.get_trial_time()


def test_config_form_needs_root_dir():
    with pytest.raises(ValueError, match="must have a root_dir entry"):
        SaveEnv(Config(other=1))

"""Machin 0.3.4 behaviours of ``machin.utils`` that machin keeps (one test per behaviour)."""

import copy
import datetime
import os
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from machin.utils.checker import CheckError, check_model, check_nan, check_shape
from machin.utils.conf import Config, merge_config
from machin.utils.helper_classes import Counter, Object
from machin.utils.logging import FakeLogger, fake_logger
from machin.utils.media import create_video, create_video_subproc
from machin.utils.prepare import (
    CheckpointLoadError,
    prep_load_model,
    prep_load_state_dict,
    prep_save_model,
)
from machin.utils.save_env import SaveEnv
from machin.utils.tensor_board import TensorBoard


class WholeNet(nn.Module):
    """A network saved whole with ``torch.save(module)``, as Machin 0.3.4 did."""

    def __init__(self, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = nn.Linear(3, 4)
        self.fc2 = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc2(self.fc1(x))


class LegacyAliasNet(WholeNet):
    """Registers its input module a second time, as 0.3.4's set_input_module did."""

    def __init__(self, seed: int = 0):
        super().__init__(seed)
        self.input_module = self.fc1


def _same(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sb)


# -- Config / Object --------------------------------------------------------------------


def test_config_items_and_unset_options():
    conf = Config(batch_size=32)
    assert conf["batch_size"] == 32
    conf["lr"] = 1e-3
    assert conf.lr == 1e-3 and conf.data == {"batch_size": 32, "lr": 1e-3}
    assert conf.not_set is None
    assert conf["not_set"] is None
    assert conf.attr("not_set") is None


def test_object_call_attribute_and_reserved_names():
    obj = Object({"a": 1})
    assert obj() is None
    obj.call = lambda x: x + obj.a
    assert obj(1) == 2
    for reserved in ("attr", "const_attrs"):
        with pytest.raises(RuntimeError, match=f"You should not set the {reserved} property"):
            setattr(obj, reserved, 1)
    with pytest.raises(ValueError, match="data attribute must be a dictionary"):
        obj.data = [1]


def test_object_const_attrs_raise_runtime_error():
    obj = Object({"fixed": 1}, const_attrs={"fixed"})
    with pytest.raises(RuntimeError, match="fixed is const"):
        obj.fixed = 2
    with pytest.raises(RuntimeError, match="fixed is const"):
        obj["fixed"] = 2


def test_object_copies_and_pickles():
    conf = Config(a=1)
    assert copy.deepcopy(conf).data == {"a": 1}
    assert pickle.loads(pickle.dumps(conf)).a == 1


def test_merge_config_const_rules():
    conf = Object({"fixed": 1, "free": 1}, const_attrs={"fixed"})
    merge_config(conf, Config(fixed=2, free=2))  # a Config merge skips const keys
    assert conf.data == {"fixed": 1, "free": 2}
    with pytest.raises(RuntimeError, match="fixed is const"):
        merge_config(conf, {"fixed": 3})


# -- Counter ----------------------------------------------------------------------------


def test_counter_compares_with_numbers():
    counter = Counter(start=3)
    assert counter == 3 and counter != 4
    assert counter > 2 and counter >= 3 and counter < 4 and counter <= 3
    assert not counter > 5
    counter.count()
    assert counter == Counter(start=4)
    assert counter < 5  # reflected comparison
    assert repr(counter) == str(counter) == "4"
    with pytest.raises(TypeError):
        hash(counter)


# -- checker ----------------------------------------------------------------------------


def test_check_error_is_a_runtime_error():
    assert issubclass(CheckError, RuntimeError)
    with pytest.raises(CheckError, match="contains nan"):
        check_nan(torch.tensor([float("nan")]), "t")
    with pytest.raises(CheckError, match="has invalid shape, required shape"):
        check_shape(torch.zeros(2), [3], "t")


def test_nan_hooks_raise_runtime_error_with_the_phrase():
    model = nn.Sequential(nn.Linear(2, 2))
    cancel = check_model(None, model)
    try:
        with pytest.raises(RuntimeError, match="contains nan"):
            model(torch.tensor([[float("nan"), 0.0]]))
    finally:
        cancel()


# -- prepare: checkpoints -----------------------------------------------------------------


def test_whole_module_checkpoint_is_refused_without_trusted(tmp_path):
    torch.save(WholeNet(1), str(tmp_path / "qnet_3.pt"))
    target = WholeNet(0)
    with pytest.raises(CheckpointLoadError, match="trusted=True") as info:
        prep_load_model(str(tmp_path), {"qnet": target}, logger=FakeLogger())
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value, pickle.UnpicklingError)
    assert "arbitrary code" in str(info.value)
    assert _same(target, WholeNet(0))  # untouched


def test_whole_module_checkpoint_loads_with_trusted(tmp_path):
    torch.save(WholeNet(1), str(tmp_path / "qnet_3.pt"))
    target = WholeNet(0)
    version = prep_load_model(str(tmp_path), {"qnet": target}, logger=FakeLogger(), trusted=True)
    assert version == 3
    assert _same(target, WholeNet(1))


def test_trusted_load_drops_0_3_4_alias_entries(tmp_path):
    saved = LegacyAliasNet(1)
    assert "input_module.weight" in saved.state_dict()  # the 0.3.4 layout
    torch.save(saved, str(tmp_path / "net_0.pt"))
    target = WholeNet(0)
    prep_load_model(str(tmp_path), {"net": target}, logger=FakeLogger(), trusted=True)
    assert _same(target, WholeNet(1))


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_old_weight_norm_entries_are_renamed():
    from torch.nn.utils import weight_norm as old_weight_norm
    from torch.nn.utils.parametrizations import weight_norm

    torch.manual_seed(0)
    old = old_weight_norm(nn.Linear(3, 2))
    new = weight_norm(nn.Linear(3, 2))
    prep_load_state_dict(new, old.state_dict())
    x = torch.randn(4, 3)
    assert torch.allclose(new(x), old(x))


def test_missing_keys_raise_key_error_as_well(tmp_path):
    state = WholeNet(1).state_dict()
    del state["fc1.bias"]
    with pytest.raises(KeyError, match=r"missing keys \['fc1.bias'\]") as info:
        prep_load_state_dict(WholeNet(0), state)
    assert isinstance(info.value, RuntimeError)
    torch.save(state, str(tmp_path / "net_0.pt"))
    with pytest.raises(KeyError, match="model 'net'"):
        prep_load_model(str(tmp_path), {"net": WholeNet(0)}, logger=FakeLogger())


def test_version_rules(tmp_path):
    for version in (1, 10, 2):
        prep_save_model(str(tmp_path), {"actor": WholeNet(version)}, version=version)
    prep_save_model(str(tmp_path), {"critic": WholeNet(0)}, version=2)
    actor = WholeNet(0)
    assert prep_load_model(str(tmp_path), {"actor": actor}, logger=FakeLogger()) == 10
    assert (
        prep_load_model(str(tmp_path), {"actor": actor, "critic": WholeNet()}, logger=FakeLogger())
        == 2
    )
    with pytest.raises(RuntimeError, match="Cannot find a valid version for all models"):
        prep_load_model(str(tmp_path), {"other": WholeNet()}, logger=FakeLogger())
    with pytest.raises(RuntimeError, match="Model directory doesn't exist"):
        prep_load_model(str(tmp_path / "missing"), {"actor": actor}, logger=FakeLogger())


# -- save_env -----------------------------------------------------------------------------


def test_save_env_trial_time_and_attributes(tmp_path):
    env = SaveEnv(str(tmp_path))
    assert isinstance(env.get_trial_time(), datetime.datetime)
    assert env.get_trial_time() is env.env_create_time
    assert env.env_root == str(tmp_path) and env.time_format == "%Y_%m_%d_%H_%M_%S"
    name = env.get_trial_time().strftime(env.time_format)
    assert env.get_trial_root() == os.path.join(str(tmp_path), name)


def test_save_env_restart_creates_a_missing_trial(tmp_path):
    env = SaveEnv(str(tmp_path), restart_from_trial="2020_05_09_15_00_31")
    assert os.path.isdir(os.path.join(str(tmp_path), "2020_05_09_15_00_31", "log", "train_log"))
    assert env.get_trial_time() == datetime.datetime(2020, 5, 9, 15, 0, 31)


def test_save_env_check_dirs_hook(tmp_path):
    class Checked(SaveEnv):
        def _check_dirs(self):
            raise RuntimeError("bad mapping")

    with pytest.raises(RuntimeError, match="bad mapping"):
        Checked(str(tmp_path))
    assert os.listdir(str(tmp_path)) == []


# -- tensor_board, logging, media --------------------------------------------------------


def test_tensor_board_is_inited_and_double_init(tmp_path):
    board = TensorBoard()
    assert board.is_inited() is False
    board.init(str(tmp_path))
    try:
        assert board.is_inited() is True and board.is_initiated() is True
        with pytest.raises(RuntimeError, match="Writer has been initialized"):
            board.init(str(tmp_path))
    finally:
        board.writer.close()


def test_fake_logger_instance():
    assert isinstance(fake_logger, FakeLogger)
    fake_logger.info("nothing %s", "happens")


def test_empty_video_writes_nothing(tmp_path):
    assert create_video([], str(tmp_path), "empty") is None
    wait = create_video_subproc([], str(tmp_path), "empty")
    assert wait() is None
    assert not (tmp_path / "empty.gif").exists()
    assert create_video([np.zeros((2, 2))], str(tmp_path), "one") is not None

import json
import pickle
import sys

import pytest

from machin.utils.conf import Config, load_config_cmd, load_config_file, merge_config, save_config
from machin.utils.helper_classes import Object


def test_config_attributes():
    conf = Config(a=1)
    assert conf.a == 1
    conf.b = "x"
    assert conf.data == {"a": 1, "b": "x"}
    assert isinstance(conf, Object)
    assert repr(conf) == "Config(a=1, b='x')"
    assert pickle.loads(pickle.dumps(conf)).data == {"a": 1, "b": "x"}


def test_load_config_cmd_parses_typed_values():
    conf = load_config_cmd(
        args=[
            "--conf",
            "a=1",
            "--conf",
            'b="x"',
            "--conf",
            'd={"k": 1}',
            "--conf",
            "lr=1e-3",
            "e=[1, 2]",
        ]
    )
    assert isinstance(conf, Config)
    assert conf.data == {"a": 1, "b": "x", "d": {"k": 1}, "lr": 1e-3, "e": [1, 2]}


def test_load_config_cmd_falls_back_to_strings():
    conf = load_config_cmd(
        args=["--conf", "device=cuda:1", "--conf", "path=/tmp/x", "--conf", "empty="]
    )
    assert conf.data == {"device": "cuda:1", "path": "/tmp/x", "empty": ""}


def test_load_config_cmd_merges_and_ignores_other_arguments():
    base = Config(a=0, keep=True)
    result = load_config_cmd(base, args=["--verbose", "pos", "--conf", "a=5", "--other", "3"])
    assert result is base
    assert base.data == {"a": 5, "keep": True}


def test_load_config_cmd_reads_sys_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["prog", "--conf", "n=3"])
    assert load_config_cmd().n == 3


@pytest.mark.parametrize("item", ["novalue", "=3"])
def test_load_config_cmd_rejects_items_without_key(item):
    with pytest.raises(
        ValueError, match=f"--conf expects items of the form key=value, got '{item}'"
    ):
        load_config_cmd(args=["--conf", item])


@pytest.mark.parametrize("arg", ["--conf1=2", "--confs", "--config=a=1"])
def test_load_config_cmd_refuses_misspelled_conf(arg):
    # 0.3.4 stopped at every unknown argument; machin keeps others for the script but a
    # misspelt --conf would silently leave its key unset.
    base = Config(a=0)
    with pytest.raises(ValueError, match=f"unrecognized argument '{arg}': write configuration"):
        load_config_cmd(base, args=["--conf", "a=5", arg])
    assert base.data == {"a": 0}


def test_load_config_cmd_takes_the_equals_form():
    assert load_config_cmd(args=["--conf=conf1=2"]).conf1 == 2


def test_save_then_load_round_trips(tmp_path):
    path = tmp_path / "config.json"
    conf = Config(a=1, b="x", c=[1.5, None], d={"k": True})
    save_config(conf, str(path))
    assert json.loads(path.read_text()) == conf.data
    loaded = load_config_file(str(path))
    assert isinstance(loaded, Config)
    assert loaded.data == conf.data


def test_load_config_file_merges(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": 2, "new": 3}')
    base = Config(a=1, old=0)
    assert load_config_file(path, base) is base
    assert base.data == {"a": 2, "old": 0, "new": 3}


def test_load_config_file_needs_an_object(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object, got a list"):
        load_config_file(path)


def test_save_config_names_values_json_cannot_hold(tmp_path):
    with pytest.raises(TypeError, match=r"these entries are not: fn=.*\(function\)"):
        save_config(Config(ok=1, fn=lambda: 0), tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


def test_merge_config_overwrites_with_merge_keys():
    conf = Config(a=1, b=2)
    assert merge_config(conf, {"b": 3, "c": 4}) is conf
    assert conf.data == {"a": 1, "b": 3, "c": 4}
    merge_config(conf, Config(a=9))
    assert conf.data == {"a": 9, "b": 3, "c": 4}


def test_merge_config_rejects_bad_types():
    with pytest.raises(TypeError, match="merge must be a dict or a Config, got 3 of type int"):
        merge_config(Config(), 3)
    with pytest.raises(TypeError, match="conf must be a Config, got {} of type dict"):
        merge_config({}, {})
    with pytest.raises(TypeError, match="conf must be a Config"):
        save_config({"a": 1}, "unused.json")

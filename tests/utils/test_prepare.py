import os
import pickle

import pytest
import torch
from torch import nn

from machin.utils.prepare import (
    prep_clear_dirs,
    prep_create_dirs,
    prep_list_model_versions,
    prep_load_model,
    prep_load_state_dict,
    prep_model_path,
    prep_save_model,
    prep_save_state_dict,
)

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _net(seed: int, out: int = 2) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, out))


def _equal(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k].cpu(), sb[k].cpu()) for k in sa)


def test_create_dirs_nested_and_keeps_existing(tmp_path):
    existing = tmp_path / "exists"
    existing.mkdir()
    (existing / "keep.txt").write_text("x")
    nested = tmp_path / "a" / "b" / "c"
    prep_create_dirs([str(nested), str(existing)])
    assert nested.is_dir()
    assert (existing / "keep.txt").read_text() == "x"


def test_clear_dirs_empties_but_keeps_directories(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    (first / "sub").mkdir(parents=True)
    (first / "sub" / "deep.txt").write_text("x")
    (first / "file.txt").write_text("x")
    second.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (second / "link").symlink_to(outside)
    prep_clear_dirs([str(first), str(second), str(tmp_path / "missing")])
    assert first.is_dir() and list(first.iterdir()) == []
    assert second.is_dir() and list(second.iterdir()) == []
    assert outside.read_text() == "keep"
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("function", [prep_clear_dirs, prep_create_dirs])
def test_dir_functions_reject_a_single_path(function):
    with pytest.raises(
        TypeError, match="dirs must be an iterable of directory paths, got the single path 'abc'"
    ):
        function("abc")


def test_model_path_and_its_validation(tmp_path):
    assert prep_model_path(str(tmp_path), "qnet_target", 1000) == os.path.join(
        str(tmp_path), "qnet_target_1000.pt"
    )
    with pytest.raises(
        ValueError, match=r"model name must match \[a-zA-Z0-9_-\]\+, got 'bad name'"
    ):
        prep_model_path(str(tmp_path), "bad name", 0)
    with pytest.raises(ValueError, match="version must be a non-negative integer, got -1"):
        prep_model_path(str(tmp_path), "qnet", -1)


def test_save_state_dict_is_atomic_and_weights_only(tmp_path):
    path = tmp_path / "net_3.pt"
    net = _net(0)
    prep_save_state_dict(str(path), net.state_dict())
    assert os.listdir(str(tmp_path)) == ["net_3.pt"]
    loaded = torch.load(str(path), map_location="cpu", weights_only=True)
    other = _net(1)
    other.load_state_dict(loaded)
    assert _equal(net, other)


def test_failed_save_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "net_0.pt"
    prep_save_state_dict(str(path), {"w": torch.ones(2)})
    before = path.read_bytes()
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        prep_save_state_dict(str(path), {"w": lambda: 0})
    assert path.read_bytes() == before
    assert os.listdir(str(tmp_path)) == ["net_0.pt"]
    with pytest.raises(
        TypeError, match="state_dict must be a mapping such as module.state_dict\\(\\), got list"
    ):
        prep_save_state_dict(str(path), [1])


def test_list_versions_ignores_unrelated_files(tmp_path):
    prep_save_model(str(tmp_path), {"actor_target": _net(0), "critic_target": _net(1)}, version=100)
    prep_save_model(str(tmp_path), {"actor_target": _net(0)}, version=1000)
    prep_save_model(str(tmp_path), {"actor_target": _net(0), "critic_target": _net(1)}, version=0)
    for junk in ("qnt.pt", "qnt_x.pt", ".actor_target_5.pt.tmp", "actor_target_7.pth", "notes.txt"):
        (tmp_path / junk).write_text("junk")
    (tmp_path / "dir_9.pt").mkdir()
    assert prep_list_model_versions(str(tmp_path)) == {
        "actor_target": [0, 100, 1000],
        "critic_target": [0, 100],
    }
    with pytest.raises(RuntimeError, match="Model directory doesn't exist: '.*nowhere'"):
        prep_list_model_versions(str(tmp_path / "nowhere"))


def test_load_model_picks_the_newest_common_version(tmp_path, recording_logger):
    saved = {}
    for version in (0, 100, 1000):
        saved[version] = (_net(version), _net(version + 1))
        names = {"actor_target": saved[version][0]}
        if version != 1000:
            names["critic_target"] = saved[version][1]
        prep_save_model(str(tmp_path), names, version=version)

    actor, critic = _net(50), _net(51)
    version = prep_load_model(
        str(tmp_path), {"actor_target": actor, "critic_target": critic}, logger=recording_logger
    )
    assert version == 100
    assert _equal(actor, saved[100][0]) and _equal(critic, saved[100][1])
    assert len(recording_logger.messages("info")) == 2

    assert prep_load_model(str(tmp_path), {"actor_target": actor}, logger=recording_logger) == 1000
    assert _equal(actor, saved[1000][0])


def test_load_model_specific_and_fallback_versions(tmp_path, recording_logger):
    prep_save_model(str(tmp_path), {"a": _net(0), "b": _net(1)}, version=1)
    prep_save_model(str(tmp_path), {"a": _net(2), "b": _net(3)}, version=2)
    prep_save_model(str(tmp_path), {"a": _net(4)}, version=3)
    a, b = _net(9), _net(9)

    assert prep_load_model(str(tmp_path), {"a": a, "b": b}, version=1, logger=recording_logger) == 1
    assert _equal(a, _net(0)) and _equal(b, _net(1))
    assert recording_logger.messages("warning") == []

    assert prep_load_model(str(tmp_path), {"a": a, "b": b}, version=3, logger=recording_logger) == 2
    assert _equal(a, _net(2)) and _equal(b, _net(3))
    [warning] = recording_logger.messages("warning")
    assert "version 3 is missing for models ['b']" in warning
    assert "loading the newest common version 2 instead" in warning

    assert (
        prep_load_model(str(tmp_path), {"a": a, "b": b}, version=-1, logger=recording_logger) == 2
    )


def test_load_model_missing_directory_or_version(tmp_path, recording_logger):
    with pytest.raises(RuntimeError, match="Model directory doesn't exist: '.*missing'"):
        prep_load_model(str(tmp_path / "missing"), {"a": _net(0)})
    assert (
        prep_load_model(
            str(tmp_path / "missing"), {"a": _net(0)}, quiet=True, logger=recording_logger
        )
        is None
    )
    assert "Model directory doesn't exist" in recording_logger.messages("warning")[0]

    prep_save_model(str(tmp_path), {"a": _net(0)}, version=1)
    prep_save_model(str(tmp_path), {"b": _net(0)}, version=2)
    message = r"Cannot find a valid version for all models in .*; versions found per model: \{'a': \[1\], 'b': \[2\]\}"
    with pytest.raises(RuntimeError, match=message):
        prep_load_model(str(tmp_path), {"a": _net(0), "b": _net(0)})
    untouched = _net(7)
    assert (
        prep_load_model(
            str(tmp_path), {"a": untouched, "b": _net(0)}, quiet=True, logger=recording_logger
        )
        is None
    )
    assert _equal(untouched, _net(7))


def test_load_model_shape_mismatch_names_model_and_parameter(tmp_path):
    prep_save_model(str(tmp_path), {"qnet": _net(0, out=2)}, version=0)
    with pytest.raises(
        RuntimeError,
        match=r"model 'qnet' .*parameter '2.weight' has shape \[2, 4\] in the state dict but \[5, 4\]",
    ):
        prep_load_model(str(tmp_path), {"qnet": _net(0, out=5)})


def test_load_model_validates_arguments(tmp_path):
    with pytest.raises(TypeError, match=r"model_map\['a'\] must be a torch.nn.Module, got int"):
        prep_load_model(str(tmp_path), {"a": 1})
    with pytest.raises(TypeError, match="version must be an int or None, got '3' of type str"):
        prep_load_model(str(tmp_path), {"a": _net(0)}, version="3")
    with pytest.raises(ValueError, match="model_map must name at least one model"):
        prep_load_model(str(tmp_path), {})


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def test_load_model_never_unpickles_code(tmp_path):
    torch.save({"0.weight": _Payload()}, str(tmp_path / "evil_0.pt"))
    with pytest.raises(pickle.UnpicklingError):
        prep_load_model(str(tmp_path), {"evil": _net(0)})


def test_load_state_dict_reports_missing_and_unexpected_keys():
    state = _net(0).state_dict()
    state["extra"] = torch.zeros(1)
    del state["0.bias"]
    with pytest.raises(
        RuntimeError, match=r"missing keys \['0.bias'\]; unexpected keys \['extra'\]"
    ):
        prep_load_state_dict(_net(1), state)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got dict"):
        prep_load_state_dict({}, state)


@pytest.mark.parametrize("model_device", DEVICES)
@pytest.mark.parametrize("state_device", DEVICES)
def test_load_state_dict_copies_onto_the_model_devices(model_device, state_device):
    source = _net(0).to(state_device)
    target = _net(1).to(model_device)
    params_before = [p for p in target.parameters()]
    prep_load_state_dict(target, source.state_dict())
    assert all(p.device.type == model_device for p in target.state_dict().values())
    assert all(
        a is b for a, b in zip(target.parameters(), params_before)
    )  # copied into, not replaced
    assert _equal(source, target)


def test_cpu_checkpoint_loads_into_a_model_on_another_device(tmp_path):
    prep_save_model(str(tmp_path), {"net": _net(0)}, version=4)
    target = _net(1).to(DEVICES[-1])
    assert prep_load_model(str(tmp_path), {"net": target}) == 4
    assert all(t.device.type == DEVICES[-1] for t in target.state_dict().values())
    assert _equal(target, _net(0))

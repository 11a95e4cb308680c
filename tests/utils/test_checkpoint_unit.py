"""A checkpoint version is one unit: a killed save, a damaged file or a half-loaded set never
yields a mix of networks (issue "Reliability: no half-written checkpoint").
"""

import io
import json
import multiprocessing
import os
import re
import signal

import pytest
import torch
from torch import nn

from machin.frame.algorithms.base import TorchFramework
from machin.utils.prepare import (
    CheckpointLoadError,
    StateDictMismatchError,
    prep_load_checkpoint,
    prep_load_model,
    prep_save_checkpoint,
    prep_save_model,
    prep_save_state_dict,
)
from tests.multiprocess import no_children_left  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("no_children_left")

TEMP = re.compile(r"^\..*\.tmp$")


class TwoNets(TorchFramework):
    """DDPG-like: two restorable target networks."""

    _is_top = ["actor_target", "critic_target"]
    _is_restorable = ["actor_target", "critic_target"]

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.actor_target = nn.Sequential(nn.Linear(3, 8), nn.Linear(8, 2))
        self.critic_target = nn.Sequential(nn.Linear(5, 8), nn.Linear(8, 1))


class WithExtra(TwoNets):
    """Saves a non-network file with every version, through the base-class hooks (like ARS)."""

    def __init__(self, seed=0):
        super().__init__(seed)
        self.stats = {"mean": torch.full((3,), float(seed))}
        self.loaded_stats = "not called"

    def _extra_checkpoint_names(self, network_map):
        return ["stats"]

    def _extra_checkpoint_state(self, network_map):
        return {"stats": self.stats}

    def _load_extra_checkpoint_state(self, network_map, states):
        self.loaded_stats = states["stats"]


def same(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def same_algo(a: TwoNets, b: TwoNets) -> bool:
    return same(a.actor_target, b.actor_target) and same(a.critic_target, b.critic_target)


# -- (1) a save killed with SIGKILL in the middle of the second file ------------------------------
def _save_and_block_on_second_file(model_dir, version, ready):
    """Child: save TwoNets(seed=2); the second network file blocks half written."""
    real_save = torch.save
    calls = []

    def slow_save(obj, file, *args, **kwargs):
        calls.append(getattr(file, "name", file))
        if len(calls) < 2:
            return real_save(obj, file, *args, **kwargs)
        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        file.write(data[: len(data) // 2])
        file.flush()
        ready.set()
        signal.pause()  # killed here by the parent
        os._exit(3)

    torch.save = slow_save
    TwoNets(seed=2).save(model_dir, version=version)
    os._exit(4)  # not reached


def _killed_save(model_dir, version):
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    child = context.Process(target=_save_and_block_on_second_file, args=(model_dir, version, ready))
    child.start()
    try:
        assert ready.wait(30), "the child never reached the second file"
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert child.exitcode == -signal.SIGKILL
    finally:
        if child.is_alive():
            child.kill()
            child.join(10)


@pytest.mark.parametrize(
    "killed_version, expected", [(2, 1), (1, 0)], ids=["new-version", "overwrite"]
)
def test_a_killed_save_leaves_the_previous_complete_version(
    tmp_path, warnings_logged, killed_version, expected
):
    model_dir = str(tmp_path)
    saved = {0: TwoNets(seed=10), 1: TwoNets(seed=11)}
    for version, algo in saved.items():
        algo.save(model_dir, version=version)

    _killed_save(model_dir, killed_version)

    files = os.listdir(model_dir)
    assert any(TEMP.match(name) and "critic_target" in name for name in files), files
    # the first network's file of the killed save was written: without the manifest it would load
    written = torch.load(
        os.path.join(model_dir, f"actor_target_{killed_version}.pt"), weights_only=True
    )
    assert torch.equal(written["0.weight"], TwoNets(seed=2).actor_target[0].weight)

    loaded = TwoNets(seed=99)
    loaded.load(model_dir)
    assert same_algo(loaded, saved[expected])
    assert any(
        f"version {killed_version} (incomplete: its save was interrupted" in m
        for m in warnings_logged
    ), warnings_logged
    assert any(f"Loaded version {expected}" in m for m in warnings_logged)

    untouched = TwoNets(seed=99)
    with pytest.raises(RuntimeError, match=f"cannot load version {killed_version} .* incomplete"):
        untouched.load(model_dir, version=killed_version)
    assert same_algo(untouched, TwoNets(seed=99))


# -- (2) the next save removes the leftover temporary file -----------------------------------------
def test_the_next_save_removes_temporaries_of_killed_saves_only(tmp_path):
    model_dir = str(tmp_path)
    TwoNets(seed=1).save(model_dir, version=1)
    _killed_save(model_dir, 2)
    leftovers = [name for name in os.listdir(model_dir) if TEMP.match(name)]
    assert leftovers
    old_format = ".actor_target_5.pt.abcd1234.tmp"  # an earlier release's name (no process id)
    live = f".critic_target_7.pt.{os.getpid()}.abcd1234.tmp"  # a save in progress in a live process
    foreign = [".notes.tmp", "actor_target_9.pt.tmp", "mine.tmp", ".actor_target_5.pt.abc.tmp.bak"]
    for name in [old_format, live] + foreign:
        (tmp_path / name).write_bytes(b"x")

    TwoNets(seed=3).save(model_dir, version=3)

    files = set(os.listdir(model_dir))
    assert not set(leftovers) & files
    assert old_format not in files
    assert live in files and set(foreign) <= files
    loaded = TwoNets(seed=99)
    loaded.load(model_dir)
    assert same_algo(loaded, TwoNets(seed=3))


# -- (3) damaged files are named, without advice to unpickle ---------------------------------------
def _damage(path, kind):
    with open(path, "rb") as file:
        data = file.read()
    if kind == "truncated":
        damaged = data[: len(data) // 2]
    elif kind == "zero-byte":
        damaged = b""
    else:
        damaged = os.urandom(len(data))
    with open(path, "wb") as file:
        file.write(damaged)


@pytest.mark.parametrize("kind", ["truncated", "zero-byte", "random-bytes"])
@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "no-manifest"])
def test_a_damaged_file_is_named(tmp_path, kind, manifest):
    model_dir = str(tmp_path)
    TwoNets(seed=1).save(model_dir, version=0)
    if not manifest:
        os.remove(tmp_path / "actor_target_0.manifest.json")
    bad = str(tmp_path / "critic_target_0.pt")
    _damage(bad, kind)
    for version in (-1, 0):
        with pytest.raises(RuntimeError) as raised:
            TwoNets(seed=2).load(model_dir, version=version)
        message = str(raised.value)
        assert repr(bad) in message, message
        assert "weights_only=False" not in message and "weights_only` set to `False" not in message
    if not manifest or kind == "random-bytes":
        # the file itself is read: the error is machin's checkpoint error
        with pytest.raises(CheckpointLoadError, match=re.escape(repr(bad))):
            prep_load_model(model_dir, {"critic_target": TwoNets().critic_target}, version=0)


@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "no-manifest"])
def test_a_file_with_wrong_keys_is_named(tmp_path, manifest):
    model_dir = str(tmp_path)
    prep_save_model(
        model_dir, {"actor_target": TwoNets().actor_target, "critic_target": nn.Linear(5, 1)}
    )
    if not manifest:
        os.remove(tmp_path / "actor_target_0.manifest.json")
    with pytest.raises(StateDictMismatchError, match=r"critic_target_0\.pt.*missing keys"):
        TwoNets().load(model_dir)


# -- (4) a bad second file leaves the first network untouched -------------------------------------
@pytest.mark.parametrize("damage", ["random-bytes", "wrong-keys", "truncated-no-manifest"])
def test_a_bad_second_file_changes_no_network(tmp_path, damage):
    model_dir = str(tmp_path)
    TwoNets(seed=1).save(model_dir, version=0)
    bad = str(tmp_path / "critic_target_0.pt")
    if damage == "wrong-keys":
        os.remove(tmp_path / "actor_target_0.manifest.json")
        prep_save_state_dict(bad, {"weight": torch.zeros(1, 5)})
    elif damage == "truncated-no-manifest":
        os.remove(tmp_path / "actor_target_0.manifest.json")
        _damage(bad, "truncated")
    else:
        _damage(bad, damage)
    loaded = TwoNets(seed=2)
    actor = loaded.actor_target
    with pytest.raises(RuntimeError, match=re.escape(repr(bad))):
        loaded.load(model_dir)
    assert loaded.actor_target is actor
    assert same_algo(loaded, TwoNets(seed=2))


def test_a_bad_extra_file_changes_no_network_and_the_extra_file_is_in_the_manifest(tmp_path):
    model_dir = str(tmp_path)
    WithExtra(seed=1).save(model_dir, version=4)
    manifest = (tmp_path / "actor_target_4.manifest.json").read_text()
    assert '"stats_4.pt"' in manifest and '"critic_target_4.pt"' in manifest
    loaded = WithExtra(seed=2)
    loaded.load(model_dir)
    assert same_algo(loaded, TwoNets(seed=1))
    assert torch.equal(loaded.loaded_stats["mean"], torch.full((3,), 1.0))

    _damage(str(tmp_path / "stats_4.pt"), "random-bytes")
    fresh = WithExtra(seed=2)
    with pytest.raises(CheckpointLoadError, match=r"stats_4\.pt"):
        fresh.load(model_dir, version=4)
    assert same_algo(fresh, TwoNets(seed=2)) and fresh.loaded_stats == "not called"


# -- a newer damaged version does not hide an older good one ---------------------------------------
@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "no-manifest"])
def test_a_newer_damaged_version_falls_back_to_an_older_complete_one(
    tmp_path, warnings_logged, manifest
):
    model_dir = str(tmp_path)
    TwoNets(seed=1).save(model_dir, version=1)
    TwoNets(seed=2).save(model_dir, version=2)
    if not manifest:
        for version in (1, 2):
            os.remove(tmp_path / f"actor_target_{version}.manifest.json")
    bad = str(tmp_path / "critic_target_2.pt")
    _damage(bad, "random-bytes")
    loaded = TwoNets(seed=99)
    loaded.load(model_dir)
    assert same_algo(loaded, TwoNets(seed=1))
    assert any("skipped version 2" in m and repr(bad) in m for m in warnings_logged), (
        warnings_logged
    )
    with pytest.raises(CheckpointLoadError, match=re.escape(repr(bad))):
        loaded.load(model_dir, version=2)


# -- (5) directories without manifests (earlier releases, Machin 0.3.4) ---------------------------
def test_a_directory_without_manifests_loads_as_before(tmp_path, warnings_logged):
    model_dir = str(tmp_path)
    for version, seed in ((0, 10), (100, 11)):
        algo = TwoNets(seed=seed)
        prep_save_state_dict(
            tmp_path / f"actor_target_{version}.pt", algo.actor_target.state_dict()
        )
        prep_save_state_dict(
            tmp_path / f"critic_target_{version}.pt", algo.critic_target.state_dict()
        )
    prep_save_state_dict(
        tmp_path / "actor_target_1000.pt", TwoNets(seed=12).actor_target.state_dict()
    )
    assert not [name for name in os.listdir(model_dir) if name.endswith(".json")]

    loaded = TwoNets(seed=99)
    loaded.load(model_dir)  # 1000 lacks the critic: 100 is the newest version of both, silently
    assert same_algo(loaded, TwoNets(seed=11))
    assert warnings_logged == []
    loaded.load(model_dir, version=0)
    assert same_algo(loaded, TwoNets(seed=10))
    loaded.load(model_dir, version=1000)  # as before: a warning and the newest common version
    assert same_algo(loaded, TwoNets(seed=11))
    assert any("version 1000 is missing for models ['critic_target']" in m for m in warnings_logged)

    # a new save into the old directory keeps its old versions loadable
    TwoNets(seed=13).save(model_dir, version=200)
    loaded.load(model_dir)
    assert same_algo(loaded, TwoNets(seed=13))
    loaded.load(model_dir, version=0)
    assert same_algo(loaded, TwoNets(seed=10))


def test_separately_saved_models_of_one_version_load_together(tmp_path):
    # two units of the same version, each with its own manifest, make one complete version
    actor, critic = TwoNets(seed=1).actor_target, TwoNets(seed=1).critic_target
    prep_save_model(str(tmp_path), {"actor_target": actor}, version=5)
    prep_save_model(str(tmp_path), {"critic_target": critic}, version=5)
    loaded = TwoNets(seed=2)
    loaded.load(str(tmp_path))
    assert same_algo(loaded, TwoNets(seed=1))


def test_prep_save_checkpoint_writes_files_then_a_complete_manifest(tmp_path):
    paths = prep_save_checkpoint(
        str(tmp_path), {"a": {"w": torch.ones(2)}, "b": {"w": torch.zeros(3)}}, 7
    )
    assert paths == [str(tmp_path / "a_7.pt"), str(tmp_path / "b_7.pt")]
    manifest = json.loads((tmp_path / "a_7.manifest.json").read_text())
    assert manifest["complete"] is True and manifest["version"] == 7
    assert manifest["files"]["b_7.pt"]["size"] == os.path.getsize(tmp_path / "b_7.pt")
    assert len(manifest["files"]["a_7.pt"]["sha256"]) == 64
    assert sorted(os.listdir(tmp_path)) == ["a_7.manifest.json", "a_7.pt", "b_7.pt"]
    holder = nn.Module()
    holder.w = nn.Parameter(torch.zeros(2))
    version, extras = prep_load_checkpoint(str(tmp_path), {"a": holder}, extra=["b", "c"])
    assert version == 7 and torch.equal(holder.w.data, torch.ones(2))
    assert torch.equal(extras["b"]["w"], torch.zeros(3)) and extras["c"] is None


def test_a_save_failing_before_any_file_is_replaced_changes_nothing(tmp_path):
    holder = nn.Module()
    holder.w = nn.Parameter(torch.ones(2))
    prep_save_model(str(tmp_path), {"a": holder}, version=0)
    before = {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)}
    for version in (0, 1):
        with pytest.raises(Exception):  # noqa: B017 (the pickler's error type varies)
            prep_save_checkpoint(str(tmp_path), {"a": {"w": lambda: 0}}, version)
        assert {name: (tmp_path / name).read_bytes() for name in os.listdir(tmp_path)} == before
    target = nn.Module()
    target.w = nn.Parameter(torch.zeros(2))
    assert prep_load_model(str(tmp_path), {"a": target}, version=0) == 0
    assert torch.equal(target.w.data, torch.ones(2))

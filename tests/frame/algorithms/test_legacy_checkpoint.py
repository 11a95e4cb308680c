"""machin.frame.algorithms.legacy_checkpoint: 0.3.4 files in a layout of their own (MADDPG's)."""

import os
import re

import pytest
import torch
from torch import nn

from machin.frame.algorithms.legacy_checkpoint import LegacyFile, file_versions, load_legacy_files
from machin.utils.prepare import StateDictMismatchError


def test_file_versions_lists_the_versions_of_one_name(tmp_path):
    for name in ("net_1.pt", "net_12.pt", "net_x.pt", "network_3.pt", "net_4.pt.tmp"):
        (tmp_path / name).write_bytes(b"")
    assert file_versions(str(tmp_path), "net") == {1, 12}
    assert file_versions(str(tmp_path / "missing"), "net") == set()


def test_renamed_joins_the_groups_of_the_old_child_name():
    legacy = LegacyFile("all_actor_target", re.compile(r"^actor_(\d+)_(\d+)\."))
    assert legacy.renamed({"actor_0_1.weight": 1, "actor_2_0.bias": 2}) == {
        "0.1.weight": 1,
        "2.0.bias": 2,
    }
    critic = LegacyFile("all_critic_target", re.compile(r"^critic_(\d+)()\."))
    assert critic.renamed({"critic_3.weight": 1}) == {"3.weight": 1}


def _old_module(seed):
    torch.manual_seed(seed)
    old = nn.Module()
    old.add_module("critic_0", nn.Linear(2, 1))
    old.add_module("critic_1", nn.Linear(2, 1))
    return old


def test_load_legacy_files_loads_every_network_or_none(tmp_path):
    old = _old_module(0)
    torch.save(old.state_dict(), os.path.join(tmp_path, "all_critic_target_5.pt"))
    torch.save({"0.weight": torch.zeros(3, 3)}, os.path.join(tmp_path, "bad_5.pt"))
    critics = nn.ModuleList([nn.Linear(2, 1), nn.Linear(2, 1)])
    files = {"critics": LegacyFile("all_critic_target", re.compile(r"^critic_(\d+)()\."))}
    load_legacy_files({"critics": critics}, files, str(tmp_path), 5, trusted=False)
    assert torch.equal(critics[1].weight, old.critic_1.weight)

    untouched = nn.ModuleList([nn.Linear(2, 1), nn.Linear(2, 1)])
    before = [p.clone() for p in untouched.parameters()]
    files["others"] = LegacyFile("bad", re.compile(r"^critic_(\d+)()\."))
    with pytest.raises(StateDictMismatchError, match=r"network 'others' \(file .*bad_5\.pt"):
        load_legacy_files(
            {"critics": untouched, "others": nn.ModuleList([nn.Linear(2, 1)])},
            files,
            str(tmp_path),
            5,
            trusted=False,
        )
    assert all(torch.equal(p, q) for p, q in zip(untouched.parameters(), before))


def test_a_pickled_module_is_read_only_when_trusted(tmp_path):
    torch.save(_old_module(1), os.path.join(tmp_path, "all_critic_target_0.pt"))
    files = {"critics": LegacyFile("all_critic_target", re.compile(r"^critic_(\d+)()\."))}
    critics = nn.ModuleList([nn.Linear(2, 1), nn.Linear(2, 1)])
    with pytest.raises(RuntimeError, match=r"looks like a Machin 0\.3\.4 checkpoint.*trusted=True"):
        load_legacy_files({"critics": critics}, files, str(tmp_path), 0, trusted=False)
    load_legacy_files({"critics": critics}, files, str(tmp_path), 0, trusted=True)
    assert torch.equal(critics[0].bias, _old_module(1).critic_0.bias)

"""LearnerCheckpoint: a version every K updates, old ones pruned, an exact resume from the newest."""

import pytest
import torch
from torch import nn

from machin.frame.algorithms.dqn_per import DQNPer
from machin.parallel.distributed.checkpoint import LearnerCheckpoint
from tests.frame.algorithms.nets import QNet


def _dqn(seed=0):
    torch.manual_seed(seed)
    agent = DQNPer(
        QNet(4, 2, 8),
        QNet(4, 2, 8),
        torch.optim.Adam,
        nn.MSELoss(reduction="none"),
        batch_size=8,
        update_rate=0.1,
    )
    generator = torch.Generator().manual_seed(seed)
    agent.store_episode(
        [
            {
                "state": {"state": torch.randn(1, 4, generator=generator)},
                "action": {"action": torch.tensor([[i % 2]])},
                "next_state": {"state": torch.randn(1, 4, generator=generator)},
                "reward": float(i % 3),
                "terminal": i == 31,
            }
            for i in range(32)
        ]
    )
    return agent


def _state(agent):
    return {
        name: {k: v.clone() for k, v in getattr(agent, name).state_dict().items()}
        for name in ("qnet", "qnet_target")
    }


def test_checkpoints_every_k_updates_keep_the_newest_and_resume_exactly(tmp_path):
    agent = _dqn()
    checkpoint = LearnerCheckpoint(agent, tmp_path, every=4, keep=2)
    written, saved = [], {}
    for updates in range(1, 15):
        agent.update()
        if checkpoint.step(updates, extra={"episodes": torch.tensor(updates * 3)}):
            written.append(updates)
            saved[updates] = (
                _state(agent),
                agent.qnet_optim.state_dict()["state"][0]["exp_avg"].clone(),
            )
    assert written == [4, 8, 12] and checkpoint.versions() == [8, 12]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "learner_state_12.pt",
        "learner_state_12.pt.manifest.json",
        "learner_state_8.pt",
        "learner_state_8.pt.manifest.json",
        "qnet_target_12.manifest.json",
        "qnet_target_12.pt",
        "qnet_target_8.manifest.json",
        "qnet_target_8.pt",
    ]

    other = _dqn(seed=1)  # a new learner process: other networks, no optimizer state
    resumed = LearnerCheckpoint(other, tmp_path, every=4)
    assert resumed.resume() == 12 and resumed.last_saved == 12
    networks, exp_avg = saved[12]
    for name, state in _state(other).items():  # the online network too, not only the saved target
        assert all(torch.equal(state[k], networks[name][k]) for k in state)
    assert torch.equal(other.qnet_optim.state_dict()["state"][0]["exp_avg"], exp_avg)
    assert int(resumed.extra["episodes"]) == 36
    assert not resumed.step(15) and resumed.step(16)  # every 4 updates from the resumed count


def test_resume_without_checkpoint_changes_nothing_and_a_half_written_version_is_skipped(tmp_path):
    agent = _dqn()
    before = _state(agent)
    assert LearnerCheckpoint(agent, tmp_path / "none").resume() is None
    assert all(torch.equal(v, before["qnet"][k]) for k, v in _state(agent)["qnet"].items())
    checkpoint = LearnerCheckpoint(agent, tmp_path, every=1)
    checkpoint.save(3)
    agent.save(
        str(tmp_path), version=5
    )  # networks of version 5 written, the learner state never was
    torch.save(
        {}, tmp_path / "learner_state_6.pt"
    )  # a learner state without its manifest: incomplete
    assert LearnerCheckpoint(_dqn(seed=2), tmp_path).resume() == 3


def test_a_checkpoint_of_another_learner_is_refused_by_name(tmp_path):
    LearnerCheckpoint(_dqn(), tmp_path, every=1).save(1)

    class Renamed(DQNPer):
        pass

    agent = Renamed(QNet(4, 2, 8), QNet(4, 2, 8), torch.optim.Adam, nn.MSELoss(reduction="none"))
    with pytest.raises(
        RuntimeError,
        match=r"learner_state_1\.pt.*it is the state of a machin\.frame\.algorithms\."
        r"dqn_per\.DQNPer, this algorithm is a .*Renamed",
    ):
        LearnerCheckpoint(agent, tmp_path).resume()
    agent = _dqn()
    agent.other_optim = torch.optim.SGD(agent.qnet.parameters(), lr=0.1)
    with pytest.raises(
        RuntimeError,
        match=r"learner_state_1\.pt.*holds the optimizers \['qnet_optim'\], "
        r"this algorithm has \['other_optim', 'qnet_optim'\]",
    ):
        LearnerCheckpoint(agent, tmp_path).resume()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(every=-1), ValueError, "every must be a non-negative int"),
        (dict(keep=0), ValueError, "keep must be a positive int or None, got 0"),
    ],
)
def test_bad_options_are_refused(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        LearnerCheckpoint(_dqn(), tmp_path, **kwargs)
    with pytest.raises(TypeError, match="framework must have save"):
        LearnerCheckpoint(object(), tmp_path)


def _networks_and_optimizer(agent):
    optimizer = agent.qnet_optim.state_dict()["state"]
    return _state(agent), {i: {k: v.clone() for k, v in s.items()} for i, s in optimizer.items()}


def _equal_nested(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal_nested(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_equal_nested(x, y) for x, y in zip(a, b))
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def test_a_fresh_learner_resumed_from_a_checkpoint_continues_exactly_as_the_saved_one(tmp_path):
    agent = _dqn()
    for _ in range(5):
        agent.update()
    agent.epsilon = 0.25  # a schedule's progress
    path = LearnerCheckpoint(agent, tmp_path, every=1).save(5)
    assert path == str(tmp_path / "learner_state_5.pt")
    saved_networks, saved_optimizer = _networks_and_optimizer(agent)
    saved_buffer = agent.replay_buffer.state_dict()["layout"]["major"]["state"]["state"][
        "rows"
    ].clone()
    agent.update()  # the saved learner goes on: draws priorities and samples with the saved generators
    after_networks, _ = _networks_and_optimizer(agent)

    fresh = _dqn(seed=1)  # another process: other networks, buffer rows and random state
    torch.manual_seed(123)
    assert LearnerCheckpoint(fresh, tmp_path).resume() == 5
    networks, optimizer = _networks_and_optimizer(fresh)
    assert _equal_nested(networks, saved_networks) and _equal_nested(optimizer, saved_optimizer)
    assert fresh._update_counter == 5 and fresh.epsilon == 0.25
    assert torch.equal(
        fresh.replay_buffer.state_dict()["layout"]["major"]["state"]["state"]["rows"], saved_buffer
    )
    fresh.update()
    assert _equal_nested(
        _networks_and_optimizer(fresh)[0], after_networks
    )  # bit-identical next update
    plain = _dqn(seed=3)
    plain.resume(path)  # a learner-state file is also an algorithm's run state
    assert _equal_nested(_networks_and_optimizer(plain), (saved_networks, saved_optimizer))


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _save_state_instead(path):
    for name in (path.name, path.name + ".manifest.json"):
        (path.parent / name).unlink()
    _dqn().save_state(str(path))  # an algorithm's own run state, not a learner checkpoint


@pytest.mark.parametrize(
    "spoil, learner, message",
    [
        (
            _truncate,
            _dqn,
            r"learner_state_2\.pt'?: the file is truncated or was changed after it was saved",
        ),
        (_save_state_instead, _dqn, r"learner_state_2\.pt'?: it is not a learner checkpoint"),
        (
            None,
            lambda: DQNPer(
                QNet(4, 2, 16), QNet(4, 2, 16), torch.optim.Adam, nn.MSELoss(reduction="none")
            ),
            r"learner_state_2\.pt'?: network 'qnet' has another architecture than the saved one: "
            r".*net\.0\.weight: saved \[8, 4\] torch\.float32, here \[16, 4\] torch\.float32",
        ),
    ],
)
def test_a_damaged_or_foreign_checkpoint_is_refused_naming_the_file_and_changes_nothing(
    tmp_path, spoil, learner, message
):
    LearnerCheckpoint(_dqn(), tmp_path, every=1).save(2)
    if spoil is not None:
        spoil(tmp_path / "learner_state_2.pt")
    other = learner()
    before = _networks_and_optimizer(other)
    checkpoint = LearnerCheckpoint(other, tmp_path)
    with pytest.raises(ValueError, match=message):
        checkpoint.resume()
    assert _equal_nested(_networks_and_optimizer(other), before) and checkpoint.last_saved == 0

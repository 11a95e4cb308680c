"""Roles: learners, servers and samplers derived from the world's size and rank."""

import pytest

from machin.parallel.distributed.roles import Roles


@pytest.mark.parametrize("world_size", [3, 5, 8])
def test_default_split_is_one_learner_and_samplers_everywhere_else(world_size):
    for rank in range(world_size):
        roles = Roles.from_world(world_size, rank)
        assert roles.learners == (0,) and roles.servers == ()
        assert roles.samplers == tuple(range(1, world_size))
        assert roles.role == ("learner" if rank == 0 else "sampler")
        assert (
            roles.is_learner == (rank == 0)
            and roles.is_sampler == (rank > 0)
            and not roles.is_server
        )
        assert roles.coordinator == 0 and roles.model_server == 0
        assert roles.replay == "samplers" and roles.replay_holders == roles.samplers
    assert str(Roles.from_world(world_size, 1)) == (
        f"{world_size} processes: learners [0], samplers {list(range(1, world_size))}; model server on rank 0, "
        f"replay on the samplers"
    )


def test_learners_and_servers_come_first_and_the_replay_can_live_with_them():
    roles = Roles.from_world(8, 4, learners=2, servers=1, replay="servers")
    assert (roles.learners, roles.servers, roles.samplers) == ((0, 1), (2,), (3, 4, 5, 6, 7))
    assert roles.model_server == 2 and roles.coordinator == 0
    assert [roles.replay_holder(r) for r in roles.samplers] == [2] * 5
    roles = Roles.from_world(8, 4, learners=2, replay="learners")
    assert roles.model_server == 0
    assert [roles.replay_holder(r) for r in roles.samplers] == [0, 1, 0, 1, 0, 1]  # round robin
    assert Roles.from_world(5, 3).replay_holder() == 3  # with replay="samplers" each keeps its own
    assert roles.describe(1) == "learner 1 (rank 1)" and roles.describe(7) == "sampler 5 (rank 7)"
    with pytest.raises(
        ValueError, match=r"rank 1 is a learner, not a sampler \[2, 3, 4, 5, 6, 7\]"
    ):
        roles.replay_holder(1)


def test_world_size_and_rank_come_from_torchrun_variables(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "5")
    monkeypatch.setenv("RANK", "4")
    roles = Roles.from_world(learners=2)
    assert (roles.world_size, roles.rank, roles.samplers) == (5, 4, (2, 3, 4))
    monkeypatch.delenv("RANK")
    with pytest.raises(
        ValueError, match="rank was not given, no World is running and the RANK environment"
    ):
        Roles.from_world()
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(
        ValueError, match="the RANK environment variable must be an integer, got 'two'"
    ):
        Roles.from_world()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(world_size=2, rank=0, learners=2),
            r"a world of 2 process\(es\) cannot hold 2 learner\(s\), 0 server\(s\) and at least one sampler: start at "
            r"least 3 processes",
        ),
        (dict(world_size=4, rank=0, servers=2, learners=2), "cannot hold 2 learner"),
        (dict(world_size=3, rank=3), r"rank must be an int in \[0, 2\], got 3"),
        (dict(world_size=3, rank=0, learners=0), "learners must be an int of at least 1, got 0"),
        (dict(world_size=3, rank=0, servers=-1), "servers must be an int of at least 0, got -1"),
        (
            dict(world_size=3, rank=0, replay="disk"),
            r"replay must be one of \('samplers', 'learners', 'servers'\), "
            r"got 'disk'",
        ),
        (
            dict(world_size=3, rank=0, replay="servers"),
            'replay="servers" needs at least one server rank',
        ),
    ],
)
def test_bad_splits_are_refused_with_what_was_asked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Roles.from_world(**kwargs)


def test_a_custom_split_must_cover_every_rank_once():
    assert Roles(4, 0, learners=(3,), servers=(), samplers=(0, 1, 2)).coordinator == 3
    with pytest.raises(
        ValueError, match=r"must hold every rank of the world \[0, 3\] exactly once"
    ):
        Roles(4, 0, learners=(0,), servers=(), samplers=(1, 2, 2))
    with pytest.raises(ValueError, match="a run needs at least one learner and one sampler"):
        Roles(2, 0, learners=(0, 1), servers=(), samplers=())

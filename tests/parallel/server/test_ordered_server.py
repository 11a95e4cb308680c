"""OrderedServerSimple(Impl): a versioned key-value server on a 3-process world."""

import pytest
import torch

from machin.parallel.distributed import World
from machin.parallel.server import OrderedServerBase, OrderedServerSimple, OrderedServerSimpleImpl
from tests.multiprocess import no_children_left, run_ranks  # noqa: F401

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("no_children_left")]


def _ordered_server_checks(rank):
    world = World(rpc_timeout=30)
    group = world.create_rpc_group("kv", world.get_members())
    if rank == 0:
        OrderedServerSimpleImpl("server", group)  # version_depth=1
        with pytest.raises(ValueError, match="version_depth must be a positive int, got 0"):
            OrderedServerSimpleImpl("other", group, version_depth=0)
    group.barrier()
    server = group.get_paired("server").to_here()
    assert isinstance(server, OrderedServerSimple) and isinstance(server, OrderedServerBase)
    if rank == 1:
        assert server.pull("k") is None
        assert server.push("k", "v1", version=1, prev_version=0)
        assert not server.push("k", "stale", version=2, prev_version=0)
        assert server.push("k", "v2", 2, 1) and server.push("k", "v3", 3, 2)
        assert server.pull("k") == ("v3", 3)
        assert server.pull("k", version=2) == ("v2", 2)
        assert server.pull("k", version=1) is None  # older than the newest and 1 more
        assert server.pull("k", version=7) is None
        assert server.push("k", "v3 again", 3, 3)  # version == prev_version replaces the newest
        assert server.pull("k") == ("v3 again", 3)
        assert server.push("t", {"w": torch.ones(3)}, 1, 0)
    group.barrier()
    value, version = server.pull("t")
    assert version == 1 and torch.equal(value["w"], torch.ones(3))
    # every member pushes the version after 3 at once: exactly one push wins
    won = server.push("k", f"from {rank}", 4, 3)
    group.barrier()
    newest = server.pull("k")
    world.stop()
    return won, newest


@pytest.mark.timeout(300)
def test_versions_form_a_chain_and_old_versions_expire(run_on):
    results = run_on(_ordered_server_checks, 3)
    winners = [rank for rank, (won, _) in enumerate(results) if won]
    assert len(winners) == 1
    assert all(newest == (f"from {winners[0]}", 4) for _, newest in results)

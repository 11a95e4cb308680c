"""Suite-wide settings: one torch thread per worker (xdist runs two), headless rendering;
shared fixtures (among them the Ray cluster of tests/ray_cluster.py, started when a module
first needs it); under xdist, every test that uses that cluster runs on one test worker."""

import logging
import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from tests.ray_cluster import (  # noqa: E402, F401 (fixtures; sets Ray's 127.0.0.1-only variables)
    _worker_cluster,
    in_ray_group,
    ray_cluster,
    run_on,
    stop_after_the_ray_group,
)


def _uses_the_ray_cluster(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    on_ray = callspec is not None and callspec.params.get("run_on") == "ray"
    return on_ray or "ray_cluster" in getattr(item, "fixturenames", ())


def pytest_itemcollected(item):
    """A test that uses the Ray cluster must say "ray" in its id (see ``in_ray_group``)."""
    if _uses_the_ray_cluster(item) and not in_ray_group(item.nodeid):
        raise pytest.UsageError(
            f"{item.nodeid} uses the Ray cluster but its id does not name ray: put 'ray' in "
            f"its name or parameters, so that it runs in the test worker of the Ray group"
        )


def pytest_xdist_make_scheduler(config, log):
    """Under ``-n``, send every test whose id names ray to one worker, as one unit (the first).

    That worker starts the one Ray cluster of the run and stops it after the group (see
    ``tests.ray_cluster.stop_after_the_ray_group``); a second cluster would cost its start
    and, idle, about a tenth of a core. Other tests are handed out one by one, as with
    ``--dist load``. (xdist's own ``--dist loadgroup`` does not work with pytest 9.2: the
    group it appends to a test's id is lost.)
    """
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class RayGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "ray" if in_ray_group(nodeid) else nodeid

    return RayGroupScheduling(config, log)


def pytest_runtest_teardown(item, nextitem):
    stop_after_the_ray_group(item, nextitem)


@pytest.fixture
def warnings_logged():
    """Collect the messages the library's default logger emits at WARNING level."""
    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("default_logger")
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)

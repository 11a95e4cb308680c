"""Suite-wide settings: one torch thread per worker (xdist runs two), headless rendering;
shared fixtures (among them the Ray cluster of tests/ray_cluster.py, started when a module
first needs it); every test that uses that cluster runs on one test worker."""

import logging
import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from tests.ray_cluster import _worker_cluster, ray_cluster, run_on  # noqa: E402, F401 (fixtures; sets Ray's 127.0.0.1-only variables)


def _uses_the_ray_cluster(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    on_ray = callspec is not None and callspec.params.get("run_on") == "ray"
    return on_ray or "ray_cluster" in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Put the tests that use the Ray cluster into one xdist group (``--dist loadgroup``).

    They then share one worker and one cluster: a second cluster would cost its start and,
    idle, about a tenth of a core for the rest of the run.
    """
    for item in items:
        if _uses_the_ray_cluster(item):
            item.add_marker(pytest.mark.xdist_group("ray"))


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

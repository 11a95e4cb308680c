"""Suite-wide settings: one torch thread per worker (xdist runs two), headless rendering;
shared fixtures (among them the Ray cluster of tests/ray_cluster.py, started once per
worker process that needs it)."""

import logging
import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from tests.ray_cluster import ray_cluster, run_on  # noqa: E402, F401 (fixtures; sets Ray's 127.0.0.1-only variables)


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


def _uses_ray(item: pytest.Item) -> bool:
    """Whether a test needs the Ray cluster (directly, or as the ``ray`` case of ``run_on``)."""
    callspec = getattr(item, "callspec", None)
    return "ray_cluster" in getattr(item, "fixturenames", ()) or (
        callspec is not None and callspec.params.get("run_on") == "ray")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Send every Ray test to one pytest-xdist worker (with ``--dist loadgroup``, set in pyproject).

    Each worker that runs a Ray test starts a cluster of its own; one cluster instead of two
    leaves the two cores to the tests, which then meet their time limits on a busy machine.
    """
    for item in items:
        if _uses_ray(item):
            item.add_marker(pytest.mark.xdist_group("ray"))

"""Suite-wide settings: one torch thread per worker (xdist runs two), headless rendering;
shared fixtures (among them the Ray cluster of tests/ray_cluster.py, one per test worker,
started when a module first needs it)."""

import logging
import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from tests.ray_cluster import _worker_cluster, ray_cluster, run_on  # noqa: E402, F401 (fixtures; sets Ray's 127.0.0.1-only variables)


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

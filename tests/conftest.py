"""Suite-wide settings: one torch thread per worker (xdist runs two), headless rendering;
shared fixtures."""

import logging
import os

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


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

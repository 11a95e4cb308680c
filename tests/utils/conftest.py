"""Fixtures shared by the machin.utils tests."""

import glob
import os
import struct
from typing import Dict, List, Tuple

import pytest
from tensorboardX.proto import event_pb2


def _read_scalars(logdir: str) -> Dict[str, List[Tuple[int, float]]]:
    """Parse every tensorboardX event file under ``logdir`` (TFRecord framing)."""
    scalars: Dict[str, List[Tuple[int, float]]] = {}
    files = sorted(glob.glob(os.path.join(logdir, "**", "events.out.tfevents.*"), recursive=True))
    assert files, f"no event file written under {logdir}"
    for path in files:
        with open(path, "rb") as file:
            data = file.read()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            offset += 12  # length and its crc
            event = event_pb2.Event()
            event.ParseFromString(data[offset : offset + length])
            offset += length + 4  # payload and its crc
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


@pytest.fixture
def read_scalars():
    """``read_scalars(logdir) -> {tag: [(step, value), ...]}`` for tensorboardX event files."""
    return _read_scalars


class RecordingLogger:
    """Collects (level, message) pairs like a logging.Logger would emit them."""

    def __init__(self):
        self.records: List[Tuple[str, str]] = []

    def _add(self, level: str, msg, *args) -> None:
        self.records.append((level, msg % args if args else str(msg)))

    def debug(self, msg, *args, **kwargs):
        self._add("debug", msg, *args)

    def info(self, msg, *args, **kwargs):
        self._add("info", msg, *args)

    def warning(self, msg, *args, **kwargs):
        self._add("warning", msg, *args)

    def error(self, msg, *args, **kwargs):
        self._add("error", msg, *args)

    def messages(self, level: str) -> List[str]:
        return [msg for lvl, msg in self.records if lvl == level]


@pytest.fixture
def recording_logger():
    """A logger object that records what it is given."""
    return RecordingLogger()

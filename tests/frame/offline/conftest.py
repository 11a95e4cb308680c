"""Minari datasets of the offline tests live in the test's temporary directory (nothing is downloaded)."""

import pytest


@pytest.fixture
def minari_path(tmp_path, monkeypatch):
    """``MINARI_DATASETS_PATH`` pointed at a fresh temporary directory."""
    path = tmp_path / "minari"
    path.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    return path

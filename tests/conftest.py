"""Suite-wide fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """Tests that run the CLI in-process install a handler on pytest's captured stderr, which is
    closed after the test; left in place, every later log line fails and its traceback piles up in
    the next test's capture (the connect soak saw that as 25 MiB of heap growth)."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)

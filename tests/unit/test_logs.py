"""--log-format json: one JSON object per line with time, level, scope, message and any traceback."""

from __future__ import annotations

import json
import logging
import sys

from app.logs import JsonFormatter


def test_a_record_is_one_json_line_with_its_traceback() -> None:
    try:
        raise ValueError("bad input")
    except ValueError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("app.x", logging.WARNING, __file__, 1, "config %s rejected", ("a/b",), exc_info)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert (entry["level"], entry["scope"], entry["msg"]) == ("warning", "app.x", "config a/b rejected")
    assert entry["time"].endswith("+00:00") and "ValueError: bad input" in entry["error"]

"""pluglog.jsonlog: the JSON line of an event, and how ``--log-format`` reaches twistd."""

import io
import json

import pytest
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure
from twisted.python.usage import UsageError
from twisted.scripts.twistd import ServerOptions

from pluglog import jsonlog
from pluglog.plugins import DISABLE_AUTOLOAD_ENV


def _twistd(tmp_path, monkeypatch, *args):
    # Only pluglog's own providers: a broken third-party package installed on
    # the machine must not fail a test of the log option.
    monkeypatch.setenv(DISABLE_AUTOLOAD_ENV, "1")
    options = ServerOptions()
    options.parseOptions(
        ["-n", "--logfile=-", "pluglog", "--data-dir", str(tmp_path / "d"), *args]
    )
    return options


def test_text_is_the_default(tmp_path, monkeypatch):
    options = _twistd(tmp_path, monkeypatch)
    assert options.subOptions["log-format"] == "text"
    assert options["logger"] is None  # twistd's own text observer


def test_json_names_the_observer_factory(tmp_path, monkeypatch):
    options = _twistd(tmp_path, monkeypatch, "--log-format", "json")
    assert options["logger"] is jsonlog.observer
    observer = options["logger"]()
    assert isinstance(observer, jsonlog.JsonLinesObserver)


def test_bad_format_is_a_usage_error():
    from pluglog.tap import Options

    with pytest.raises(UsageError, match="--log-format"):
        Options().parseOptions(["--log-format", "xml"])


def test_one_line_with_fields_made_json_safe():
    out = io.StringIO()
    log = Logger(namespace="pluglog.test", observer=jsonlog.JsonLinesObserver(out))
    log.warn(
        "closing {peer}: {reason}",
        peer="127.0.0.1:5",
        reason="bad\nline\x1b[31m",
        raw=b"\xff\x00",
        isr=(1, 2),
        nan=float("nan"),
        obj=object,
    )
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    event = json.loads(text)
    assert event["level"] == "warn" and event["namespace"] == "pluglog.test"
    assert event["message"] == "closing 127.0.0.1:5: bad\nline\x1b[31m"
    assert event["reason"] == "bad\nline\x1b[31m"
    assert event["raw"] == "\\xff\x00"
    assert event["isr"] == [1, 2]
    assert event["nan"] == "nan"
    assert event["obj"] == str(object)


def test_failure_carries_its_traceback():
    out = io.StringIO()
    log = Logger(namespace="pluglog.test", observer=jsonlog.JsonLinesObserver(out))
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        log.failure("handler crashed", Failure())
    event = json.loads(out.getvalue())
    assert event["level"] == LogLevel.critical.name
    assert "ZeroDivisionError" in event["traceback"]

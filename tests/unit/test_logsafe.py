"""pluglog.logsafe: escaping client text in log events, throttling floods."""

from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher

from pluglog.logsafe import SafeLogger, Throttle, escape


def test_escape_leaves_printable_text_alone():
    assert escape("orders-1.ü_ok") == "orders-1.ü_ok"


def test_escape_control_characters_and_separators():
    assert escape("a\nb\rc\x1b[31m\x7f\x85\u2028") == "a\\x0ab\\x0dc\\x1b[31m\\x7f\\x85\\u2028"
    # A literal backslash cannot fake an escape.
    assert escape("\\x0a") == "\\\\x0a"
    assert escape(42) == "42"


def test_safe_logger_escapes_string_fields_not_twisted_ones():
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        SafeLogger().warn("client {c} said {n}", c="evil\nFAKE", n=3)
    finally:
        globalLogPublisher.removeObserver(events.append)
    [event] = [e for e in events if e.get("log_format") == "client {c} said {n}"]
    assert event["c"] == "evil\\x0aFAKE" and event["n"] == 3
    assert event["log_namespace"] == __name__


def test_throttle_counts_and_summarises():
    clock = Clock()
    throttle = Throttle(clock, "warnings", burst=3, window=10.0)
    emitted = []
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        for i in range(10):
            throttle(emitted.append, i)
        assert emitted == [0, 1, 2]
        assert throttle.suppressed == 7
        clock.advance(10)
        summary = [e for e in events if "suppressed" in e.get("log_format", "")]
        assert len(summary) == 1 and summary[0]["count"] == 7
        # A new window writes again.
        throttle(emitted.append, 10)
        assert emitted[-1] == 10 and throttle.total_suppressed == 7
    finally:
        globalLogPublisher.removeObserver(events.append)
        throttle.cancel()

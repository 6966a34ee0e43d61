"""The CLI's progress line and --help texts."""

import io

from pluglog.cli.main import build_parser, plain
from pluglog.cli.progress import Progress


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_draws_on_a_tty_at_most_every_interval():
    now = [100.0]
    out = FakeTTY()
    progress = Progress("produced", stream=out, clock=lambda: now[0], interval=0.2)
    progress.add(500, 100_000)
    assert out.getvalue() == ""  # not yet 0.2 s
    now[0] += 0.5
    progress.add(500, 100_000)
    assert "produced 1,000 records  2,000 rec/s  0.4 MB/s" in out.getvalue()
    progress.done()
    assert out.getvalue().endswith("\n")


def test_progress_silent_when_not_a_tty():
    out = io.StringIO()
    progress = Progress("consumed", stream=out, clock=lambda: 0.0, interval=0)
    progress.add(10, 10)
    progress.done()
    assert out.getvalue() == ""


def _parsers(parser):
    yield parser
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            for choice in choices.values():
                yield from _parsers(choice)


def test_help_texts_are_plain_text():
    texts = [p.format_help() for p in _parsers(build_parser())]
    assert len(texts) > 10
    for text in texts:
        for markup in ("``", ":class:", ":func:", ":mod:", "**"):
            assert markup not in text, (markup, text[:200])
    assert plain(":class:`~pluglog.X` and ``y``") == "pluglog.X and y"


def test_no_broker_is_one_line_and_exit_1(capsys):
    import socket

    from pluglog.cli.main import main

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connection refused
        assert main(["-b", f"127.0.0.1:{port}", "topics", "list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"pluglog: cannot reach 127.0.0.1:{port}")


def test_a_run_shorter_than_one_interval_still_ends_with_its_line():
    out = FakeTTY()
    now = [0.0]
    progress = Progress("consumed", stream=out, clock=lambda: now[0], interval=0.2)
    progress.add(1000, 200_000)
    now[0] = 0.1
    progress.done()
    assert "consumed 1,000 records" in out.getvalue() and "MB/s" in out.getvalue()

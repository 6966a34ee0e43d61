"""``pluglog top``: live per-topic throughput from a broker's ``/metrics``.

Reads the Prometheus page of a broker's ``--http`` listener every
``--interval`` seconds (``pluglog_messages_in_total``,
``pluglog_bytes_in_total`` and ``pluglog_bytes_out_total`` per topic, parsed
with prometheus_client's own parser) and prints each topic's rates over the
last interval, busiest first. On a terminal the screen is redrawn in place;
otherwise (a pipe, a script) one block of lines per interval is printed.
``--iterations N`` stops after N intervals. The figures are one broker's:
the partitions it leads.
"""

import argparse
import sys
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from pluglog.cli.common import CliError

_COUNTERS = {
    "pluglog_messages_in": "messages_in",
    "pluglog_bytes_in": "bytes_in",
    "pluglog_bytes_out": "bytes_out",
}
_CLEAR = "\x1b[H\x1b[2J"


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def add_parser(sub, positive):
    top = sub.add_parser("top", help="live per-topic throughput from a broker's /metrics")
    top.add_argument(
        "--url",
        help="the broker's --http listener (default http://<bootstrap host>:8081)",
    )
    top.add_argument("--interval", type=_seconds, default=2.0, help="seconds between samples")
    top.add_argument("--iterations", type=positive, help="stop after this many intervals")
    top.add_argument("--limit", type=positive, default=20, help="topics shown (busiest first)")
    top.set_defaults(run=run_top, standalone=True)


def sample(url):
    """``{topic: {"messages_in": n, "bytes_in": n, "bytes_out": n}}`` now."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10) as answer:
            text = answer.read().decode("utf-8")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(f"cannot read {url}/metrics: {reason}") from None
    found = {}
    for family in text_string_to_metric_families(text):
        key = _COUNTERS.get(family.name)
        if key is None:
            continue
        for s in family.samples:
            if s.name.endswith("_total") and "topic" in s.labels:
                found.setdefault(s.labels["topic"], {})[key] = s.value
    return found


def rates(before, after, seconds):
    """``[(topic, msgs/s, MB/s in, MB/s out)]``, busiest first."""
    rows = []
    for topic, now in after.items():
        then = before.get(topic, {})

        def per_s(key, now=now, then=then):
            return max(0.0, now.get(key, 0.0) - then.get(key, 0.0)) / seconds

        rows.append(
            (topic, per_s("messages_in"), per_s("bytes_in") / 1e6, per_s("bytes_out") / 1e6)
        )
    rows.sort(key=lambda row: (-row[1], -row[3], row[0]))
    return rows


def render(rows, limit):
    lines = [f"{'TOPIC':<40} {'MSGS/S IN':>12} {'MB/S IN':>9} {'MB/S OUT':>9}"]
    for topic, msgs, mb_in, mb_out in rows[:limit]:
        lines.append(f"{topic[:40]:<40} {msgs:>12,.0f} {mb_in:>9.2f} {mb_out:>9.2f}")
    return "\n".join(lines)


def run_top(_client, args):
    url = args.url or f"http://{args.bootstrap_server.split(',')[0].rpartition(':')[0]}:8081"
    terminal = sys.stdout.isatty()
    before, then = sample(url), time.monotonic()
    done = 0
    try:
        while args.iterations is None or done < args.iterations:
            time.sleep(args.interval)
            after, now = sample(url), time.monotonic()
            block = render(rates(before, after, now - then), args.limit)
            sys.stdout.write((_CLEAR if terminal else "") + block + "\n\n")
            sys.stdout.flush()
            before, then = after, now
            done += 1
    except KeyboardInterrupt:
        pass
    return 0

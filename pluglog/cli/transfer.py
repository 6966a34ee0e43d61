"""``pluglog produce`` and ``pluglog consume``: the console producer and consumer.

produce reads lines from stdin (``--key-separator`` splits key and value;
``--value-format avro`` turns JSON values into Avro, see
:mod:`pluglog.cli.formats`), chooses partitions with a partitioner plugin
(``murmur2`` by default, Kafka's choice for keyed records) and sends one
batch per partition per request.
consume prints records from every partition (or one), from the beginning,
the end or an offset, and with ``--exit`` stops at the end offsets it found
when it started. It never prints transaction markers (control records);
``--isolation-level read_committed`` also leaves out the records of aborted
transactions and reads only up to the last stable offset, as Kafka's
consumers do. ``--group G`` makes it a member of consumer group G that
commits its offsets (:mod:`pluglog.cli.membership`).
"""

import contextlib
import signal
import sys
import time

from pluglog.cli import formats
from pluglog.cli.common import CliError, check, error_name, partitions_of
from pluglog.cli.membership import GroupMember
from pluglog.cli.progress import Progress
from pluglog.cli.routing import CONNECTION_ERRORS, NoLeaderError, router
from pluglog.cli.sender import BACKOFF_S, RETRIABLE, RETRY_FOR_S, Sender, read_lines
from pluglog.cli.topics import end_offsets
from pluglog.client.fetcher import records_from
from pluglog.protocol.codecs import CODEC_NAMES
from pluglog.protocol.records import Record
from pluglog.serializers import BytesSerializer


def add_parsers(sub, positive):
    produce = sub.add_parser("produce", help="send stdin lines as records")
    produce.add_argument("topic")
    produce.add_argument(
        "--key-separator", default=None, help="split each line into key SEP value"
    )
    produce.add_argument("--partition", type=int, default=None)
    produce.add_argument("--partitioner", default="murmur2", help="partitioner plugin name")
    produce.add_argument("--compression", choices=sorted(CODEC_NAMES), default="none")
    produce.add_argument("--acks", type=int, choices=(-1, 0, 1), default=-1)
    produce.add_argument("--batch-size", type=positive, default=500)
    produce.add_argument(
        "--linger-ms",
        type=int,
        default=100,
        help="send records that waited this long without filling a batch (default 100)",
    )
    formats.add_arguments(produce, produce=True)
    produce.set_defaults(run=produce_lines)

    consume = sub.add_parser("consume", help="print records")
    consume.add_argument("topic")
    consume.add_argument("--partition", type=int, default=None)
    consume.add_argument(
        "--group",
        default=None,
        help="consume as a member of this consumer group and commit its offsets, "
        "so the next run continues where this one stopped",
    )
    where = consume.add_mutually_exclusive_group()
    where.add_argument("--from-beginning", action="store_true")
    where.add_argument("--offset", type=int, default=None)
    consume.add_argument("--exit", "-e", action="store_true", help="stop at the end offsets")
    consume.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed: only records of committed transactions, up to the last "
        "stable offset (default read_uncommitted)",
    )
    consume.add_argument("--max-messages", type=positive, default=None)
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--print-offset", action="store_true")
    consume.add_argument("--timeout-ms", type=int, default=None, help="stop after this idle time")
    formats.add_arguments(consume, produce=False)
    consume.set_defaults(run=consume_records)


def _partitioner(name):
    from twisted.internet.task import Clock

    from pluglog.config import BrokerConfig
    from pluglog.errors import PluginError
    from pluglog.plugins import make_plugin_manager
    from pluglog.registry import Registry

    try:
        return Registry(make_plugin_manager()).build("partitioner", name, BrokerConfig(), Clock())
    except PluginError as exc:
        raise CliError(str(exc)) from None


def produce_lines(client, args):
    partitions = partitions_of(client, args.topic, allow_create=True)
    if args.partition is not None and args.partition not in partitions:
        raise CliError(f"--partition {args.partition}: {args.topic} has partitions {partitions}")
    partitioner = None if args.partition is not None else _partitioner(args.partitioner)
    value_format = formats.ValueFormat(args)
    sender = Sender(client, args.topic, args.acks, args.compression)
    pending = {}
    count = size = 0
    number = 0
    lingering_since = None
    progress = Progress("produced")

    def send():
        nonlocal lingering_since
        sender.send(pending)
        lingering_since = None
        progress.add(count - progress.records, size - progress.bytes)

    for line in read_lines(sys.stdin, args.linger_ms / 1000):
        if line is None:  # nothing new for --linger-ms: send what waits
            if pending:
                send()
            continue
        number += 1
        line = line.rstrip(b"\r")
        key = None
        if args.key_separator is not None:
            sep = args.key_separator.encode()
            if sep in line:
                key, line = line.split(sep, 1)
        partition = args.partition
        if partition is None:
            partition = partitioner.partition(args.topic, key, len(partitions))
        line = value_format.encode(args.topic, line, number)
        records = pending.setdefault(partition, [])
        records.append(Record(key=key, value=line, timestamp=int(time.time() * 1000)))
        count += 1
        size += len(line) + (len(key) if key else 0)
        lingering_since = lingering_since or time.monotonic()
        if (
            len(records) >= args.batch_size
            or time.monotonic() - lingering_since >= args.linger_ms / 1000
        ):
            send()
    if pending:
        send()
    progress.done()
    print(f"Produced {count} records to {args.topic}.", file=sys.stderr)


def consume_records(client, args):
    if args.group is not None and (args.partition is not None or args.offset is not None):
        print(  # a usage error: exit 2 like argparse's
            "pluglog: consume: --group reads the partitions the group assigns, from its "
            "committed offsets; drop --partition/--offset",
            file=sys.stderr,
        )
        return 2
    partitions = partitions_of(client, args.topic)
    if args.partition is not None:
        partitions = [p for p in partitions if p == args.partition]
    isolation = 1 if args.isolation_level == "read_committed" else 0
    stop_at = None
    if args.exit:
        stop_at = end_offsets(client, args.topic, partitions, -1, isolation_level=isolation)
    progress = Progress("consumed")
    with _ctrl_c_stops(args):
        try:
            if args.group is None:
                if args.offset is not None:
                    positions = dict.fromkeys(partitions, args.offset)
                else:
                    start = -2 if args.from_beginning else -1
                    positions = end_offsets(
                        client, args.topic, partitions, start, isolation_level=isolation
                    )
                _consume_loop(client, args, positions, stop_at, progress)
                return
            with GroupMember(client, args.group, args.topic, args.from_beginning) as member:
                positions = member.join()
                try:
                    _consume_loop(client, args, positions, stop_at, progress, member)
                except BrokenPipeError:
                    member.leave(positions)  # what was printed counts as read
                    raise
                member.leave(positions)
        finally:
            progress.done()


@contextlib.contextmanager
def _ctrl_c_stops(args):
    """Ctrl-C (SIGINT) ends the consume loop between two fetches, so no
    request is cut in half and ``--group`` commits; a second Ctrl-C
    interrupts at once."""
    args.stop = []

    def on_sigint(_signum, _frame):
        if args.stop:
            raise KeyboardInterrupt
        args.stop.append(True)

    try:
        old = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread: Ctrl-C stays KeyboardInterrupt
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


class _Failing:
    """Fetches failing because a leader moved or died: retried with fresh
    leaders for up to RETRY_FOR_S seconds, then the command stops."""

    def __init__(self, routes):
        self.routes = routes
        self.since = None
        self.failed = False

    def round_done(self):
        if not self.failed:
            self.since = None
        self.failed = False

    def retry(self, why):
        self.failed = True
        now = time.monotonic()
        self.since = self.since or now
        if now - self.since > RETRY_FOR_S:
            raise CliError(f"no answer from the leaders for {RETRY_FOR_S:.0f}s: {why}")
        self.routes.reset()
        time.sleep(BACKOFF_S)


def _consume_loop(client, args, positions, stop_at, progress, member=None):
    """Print records from ``positions`` ({partition: next offset}, updated in
    place) on; ``member`` (a group member) may hand over new partitions."""
    out = sys.stdout.buffer
    value_format = formats.ValueFormat(args)
    failing = _Failing(router(client))
    isolation = 1 if args.isolation_level == "read_committed" else 0
    raw = BytesSerializer()
    printed = 0
    idle_since = time.monotonic()
    while not args.stop:
        if member is not None:
            moved = member.tick(positions)
            if moved is not None:
                positions.clear()
                positions.update(moved)
        active = [p for p in sorted(positions) if stop_at is None or positions[p] < stop_at[p]]
        if not active:
            if member is None or stop_at is not None:
                break
            time.sleep(0.5)  # nothing assigned: stay in the group
            continue
        fetched = []
        try:
            for leader, parts in router(client).by_leader(args.topic, active):
                fetched += leader.fetch(
                    args.topic,
                    {p: positions[p] for p in parts},
                    max_wait_ms=500,
                    partition_max_bytes=1_048_576,
                    isolation_level=isolation,
                )
        except (*CONNECTION_ERRORS, NoLeaderError) as exc:
            failing.retry(getattr(exc, "strerror", None) or exc)
            continue
        got_any = False
        size = 0
        for part in fetched:
            index = part["partition_index"]
            if part["error_code"] in RETRIABLE:  # the leader moved: ask again
                failing.retry(f"{args.topic}-{index}: {error_name(part['error_code'])}")
                continue
            check(part["error_code"], f"{args.topic}-{index}")
            # Control batches (markers) and, read_committed, the batches of
            # aborted transactions are left out; records before the position
            # too (a batch may start before the fetch offset).
            records, end = records_from(
                args.topic,
                index,
                part["records"] or b"",
                positions[index],
                raw,
                raw,
                part.get("aborted_transactions") if isolation else None,
            )
            for record in records:
                if stop_at is not None and record.offset >= stop_at[index]:
                    break
                prefix = b""
                if args.print_offset:
                    prefix += f"{index}:{record.offset}\t".encode()
                if args.print_key:
                    prefix += (record.key or b"") + b"\t"
                value = value_format.decode(args.topic, record.value)
                out.write(prefix + value + b"\n")
                size += len(value) + len(record.key or b"")
                positions[index] = record.offset + 1
                printed += 1
                got_any = True
                if args.max_messages and printed >= args.max_messages:
                    out.flush()
                    return
            # Compaction leaves batches whose last records are gone, and
            # markers and aborted batches print nothing: move past the whole
            # batches fetched, or the next fetch returns them again.
            end = max(end, positions[index])
            positions[index] = min(end, stop_at[index]) if stop_at else end
        out.flush()
        failing.round_done()
        progress.add(printed - progress.records, size)
        if got_any:
            idle_since = time.monotonic()
        elif (
            args.timeout_ms is not None
            and (time.monotonic() - idle_since) * 1000 > args.timeout_ms
        ):
            break

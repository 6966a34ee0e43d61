"""A consumer session's remembered empty answers (pluglog.broker.fetch_sessions,
``remember_empty``): a partition whose first batch did not fit what was left
of a fetch's byte limit is answered, in the session's later fetches, without
a read while nothing changed. Held to byte equality with the same fetches
answered by reading every partition, on segment files."""

import random
import shutil
import struct
import tempfile
from types import SimpleNamespace
from unittest import mock

import pytest
from twisted.internet import defer
from twisted.internet.task import Clock

from pluglog import protocol as codec
from pluglog.broker.core import Broker
from pluglog.config import BrokerConfig
from pluglog.plugins import make_plugin_manager
from pluglog.registry import Registry
from pluglog.server.handlers import fetch as fetch_handler
from pluglog.server.handlers.common import RequestContext
from pluglog.storage.segment_log import SegmentPartitionLog
from tests.unit.test_server_fastlane import batch

pytestmark = pytest.mark.unit

VERSION = 12
PARTITIONS = 24
_HEADER = struct.Struct(">qi")


def _broker(path):
    clock = Clock()
    clock.advance(1_700_000_000.5)
    config = BrokerConfig(data_dir=str(path), storage="segments", advertised_port=9092)
    broker = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
    broker.start()
    broker.create_topic("t", PARTITIONS)
    return broker


def _frame(body, version=VERSION):
    """The response bytes the encoder writes (file ranges read), session id zeroed."""
    body = dict(body, session_id=0)
    parts = codec.encode_response(codec.FETCH, version, 1, body)
    buffers = (bytes, bytearray, memoryview)
    return b"".join(bytes(p) if isinstance(p, buffers) else p.read() for p in parts)


def _next_offset(records, offset):
    """The fetch offset after the whole batches in ``records``."""
    data = records if isinstance(records, bytes | bytearray) else records.read()
    pos = 0
    while pos + 12 <= len(data):
        base, length = _HEADER.unpack_from(data, pos)
        if pos + 12 + length > len(data):
            break
        offset = base + struct.unpack_from(">i", data, pos + 23)[0] + 1
        pos += 12 + length
    return offset


class _Consumer:
    """A session consumer of topic ``t`` on one broker (as bench/raw_consumer.py)."""

    def __init__(self, broker):
        self.broker = broker
        self.ctx = RequestContext(broker, SimpleNamespace(api_version=VERSION), "peer")
        self.offsets = dict.fromkeys(range(PARTITIONS), 0)
        self.changed = set(self.offsets)
        self.max_bytes = {}
        self.session_id = 0
        self.epoch = 0
        self.results = []

    def fetch(self, max_bytes, isolation=0, forget=(), parked=None):
        """One Fetch; ``parked``: park it (MinBytes out of reach) and call
        this before the broker's clock runs out its MaxWaitMs."""
        wants = [
            {
                "partition": p,
                "current_leader_epoch": -1,
                "fetch_offset": self.offsets[p],
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": self.max_bytes.get(p, 1 << 20),
            }
            for p in sorted(self.changed - set(forget))
        ]
        body = {
            "replica_id": -1,
            "max_wait_ms": 0 if parked is None else 100,
            "min_bytes": 1 if parked is None else 1 << 30,
            "max_bytes": max_bytes,
            "isolation_level": isolation,
            "session_id": self.session_id,
            "session_epoch": self.epoch,
            "topics": [{"topic": "t", "partitions": wants}] if wants else [],
            "forgotten_topics_data": [{"topic": "t", "partitions": list(forget)}]
            if forget
            else [],
            "rack_id": "",
        }
        answer = self.send(body, parked)
        self.session_id, self.epoch = answer["session_id"], self.epoch + 1
        for p in forget:
            self.offsets.pop(p)
        self.advance(answer)
        return _frame(answer)

    def send(self, body, parked=None):
        """The answer to ``body`` (parked as :meth:`fetch` says)."""
        answer = fetch_handler.handle_fetch(self.ctx, body)
        if parked is not None:
            assert isinstance(answer, defer.Deferred)
            parked()
            self.broker.reactor.advance(0.1)
            answer.addCallback(self.results.append)
            answer = self.results.pop()
        assert answer["error_code"] == 0
        return answer

    def advance(self, answer):
        """Fetch after the whole batches ``answer`` returned; list those next."""
        self.changed = set()
        for topic in answer["responses"]:
            for part in topic["partitions"]:
                index = part["partition_index"]
                if part["records"]:
                    nxt = _next_offset(part["records"], self.offsets[index])
                    if nxt != self.offsets[index]:
                        self.offsets[index] = nxt
                        self.changed.add(index)


def _reading_everything(broker, request, first_pass=True, version=0, clock=None, memo=None):
    """The general path: every partition read, nothing remembered."""
    return _read_all(broker, request, first_pass, version, clock, memo=None)


_read_all = fetch_handler._read_all


@pytest.fixture
def brokers():
    dirs = [tempfile.mkdtemp(prefix="pluglog-fempty-") for _ in range(2)]
    made = [_broker(d) for d in dirs]
    yield made
    for broker, path in zip(made, dirs):
        broker.storage.close()
        shutil.rmtree(path, True)


def _append(brokers, index, values):
    for broker in brokers:
        part = broker.partitions[("t", index)]
        part.append(batch(values), broker.now_ms())


def _count_reads():
    calls = []
    real = SegmentPartitionLog.read

    def counted(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)

    return calls, mock.patch.object(SegmentPartitionLog, "read", counted)


def test_answers_are_byte_equal_to_reading_every_partition(tmp_path):
    reads = {}
    for seed in range(1, 7):
        made = [_broker(tmp_path / f"{seed}-{i}") for i in range(2)]
        try:
            _compare(made, seed, reads)
        finally:
            for broker in made:
                broker.storage.close()
    # The path under test was taken: fewer reads for the same answers.
    assert sum(reads["remembering"]) < sum(reads["reading"]), reads


def _compare(brokers, seed, reads):
    """40 fetches of one session on each broker (same data, same appends),
    one answered through remembered empty answers, one reading everything:
    each pair of answers byte-equal."""
    rng = random.Random(seed)
    for index in range(PARTITIONS):
        for _ in range(rng.randint(1, 6)):
            size = rng.choice((10, 60, 300))
            _append(brokers, index, [b"x" * size] * rng.randint(1, 4))
    remembering, reading = _Consumer(brokers[0]), _Consumer(brokers[1])
    for step in range(40):
        max_bytes = rng.choice((900, 1500, 2500, 1 << 20)) if step else 2500
        isolation = 1 if step in (20, 21) else 0
        forget = (rng.randrange(PARTITIONS),) if step == 30 else ()
        if step == 25:
            for c in (remembering, reading):
                c.max_bytes[3] = 200
                c.changed.add(3)
        # Some fetches park (the first, full one among them): they re-read
        # when their time is up, after appends made while they waited.
        grown = rng.sample(range(PARTITIONS), 3) if step in (0, 7, 15) else None
        answers = []
        for name, consumer, general in (
            ("remembering", remembering, False),
            ("reading", reading, True),
        ):
            parked = None
            if grown is not None:

                def parked(broker=consumer.broker, grown=grown):
                    # Appends wake the parked fetch, which re-reads (and
                    # stays parked); more appends, then its time is up.
                    for value in (b"p", b"q"):
                        for index in grown:
                            if index in remembering.offsets:
                                _append([broker], index, [value * 60])
                        broker.reactor.advance(0)

            calls, patch = _count_reads()
            with patch:
                if general:
                    with mock.patch.object(fetch_handler, "_read_all", _reading_everything):
                        answers.append(consumer.fetch(max_bytes, isolation, forget, parked))
                else:
                    answers.append(consumer.fetch(max_bytes, isolation, forget, parked))
            reads.setdefault(name, []).append(len(calls))
        assert answers[0] == answers[1], f"seed {seed}, step {step}"
        if rng.random() < 0.4:
            index = rng.choice(list(remembering.offsets))
            _append(brokers, index, [b"y" * rng.choice((10, 60, 300))])
    assert remembering.offsets == reading.offsets


def test_a_change_to_the_partition_forgets_the_empty_answer(brokers):
    broker = brokers[0]
    for index in range(PARTITIONS):
        _append([broker], index, [b"x" * 300] * 3)
    consumer = _Consumer(broker)
    consumer.fetch(2500)  # full: the first few fill it
    consumer.fetch(2500)
    session = broker.fetch_sessions.sessions[consumer.session_id]
    empty = [k for k, e in session.entries.items() if e["empty_until"] >= 0]
    assert empty, "no partition was answered from a remembered empty read"
    key = empty[-1]
    broker.partitions[key].append(batch([b"z"]), broker.now_ms())
    assert session.entries[key]["empty_until"] == -1
    assert all(session.entries[k]["empty_until"] >= 0 for k in empty[:-1])


def test_read_result_says_what_the_first_batch_needs(tmp_path):
    broker = _broker(tmp_path)
    try:
        part = broker.partitions[("t", 0)]
        part.append(batch([b"x" * 300]), broker.now_ms())
        part.append(batch([b"y"]), broker.now_ms())
        whole = part.log.read(0, 1 << 20).size
        first = part.log.read(0, 1, min_one_batch=True).size
        assert 300 < first < whole
        cut = part.log.read(0, first - 1, min_one_batch=False)
        assert (cut.size, cut.needs) == (0, first)
        assert part.log.read(0, first, min_one_batch=False).size == first
        # Left out by max_offset, not by the limit: nothing to promise.
        assert part.log.read(1, 10, max_offset=1, min_one_batch=False).needs == 0
    finally:
        broker.storage.close()

"""pluglog.console in-process: the browser's reads, the pages' bounds, decoding.

A real Broker (memory storage, a Clock) with batches appended through
``Partition.append``; the resource is rendered with twisted.web's
DummyRequest, so what is checked is the page the broker would send.
"""

import json
import shutil
import tempfile

from twisted.internet import defer
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from pluglog.console import browse
from pluglog.console.budget import RenderBudget
from pluglog.console.decode import Decoder, UnsafeSchemaError, check_avro
from pluglog.console.lag import LagSamples, chart
from pluglog.console.resource import MAX_PAGE_SIZE, ConsoleResource, PageError, number
from pluglog.console.session import COOKIE, LoginBudget, Sessions, token_ok
from pluglog.group.model import Group, OffsetAndMetadata
from pluglog.protocol.records import Record, build_batch
from pluglog.serialization.avro import AvroSerializer
from pluglog.serialization.framing import frame
from pluglog.serialization.registry import SchemaRegistry
from tests.unit.test_server_fastlane import make_broker


class Request(DummyRequest):
    """DummyRequest with the cookie calls of twisted.web's Request."""

    def __init__(self, postpath, cookies=None):
        super().__init__(postpath)
        self.received_cookies = dict(cookies or {})
        self.cookies = []

    def getCookie(self, key):  # noqa: N802 - twisted.web name
        return self.received_cookies.get(key)

    def addCookie(self, key, value, **attributes):  # noqa: N802 - twisted.web name
        self.cookies.append((key, value, attributes))

    def isSecure(self):  # noqa: N802 - twisted.web name
        return False


def render(resource, path, **args):
    request = Request([p.encode() for p in path.split("/")])
    request.args = {k.encode(): [str(v).encode()] for k, v in args.items()}
    body = resource.render(request)
    return request.responseCode or 200, body.decode("utf-8")


class BrowseTests(SynchronousTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pluglog-console-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.broker = make_broker(self.dir, "memory")
        self.part = self.broker.partition("t", 0)

    def append(self, values, compression=0, timestamp=1000):
        records = [Record(key=b"k", value=v, timestamp=timestamp) for v in values]
        self.part.append(build_batch(records, compression=compression), 0)

    def test_pages_across_batches_and_codecs(self):
        self.append([b"a", b"b", b"c"])
        self.append([b"d", b"e"], compression="zstd")
        self.append([b"f"], compression="gzip")
        records, following = self.successResultOf(browse.read_records(self.part, 1, 3))
        self.assertEqual([r["value"]["text"] for r in records], ["b", "c", "d"])
        self.assertEqual(following, 4)
        records, following = self.successResultOf(browse.read_records(self.part, following, 3))
        self.assertEqual([r["offset"] for r in records], [4, 5])
        self.assertIsNone(following)  # the end: no next page
        self.assertEqual(self.successResultOf(browse.read_records(self.part, 6, 3)), ([], None))
        self.assertEqual(
            self.successResultOf(browse.read_one(self.part, 4, 10))["value"]["text"], "e"
        )
        self.assertIsNone(self.successResultOf(browse.read_one(self.part, 6, 10)))

    def test_reads_stop_at_the_high_watermark(self):
        self.append([b"a", b"b"])
        self.part.high_watermark = 1  # b is not committed yet: a consumer would not see it
        records, following = self.successResultOf(browse.read_records(self.part, 0, 10))
        self.assertEqual([r["offset"] for r in records], [0])
        self.assertIsNone(following)
        self.assertIsNone(self.successResultOf(browse.read_one(self.part, 1, 10)))

    def test_a_page_scans_a_bounded_number_of_bytes(self):
        self.patch(browse, "MAX_SCAN_BYTES", 1)
        self.patch(browse, "READ_BYTES", 1)
        for value in (b"a", b"b", b"c"):
            self.append([value])
        records, following = self.successResultOf(browse.read_records(self.part, 0, 100))
        self.assertEqual([r["offset"] for r in records], [0])  # one batch, then it stops
        self.assertEqual(following, 1)

    def test_shown_as_text_hex_or_null(self):
        self.assertEqual(
            browse.shown("é<b>".encode(), 10),
            {"kind": "text", "text": "é<b>", "length": 5, "truncated": False},
        )
        self.assertEqual(
            browse.shown(b"\xff\x00\x10\x20", 2),
            {"kind": "hex", "text": "ff 00", "length": 4, "truncated": True},
        )
        self.assertEqual(browse.shown(None, 5)["kind"], "null")
        cut = browse.shown(b"x" * 300, 200)
        self.assertEqual((cut["text"], cut["truncated"]), ("x" * 200, True))
        self.assertEqual(browse.timestamp_text(1_700_000_000_123), "2023-11-14T22:13:20.123Z")
        self.assertEqual(browse.timestamp_text(-1), "-")

    def test_numbers_are_bounded(self):
        self.assertEqual(number(" 42 ", "n"), 42)
        for bad in ("", "-", "4.2", "0x10", "١٢", "²", "9" * 21, "-1", "9223372036854775808"):
            with self.assertRaises(PageError) as caught:
                number(bad, "the offset")
            self.assertEqual(caught.exception.status, 400, bad)


class PageTests(SynchronousTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pluglog-console-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.broker = make_broker(self.dir, "memory")
        self.resource = ConsoleResource(self.broker)

    def test_topic_list_is_filtered_and_paged(self):
        for i in range(120):
            self.broker.create_topic(f"many-{i:03d}", 1)
        status, text = render(self.resource, "topics", q="MANY-", size=50, page=3)
        self.assertEqual(status, 200)
        self.assertIn("120 topic(s) matching “MANY-”; page 3 of 3.", text)
        self.assertEqual(text.count('<tr><td><a href="/console/topics/many-'), 20)
        self.assertIn("many-100", text)
        self.assertNotIn("many-099", text)
        status, text = render(self.resource, "topics", size=10**12)
        self.assertIn(f"page size capped at {MAX_PAGE_SIZE}", text)

    def test_topic_page_shows_the_id_as_kafka_spells_it(self):
        from pluglog import topicids

        hex_id = self.broker.coordinator.topics()["t"].topic_id
        status, text = render(self.resource, "topics/t")
        self.assertEqual(status, 200)
        self.assertIn(f"Topic id <code>{topicids.to_base64(hex_id)}</code>", text)

    def test_partition_not_hosted_or_missing(self):
        status, text = render(self.resource, "topics/t/2")
        self.assertEqual(status, 404)
        self.assertIn("has no partition 2", text)
        status, text = render(self.resource, "topics/t/0/0")
        self.assertEqual(status, 404)
        self.assertIn("no record at offset 0", text)

    def test_a_failing_page_is_a_500_page_not_a_crash(self):
        def broken(_broker):
            raise RuntimeError("boom <b>")

        self.patch(ConsoleResource, "_route", lambda self, request, parts: broken(self))
        status, text = render(self.resource, "")
        self.assertEqual(status, 500)
        self.assertIn("the page failed; the broker log has the details", text)
        self.assertNotIn("boom", text)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_a_page_waiting_on_a_lookup_is_written_when_it_answers(self):
        # A lookup by time in the remote tier (tiered storage) answers later.
        lookups = []

        def waiting(self, request, parts):
            lookups.append(defer.Deferred())
            return lookups[-1]

        self.patch(ConsoleResource, "_route", waiting)
        request = Request([b"topics"])
        self.assertEqual(self.resource.render(request), NOT_DONE_YET)
        self.assertEqual(request.finished, 0)
        lookups[0].callback(("error.html", {"status": 200, "message": "answered <later>"}))
        self.assertEqual(request.finished, 1)
        self.assertIn("answered &lt;later&gt;", b"".join(request.written).decode())

        failed = Request([b"topics"])
        self.assertEqual(self.resource.render(failed), NOT_DONE_YET)
        lookups[1].errback(PageError(503, "the remote tier could not be read"))
        self.assertEqual((failed.finished, failed.responseCode), (1, 503))
        self.assertIn("the remote tier could not be read", b"".join(failed.written).decode())

        gone = Request([b"topics"])
        self.assertEqual(self.resource.render(gone), NOT_DONE_YET)
        gone.processingFailed(Failure(ConnectionDone()))  # the browser went away
        lookups[2].callback(("error.html", {"status": 200, "message": "late"}))
        self.assertEqual(gone.written, [])


class DecodeTests(SynchronousTestCase):
    """Framed values decoded through an in-process registry."""

    def setUp(self):
        self.registry = SchemaRegistry(write=lambda records: None)
        self.decode = Decoder(self.registry)

    def register(self, schema, schema_type="AVRO"):
        subject = f"s{len(self.registry.ids)}"  # one each: no compatibility checks between them
        return self.registry.register(subject, json.dumps(schema), schema_type)

    def test_avro_and_json_values(self):
        schema = {
            "type": "record",
            "name": "Order",
            "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": "string"}],
        }
        value = AvroSerializer(self.registry, schema=json.dumps(schema)).serialize(
            "t", {"id": 7, "note": "<b>n</b>"}
        )
        out = self.decode("t", value)
        self.assertEqual(out["type"], "AVRO")
        self.assertEqual(json.loads(out["text"]), {"id": 7, "note": "<b>n</b>"})
        json_id = self.register({"type": "object"}, "JSON")
        out = self.decode("t", frame(json_id, b'{"a": [1, 2]}'))
        self.assertEqual((out["type"], json.loads(out["text"])), ("JSON", {"a": [1, 2]}))
        # Not framed, or an id the registry does not know: nothing decoded.
        self.assertIsNone(self.decode("t", b"plain text"))
        self.assertIsNone(self.decode("t", frame(999, b"x")))
        self.assertIsNone(self.decode("t", None))
        # Framed with a known id but not Avro of that schema: the error, not a crash.
        out = self.decode("t", frame(out["schema_id"], b"{not json"))
        self.assertIn("does not decode", out["error"])

    def test_schemas_whose_reads_are_unbounded_are_not_used(self):
        recursive = {
            "type": "record",
            "name": "Node",
            "fields": [{"name": "next", "type": ["null", "Node"]}],
        }
        zero_items = {
            "type": "record",
            "name": "Z",
            "fields": [
                {"name": "e", "type": {"type": "record", "name": "E", "fields": []}},
                {"name": "a", "type": {"type": "array", "items": "E"}},
            ],
        }
        for schema, reason in ((recursive, "recursive type 'Node'"), (zero_items, "an array")):
            schema_id = self.register(schema)
            # A block count of 2**62 items that take no bytes: fastavro would
            # loop for ever, so the value is not read at all.
            value = frame(schema_id, b"\x02" * 3 + b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f")
            out = self.decode("t", value)
            self.assertIn(reason, out["error"])
        safe = {"type": "array", "items": {"type": "map", "values": "int"}}
        check_avro(json.dumps(safe))
        with self.assertRaises(UnsafeSchemaError):
            check_avro(json.dumps({"type": "map", "values": "null"}))


class SessionTests(SynchronousTestCase):
    """Sessions: cookie, CSRF token, expiry, bound; the login budget."""

    def setUp(self):
        self.now = [1000.0]
        self.sessions = Sessions(lambda: self.now[0], idle=60, limit=3)

    def request_with(self, found):
        return Request([b""], {COOKIE: found.sid.encode()} if found else None)

    def test_cookie_token_and_expiry(self):
        request = Request([b""])
        found = self.sessions.start(request, "User:alice", "alice")
        ((key, value, attrs),) = request.cookies
        self.assertEqual((key, value), (COOKIE, found.sid.encode()))
        self.assertEqual(
            attrs, {"path": b"/console/", "httpOnly": True, "secure": False, "sameSite": "strict"}
        )
        self.assertIs(self.sessions.get(self.request_with(found)), found)
        self.assertTrue(token_ok(found, found.csrf))
        for wrong in ("", "x", found.csrf[:-1], found.sid):
            self.assertFalse(token_ok(found, wrong), wrong)
        self.assertFalse(token_ok(None, found.csrf))
        self.now[0] += 59  # used within the idle time: kept, and touched
        self.assertIs(self.sessions.get(self.request_with(found)), found)
        self.now[0] += 61
        self.assertIsNone(self.sessions.get(self.request_with(found)))
        self.assertEqual(len(self.sessions), 0)

    def test_bounded_and_a_login_replaces_the_session(self):
        login = self.sessions.start(Request([b""]), "User:carol", "carol")
        first = self.sessions.start(Request([b""]))
        made = [self.sessions.start(Request([b""])) for _ in range(3)]
        self.assertEqual(len(self.sessions), 4)  # the least recently used anonymous one went
        self.assertIsNone(self.sessions.get(self.request_with(first)))
        self.assertIs(self.sessions.get(self.request_with(login)), login)  # not pushed out
        request = self.request_with(made[-1])
        fresh = self.sessions.start(request, "User:bob", "bob")
        self.assertNotEqual(fresh.sid, made[-1].sid)  # no fixation
        self.assertIsNone(self.sessions.get(self.request_with(made[-1])))
        self.assertEqual(self.sessions.get(self.request_with(fresh)).principal, "User:bob")
        self.assertIsNone(self.sessions.get(Request([b""], {COOKIE: b"\xff"})))

    def test_login_budget(self):
        budget = LoginBudget(lambda: self.now[0], rate=2.0, burst=3)
        self.assertEqual([budget.take() for _ in range(4)], [True, True, True, False])
        self.now[0] += 0.5  # one more token
        self.assertEqual([budget.take(), budget.take()], [True, False])


class LagTests(SynchronousTestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="pluglog-console-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.broker = make_broker(self.dir, "memory")
        part = self.broker.partition("t", 0)
        part.append(build_batch([Record(key=None, value=b"v")] * 10), 0)
        self.groups = self.broker.group_coordinator.groups

    def commit(self, group_id, offset):
        group = self.groups.get(group_id) or Group(group_id, 0)
        self.groups[group_id] = group
        group.offsets[("t", 0)] = OffsetAndMetadata(offset, -1, "", 0, -1)

    def test_rings_are_bounded_and_follow_the_groups(self):
        samples = LagSamples(self.broker, keep=3, max_groups=2)
        self.commit("a", 4)
        samples.sample()
        self.commit("a", 7)
        self.broker.reactor.advance(10)
        samples.sample()
        self.assertEqual([lag for _t, lag in samples.of("a")], [6, 3])
        first, second = (t for t, _lag in samples.of("a"))
        self.assertEqual(second - first, 10_000)
        for _ in range(5):
            samples.sample()
        self.assertEqual(len(samples.of("a")), 3)
        self.commit("b", 0)
        self.commit("c", 0)  # over max_groups: not sampled
        samples.sample()
        self.assertEqual(set(samples.rings), {"a", "b"})
        del self.groups["a"]
        samples.sample()
        self.assertEqual(set(samples.rings), {"b", "c"})
        self.assertEqual(samples.of("a"), [])

    def test_chart(self):
        self.assertIsNone(chart([(0, 5)]))
        drawn = chart([(1000, 0), (2000, 10), (3000, 5)])
        self.assertEqual(drawn["points"], "4.0,156.0 300.0,4.0 596.0,80.0")
        self.assertEqual((drawn["max"], drawn["latest"], drawn["minimum"]), (10, 5, 0))
        flat = chart([(1000, 0), (1000, 0)])  # no time span, no lag: no division by zero
        self.assertEqual(flat["points"], "4.0,156.0 4.0,156.0")


class RenderBudgetTests(SynchronousTestCase):
    def test_a_share_of_the_reactor_with_a_burst(self):
        clock = Clock()
        budget = RenderBudget(clock.seconds, share=0.2, burst=1.0)
        budget.spend(0.9)  # one slow page (templates compiled) is within the burst
        self.assertTrue(budget.allow())
        budget.spend(0.2)  # 0.1 s overdrawn: refused until it is paid back
        self.assertFalse(budget.allow())
        self.assertEqual(budget.refused, 1)
        clock.advance(0.4)  # refills 0.08 s: still short
        self.assertFalse(budget.allow())
        clock.advance(0.2)
        self.assertTrue(budget.allow())
        clock.advance(3600)  # never more than the burst
        budget.spend(1.0)
        self.assertFalse(budget.allow())

    def test_the_resource_answers_503_unrendered_past_its_share(self):
        dir_ = tempfile.mkdtemp(prefix="pluglog-console-")
        self.addCleanup(shutil.rmtree, dir_, True)
        console = ConsoleResource(make_broker(dir_, "memory"))
        status, _body = render(console, "topics")
        self.assertEqual(status, 200)
        console.budget.spend(2.0)
        request = Request([b"topics"])
        body = console.render(request)
        self.assertEqual(request.responseCode, 503)
        self.assertEqual(request.responseHeaders.getRawHeaders(b"retry-after"), [b"1"])
        self.assertIn(b"the console is busy", body)
        console.broker.reactor.advance(10)
        self.assertEqual(render(console, "topics")[0], 200)

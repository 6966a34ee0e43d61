"""Forwarding registry writes to the leader (pluglog.web.forward) over real loopback
HTTP, and the resource's routing of reads on a broker that hosts no replica."""

import io
import json

from twisted.internet import defer, reactor
from twisted.trial import unittest
from twisted.web import resource, server
from twisted.web.test.requesthelper import DummyRequest

from pluglog.coordination.state import PartitionState
from pluglog.serialization.registry import RegistryError
from pluglog.serialization.store import SCHEMAS_TOPIC
from pluglog.web import forward as forwarding
from pluglog.web.forward import FORWARDED_HEADER, forward
from pluglog.web.registry import MAX_BODY_BYTES, RegistryResource


class Echo(resource.Resource):
    """A stand-in leader: answers what it received, or a page that is not JSON."""

    isLeaf = True  # noqa: N815 - twisted.web name

    def render(self, request):
        if request.uri.startswith(b"/html"):
            return b"<html>oops</html>"
        request.setResponseCode(201)
        return json.dumps(
            {
                "method": request.method.decode(),
                "uri": request.uri.decode(),
                "body": request.content.read().decode(),
                "by": (request.getHeader(FORWARDED_HEADER) or b"").decode(),
            }
        ).encode()


class Incoming:
    """The parts of a twisted.web Request that forward() reads."""

    def __init__(self, method, uri):
        self.method = method
        self.uri = uri

    def getHeader(self, name):  # noqa: N802 - twisted.web name
        return b"application/vnd.schemaregistry.v1+json" if name == b"content-type" else None


class ForwardOverLoopback(unittest.TestCase):
    timeout = 30

    def setUp(self):
        self.port = reactor.listenTCP(0, server.Site(Echo()), interface="127.0.0.1")
        self.addCleanup(self.port.stopListening)
        self.url = f"http://127.0.0.1:{self.port.getHost().port}"

    @defer.inlineCallbacks
    def test_passes_method_path_query_and_body_and_answer_through(self):
        incoming = Incoming(b"POST", b"/subjects/s/versions?normalize=false")
        status, body = yield forward(reactor, self.url, incoming, b'{"schema":"1"}', 2, 5.0)
        self.assertEqual(status, 201)
        self.assertEqual(
            body,
            {
                "method": "POST",
                "uri": "/subjects/s/versions?normalize=false",
                "body": '{"schema":"1"}',
                "by": "2",
            },
        )

    @defer.inlineCallbacks
    def test_unreachable_leader_is_50003(self):
        port = self.port.getHost().port
        yield self.port.stopListening()
        with self.assertRaises(RegistryError) as info:
            yield forward(
                reactor, f"http://127.0.0.1:{port}", Incoming(b"DELETE", b"/x"), b"", 2, 5
            )
        self.assertEqual((info.exception.status, info.exception.code), (500, 50003))
        self.assertIn(str(port), info.exception.message)

    @defer.inlineCallbacks
    def test_an_answer_that_is_not_json_is_50003(self):
        with self.assertRaises(RegistryError) as info:
            yield forward(reactor, self.url, Incoming(b"PUT", b"/html"), b"{}", 2, 5.0)
        self.assertEqual(info.exception.code, 50003)


def test_reads_are_forwarded_where_no_replica_is_hosted(tmp_path, monkeypatch):
    from twisted.internet.task import Clock

    from pluglog.serialization.replicated import RegistryNode
    from tests.unit.test_group_coordinator import make_broker, result_of

    clock = Clock()
    broker = make_broker(tmp_path, clock)
    node = RegistryNode(broker, timeout_s=1.0)
    node.start()
    assert result_of(node.route()) is None  # creates _schemas, led here
    leaf = RegistryResource(node.registry, node)

    def get(path):
        request = DummyRequest([p.encode() for p in path[1:]])
        request.prepath = [path[0].encode()]
        request.method = b"GET"
        request.content = io.BytesIO(b"")
        data = leaf.render(request)
        if data != server.NOT_DONE_YET:
            return json.loads(data)  # answered at once, locally
        clock.advance(0.1)
        assert request.finished
        return json.loads(b"".join(request.written))

    calls = []

    def fake_forward(_reactor, url, request, body, node_id, timeout_s):
        calls.append((url, node_id))
        return defer.succeed((200, ["from-the-leader"]))

    monkeypatch.setattr(forwarding, "forward", fake_forward)
    # Hosting a replica: reads are local.
    assert get(["subjects"]) == [] and calls == []
    # Reassigned away (a fourth broker): reads go to the leader.
    broker.partitions.pop((SCHEMAS_TOPIC, 0))
    broker.coordinator.partition_state = lambda topic, index: PartitionState(7, 3, (7,))
    broker.coordinator.http_urls = lambda: {7: "http://b7:8081"}
    assert get(["subjects"]) == ["from-the-leader"]
    assert calls == [("http://b7:8081", broker.node_id)]
    # An oversized body is refused here, not shipped to the leader.
    request = DummyRequest([b"s", b"versions"])
    request.prepath = [b"subjects"]
    request.method = b"POST"
    request.content = io.BytesIO(b"x" * (MAX_BODY_BYTES + 1))
    answer = json.loads(leaf.render(request))
    assert answer["error_code"] == 42201 and request.responseCode == 422
    assert len(calls) == 1

"""Passing one registry request on to the registry leader over HTTP.

The method, path with query, body and content type go to the leader's
``--http`` URL unchanged (as Confluent's followers forward to their leader);
its status and JSON body come back unchanged. The request carries
:data:`FORWARDED_HEADER` so the leader never forwards it again. Any failure
(connection refused, a timeout, a body that is not JSON) is Confluent's
50003.
"""

import io
import json

from twisted.internet import defer, protocol
from twisted.web.client import Agent, FileBodyProducer, ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers

from pluglog.serialization.replicated import forwarding_error

FORWARDED_HEADER = b"x-pluglog-forwarded-by"
#: Registry answers are small JSON (a schema at most); anything larger is
#: not a registry talking.
MAX_ANSWER_BYTES = 4 << 20


class _Collect(protocol.Protocol):
    """Gathers a response body (at most MAX_ANSWER_BYTES) into ``finished``."""

    def __init__(self, finished):
        self.finished = finished
        self.parts = []
        self.size = 0

    def dataReceived(self, data):  # noqa: N802 - twisted name
        self.size += len(data)
        if self.size > MAX_ANSWER_BYTES and not self.finished.called:
            self.transport.stopProducing()
            self.finished.errback(ValueError(f"answer larger than {MAX_ANSWER_BYTES} bytes"))
        self.parts.append(data)

    def connectionLost(self, reason):  # noqa: N802 - twisted name
        if self.finished.called:
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self.finished.callback(b"".join(self.parts))
        else:
            self.finished.errback(reason)


@defer.inlineCallbacks
def forward(reactor, url, request, body, node_id, timeout_s):
    """Send ``request`` (a twisted.web Request whose body is ``body``) to
    ``url``; fires with ``(status, decoded JSON body)``."""
    target = url.rstrip("/").encode() + request.uri
    headers = Headers(
        {
            b"content-type": [request.getHeader(b"content-type") or b"application/json"],
            b"accept": [b"application/json"],
            FORWARDED_HEADER: [str(node_id).encode()],
        }
    )
    producer = FileBodyProducer(io.BytesIO(body)) if body else None
    agent = Agent(reactor, connectTimeout=timeout_s)
    try:
        d = agent.request(request.method, target, headers, producer)
        d.addTimeout(timeout_s, reactor)
        response = yield d
        d = defer.Deferred()
        response.deliverBody(_Collect(d))
        d.addTimeout(timeout_s, reactor)
        data = yield d
    except Exception as exc:  # noqa: BLE001 - every failure is the same 50003
        raise forwarding_error(f"{url}: {exc.__class__.__name__}: {exc}") from None
    try:
        answer = json.loads(data)
    except ValueError:
        raise forwarding_error(f"{url} answered {response.code} without a JSON body") from None
    return response.code, answer

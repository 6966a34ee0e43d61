"""The HTTP listener service and the root resource plugins add children to.

Off unless ``--http STRPORT`` is given. Started after the Kafka listener and
the plugin services; it calls ``pluglog_add_web_resources(broker, root)`` on
every plugin, waits for the Deferreds they may return (the schema registry
loads ``_schemas`` first) and only then listens, so a client never meets a
half-loaded resource. Tracebacks are never shown: unexpected errors become
a JSON body with status 500. ``/metrics`` (:mod:`pluglog.web.metrics`) is
served unless ``metrics.enabled`` is false; the read-only console
(:mod:`pluglog.console`) is served at ``/console/``.
"""

import json

from twisted.application import service
from twisted.internet import defer, endpoints
from twisted.logger import Logger
from twisted.web import resource, server

from pluglog.console.resource import ConsoleResource
from pluglog.web.metrics import MetricsResource

log = Logger()


def json_response(request, status, body):
    """Write ``body`` as JSON with ``status``; returns the bytes to render."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/vnd.schemaregistry.v1+json")
    return json.dumps(body).encode("utf-8")


class JsonNotFound(resource.Resource):
    """404 with a JSON body for paths no plugin serves."""

    isLeaf = True  # noqa: N815 - twisted.web name

    def render(self, request):
        return json_response(request, 404, {"error_code": 404, "message": "HTTP 404 Not Found"})


class Root(resource.Resource):
    """``/``: an empty JSON object (Confluent's registry answers ``{}``)."""

    def getChild(self, path, request):
        if path == b"":
            return self
        return JsonNotFound()

    def render_GET(self, request):
        return json_response(request, 200, {})


class _Site(server.Site):
    """twisted.web's Site without an access-log line per ``/metrics`` scrape
    (one every scrape interval, from every Prometheus server)."""

    def log(self, request):
        if request.path != b"/metrics":
            super().log(request)


class WebService(service.Service):
    """Listens on ``strport`` with a twisted.web Site rooted at :class:`Root`."""

    def __init__(self, broker, strport, hook, reactor, metrics_registry=None):
        self.broker = broker
        self.strport = strport
        self.hook = hook
        self.reactor = reactor
        self.root = Root()
        if metrics_registry is not None:
            self.root.putChild(b"metrics", MetricsResource(metrics_registry))
        self.root.putChild(b"console", ConsoleResource(broker))
        self.port = None

    @defer.inlineCallbacks
    def start(self):
        """Let plugins add resources, then listen; returns the Deferred."""
        results = self.hook.pluglog_add_web_resources(broker=self.broker, root=self.root)
        yield defer.gatherResults(
            [defer.maybeDeferred(lambda r=r: r) for r in results if r is not None],
            consumeErrors=True,
        )
        site = _Site(self.root)
        site.displayTracebacks = False
        endpoint = endpoints.serverFromString(self.reactor, self.strport)
        self.port = yield endpoint.listen(site)
        log.info(
            "pluglog HTTP listener on {strport} (port {port})",
            strport=self.strport,
            port=self.port.getHost().port,
        )

    def stopService(self):
        super().stopService()
        if self.port is not None:
            return self.port.stopListening()
        return None

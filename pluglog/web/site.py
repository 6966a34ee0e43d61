"""The HTTP listener service and the root resource plugins add children to.

Off unless ``--http STRPORT`` is given. Started after the Kafka listener and
the plugin services; it calls ``pluglog_add_web_resources(broker, root)`` on
every plugin, waits for the Deferreds they may return (the schema registry
loads ``_schemas`` first) and only then listens, so a client never meets a
half-loaded resource. Tracebacks are never shown: unexpected errors become
a JSON body with status 500. ``/metrics`` (:mod:`pluglog.web.metrics`) is
served unless ``metrics.enabled`` is false; the console
(:mod:`pluglog.console`) is served at ``/console/``, read-only unless
``console.read.only`` is false. Here the console gets what it may not
import: its actions run through the server (:mod:`pluglog.web.console_ops`),
its login checks the broker's SCRAM credential store, and a reactor timer
samples group lag for its chart.
"""

import json

from twisted.application import service
from twisted.internet import defer, endpoints, task
from twisted.logger import Logger
from twisted.web import resource, server

from pluglog.console.lag import LagSamples
from pluglog.console.resource import ConsoleResource
from pluglog.security.sasl import verify_password
from pluglog.web.console_ops import ConsoleOps
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


def security_on(broker):
    """Whether the broker has SASL listeners or an authorizer: then the
    console asks for a login."""
    security = getattr(broker, "security", None)
    if security is None:
        return False
    return security.authorizer is not None or any(item.sasl for item in security.listeners)


def make_console(broker, lag):
    """The ``/console/`` resource with its actions, login and lag samples."""
    verify = None
    if security_on(broker):
        store = broker.security.store

        def verify(user, password):
            verify_password(store, user, password)
            return "User:" + user

    read_only = broker.config.console_read_only
    ops = None if read_only else ConsoleOps(broker)
    return ConsoleResource(broker, read_only=read_only, ops=ops, verify_login=verify, lag=lag)


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
        self.lag = LagSamples(broker)
        self.console = make_console(broker, self.lag)
        self.root.putChild(b"console", self.console)
        self._sampler = None
        self.port = None

    @defer.inlineCallbacks
    def start(self):
        """Let plugins add resources, then listen; returns the Deferred."""
        results = self.hook.pluglog_add_web_resources(broker=self.broker, root=self.root)
        yield defer.gatherResults(
            [defer.maybeDeferred(lambda r=r: r) for r in results if r is not None],
            consumeErrors=True,
        )
        interval = self.broker.config.console_lag_sample_interval_ms / 1000.0
        self._sampler = task.LoopingCall(self._sample)
        self._sampler.clock = self.reactor
        self._sampler.start(interval, now=True)
        site = _Site(self.root)
        site.displayTracebacks = False
        endpoint = endpoints.serverFromString(self.reactor, self.strport)
        self.port = yield endpoint.listen(site)
        log.info(
            "pluglog HTTP listener on {strport} (port {port})",
            strport=self.strport,
            port=self.port.getHost().port,
        )

    def _sample(self):
        try:
            self.lag.sample()
        except Exception:  # a bug must not stop the timer, nor reach the reactor
            log.failure("sampling group lag for the console failed")

    def stopService(self):
        super().stopService()
        if self._sampler is not None and self._sampler.running:
            self._sampler.stop()
        if self.port is not None:
            return self.port.stopListening()
        return None

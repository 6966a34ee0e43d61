"""``/metrics``: the broker's Prometheus registry in the exposition format.

prometheus_client writes the text (or OpenMetrics, when the scraper asks for
it in ``Accept``); the collectors run here, on the reactor thread, so a
scrape sees one consistent moment of the broker. A collector that fails is
logged and the scrape answers 500 rather than a partial page.
"""

from prometheus_client.exposition import choose_encoder
from twisted.logger import Logger
from twisted.web import resource

log = Logger()


class MetricsResource(resource.Resource):
    """Renders ``registry`` on GET."""

    isLeaf = True  # noqa: N815 - twisted.web name

    def __init__(self, registry):
        super().__init__()
        self.registry = registry

    def render_GET(self, request):
        accept = request.getHeader(b"accept")
        encoder, content_type = choose_encoder(accept.decode("latin-1") if accept else None)
        try:
            body = encoder(self.registry)
        except Exception:
            log.failure("collecting /metrics failed")
            request.setResponseCode(500)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"collecting metrics failed; the broker log has the traceback\n"
        request.setHeader(b"content-type", content_type.encode("ascii"))
        return body

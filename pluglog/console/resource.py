"""``/console/``: the console's twisted.web resource, its routes and its pages.

Templates are Jinja2 with autoescape on for every template, so a topic
name, group id, key, value or header that holds HTML is shown as text: a
template has to opt out explicitly (none does). Jinja2 was chosen over
twisted.web.template because the pages are mostly tables and loops, which
read as HTML templates with inheritance (``base.html``) far more plainly
than as Python tag trees, and because it renders synchronously, in one
call, on the reactor thread. There is no front-end build: one stylesheet
and one small script (``static/``), served from the package.

Routes (GET)::

    /console/                                overview: brokers, controller, racks, health
    /console/topics?q=&page=&size=           topics, filtered and paginated
    /console/topics/T                        partitions of T and its configs
    /console/topics/T/P?offset=&limit=       message browser of partition P
    /console/topics/T/P?time=                ... from the first record at or after a time
                                             (ListOffsets' answer: may wait on the remote tier)
    /console/topics/T/P/O                    the record at offset O
    /console/groups, /console/groups/G       consumer groups, one group's offsets, lag, chart
    /console/schemas, /console/schemas/S     registry subjects, one subject's versions
    /console/login, /console/actions/NAME    the login form; an action's confirmation

and the forms' POSTs (login, logout, actions: :mod:`pluglog.console.forms`).
When the broker has security (SASL listeners or an authorizer) every page
but the login form and the static files needs a logged-in session; a
read-only console (``console.read.only``, the default) answers any action
with a 403 page saying so.

Every parameter is parsed and bounded here: a malformed number is a 400
page, an unknown topic, partition, offset, group or subject a 404 page,
and page sizes are capped (:data:`MAX_PAGE_SIZE`). An unexpected error is
logged and answered with a 500 page; it never reaches twisted.web's
traceback page or stops the broker. Console requests may take a fifth of
the reactor's time on average (:mod:`pluglog.console.budget`); past it they
are answered ``503`` unrendered, so a flood cannot slow the Kafka listener.
"""

import os
import time
import urllib.parse

import jinja2
from twisted.internet import defer
from twisted.logger import Logger
from twisted.web import resource

from pluglog.console import browse, forms, lag, state
from pluglog.console.budget import RenderBudget
from pluglog.console.decode import Decoder
from pluglog.console.params import PageError, number, param, timestamp
from pluglog.console.session import LoginBudget, Sessions

log = Logger()

#: Rows per page of the topics list and records per page of the browser.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
#: Characters of a key or value shown in the browser's list, and on a record's page.
LIST_SHOWN = 200
RECORD_SHOWN = 256 * 1024
_HERE = os.path.dirname(os.path.abspath(__file__))
STATIC = {
    b"console.css": b"text/css; charset=utf-8",
    b"console.js": b"text/javascript; charset=utf-8",
}
BUSY = b"503: the console is busy (too many requests this second); retry in a second\n"
SECURITY_HEADERS = {
    b"content-security-policy": (
        b"default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
        b"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
    b"cache-control": b"no-store",
}


def _segment(value):
    """A path segment for ``value``: every reserved character quoted, ``/`` too."""
    return urllib.parse.quote(str(value), safe="")


def _size(count):
    count = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return str(count)


def make_environment():
    """The Jinja2 environment: package templates, autoescape on, strict undefined."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(os.path.join(_HERE, "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["seg"] = _segment
    env.filters["size"] = _size
    env.filters["time"] = browse.timestamp_text
    return env


def _page_size(request, name):
    """The requested page size, capped at MAX_PAGE_SIZE; returns (size, note)."""
    text = param(request, name)
    if text is None:
        return DEFAULT_PAGE_SIZE, None
    size = number(text, f"the page size ({name})", low=1)
    if size > MAX_PAGE_SIZE:
        return MAX_PAGE_SIZE, f"page size capped at {MAX_PAGE_SIZE} (asked for {size})"
    return size, None


class ConsoleResource(resource.Resource):
    """Everything under ``/console``; a leaf that routes on the rest of the path.

    ``read_only`` turns the actions off; ``ops`` runs them (the web layer's
    :class:`pluglog.web.console_ops.ConsoleOps`); ``verify_login(user,
    password) -> principal`` checks a login against the broker's credential
    store, None when the broker has no security (then nobody logs in);
    ``lag`` is the :class:`~pluglog.console.lag.LagSamples` the group page
    charts (None: no chart)."""

    isLeaf = True  # noqa: N815 - twisted.web name

    def __init__(self, broker, read_only=True, ops=None, verify_login=None, lag=None):
        super().__init__()
        self.broker = broker
        self.env = make_environment()
        self.read_only = read_only or ops is None
        self.ops = ops
        self.verify_login = verify_login
        self.lag = lag
        seconds = broker.reactor.seconds
        self.sessions = Sessions(seconds)
        self.logins = LoginBudget(seconds)
        self.budget = RenderBudget(seconds)

    # -- twisted.web -------------------------------------------------------------

    def render(self, request):
        for name, value in SECURITY_HEADERS.items():
            request.setHeader(name, value)
        if not self.budget.allow():
            # Over its share of the reactor's time: refuse without
            # rendering anything, so a flood cannot delay Kafka requests.
            request.setResponseCode(503)
            request.setHeader(b"retry-after", b"1")
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return BUSY
        started = time.perf_counter()
        try:
            return self._render(request)
        finally:
            self.budget.spend(time.perf_counter() - started)

    def _render(self, request):
        if request.method in (b"GET", b"HEAD"):
            return self._get(request)
        if request.method == b"POST":
            return self._post(request)
        request.setHeader(b"allow", b"GET, HEAD" if self.read_only else b"GET, HEAD, POST")
        return self.error(
            request,
            PageError(405, "the console answers GET and HEAD, and POST for its forms only"),
        )

    def _parts(self, request):
        try:
            parts = [p.decode("utf-8") for p in request.postpath]
        except UnicodeDecodeError:
            raise PageError(400, "the path is not UTF-8") from None
        if parts[-1] == "" and len(parts) > 1:
            parts = parts[:-1]
        return parts

    def _logged_in(self, request):
        """The request's session when it may see pages (always without security)."""
        found = self.sessions.get(request)
        if self.verify_login is None:
            return found, True
        return found, found is not None and found.user is not None

    def _post(self, request):
        def run():
            parts = self._parts(request)
            if parts == ["login"]:
                return forms.login_post(self, request)
            if parts == ["logout"]:
                return forms.logout_post(self, request)
            if self.read_only:
                raise PageError(403, forms.READ_ONLY)
            if parts[0] != "actions":
                request.setHeader(b"allow", b"GET, HEAD")
                raise PageError(405, "this page takes no forms: it answers GET and HEAD")
            return forms.run_action(self, request, parts)

        return forms.guarded(self, request, run)

    def _get(self, request):
        if not request.postpath:  # /console: the pages' relative links need the slash
            request.redirect(b"/console/")
            return b""
        started = time.perf_counter()

        def run():
            parts = self._parts(request)
            if parts[0] == "static" and len(parts) == 2:
                return self._static(request, parts[1])
            if parts == ["login"]:
                return forms.login_page(self, request)
            _found, allowed = self._logged_in(request)
            if not allowed:
                return forms.login_redirect(request)
            if parts[0] == "actions":
                return forms.confirm_page(self, request, parts)
            routed = self._route(request, parts)
            section = parts[0] or "overview"
            if isinstance(routed, defer.Deferred):  # records, maybe from the remote tier
                return forms.later(
                    self,
                    request,
                    routed,
                    lambda r: self.page(request, r[0], section=section, **r[1]),
                )
            template, values = routed
            return self.page(request, template, section=section, **values)

        body = forms.guarded(self, request, run)
        # How long the broker spent on the page (reading its state and
        # rendering), for browsers' developer tools and the tests.
        spent = (time.perf_counter() - started) * 1000
        request.setHeader(b"server-timing", f"render;dur={spent:.1f}".encode("ascii"))
        return body

    def page(self, request, template, **values):
        """``template`` rendered with the viewer's login and mode, as bytes."""
        found = self.sessions.get(request)
        viewer = {
            "user": found.user if found is not None else None,
            "csrf": found.csrf if found is not None else "",
            "actions": not self.read_only,
        }
        body = self.env.get_template(template).render(viewer=viewer, **values)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return body.encode("utf-8")

    def error(self, request, exc):
        request.setResponseCode(exc.status)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        try:
            return self.page(
                request, "error.html", section="", status=exc.status, message=exc.message
            )
        except Exception:
            log.failure("console error page failed")
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return f"{exc.status}: console error\n".encode()

    def _static(self, request, name):
        key = name.encode("utf-8")
        if key not in STATIC:
            raise PageError(404, f"no static file {name!r}")
        with open(os.path.join(_HERE, "static", name), "rb") as f:
            body = f.read()
        request.setHeader(b"content-type", STATIC[key])
        request.setHeader(b"cache-control", b"max-age=300")
        return body

    # -- routes --------------------------------------------------------------------

    def _route(self, request, parts):
        head, rest = parts[0], parts[1:]
        if head == "" and not rest:
            return "overview.html", {"o": state.overview(self.broker)}
        if head == "topics":
            if not rest:
                return self._topics(request)
            if len(rest) == 1:
                return "topic.html", {"t": state.topic(self.broker, rest[0])}
            index = number(rest[1], "the partition", high=2**31 - 1)
            if len(rest) == 2:
                return self._partition(request, rest[0], index)
            if len(rest) == 3:
                return self._record(rest[0], index, number(rest[2], "the offset"))
        elif head == "groups":
            if not rest:
                return "groups.html", {"groups": state.groups(self.broker)}
            if len(rest) == 1:
                samples = self.lag.of(rest[0]) if self.lag is not None else []
                return "group.html", {
                    "g": state.group(self.broker, rest[0]),
                    "chart": lag.chart(samples),
                    "sampling": self.lag is not None,
                }
        elif head == "schemas":
            if not rest:
                return "schemas.html", {"subjects": state.subjects(self.broker)}
            if len(rest) == 1:
                return "subject.html", {
                    "subject": rest[0],
                    "versions": state.subject(self.broker, rest[0]),
                }
        raise PageError(404, "the console has no such page")

    def _topics(self, request):
        query = (param(request, "q", "") or "").strip()
        size, note = _page_size(request, "size")
        page = number(param(request, "page", "1"), "the page number", low=1, high=10**9)
        names = state.topic_names(self.broker, query)
        pages = max(1, -(-len(names) // size))
        start = (page - 1) * size
        rows = state.topic_rows(self.broker, names[start : start + size])
        return "topics.html", {
            "rows": rows,
            "query": query,
            "page": page,
            "pages": pages,
            "size": size,
            "total": len(names),
            "note": note,
        }

    def _partition(self, request, name, index):
        part = state.local_partition(self.broker, name, index)
        limit, note = _page_size(request, "limit")
        at = param(request, "time")
        offset_text = param(request, "offset")
        if at is not None and at.strip() and offset_text is not None and offset_text.strip():
            raise PageError(400, "give an offset or a time, not both")
        if at is not None and at.strip():
            # ListOffsets' exact lookup, which may wait on the remote tier.
            found = browse.offset_at_time(part, timestamp(at))
            return found.addCallback(lambda offset: self._records(part, offset, limit, note, at))
        if offset_text is None or not offset_text.strip():
            # The first readable offset: under tiered storage the remote tier's.
            earliest = part.earliest_offset
            offset_text = str(part.log.log_start_offset if earliest is None else earliest)
        return self._records(part, number(offset_text, "the offset"), limit, note, at)

    def _records(self, part, offset, limit, note, at):
        decoder = Decoder(self.broker.schema_registry)
        # Offsets below the local log start come from the remote tier
        # (tiered storage), which may answer later: a Deferred either way.
        d = browse.read_records(part, offset, limit, LIST_SHOWN, decoder, self.broker.reactor)

        def page(found):
            records, following = found
            earliest = part.earliest_offset
            local_start = part.log.log_start_offset
            return "partition.html", {
                "topic": part.topic,
                "partition": part.index,
                "offset": offset,
                "time": at or "",
                "limit": limit,
                "note": note,
                "records": records,
                "next_offset": following,
                "log_start_offset": local_start if earliest is None else earliest,
                "local_start_offset": local_start,
                "high_watermark": part.high_watermark,
                "log_end_offset": part.log.log_end_offset,
                "shown": LIST_SHOWN,
            }

        return d.addCallback(page)

    def _record(self, name, index, offset):
        part = state.local_partition(self.broker, name, index)
        decoder = Decoder(self.broker.schema_registry)
        d = browse.read_one(part, offset, RECORD_SHOWN, decoder, self.broker.reactor)

        def page(record):
            if record is None:
                earliest = part.earliest_offset
                start = part.log.log_start_offset if earliest is None else earliest
                raise PageError(
                    404,
                    f"partition {index} of {name!r} has no record at offset {offset} "
                    f"(readable: {start} to {part.high_watermark - 1})",
                )
            return "record.html", {
                "topic": name,
                "partition": index,
                "r": record,
                "shown": RECORD_SHOWN,
            }

        return d.addCallback(page)

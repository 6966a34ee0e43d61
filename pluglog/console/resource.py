"""``/console/``: the console's twisted.web resource, its routes and its pages.

Templates are Jinja2 with autoescape on for every template, so a topic
name, group id, key, value or header that holds HTML is shown as text: a
template has to opt out explicitly (none does). Jinja2 was chosen over
twisted.web.template because the pages are mostly tables and loops, which
read as HTML templates with inheritance (``base.html``) far more plainly
than as Python tag trees, and because it renders synchronously, in one
call, on the reactor thread. There is no front-end build: one stylesheet
and one small script (``static/``), served from the package.

Routes (all GET, read-only)::

    /console/                                overview: brokers, controller, racks, health
    /console/topics?q=&page=&size=           topics, filtered and paginated
    /console/topics/T                        partitions of T and its configs
    /console/topics/T/P?offset=&limit=       message browser of partition P
    /console/topics/T/P?time=                ... from the first record at or after a time
    /console/topics/T/P/O                    the record at offset O
    /console/groups, /console/groups/G       consumer groups, one group's offsets and lag
    /console/schemas, /console/schemas/S     registry subjects, one subject's versions

Every parameter is parsed and bounded here: a malformed number is a 400
page, an unknown topic, partition, offset, group or subject a 404 page,
and page sizes are capped (:data:`MAX_PAGE_SIZE`). An unexpected error is
logged and answered with a 500 page; it never reaches twisted.web's
traceback page or stops the broker.
"""

import datetime
import os
import re
import time
import urllib.parse

import jinja2
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import resource

from pluglog.console import browse, state
from pluglog.console.decode import Decoder

log = Logger()

#: Rows per page of the topics list and records per page of the browser.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
#: Characters of a key or value shown in the browser's list, and on a record's page.
LIST_SHOWN = 200
RECORD_SHOWN = 256 * 1024
#: Longest query-string value accepted (topic names are at most 249 characters).
MAX_PARAM = 256
INT64_MAX = 2**63 - 1
#: ASCII digits only: str.isdigit() also takes "²" and other scripts' digits.
_INTEGER = re.compile(r"-?[0-9]+")

_HERE = os.path.dirname(os.path.abspath(__file__))
STATIC = {
    b"console.css": b"text/css; charset=utf-8",
    b"console.js": b"text/javascript; charset=utf-8",
}
SECURITY_HEADERS = {
    b"content-security-policy": (
        b"default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self'; "
        b"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"no-referrer",
    b"cache-control": b"no-store",
}


class PageError(Exception):
    """Answer with ``status`` and a page saying ``message``."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


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


def _param(request, name, default=None):
    values = request.args.get(name.encode("ascii"))
    if not values:
        return default
    raw = values[-1]
    if len(raw) > MAX_PARAM:
        raise PageError(400, f"the {name!r} parameter is longer than {MAX_PARAM} characters")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PageError(400, f"the {name!r} parameter is not UTF-8") from None


def number(text, what, low=0, high=INT64_MAX):
    """``text`` as an int in ``[low, high]``, else a 400 naming ``what``."""
    text = text.strip()
    if len(text) > 20 or not _INTEGER.fullmatch(text):
        raise PageError(400, f"{what} must be a whole number, not {text!r}")
    value = int(text)
    if not low <= value <= high:
        raise PageError(400, f"{what} must be between {low} and {high}, not {value}")
    return value


def timestamp(text):
    """Epoch milliseconds of ``text``: a whole number of ms, or ISO 8601
    (``2024-05-01T12:00:00Z``; no zone means UTC); else a 400."""
    text = text.strip()
    if _INTEGER.fullmatch(text):
        return number(text, "the time")
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise PageError(
            400, f"the time must be ISO 8601 (2024-05-01T12:00:00Z) or epoch ms, not {text!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    try:
        return number(str(int(moment.timestamp() * 1000)), "the time")
    except (OverflowError, ValueError, OSError):
        raise PageError(400, f"the time {text!r} is out of range") from None


def _page_size(request, name):
    """The requested page size, capped at MAX_PAGE_SIZE; returns (size, note)."""
    text = _param(request, name)
    if text is None:
        return DEFAULT_PAGE_SIZE, None
    size = number(text, f"the page size ({name})", low=1)
    if size > MAX_PAGE_SIZE:
        return MAX_PAGE_SIZE, f"page size capped at {MAX_PAGE_SIZE} (asked for {size})"
    return size, None


class ConsoleResource(resource.Resource):
    """Everything under ``/console``; a leaf that routes on the rest of the path."""

    isLeaf = True  # noqa: N815 - twisted.web name

    def __init__(self, broker):
        super().__init__()
        self.broker = broker
        self.env = make_environment()

    # -- twisted.web -------------------------------------------------------------

    def render(self, request):
        if request.method in (b"GET", b"HEAD"):
            return super().render(request)
        for name, value in SECURITY_HEADERS.items():
            request.setHeader(name, value)
        request.setHeader(b"allow", b"GET, HEAD")
        return self._error(
            request, PageError(405, "the console is read-only: it answers GET and HEAD only")
        )

    def render_GET(self, request):
        for name, value in SECURITY_HEADERS.items():
            request.setHeader(name, value)
        if not request.postpath:  # /console: the pages' relative links need the slash
            request.redirect(b"/console/")
            return b""
        try:
            parts = [p.decode("utf-8") for p in request.postpath]
        except UnicodeDecodeError:
            return self._error(request, PageError(400, "the path is not UTF-8"))
        if parts[-1] == "" and len(parts) > 1:
            parts = parts[:-1]
        started = time.perf_counter()
        try:
            if parts[0] == "static" and len(parts) == 2:
                return self._static(request, parts[1])
            template, values = self._route(request, parts)
            body = self.env.get_template(template).render(section=parts[0] or "overview", **values)
        except PageError as exc:
            return self._error(request, exc)
        except state.NotFoundError as exc:
            return self._error(request, PageError(404, str(exc)))
        except Exception:
            log.failure("console page {uri} failed", Failure(), uri=request.uri)
            return self._error(
                request, PageError(500, "the page failed; the broker log has the details")
            )
        # How long the broker spent on the page (reading its state and
        # rendering), for browsers' developer tools and the tests.
        spent = (time.perf_counter() - started) * 1000
        request.setHeader(b"server-timing", f"render;dur={spent:.1f}".encode("ascii"))
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return body.encode("utf-8")

    def _error(self, request, exc):
        request.setResponseCode(exc.status)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        try:
            body = self.env.get_template("error.html").render(
                section="", status=exc.status, message=exc.message
            )
        except Exception:
            log.failure("console error page failed")
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return f"{exc.status}: console error\n".encode()
        return body.encode("utf-8")

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
                return "group.html", {"g": state.group(self.broker, rest[0])}
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
        query = (_param(request, "q", "") or "").strip()
        size, note = _page_size(request, "size")
        page = number(_param(request, "page", "1"), "the page number", low=1, high=10**9)
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
        start = part.log.log_start_offset
        at = _param(request, "time")
        offset_text = _param(request, "offset")
        if at is not None and at.strip() and offset_text is not None and offset_text.strip():
            raise PageError(400, "give an offset or a time, not both")
        if at is not None and at.strip():
            found = part.log.offset_for_timestamp(timestamp(at))
            offset = part.high_watermark if found is None else max(found[0], start)
        else:
            offset = number(offset_text or str(start), "the offset")
        decoder = Decoder(self.broker.schema_registry)
        records, following = browse.read_records(part, offset, limit, LIST_SHOWN, decoder)
        return "partition.html", {
            "topic": name,
            "partition": index,
            "offset": offset,
            "time": at or "",
            "limit": limit,
            "note": note,
            "records": records,
            "next_offset": following,
            "log_start_offset": start,
            "high_watermark": part.high_watermark,
            "log_end_offset": part.log.log_end_offset,
            "shown": LIST_SHOWN,
        }

    def _record(self, name, index, offset):
        part = state.local_partition(self.broker, name, index)
        record = browse.read_one(part, offset, RECORD_SHOWN, Decoder(self.broker.schema_registry))
        if record is None:
            raise PageError(
                404,
                f"partition {index} of {name!r} has no record at offset {offset} "
                f"(readable: {part.log.log_start_offset} to {part.high_watermark - 1})",
            )
        return "record.html", {
            "topic": name,
            "partition": index,
            "r": record,
            "shown": RECORD_SHOWN,
        }

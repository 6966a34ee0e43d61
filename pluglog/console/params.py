"""The console's request parameters: read, bounded and parsed, or a 400 page.

:class:`PageError` is the answer a route raises (status and message);
:func:`param` reads one query-string or form field (at most
:data:`MAX_PARAM` characters, UTF-8), :func:`number` and :func:`timestamp`
parse it, naming the value they refuse.
"""

import datetime
import re

#: Longest query-string value accepted (topic names are at most 249 characters).
MAX_PARAM = 256
INT64_MAX = 2**63 - 1
#: ASCII digits only: str.isdigit() also takes "²" and other scripts' digits.
_INTEGER = re.compile(r"-?[0-9]+")


class PageError(Exception):
    """Answer with ``status`` and a page saying ``message``."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def param(request, name, default=None):
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

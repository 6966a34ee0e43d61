"""The message browser's reads: records of one partition from an offset, formatted.

Reads go through the partition's log (``IPartitionLog.read``, the fetch
path's own call) up to the high watermark, as a consumer would see them,
and decode batches with :mod:`pluglog.protocol.records` (compressed
batches included). Each read is bounded: at most ``limit`` records and at
most :data:`MAX_SCAN_BYTES` of batches per page, so no request can make the
reactor walk a whole log. Control batches (transaction markers) are
skipped, as consumers skip them.

Both tiers are browsable: from the partition's earliest offset (under
tiered storage the remote tier's start), offsets below the local log start
are read by the same ``read`` call, which serves them from the remote tier
(:class:`pluglog.storage.remote.tier.RemoteTier`) as it serves a consumer's
fetch. A read of bytes not cached yet answers "nothing yet" and fetches
them in the reader thread pool; the page then parks like a fetch (a waiter
on the partition, woken when the bytes arrive) and reads again, so the
reactor never waits on the store. A page whose remote bytes do not come
within :data:`REMOTE_WAIT_S` (the store is failing) is a 503. The reads
therefore answer through Deferreds, which fire at once for local offsets.

Keys, values and header values are shown as text when they are valid
UTF-8, else as hex, cut at a length the caller chooses; the templates
escape whatever text comes out (Jinja2 autoescape).

:func:`offset_at_time` is the console's lookup by time (the browser's
``time=`` and an offset reset "to a time"): ListOffsets' own exact lookup
across both tiers, a Deferred that may wait on the remote tier.
"""

import datetime

from twisted.internet import defer
from twisted.logger import Logger

from pluglog.broker.timestamps import offset_for_timestamp_deferred
from pluglog.console.params import PageError
from pluglog.errors import KafkaError
from pluglog.protocol.records import batches_end, iter_batches

log = Logger()

#: Bytes of batches one page may read from the log, whatever ``limit`` is.
MAX_SCAN_BYTES = 4 * 1024 * 1024
#: Bytes asked of the log per read (one segment's batches at most).
READ_BYTES = 1024 * 1024
#: Seconds a page waits in all for remote bytes before it answers 503.
REMOTE_WAIT_S = 15.0


def shown(data, limit):
    """``{"kind", "text", "length", "truncated"}`` of ``data`` for a page.

    ``kind`` is ``null`` (no bytes at all), ``text`` (UTF-8) or ``hex``."""
    if data is None:
        return {"kind": "null", "text": "", "length": 0, "truncated": False}
    raw = bytes(data)
    cut = raw[:limit]
    try:
        text = raw.decode("utf-8")
        kind = "text"
        truncated = len(text) > limit
        text = text[:limit]
    except UnicodeDecodeError:
        kind = "hex"
        text = cut.hex(" ")
        truncated = len(raw) > limit
    return {"kind": kind, "text": text, "length": len(raw), "truncated": truncated}


def timestamp_text(ms):
    """ISO 8601 UTC of a record timestamp in ms (or ``-`` when it has none)."""
    if ms is None or ms < 0:
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return str(ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def offset_at_time(part, at_ms):
    """A Deferred firing with the offset of ``part``'s first record with a
    timestamp >= ``at_ms`` (the high watermark when there is none), exactly
    as ListOffsets answers it: to the record, in a remote segment (tiered
    storage) too. Raises PageError (503) while the remote tier's metadata
    is still being read; the Deferred fails with one when the remote tier
    cannot be read."""
    earliest = part.earliest_offset
    if earliest is None:
        raise PageError(
            503, "the partition's remote tier is still being loaded: retry in a moment"
        )
    d = offset_for_timestamp_deferred(part.log, at_ms, part.high_watermark)

    def found(answer):
        return part.high_watermark if answer is None else max(answer[0], earliest)

    def failed(failure):
        log.warn(
            "console lookup by time in the remote tier of {t}-{i} failed: {e}",
            t=part.topic,
            i=part.index,
            e=failure.getErrorMessage(),
        )
        raise PageError(
            503,
            f"the remote tier of partition {part.index} of {part.topic!r} could not be "
            "read: retry later (the broker log has the details)",
        )

    return d.addCallbacks(found, failed)


def _record_view(record, limit, decode, topic):
    view = {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "time": timestamp_text(record.timestamp),
        "key": shown(record.key, limit),
        "value": shown(record.value, limit),
        "headers": [(name, shown(value, limit)) for name, value in record.headers],
        "key_decoded": None,
        "value_decoded": None,
    }
    if decode is not None:
        view["key_decoded"] = decode(topic, record.key)
        view["value_decoded"] = decode(topic, record.value)
    return view


def read_records(part, offset, limit, shown_bytes=256, decode=None, clock=None):
    """A Deferred firing with up to ``limit`` records of ``part`` at or
    after ``offset`` (from its earliest offset, the remote tier's start
    under tiered storage), below its high watermark, as ``(records,
    next_offset)``: ``next_offset`` is where the next page starts (None
    when the page reached the end). ``decode(topic, bytes)`` (a
    :class:`pluglog.console.decode.Decoder`), when given, adds each key's
    and value's decoded form (or None). ``clock`` (the reactor) bounds the
    wait for remote bytes; it is needed only when some are not cached.
    Raises PageError (503) while the remote tier's metadata is being read."""
    earliest = part.earliest_offset
    if earliest is None:
        raise PageError(
            503, "the partition's remote tier is still being loaded: retry in a moment"
        )
    scan = _Scan(part, offset, limit, shown_bytes, decode, earliest)
    return scan.run(clock)


class _Scan:
    """One page's walk over the log, resumed when remote bytes arrive."""

    def __init__(self, part, offset, limit, shown_bytes, decode, earliest):
        self.part = part
        self.offset = offset
        self.limit = limit
        self.shown_bytes = shown_bytes
        self.decode = decode
        self.end = part.high_watermark
        self.position = max(offset, earliest)
        self.records = []
        self.scanned = 0

    def run(self, clock):
        d = defer.Deferred()
        deadline = None if clock is None else clock.seconds() + REMOTE_WAIT_S
        self._step(d, clock, deadline)
        return d

    def _step(self, d, clock, deadline):
        if self._walk():
            d.callback(self._page())
            return
        # Remote bytes are being fetched: wait like a parked fetch.
        if clock is None or clock.seconds() >= deadline:
            d.errback(self._unreadable())
            return
        part = self.part

        def woken(_part):
            timer.cancel()
            self._step(d, clock, deadline)

        def timed_out():
            part.remove_waiter(woken)
            d.errback(self._unreadable())

        timer = clock.callLater(max(0.0, deadline - clock.seconds()), timed_out)
        part.add_waiter(woken)

    def _walk(self):
        """Read on from ``position``; False when a remote read answered
        "nothing yet" (its bytes are on their way), True when done."""
        plog = self.part.log
        end = self.end
        while (
            self.position < end
            and len(self.records) < self.limit
            and self.scanned < MAX_SCAN_BYTES
        ):
            position = self.position
            try:
                result = plog.read(position, READ_BYTES, end, True)
            except KafkaError:  # retention moved the start past us, or the log went away
                return True
            if not result.size:
                # Below the local start an empty answer is the remote tier's
                # "fetching": every remote offset below the HW holds a batch.
                return position >= plog.log_start_offset
            data = result.records
            if not isinstance(data, bytes | bytearray | memoryview):
                data = data.read()
            self.scanned += result.size
            for batch in iter_batches(data):
                if batch.is_control:
                    continue
                for record in batch.records:
                    if self.offset <= record.offset < end and len(self.records) < self.limit:
                        view = _record_view(record, self.shown_bytes, self.decode, self.part.topic)
                        self.records.append(view)
            following = batches_end(data, position)
            if following <= position:
                return True
            self.position = following
        return True

    def _page(self):
        records, end = self.records, self.end
        if records and len(records) >= self.limit:
            following = records[-1]["offset"] + 1
            return records, following if following < end else None
        return records, (self.position if self.position < end else None)

    def _unreadable(self):
        part = self.part
        log.warn(
            "console read of the remote tier of {t}-{i} at offset {o}: no bytes in {s} s",
            t=part.topic,
            i=part.index,
            o=self.position,
            s=REMOTE_WAIT_S,
        )
        return PageError(
            503,
            f"the remote tier of partition {part.index} of {part.topic!r} could not be "
            "read: retry later (the broker log has the details)",
        )


def read_one(part, offset, shown_bytes, decode=None, clock=None):
    """A Deferred firing with the record at exactly ``offset``, or None when
    there is none (compacted, a control record, or outside the readable
    range of either tier)."""
    earliest = part.earliest_offset
    if offset >= part.high_watermark or (earliest is not None and offset < earliest):
        return defer.succeed(None)
    d = read_records(part, offset, 1, shown_bytes, decode, clock)

    def exactly(page):
        records, _next = page
        if records and records[0]["offset"] == offset:
            return records[0]
        return None

    return d.addCallback(exactly)

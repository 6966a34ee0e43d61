"""What storage hands back: the value types of appends, reads and segments.

:class:`AppendInfo` (what an append did, the produce response's source),
:class:`ReadResult` (whole batches read plus the log's bounds),
:class:`SegmentInfo` (a segment's summary for retention policies and tools)
and :class:`FileRange` (a ``sendfile`` range of a segment file, the one
thing here that does I/O). Built-in logs and third-party storage providers
return them (the latter through :mod:`pluglog.storage.api`); batch parsing
and validation are :mod:`pluglog.storage.records`' job.
"""

import os
from collections import namedtuple
from dataclasses import dataclass

from zope.interface import implementer

from pluglog.interfaces import IFileRange


class AppendInfo(
    namedtuple(
        "AppendInfo",
        "first_offset last_offset max_timestamp offset_of_max_timestamp log_append_time "
        "num_batches size_bytes log_start_offset num_records",
        defaults=(0,),
    )
):
    """What an append did (the produce response is built from it).

    Fields: ``first_offset`` and ``last_offset`` (of the appended records),
    ``max_timestamp`` and ``offset_of_max_timestamp`` (-1 when no record has
    one), ``log_append_time`` (the time stamped, -1 unless
    message.timestamp.type is LogAppendTime), ``num_batches``,
    ``size_bytes`` (bytes stored), ``log_start_offset`` (after the append)
    and ``num_records``.
    A named tuple rather than a frozen dataclass: it is built once per
    produced batch, and a frozen dataclass costs ~1.5 µs to construct.
    """

    __slots__ = ()


class ReadResult(
    namedtuple(
        "ReadResult",
        "records size first_offset log_start_offset log_end_offset needs",
        defaults=(0,),
    )
):
    """Whole batches read from one segment, plus the log's bounds.

    ``records`` is bytes or an IFileRange holding ``size`` bytes of whole
    batches; ``first_offset`` is the base offset of the first of them (-1
    and ``records == b""`` when the read found none: see
    :func:`pluglog.storage.api.empty_read`); ``log_start_offset`` and
    ``log_end_offset`` are the log's at the time of the read. ``needs``:
    when the read returned nothing only because its byte limit was below
    the size of the first batch (and a whole batch was not required), that
    size; else 0 (unknown). Until the log changes, a read of the same
    offset with a limit below it returns nothing too, which fetch sessions
    use to answer a partition without reading it (pluglog.broker.fetch_sessions).
    A named tuple, as :class:`AppendInfo`: a fetch makes one per partition
    read, and a frozen dataclass cost ~1.5 µs to construct.
    """

    __slots__ = ()


@dataclass(frozen=True)
class SegmentInfo:
    """A segment's summary, for retention policies, tools and tests.

    ``base_offset``: its first offset; ``next_offset``: one past its last
    batch's last offset; ``size_bytes``; ``largest_timestamp`` (max
    timestamp of its batches, -1 if none); ``created_ms`` (when it was
    started, -1 if unknown); ``active``: it is the one being written.
    """

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp: int  # -1 when the segment has no batch with a timestamp
    created_ms: int  # -1 when unknown (segment found on disk)
    active: bool

    @classmethod
    def of(cls, segment, active):
        """The summary of a file or memory segment."""
        return cls(
            segment.base_offset,
            segment.next_offset,
            segment.size,
            segment.largest_timestamp,
            segment.created_ms,
            active,
        )


@implementer(IFileRange)
class FileRange:
    """``size`` bytes at ``position`` of the file behind ``fileno()``.

    The descriptor belongs to the segment, and ``fileno()`` is called each
    time the range is sent from (a closed segment reopens its file; one
    deleted stays readable file.delete.delay.ms, the window a fetch has to
    send the range; after that ``fileno()`` raises and the connection is
    dropped).
    """

    __slots__ = ("fileno", "position", "size")

    def __init__(self, fileno, position, size):
        self.fileno = fileno
        self.position = position
        self.size = size

    def read(self):
        data = os.pread(self.fileno(), self.size, self.position)
        if len(data) == self.size:
            return data
        chunks = [data]
        done = len(data)
        while done < self.size:
            chunk = os.pread(self.fileno(), self.size - done, self.position + done)
            if not chunk:
                raise OSError(f"file ended {self.size - done} bytes before the range end")
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)

    def __len__(self):
        return self.size

    def __repr__(self):
        return f"<FileRange fd={self.fileno()} position={self.position} size={self.size}>"

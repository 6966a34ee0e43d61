"""The SQLite storage: one database per partition, one row per record batch.

Schema of ``<directory>/<topic>-<partition>.db``::

    segments(base_offset PRIMARY KEY, created_ms, cleaned_ms)
    batches(base_offset PRIMARY KEY, last_offset, max_timestamp, segment, data)
    meta(key PRIMARY KEY, value)          -- log_start_offset, end_floor

A "segment" is a group of batches (``segments.base_offset``); the newest is
the active one, and rolls follow ``segment.bytes`` and ``segment.ms`` like
Kafka's, so retention policies and compaction see the usual shape. ``data``
holds a batch exactly as pluglog's built-in storage would write it (offsets
and leader epoch patched by :func:`pluglog.storage.api.prepare_append`).
``end_floor`` keeps the log end when no batch does (after a truncation or
``truncate_fully_and_start_at``).

Durability: WAL mode; every append is one transaction, so a killed process
loses nothing that was acknowledged (the commit is in the OS before the
produce response leaves). ``--fsync always`` sets ``synchronous=FULL`` (an
fsync per commit); otherwise ``flush`` checkpoints the WAL with an fsync.

Threading: everything runs on the caller's (reactor) thread, one connection
per database.
"""

import os
import sqlite3

from zope.interface import implementer

from pluglog.config import TopicConfig
from pluglog.errors import OffsetOutOfRangeError
from pluglog.interfaces import (
    ICompactableLog,
    ICompactingStorage,
    IFlushableLog,
    IPartitionLog,
    IReplicatedLog,
    IReplicatingStorage,
)
from pluglog.storage.api import (
    HEADER_SIZE,
    ReadResult,
    SegmentInfo,
    append_info,
    empty_read,
    filter_batch,
    iter_keys,
    log_append_time,
    parse_header,
    prepare_append,
    prepare_replicated,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS segments (
    base_offset INTEGER PRIMARY KEY, created_ms INTEGER NOT NULL, cleaned_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS batches (
    base_offset INTEGER PRIMARY KEY, last_offset INTEGER NOT NULL,
    max_timestamp INTEGER NOT NULL, segment INTEGER NOT NULL, data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS batches_last ON batches (last_offset);
CREATE INDEX IF NOT EXISTS batches_segment ON batches (segment);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def _rows(prepared, segment):
    """One ``batches`` row per batch of a PreparedAppend."""
    data = b"".join(prepared.pieces)
    rows, position = [], 0
    for base, last, size, max_timestamp in prepared.batches:
        rows.append((base, last, max_timestamp, segment, data[position : position + size]))
        position += size
    return rows


@implementer(IPartitionLog, IFlushableLog, IReplicatedLog, ICompactableLog)
class SqliteLog:
    """One partition's database."""

    def __init__(self, path, topic, partition, config, fsync="interval"):
        self.path = path
        self.topic = topic
        self.partition = partition
        self.config = config
        self.fsync = fsync
        self.closed = False
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={'FULL' if fsync == 'always' else 'NORMAL'}")
        self.db.executescript(SCHEMA)
        meta = dict(self.db.execute("SELECT key, value FROM meta"))
        self._segments = [
            list(row)
            for row in self.db.execute(
                "SELECT base_offset, created_ms, cleaned_ms FROM segments ORDER BY base_offset"
            )
        ]
        if not self._segments:
            self._add_segment(meta.get("end_floor", 0), -1)
        last, size = self.db.execute(
            "SELECT max(last_offset), coalesce(sum(length(data)), 0) FROM batches"
        ).fetchone()
        self.log_end_offset = max(
            meta.get("end_floor", 0), self._segments[-1][0], -1 if last is None else last + 1
        )
        self.size_bytes = size
        self._active_size = self._segment_size(self._segments[-1][0])
        self.log_start_offset = min(
            max(meta.get("log_start_offset", 0), self._segments[0][0]), self.log_end_offset
        )
        self.recovery_point = self.log_end_offset  # committed transactions only
        self._unflushed = 0
        self._last_flush_ms = None
        self._compacted = None  # (sources, end) of the last compact() pass
        self._tombstones_due = None  # when the earliest tombstone it kept may go

    def __repr__(self):
        return f"<SqliteLog {self.topic}-{self.partition}>"

    # -- helpers ---------------------------------------------------------------

    def _segment_size(self, base):
        return self.db.execute(
            "SELECT coalesce(sum(length(data)), 0) FROM batches WHERE segment = ?", (base,)
        ).fetchone()[0]

    def _add_segment(self, base, now_ms):
        self.db.execute("INSERT OR REPLACE INTO segments VALUES (?, ?, -1)", (base, now_ms))
        self._segments.append([base, now_ms, -1])
        self._active_size = 0

    def _set_meta(self, key, value):
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def _active_for(self, size_bytes, max_timestamp, now_ms):
        """The segment an append of ``size_bytes`` goes to (rolling if due)."""
        base, created_ms, _cleaned = self._segments[-1]
        if self._active_size:
            waited = now_ms - created_ms if created_ms >= 0 else 0
            if (
                self._active_size + size_bytes > self.config.segment_bytes
                or waited > self.config.segment_ms
            ):
                self.roll(now_ms)
        elif created_ms < 0:
            self._segments[-1][1] = now_ms
            self.db.execute(
                "UPDATE segments SET created_ms = ? WHERE base_offset = ?", (now_ms, base)
            )
        return self._segments[-1][0]

    def _store(self, prepared, now_ms):
        self.db.execute("BEGIN")
        try:
            segment = self._active_for(prepared.size_bytes, prepared.max_timestamp, now_ms)
            self.db.executemany(
                "INSERT INTO batches VALUES (?, ?, ?, ?, ?)", _rows(prepared, segment)
            )
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            self._reload_segments()
            raise
        self.log_end_offset = prepared.last_offset + 1
        self.size_bytes += prepared.size_bytes
        self._active_size += prepared.size_bytes
        self._unflushed += prepared.records
        if self.fsync == "always":
            self.recovery_point = self.log_end_offset
        elif self.fsync == "interval" and self._unflushed >= self.config.flush_messages:
            self.flush()

    def _reload_segments(self):
        self._segments = [
            list(row)
            for row in self.db.execute(
                "SELECT base_offset, created_ms, cleaned_ms FROM segments ORDER BY base_offset"
            )
        ]
        self._active_size = self._segment_size(self._segments[-1][0])

    # -- IPartitionLog ---------------------------------------------------------

    def append(self, batches, now_ms, leader_epoch=0, answer=None):
        stamp = log_append_time(self.config, now_ms)
        prepared = prepare_append(
            batches, self.log_end_offset, leader_epoch, self.config.max_message_bytes, stamp
        )
        self._store(prepared, now_ms)
        # ``answer`` is not called: the broker answers from the AppendInfo.
        return append_info(prepared, stamp, self.log_start_offset)

    def read(self, offset, max_bytes, max_offset=None, min_one_batch=True):
        start, end = self.log_start_offset, self.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{start}, {end}] of {self.topic}-{self.partition}"
            )
        limit = end if max_offset is None else min(max_offset, end)
        chunks, size, first = [], 0, -1
        cursor = self.db.execute(
            "SELECT base_offset, data FROM batches WHERE last_offset >= ? AND base_offset < ? "
            "ORDER BY base_offset",
            (offset, limit),
        )
        for base, data in cursor:
            if size + len(data) > max_bytes and (chunks or not min_one_batch):
                break
            if first < 0:
                first = base
            chunks.append(data)
            size += len(data)
        cursor.close()
        if not chunks:
            return empty_read(start, end)
        return ReadResult(b"".join(chunks), size, first, start, end)

    def offset_for_timestamp(self, timestamp_ms):
        row = self.db.execute(
            "SELECT base_offset, max_timestamp FROM batches WHERE max_timestamp >= ? "
            "AND last_offset >= ? ORDER BY base_offset LIMIT 1",
            (timestamp_ms, self.log_start_offset),
        ).fetchone()
        return None if row is None else (max(row[0], self.log_start_offset), row[1])

    def batch_headers(self, start_offset=0):
        rows = self.db.execute(
            "SELECT substr(data, 1, ?) FROM batches WHERE last_offset >= ? ORDER BY base_offset",
            (HEADER_SIZE, start_offset),
        ).fetchall()
        for (head,) in rows:
            yield parse_header(head)

    def roll(self, now_ms):
        if self._active_size:
            self._add_segment(self.log_end_offset, now_ms)

    def segment_infos(self):
        stats = {
            segment: (size, next_offset, largest)
            for segment, size, next_offset, largest in self.db.execute(
                "SELECT segment, sum(length(data)), max(last_offset) + 1, max(max_timestamp) "
                "FROM batches GROUP BY segment"
            )
        }
        infos = []
        for i, (base, created_ms, _cleaned) in enumerate(self._segments):
            size, next_offset, largest = stats.get(base, (0, base, -1))
            active = i == len(self._segments) - 1
            if active:
                next_offset = self.log_end_offset
            infos.append(SegmentInfo(base, next_offset, size, largest, created_ms, active))
        return infos

    def delete_records_before(self, offset):
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is beyond the log end {self.log_end_offset}"
            )
        if offset <= self.log_start_offset:
            return 0
        self.log_start_offset = offset
        self._set_meta("log_start_offset", offset)
        count = sum(1 for later in self._segments[1:] if later[0] <= offset)
        return self.delete_oldest_segments(count)

    def delete_oldest_segments(self, count):
        count = max(0, min(count, len(self._segments) - 1))
        if not count:
            return 0
        gone = [segment[0] for segment in self._segments[:count]]
        self.db.execute("BEGIN")
        for base in gone:
            self.db.execute("DELETE FROM batches WHERE segment = ?", (base,))
            self.db.execute("DELETE FROM segments WHERE base_offset = ?", (base,))
        self.log_start_offset = max(self.log_start_offset, self._segments[count][0])
        self._set_meta("log_start_offset", self.log_start_offset)
        self.db.execute("COMMIT")
        self._segments = self._segments[count:]
        self.size_bytes = self.db.execute(
            "SELECT coalesce(sum(length(data)), 0) FROM batches"
        ).fetchone()[0]
        return count

    def truncate_to(self, offset):
        if offset >= self.log_end_offset:
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        row = self.db.execute(
            "SELECT base_offset FROM batches WHERE last_offset >= ? ORDER BY base_offset LIMIT 1",
            (offset,),
        ).fetchone()
        end = offset if row is None else min(offset, row[0])
        self.db.execute("BEGIN")
        self.db.execute("DELETE FROM batches WHERE base_offset >= ?", (end,))
        self.db.execute("DELETE FROM segments WHERE base_offset > ?", (end,))
        self._segments = [s for s in self._segments if s[0] <= end] or [[end, -1, -1]]
        self.db.execute(
            "INSERT OR IGNORE INTO segments VALUES (?, ?, ?)", tuple(self._segments[0])
        )
        self._set_meta("end_floor", end)
        self.db.execute("COMMIT")
        self.log_end_offset = end
        self.recovery_point = min(self.recovery_point, end)
        self.size_bytes = self.db.execute(
            "SELECT coalesce(sum(length(data)), 0) FROM batches"
        ).fetchone()[0]
        self._active_size = self._segment_size(self._segments[-1][0])

    def update_config(self, config):
        self.config = config

    def flush(self):
        if not self.closed:
            self.db.execute("PRAGMA wal_checkpoint(FULL)")
        self._unflushed = 0
        self.recovery_point = self.log_end_offset

    def close(self):
        if self.closed:
            return
        self.flush()
        self.db.close()
        self.closed = True

    # -- IFlushableLog ---------------------------------------------------------

    def maybe_flush(self, now_ms):
        if self.fsync != "interval" or not self._unflushed:
            return False
        if self._last_flush_ms is not None and now_ms - self._last_flush_ms < self.config.flush_ms:
            return False
        self.flush()
        self._last_flush_ms = now_ms
        return True

    # -- IReplicatedLog --------------------------------------------------------

    def append_replicated(self, batches, now_ms):
        prepared, headers = prepare_replicated(batches, self.log_end_offset)
        if prepared is None:
            return None, headers
        self._store(prepared, now_ms)
        return append_info(prepared, -1, self.log_start_offset), headers

    def truncate_fully_and_start_at(self, offset):
        self.db.execute("BEGIN")
        self.db.execute("DELETE FROM batches")
        self.db.execute("DELETE FROM segments")
        self._segments = []
        self._add_segment(offset, -1)
        self._set_meta("end_floor", offset)
        self._set_meta("log_start_offset", offset)
        self.db.execute("COMMIT")
        self.log_start_offset = self.log_end_offset = self.recovery_point = offset
        self.size_bytes = 0

    # -- ICompactableLog -------------------------------------------------------

    def compact(self, now_ms):
        """Kafka's rules over the closed segments older than
        min.compaction.lag.ms; a pass is skipped when nothing changed since
        the last one and no tombstone is due."""
        lag = self.config.min_compaction_lag_ms
        infos = self.segment_infos()[:-1]
        sources = []
        for info in infos:
            if lag > 0 and info.largest_timestamp > now_ms - lag:
                break
            sources.append(info)
        if not sources:
            return 0
        expiry = self.config.delete_retention_ms
        cleaned = {base: cleaned_ms for base, _created, cleaned_ms in self._segments}
        state = (tuple(s.base_offset for s in sources), sources[-1].next_offset)
        if self._compacted == state and (
            self._tombstones_due is None or now_ms < self._tombstones_due
        ):
            return 0
        bases = [s.base_offset for s in sources]
        marks = ",".join("?" * len(bases))
        rows = self.db.execute(
            f"SELECT base_offset, segment, data FROM batches WHERE segment IN ({marks}) "
            "ORDER BY base_offset",
            bases,
        ).fetchall()
        latest = {}
        for _base, _segment, data in rows:
            for offset, key, _null in iter_keys(data):
                latest[key] = offset
        last_of_segment = {segment: base for base, segment, _data in rows}
        removed = 0
        kept_tombstones = []  # when each kept tombstone may go
        self.db.execute("BEGIN")
        for base, segment, data in rows:
            first_cleaned = cleaned[segment] if cleaned[segment] >= 0 else now_ms
            expired = cleaned[segment] >= 0 and cleaned[segment] + expiry <= now_ms

            def keep(offset, key, is_null, expired=expired, goes=first_cleaned + expiry):
                if key is None or latest.get(key) != offset:
                    return False
                if is_null:
                    if expired:
                        return False
                    kept_tombstones.append(goes)
                return True

            retain = last_of_segment[segment] == base or parse_header(data).producer_id >= 0
            new, _kept, gone = filter_batch(data, keep, retain_empty=retain)
            removed += gone
            if new is None:
                self.db.execute("DELETE FROM batches WHERE base_offset = ?", (base,))
            elif new is not data:
                self.db.execute("UPDATE batches SET data = ? WHERE base_offset = ?", (new, base))
        for segment in self._segments:
            if segment[0] in bases and segment[2] < 0:
                segment[2] = now_ms
                self.db.execute(
                    "UPDATE segments SET cleaned_ms = ? WHERE base_offset = ?",
                    (now_ms, segment[0]),
                )
        self.db.execute("COMMIT")
        self.size_bytes = self.db.execute(
            "SELECT coalesce(sum(length(data)), 0) FROM batches"
        ).fetchone()[0]
        self._compacted = state
        self._tombstones_due = min(kept_tombstones, default=None)
        return removed


@implementer(ICompactingStorage, IReplicatingStorage)
class SqliteStorage:
    """ILogStorage: one SqliteLog per partition under ``directory``."""

    log_class = SqliteLog

    def __init__(self, directory, topic_defaults=None, fsync="interval"):
        self.directory = os.path.abspath(directory)
        self.topic_defaults = topic_defaults or TopicConfig()
        self.fsync = fsync
        self._logs = {}
        os.makedirs(self.directory, exist_ok=True)

    def _path(self, topic, partition):
        return os.path.join(self.directory, f"{topic}-{partition}.db")

    def open_log(self, topic, partition, topic_config):
        log = self._logs.get((topic, partition))
        config = topic_config or self.topic_defaults
        if log is None or log.closed:
            log = SqliteLog(self._path(topic, partition), topic, partition, config, self.fsync)
            self._logs[(topic, partition)] = log
        else:
            log.update_config(config)
        return log

    def get_log(self, topic, partition):
        return self._logs.get((topic, partition))

    def delete_log(self, topic, partition):
        log = self._logs.pop((topic, partition), None)
        if log is not None:
            log.close()
        path = self._path(topic, partition)
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(path + suffix)
            except FileNotFoundError:
                pass

    def logs(self):
        return list(self._logs.values())

    def flush_all(self):
        for log in self._logs.values():
            log.flush()

    def close(self):
        for log in self._logs.values():
            log.close()

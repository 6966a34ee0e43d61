"""The driver's control plane: topic metadata and offset lookups.

Planning needs a handful of small requests per micro-batch (Metadata and
ListOffsets), so it uses pluglog's own :class:`~pluglog.client.blocking.BlockingClient`
(one connection for metadata, one per partition leader it asks for offsets):
no librdkafka threads to start, and exact control over
the ListOffsets timestamps (-2 earliest, -1 latest, or a time in ms).
Record data never flows through here; executors read and write with
confluent-kafka (see :mod:`pluglog_spark.executor`).

A :class:`ClusterView` is not picklable state: readers drop it before Spark
ships them to executors and reconnect lazily on the driver.
"""

import re
import time

from pluglog import protocol as codec
from pluglog.client.blocking import FETCH_VERSION, BlockingClient, fetch_body
from pluglog.protocol.records import iter_batches
from pluglog_spark.options import EARLIEST, LATEST

OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
EARLIEST_LOCAL = -4  # ListOffsets v8 (KIP-405)
# Leadership moved or is moving: refresh metadata and ask the new leader.
RETRIABLE = {5, 6, 74, 75}  # LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, *_LEADER_EPOCH
RETRIES = 6


class ControlError(RuntimeError):
    """The broker refused or failed a metadata or offset request."""


class ClusterView:
    """Blocking metadata/offset queries: Metadata from the first reachable
    server, ListOffsets and Fetch from each partition's leader (a cluster
    spreads leaders over its brokers; a stale leader is retried after a
    metadata refresh)."""

    def __init__(self, bootstrap, timeout=30.0, connect_retries=20, read_committed=False):
        self.bootstrap = [s.strip() for s in bootstrap.split(",") if s.strip()]
        #: "latest" is the last stable offset (LSO) for read_committed readers:
        #: records past it may still be aborted, and a read_committed consumer
        #: cannot reach them yet (Spark's Kafka source does the same).
        self.isolation_level = 1 if read_committed else 0
        self.timeout = timeout
        self.connect_retries = connect_retries
        self._client = None
        self._leaders_of = {}
        self._brokers = {}
        self._leader_clients = {}

    def close(self):
        clients = [self._client, *self._leader_clients.values()]
        self._client = None
        self._leader_clients = {}
        for client in clients:
            if client is not None:
                client.close()

    def _connect(self):
        last = None
        # The broker may still be starting (the sink plugin's child races it).
        for attempt in range(self.connect_retries):
            for server in self.bootstrap:
                try:
                    return BlockingClient.from_bootstrap(
                        server, client_id="pluglog-spark-driver", timeout=self.timeout
                    )
                except OSError as exc:
                    last = exc
            time.sleep(min(0.1 * 2**attempt, 2.0))
        raise ControlError(f"cannot connect to {','.join(self.bootstrap)}: {last}")

    def _request(self, api_key, version, body, node=None):
        for attempt in (0, 1):
            try:
                client = self._client_for(node)
                return client.request(api_key, version, body)
            except OSError:
                self._drop(node)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _client_for(self, node):
        if node is None or node not in self._brokers:
            if self._client is None:
                self._client = self._connect()
            return self._client
        client = self._leader_clients.get(node)
        if client is None:
            host, port = self._brokers[node]
            client = BlockingClient(host, port, "pluglog-spark-driver", self.timeout)
            self._leader_clients[node] = client
        return client

    def _drop(self, node):
        client = self._leader_clients.pop(node, None) if node is not None else None
        if client is None:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _metadata(self, topics):
        body = {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
        }
        resp = self._request(codec.METADATA, 8, body)
        self._brokers = {b["node_id"]: (b["host"], b["port"]) for b in resp["brokers"]}
        for topic in resp["topics"]:
            for part in topic["partitions"]:
                self._leaders_of[(topic["name"], part["partition_index"])] = part["leader_id"]
        return resp

    def partitions(self, topics=None):
        """``{topic: [partition, ...]}`` for ``topics`` (None: every topic).
        Topics that do not exist are left out."""
        resp = self._metadata(topics)
        out = {}
        for topic in resp["topics"]:
            if topic["error_code"] == UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if topic["error_code"]:
                raise ControlError(f"metadata for {topic['name']}: error {topic['error_code']}")
            out[topic["name"]] = sorted(p["partition_index"] for p in topic["partitions"])
        return out

    def subscribed(self, opts):
        """The sorted ``[(topic, partition)]`` a SourceOptions subscribes to."""
        if opts.assign is not None:
            return sorted((t, p) for t, parts in opts.assign.items() for p in parts)
        if opts.pattern is not None:
            regex = re.compile(opts.pattern)
            found = {
                t: ps
                for t, ps in self.partitions(None).items()
                if regex.fullmatch(t) and not t.startswith("__")
            }
        else:
            found = self.partitions(list(opts.subscribe))
        return sorted((t, p) for t, ps in found.items() for p in ps)

    def list_offsets(self, timestamps, version=5):
        """``{(topic, partition): ts}`` -> ``{(topic, partition): offset}``.

        ``ts`` is -2 (earliest), -1 (latest: the high watermark, or the LSO
        for read_committed) or a
        time in ms; a time after the last record gives -1.
        """
        out = {}
        wanted = dict(timestamps)
        for attempt in range(RETRIES):
            if not wanted:
                break
            if attempt or any(tp not in self._leaders_of for tp in wanted):
                if attempt:
                    time.sleep(min(0.1 * 2**attempt, 1.0))
                self._metadata(sorted({t for t, _ in wanted}))
            by_leader = {}
            for tp, ts in wanted.items():
                by_leader.setdefault(self._leaders_of.get(tp), {})[tp] = ts
            retry = {}
            for node, group in by_leader.items():
                for tp, (code, offset) in self._list_offsets_at(node, group, version).items():
                    if code in RETRIABLE:
                        retry[tp] = group[tp]
                    elif code:
                        raise ControlError(f"list offsets of {tp[0]}-{tp[1]}: error {code}")
                    else:
                        out[tp] = offset
            wanted = retry
        if wanted:
            tp = next(iter(wanted))
            raise ControlError(f"list offsets of {tp[0]}-{tp[1]}: no leader answered")
        # A time's answer is already the first record at or after it, in
        # the remote tier too (the broker reads the segment's time index).
        return out

    def _list_offsets_at(self, node, timestamps, version=5):
        by_topic = {}
        for (topic, partition), ts in timestamps.items():
            by_topic.setdefault(topic, []).append({"partition_index": partition, "timestamp": ts})
        body = {
            "replica_id": -1,
            "isolation_level": self.isolation_level,
            "topics": [{"name": t, "partitions": ps} for t, ps in sorted(by_topic.items())],
        }
        resp = self._request(codec.LIST_OFFSETS, version, body, node)
        return {
            (topic["name"], entry["partition_index"]): (entry["error_code"], entry["offset"])
            for topic in resp["topics"]
            for entry in topic["partitions"]
        }

    def earliest_local(self, tps):
        """The local log start of each partition (ListOffsets v8,
        EARLIEST_LOCAL): offsets below it live in the remote tier only."""
        return self.list_offsets(dict.fromkeys(tps, EARLIEST_LOCAL), version=8)

    def read_partition(self, topic, partition):
        """Every record of ``topic``-``partition`` below its high watermark
        (a small internal topic such as ``__remote_log_metadata``)."""
        tp = (topic, partition)
        self._metadata([topic])
        offset, records = 0, []
        while True:
            body = fetch_body(
                topic, {partition: offset}, max_bytes=8_388_608, partition_max_bytes=8_388_608
            )
            resp = self._request(codec.FETCH, FETCH_VERSION, body, self._leaders_of.get(tp))
            answer = resp["responses"][0]["partitions"][0]
            if answer["error_code"] == OFFSET_OUT_OF_RANGE and offset < answer["log_start_offset"]:
                offset = answer["log_start_offset"]
                continue
            if answer["error_code"]:
                raise ControlError(f"fetch of {topic}-{partition}: error {answer['error_code']}")
            data = answer["records"] or b""
            before = offset
            for batch in iter_batches(data):
                offset = batch.base_offset + batch.last_offset_delta + 1
                if not batch.is_control:
                    records.extend(batch.records)
            if offset >= answer["high_watermark"] or offset == before:
                return records

    def earliest(self, tps):
        return self.list_offsets(dict.fromkeys(tps, EARLIEST))

    def latest(self, tps):
        return self.list_offsets(dict.fromkeys(tps, LATEST))

"""Fetch (with long polling) and OffsetForLeaderEpoch.

ListOffsets is served by :mod:`.offsets`.

Fetch v7+ keeps incremental fetch sessions (KIP-227,
pluglog.broker.fetch_sessions): the session's context says which partitions
to read and turns each answer into the response (all partitions for a full
fetch; for an incremental one only the session's dirty partitions are read
and only the changed ones answered). Record data is returned as the
storage's file range, untouched. Long polls: when the first pass has fewer
than MinBytes, one timer per request and one waiter per partition (one per
session for an incremental fetch) are registered; the first append that
brings the total to MinBytes, or MaxWaitMs, answers.
Size limits follow KIP-74: the first non-empty partition may exceed
MaxBytes/PartitionMaxBytes by one whole batch so a consumer always makes
progress.
"""

from twisted.internet import defer

from pluglog import protocol as codec
from pluglog.broker.replica_selection import preferred_read_replica
from pluglog.errors import (
    FENCED_LEADER_EPOCH,
    NONE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_OUT_OF_RANGE,
    UNKNOWN_TOPIC_ID,
    KafkaError,
    OffsetOutOfRangeError,
)
from pluglog.server.handlers.common import (
    error_code,
    follower_error,
    leader_error,
    per_partition,
    resolve_topic_ids,
)
from pluglog.server.handlers.fetch_follower import (
    diverging,
    fetched_again,
    follower_memo,
    leader_throttle,
)
from pluglog.server.handlers.leaders import current_leader, leader_endpoints


def _partition_data(index, code, hw=-1, log_start=-1, records=b"", lso=None, aborted=()):
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": hw,
        "last_stable_offset": hw if lso is None else lso,
        "log_start_offset": log_start,
        "aborted_transactions": aborted,
        "preferred_read_replica": -1,
        "records": records,
    }


def _unknown_ids(topic):
    return {
        "topic": "",
        "topic_id": topic["topic_id"],
        "partitions": [
            _partition_data(want["partition"], UNKNOWN_TOPIC_ID) for want in topic["partitions"]
        ],
    }


def _read_all(broker, request, first_pass=True, version=0, clock=None, memo=None):
    """One pass over the requested partitions; returns (response topics, bytes).

    Consumers read below the high watermark. A follower (``replica_id`` >= 0)
    reads up to the log end, and its fetch offset tells the leader how far
    its log reaches (on the first pass; a parked fetch re-reads later).
    v13+ names topics by id: each pass looks the id up, so a topic deleted
    (and created again) meanwhile answers UNKNOWN_TOPIC_ID.

    KIP-392: a consumer's v11+ fetch may be served by a follower replica
    here (below this broker's own HW, learnt from the leader), and on the
    leader it may be answered with no records and a ``preferred_read_replica``
    when ``replica.selector.class`` picks another broker for its rack.

    ``clock``: a follower's fetch session clock (FollowerClock), set to this
    fetch's time after the first pass; partitions it reached update_follower
    for while caught up count as fetched at each later session fetch.

    ``memo``: a consumer's fetch session context, told each empty answer
    a byte limit made (``remember_empty``); when its ``skips``, the
    request's partitions are the session's entries, and one that remembers
    an empty answer for a limit at least this one gets it without a read
    (see pluglog.broker.fetch_sessions, ``remember_empty``)."""
    max_bytes = request.get("max_bytes", 0x7FFFFFFF)
    if max_bytes <= 0:
        max_bytes = 0x7FFFFFFF
    # The broker's fetch.max.bytes caps what any client may ask for (Kafka's rule).
    max_bytes = min(max_bytes, broker.config.fetch_max_bytes)
    replica_id = request.get("replica_id", -1)
    by_id = version >= 13
    # read_committed (1): consumers read below the last stable offset and
    # learn which transactions in that range were aborted.
    committed = request.get("isolation_level", 0) == 1 and replica_id < 0
    now = broker.now_ms() if replica_id >= 0 and first_pass else 0
    # Fetch from followers (KIP-392) is for consumers' v11+ fetches only.
    from_any_replica = replica_id < 0 and version >= 11
    client_rack = request.get("rack_id") or "" if from_any_replica else ""
    # Not with a rack (the replica selector's choice is not a change a
    # session sees). A follower's memos are made where update_follower ran
    # in this pass and used where its whole effect is the fetch time
    # (pluglog.server.handlers.fetch_follower).
    if client_rack:
        memo = None
    skips = memo is not None and memo.skips
    remaining = max_bytes
    total = 0
    topics = []
    for topic in request["topics"]:
        if by_id:
            name = broker.topic_ids.name_of(topic["topic_id"])
            if name is None:
                topics.append(_unknown_ids(topic))
                continue
        else:
            name = topic["topic"]
        out = []
        partitions = broker.partitions
        for want in topic["partitions"]:
            if skips and total:
                # (until >= max(0, min(partition_max_bytes, remaining)),
                # without the calls: this runs for thousands of partitions)
                until = want["empty_until"]
                if (
                    (until >= remaining or until >= want["partition_max_bytes"])
                    and until >= 0
                    and (not now or fetched_again(want, replica_id, now))
                ):
                    # The answer the read below would give again (remember_empty).
                    out.append(want["empty_answer"])
                    continue
            index = want["partition"]
            part = partitions.get((name, index))
            # The usual case, a leader in the requested epoch, tested inline
            # (a sessionless consumer lists every partition in every fetch).
            if (
                part is not None
                and part.leader_id == part.node_id
                and not part.offline
                and not part.log_offline
                and want.get("current_leader_epoch", -1) in (-1, part.leader_epoch)
            ):
                code = NONE
            else:
                code = leader_error(broker, name, part, want, index)
            on_leader = code == NONE
            if code == NOT_LEADER_OR_FOLLOWER and from_any_replica and part is not None:
                code = follower_error(broker, part, want)
            if code != NONE:
                if clock is not None and now and part is not None:
                    part.follower_left_session(replica_id, clock)
                hw, start = (-1, -1) if part is None else (part.high_watermark, -1)
                entry = _partition_data(index, code, hw, start)
                if version >= 12 and code in (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH):
                    entry["current_leader"] = current_leader(broker, name, index)
                out.append(entry)
                continue
            plog = part.log
            offset = want["fetch_offset"]
            if version >= 12 and want.get("last_fetched_epoch", -1) >= 0:
                diverged = diverging(part, want, offset)
                if diverged is not None:
                    if clock is not None and now:
                        part.follower_left_session(replica_id, clock)
                    entry = _partition_data(
                        index, NONE, part.high_watermark, plog.log_start_offset
                    )
                    entry["diverging_epoch"] = diverged
                    out.append(entry)
                    continue
            if client_rack and on_leader:
                preferred = preferred_read_replica(
                    broker, part, client_rack, offset, broker.now_ms()
                )
                if preferred >= 0:
                    # No records: the consumer fetches from ``preferred`` next.
                    entry = _partition_data(
                        index,
                        NONE,
                        part.high_watermark,
                        plog.log_start_offset,
                        lso=part.last_stable_offset,
                    )
                    entry["preferred_read_replica"] = preferred
                    out.append(entry)
                    continue
            throttle = None
            if replica_id >= 0:
                if now and not part.update_follower(replica_id, offset, now, clock):
                    out.append(_partition_data(index, NOT_LEADER_OR_FOLLOWER))
                    continue
                end, max_offset = plog.log_end_offset, None
                throttle = leader_throttle(broker, part, replica_id)
                if throttle is not None and throttle.exceeded(broker.now_ms()):
                    # Over the reassignment throttle: nothing this time round.
                    out.append(_partition_data(index, NONE, part.high_watermark, -1))
                    continue
            else:
                end = max_offset = part.high_watermark
            lso = part.last_stable_offset if committed or part.has_transactions else None
            if committed:
                max_offset = lso
            limit = min(want["partition_max_bytes"], remaining)
            if offset == end or committed and offset >= max_offset or limit <= 0 and total:
                # Out of range is judged against the log end, as Kafka does:
                # a new leader's HW (and LSO) can trail the old leader's for
                # a moment, and a consumer already past it must get an empty
                # answer, not OFFSET_OUT_OF_RANGE (which resets it by
                # auto.offset.reset: records read twice or skipped).
                # Below the local start may still be in range: the remote
                # tier's (unknown for a moment after a start: not judged).
                if offset < plog.log_start_offset or offset > end:
                    # (at or above the log start and at most the end read
                    # up to, which is at most the log end: in range)
                    earliest = part.earliest_offset
                    if earliest is None:
                        earliest = min(offset, plog.log_start_offset)
                    if offset < earliest or offset > plog.log_end_offset:
                        code = OFFSET_OUT_OF_RANGE
                entry = _partition_data(
                    index, code, part.high_watermark, plog.log_start_offset, lso=lso
                )
                out.append(entry)
                if (
                    memo is not None
                    and code == NONE
                    and limit <= 0
                    and offset != end
                    and (replica_id < 0 or follower_memo(part, replica_id, now, throttle))
                ):
                    memo.remember_empty(want, part, 0, entry)
                continue
            try:
                result = plog.read(
                    offset, max(limit, 0), max_offset=max_offset, min_one_batch=total == 0
                )
            except OffsetOutOfRangeError:
                out.append(
                    _partition_data(
                        index, OFFSET_OUT_OF_RANGE, part.high_watermark, plog.log_start_offset
                    )
                )
                continue
            except KafkaError as exc:
                out.append(_partition_data(index, error_code(exc), part.high_watermark))
                continue
            size = result.size
            if (
                not size
                and total
                and memo is not None
                and (replica_id < 0 or follower_memo(part, replica_id, now, throttle))
            ):
                entry = _partition_data(
                    index, NONE, part.high_watermark, plog.log_start_offset, b"", lso
                )
                memo.remember_empty(want, part, result.needs - 1 if result.needs else limit, entry)
                out.append(entry)
                continue
            total += size
            remaining -= size
            if throttle is not None:
                throttle.record(size, broker.now_ms())
            aborted = part.aborted_transactions(offset, max_offset) if committed and size else ()
            out.append(
                _partition_data(
                    index,
                    NONE,
                    part.high_watermark,
                    plog.log_start_offset,
                    result.records if size else b"",
                    lso,
                    aborted,
                )
            )
        topics.append({"topic": name, "topic_id": topic.get("topic_id"), "partitions": out})
    if clock is not None and now:
        clock.fetch_ms = now
    return topics, total


def _response(session, topics, total, broker=None, ctx=None):
    """The answer, through the fetch session's context: called once per answer."""
    session_id, topics = session.respond(topics, total)
    body = {
        "throttle_time_ms": 0,
        "error_code": NONE,
        "session_id": session_id,
        "responses": topics,
    }
    if ctx is not None and ctx.version >= 16:
        body["node_endpoints"] = leader_endpoints(broker, ctx.session, topics)
    return body


def handle_fetch(ctx, request):
    broker = ctx.broker
    version = ctx.version
    resolve_topic_ids(broker, codec.FETCH, version, request)
    session = broker.fetch_sessions.context(request, version, broker.now_ms())
    if isinstance(session, int):  # an unknown session id or a wrong epoch
        return {"throttle_time_ms": 0, "error_code": session, "session_id": 0, "responses": []}
    # An incremental fetch reads the partitions of its session that changed.
    request = session.request
    topics, total = _read_all(
        broker, request, version=version, clock=session.clock, memo=session.memo
    )
    min_bytes = request["min_bytes"]
    max_wait = request["max_wait_ms"]
    if (
        total >= min_bytes
        or max_wait <= 0
        or total > 0
        and min_bytes <= 1
        or _has_news(topics)  # last: a walk over every answered partition
    ):
        return _response(session, topics, total, broker, ctx)
    return _LongPoll(broker, session, max_wait, ctx).deferred


def _has_news(topics):
    """An error, a diverging epoch or a preferred read replica: answered at
    once, as Kafka does."""
    return any(
        p["error_code"] or p["preferred_read_replica"] >= 0 or p.get("diverging_epoch")
        for t in topics
        for p in t["partitions"]
    )


class _LongPoll:
    """A fetch parked until enough data arrives or MaxWaitMs passes.

    Re-reads are plain reads; only the pass that answers goes through the
    session's context, so a session remembers what was actually sent. An
    incremental fetch waits on its session, which any change to one of its
    partitions wakes, and re-reads only the session's dirty partitions;
    sessionless and full fetches wait on each partition."""

    def __init__(self, broker, session, max_wait_ms, ctx):
        self.broker = broker
        self.session = session
        self.ctx = ctx
        self.version = ctx.version
        self.request = request = session.request
        self.deferred = defer.Deferred(self._cancel)
        self.partitions = []
        self.watched = None
        #: the coalesced re-read (see :meth:`_soon`) and the partitions whose
        #: one-shot waiter fired since the last one
        self._check_call = None
        self._woken = []
        if session.session_waits:
            self.watched = session.session
            self.watched.waiters.append(self._wake_session)
        else:
            for topic in request["topics"]:
                name = (
                    broker.topic_ids.name_of(topic["topic_id"])
                    if self.version >= 13
                    else topic["topic"]
                )
                for want in topic["partitions"]:
                    part = broker.partitions.get((name, want["partition"]))
                    if part is not None:
                        part.add_waiter(self._wake)
                        self.partitions.append(part)
        self.timer = broker.reactor.callLater(max_wait_ms / 1000.0, self._answer)

    def _detach(self):
        for part in self.partitions:
            part.remove_waiter(self._wake)
        self.partitions = []
        if self.watched is not None:
            try:
                self.watched.waiters.remove(self._wake_session)
            except ValueError:
                pass
            self.watched = None
        if self.timer.active():
            self.timer.cancel()
        if self._check_call is not None and self._check_call.active():
            self._check_call.cancel()
        self._check_call = None
        self._woken = []

    def _read(self):
        return _read_all(
            self.broker, self.session.reread(), False, self.version, memo=self.session.memo
        )

    def _wake_session(self):
        if not self.deferred.called:
            self._soon()

    def _wake(self, part):
        if not self.deferred.called:
            self._woken.append(part)
            self._soon()

    def _soon(self):
        """Re-read once, at the reactor's next turn, however many wake-ups
        come before it. A wake-up is a partition change (an append, a HW
        move, an ISR change, a new leader...), and one event can make
        thousands in a row: a leadership or ISR change over 10,000
        partitions woke a parked follower fetch 10,000 times, and each
        re-read the session's dirty partitions on the spot, 10,000 x 10,000
        reads that froze the leader (bench/RESULTS.md). Kafka's
        DelayedFetch checks its partitions per completion attempt too; here
        the attempts of one turn are one."""
        if self._check_call is None:
            self._check_call = self.broker.reactor.callLater(0, self._check)

    def _check(self):
        self._check_call = None
        woken, self._woken = self._woken, []
        if self.deferred.called:
            return
        topics, total = self._read()
        if total >= self.request["min_bytes"]:
            self._detach()
            self.deferred.callback(_response(self.session, topics, total, self.broker, self.ctx))
            return
        for part in woken:
            # A partition's waiters are one-shot: watch it again.
            part.add_waiter(self._wake)

    def _answer(self):
        if self.deferred.called:
            return
        self._detach()
        topics, total = self._read()
        self.deferred.callback(_response(self.session, topics, total, self.broker, self.ctx))

    def _cancel(self, _deferred):
        self._detach()


def handle_offset_for_leader_epoch(ctx, request):
    def answer(part, want, topic):
        entry = {
            "error_code": NONE,
            "partition": want["partition"],
            "leader_epoch": -1,
            "end_offset": -1,
        }
        entry["error_code"] = leader_error(ctx.broker, topic, part, want, want["partition"])
        if entry["error_code"] == NONE:
            # KIP-101: the largest epoch <= the requested one and where it ends.
            epoch, end = part.epochs.end_offset_for(want["leader_epoch"], part.log.log_end_offset)
            entry["leader_epoch"], entry["end_offset"] = epoch, end
        return entry

    topics = per_partition(ctx.broker, request["topics"], answer, "topic", "partition")
    return {"throttle_time_ms": 0, "topics": topics}


HANDLERS = {
    codec.FETCH: handle_fetch,
    codec.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
}

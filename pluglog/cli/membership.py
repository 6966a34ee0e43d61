"""``pluglog consume --group G``: the console consumer as a member of a consumer group.

A blocking take on Kafka's classic group protocol, enough for a console
consumer: find the coordinator, join (answering MEMBER_ID_REQUIRED), run the
chosen assignor (``range`` or ``roundrobin``, :mod:`pluglog.client.assignors`)
when this member leads, take the assignment from SyncGroup, heartbeat between
fetches, and commit positions (the next offset to read) every
:data:`COMMIT_INTERVAL_S` and when the command stops; then LeaveGroup. A
partition without a committed offset starts at the earliest offset with
``--from-beginning``, else at the end (Kafka's console consumer does the same).
A rebalance (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID)
commits what it can and joins again. So a second run with the same group
continues where the first one stopped, and two runs at once share the
partitions.
"""

import contextlib
import time

from pluglog import protocol as codec
from pluglog.cli.common import CliError, check, metadata
from pluglog.cli.groups import coordinator
from pluglog.cli.topics import end_offsets
from pluglog.client import assignors

SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 20_000
HEARTBEAT_INTERVAL_S = 3.0
COMMIT_INTERVAL_S = 1.0
STRATEGIES = ("range", "roundrobin")

ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79
_REJOIN = {ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS}
_COORDINATOR_MOVED = {14, 15, 16}  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
JOIN_ATTEMPTS = 20


class GroupMember:
    """One console consumer in ``group`` reading ``topic``; a context manager
    that commits and leaves on exit."""

    def __init__(self, client, group, topic, from_beginning=False):
        self.client = client
        self.group = group
        self.topic = topic
        self.from_beginning = from_beginning
        self.member_id = ""
        self.generation = -1
        self.coord = None
        self._stack = contextlib.ExitStack()
        self._last_beat = self._last_commit = time.monotonic()
        self._committed = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stack.close()

    def _connect(self):
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.coord = self._stack.enter_context(coordinator(self.client, self.group))

    # -- joining ------------------------------------------------------------------

    def join(self):
        """Join the group; return ``{partition: position}`` of the assignment."""
        subscription = assignors.encode_subscription([self.topic])
        for _ in range(JOIN_ATTEMPTS):
            if self.coord is None:
                self._connect()
            resp = self.coord.request(
                codec.JOIN_GROUP,
                5,
                {
                    "group_id": self.group,
                    "session_timeout_ms": SESSION_TIMEOUT_MS,
                    "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
                    "member_id": self.member_id,
                    "group_instance_id": None,
                    "protocol_type": "consumer",
                    "protocols": [{"name": n, "metadata": subscription} for n in STRATEGIES],
                },
            )
            code = resp["error_code"]
            if code == MEMBER_ID_REQUIRED:
                self.member_id = resp["member_id"]
                continue
            if code in _REJOIN or code in _COORDINATOR_MOVED:
                self._retry_after(code)
                continue
            check(code, f"JoinGroup {self.group}")
            self.member_id, self.generation = resp["member_id"], resp["generation_id"]
            plan = []
            if resp["leader"] == self.member_id:
                plan = self._assign(resp["protocol_name"], resp["members"])
            resp = self.coord.request(
                codec.SYNC_GROUP,
                3,
                {
                    "group_id": self.group,
                    "generation_id": self.generation,
                    "member_id": self.member_id,
                    "group_instance_id": None,
                    "assignments": plan,
                },
            )
            code = resp["error_code"]
            if code in _REJOIN or code in _COORDINATOR_MOVED:
                self._retry_after(code)
                continue
            check(code, f"SyncGroup {self.group}")
            mine = sorted(
                p for t, p in assignors.decode_assignment(resp["assignment"]) if t == self.topic
            )
            self._last_beat = time.monotonic()
            return self._positions(mine)
        raise CliError(f"group {self.group}: could not join in {JOIN_ATTEMPTS} attempts")

    def _retry_after(self, code):
        if code == UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if code in _COORDINATOR_MOVED:
            self.coord = None
        time.sleep(0.2)

    def _assign(self, protocol, members):
        assign = assignors.ASSIGNORS.get(protocol)
        if assign is None:
            raise CliError(f"group {self.group} chose assignor {protocol!r}, which pluglog lacks")
        subscriptions = {
            m["member_id"]: assignors.decode_subscription(m["metadata"]) for m in members
        }
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        partitions = {}
        for entry in metadata(self.client, topics)["topics"]:
            if not entry["error_code"]:
                partitions[entry["name"]] = [p["partition_index"] for p in entry["partitions"]]
        return [
            {"member_id": member, "assignment": assignors.encode_assignment(pairs)}
            for member, pairs in assign(partitions, subscriptions).items()
        ]

    def _positions(self, partitions):
        """Committed offsets of ``partitions``; the earliest or latest where none."""
        if not partitions:
            return {}
        resp = self.coord.request(
            codec.OFFSET_FETCH,
            5,
            {
                "group_id": self.group,
                "topics": [{"name": self.topic, "partition_indexes": partitions}],
            },
        )
        check(resp["error_code"], f"OffsetFetch {self.group}")
        out = {}
        for part in resp["topics"][0]["partitions"] if resp["topics"] else []:
            check(part["error_code"], f"{self.topic}-{part['partition_index']}")
            if part["committed_offset"] >= 0:
                out[part["partition_index"]] = part["committed_offset"]
        self._committed = dict(out)  # reset positions below still get committed
        missing = [p for p in partitions if p not in out]
        if missing:
            reset = -2 if self.from_beginning else -1
            out.update(end_offsets(self.client, self.topic, missing, reset))
        return out

    # -- while consuming ------------------------------------------------------------

    def tick(self, positions):
        """Heartbeat and commit when due. Returns ``None``, or after a rebalance
        the new ``{partition: position}``."""
        now = time.monotonic()
        if now - self._last_commit >= COMMIT_INTERVAL_S:
            if not self.commit(positions):
                return self.join()
        if now - self._last_beat >= HEARTBEAT_INTERVAL_S:
            self._last_beat = now
            resp = self.coord.request(
                codec.HEARTBEAT,
                3,
                {
                    "group_id": self.group,
                    "generation_id": self.generation,
                    "member_id": self.member_id,
                    "group_instance_id": None,
                },
            )
            code = resp["error_code"]
            if code in _REJOIN or code in _COORDINATOR_MOVED:
                if code == REBALANCE_IN_PROGRESS:
                    self.commit(positions)
                self._retry_after(code)
                return self.join()
            check(code, f"Heartbeat {self.group}")
        return None

    def commit(self, positions):
        """Commit positions that moved; False if the group has rebalanced."""
        self._last_commit = time.monotonic()
        changed = {p: o for p, o in positions.items() if self._committed.get(p) != o}
        if not changed:
            return True
        resp = self.coord.request(
            codec.OFFSET_COMMIT,
            7,
            {
                "group_id": self.group,
                "generation_id_or_member_epoch": self.generation,
                "member_id": self.member_id,
                "group_instance_id": None,
                "topics": [
                    {
                        "name": self.topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": o,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                            for p, o in sorted(changed.items())
                        ],
                    }
                ],
            },
        )
        for part in resp["topics"][0]["partitions"]:
            code = part["error_code"]
            if code in _REJOIN:
                return False
            check(code, f"OffsetCommit {self.topic}-{part['partition_index']}")
        self._committed.update(changed)
        return True

    def leave(self, positions):
        """Commit the final positions and leave the group (best effort once
        the group has moved on)."""
        if self.coord is None:
            return
        self.commit(positions)
        self.coord.request(
            codec.LEAVE_GROUP,
            3,
            {
                "group_id": self.group,
                "members": [{"member_id": self.member_id, "group_instance_id": None}],
            },
        )

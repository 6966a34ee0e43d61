"""The console's actions, run as the Kafka requests they stand for.

The console (:mod:`pluglog.console.actions`) decides *what* an operator
asked for; this module does it, in the web layer because it needs the
server. Each action is built as the request body an admin client would
send and handed to the server's own handler, through the server's own
per-API authorization check (:func:`pluglog.server.api_checks.checked`)
when the broker has an authorizer, for the console's logged-in principal
and the browser's address. So a console action is allowed, refused and
validated exactly as the Kafka request would be:

================  ===============================  ====================================
action            request                          authorization (as Kafka's KafkaApis)
================  ===============================  ====================================
create a topic    CreateTopics v5                  CREATE on the cluster or the topic
delete a topic    DeleteTopics v4                  DELETE on the topic
add partitions    CreatePartitions v1              ALTER on the topic
reset offsets     OffsetCommit v8, generation -1,  READ on the group and on each topic
                  no member (AlterConsumerGroup-
                  Offsets)
================  ===============================  ====================================

The answer's error codes become an :class:`~pluglog.console.actions.Outcome`:
an authorization error is ``denied``, any other ``failed``, with the
error's name and message.
"""

from twisted.internet import defer

from pluglog import errors
from pluglog import protocol as codec
from pluglog.console.actions import Outcome
from pluglog.protocol.headers import RequestHeader
from pluglog.security.listeners import Listener
from pluglog.server.api_checks import checked
from pluglog.server.handlers.common import RequestContext
from pluglog.server.handlers.table import HANDLERS

_DENIALS = {
    errors.TOPIC_AUTHORIZATION_FAILED,
    errors.GROUP_AUTHORIZATION_FAILED,
    errors.CLUSTER_AUTHORIZATION_FAILED,
}
_NAMES = {
    value: name
    for name, value in vars(errors).items()
    if name.isupper() and isinstance(value, int) and not isinstance(value, bool)
}
#: What the authorization checks see of the console "connection": a SASL
#: listener (the principal is the console login's, never a certificate's).
_LISTENER = Listener("CONSOLE", "SASL_PLAINTEXT", "", 0)


class _Session:
    """The part of :class:`pluglog.security.sasl.Session` the checks read."""

    __slots__ = ("principal", "listener", "acl_cache")

    def __init__(self, principal):
        self.principal = principal
        self.listener = _LISTENER
        self.acl_cache = {}


class ConsoleOps:
    """``ops`` for :class:`pluglog.console.resource.ConsoleResource`."""

    def __init__(self, broker):
        self.broker = broker

    def _call(self, who, api_key, version, request):
        principal, host = who
        header = RequestHeader(api_key, version, 0, "pluglog-console", None)
        security = getattr(self.broker, "security", None)
        authorizing = security is not None and security.authorizer is not None
        ctx = RequestContext(self.broker, header, f"{host}:0", _Session(principal))
        handler = HANDLERS[api_key]
        if authorizing:
            return defer.maybeDeferred(checked, ctx, api_key, request, handler)
        return defer.maybeDeferred(handler, ctx, request)

    def create_topic(self, who, name, partitions, replication):
        request = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 30000,
            "validate_only": False,
        }
        d = self._call(who, codec.CREATE_TOPICS, 5, request)
        return d.addCallback(
            _outcome, "topics", f"created topic {name!r} ({partitions} partition(s))"
        )

    def delete_topic(self, who, name):
        request = {"topic_names": [name], "timeout_ms": 30000}
        d = self._call(who, codec.DELETE_TOPICS, 4, request)
        return d.addCallback(_outcome, "responses", f"deleted topic {name!r}")

    def add_partitions(self, who, name, count):
        request = {
            "topics": [{"name": name, "count": count, "assignments": None}],
            "timeout_ms": 30000,
            "validate_only": False,
        }
        d = self._call(who, codec.CREATE_PARTITIONS, 1, request)
        return d.addCallback(_outcome, "results", f"topic {name!r} has {count} partitions")

    def reset_offsets(self, who, group_id, offsets):
        """``offsets``: ``[(topic, partition, offset)]``."""
        topics = {}
        for topic, index, offset in offsets:
            topics.setdefault(topic, []).append(
                {
                    "partition_index": index,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )
        request = {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": t, "partitions": p} for t, p in topics.items()],
        }
        d = self._call(who, codec.OFFSET_COMMIT, 8, request)
        return d.addCallback(
            _outcome,
            "topics",
            f"group {group_id!r}: {len(offsets)} partition offset(s) reset",
        )


def _codes(response, key):
    """``[(what, code, message)]`` of every entry of the answer that failed."""
    found = []
    top = response.get("error_code", errors.NONE)
    if top:
        found.append(("", top, response.get("error_message")))
    for entry in response.get(key, ()):
        name = entry.get("name", "")
        if entry.get("error_code"):
            found.append((name, entry["error_code"], entry.get("error_message")))
        for part in entry.get("partitions", ()):
            if part.get("error_code"):
                where = f"{name}-{part.get('partition_index')}"
                found.append((where, part["error_code"], None))
    return found


def _outcome(response, key, done):
    failures = _codes(response, key)
    if not failures:
        return Outcome("done", done)
    denied = any(code in _DENIALS for _w, code, _m in failures)
    shown = []
    for what, code, message in failures[:5]:
        text = _NAMES.get(code, str(code))
        if message:
            text += f": {message}"
        shown.append(f"{what} {text}" if what else text)
    more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
    return Outcome("denied" if denied else "failed", "; ".join(shown) + more)

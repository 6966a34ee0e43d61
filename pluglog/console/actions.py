"""The console's actions: create and delete a topic, add partitions, reset a
group's offsets (only when ``console.read.only=false``).

Each action is two requests. A GET of ``/console/actions/NAME?...`` checks
the parameters and shows a confirmation page saying exactly what will
happen (for an offset reset, each partition's committed and new offset);
it changes nothing. Its form POSTs the same parameters back with the
session's CSRF token (:mod:`pluglog.console.session`); the POST checks them
again and runs the action. The forms that lead to the confirmation pages
(on the topics, topic and group pages) are plain GET forms.

The console does not change the broker itself: the web layer hands it an
``ops`` object whose methods run each action as the equivalent Kafka
request (CreateTopics, DeleteTopics, CreatePartitions, OffsetCommit as
AlterConsumerGroupOffsets sends it) through the server's handlers and the
same authorization checks as the Kafka APIs, for the logged-in principal
and the browser's address. Each returns a Deferred firing an
:class:`Outcome`; a denial by the authorizer is ``denied`` (a 403 page that
says so).
"""

from typing import NamedTuple
from urllib.parse import quote

from twisted.internet import defer

from pluglog.console import browse, state
from pluglog.console.params import PageError, number, param, timestamp

NAMES = ("create-topic", "delete-topic", "add-partitions", "reset-offsets")
#: Partitions one action may create (the broker's own limits apply as well).
MAX_PARTITIONS = 10000
MAX_REPLICATION = 32767
RESET_TO = ("earliest", "latest", "offset", "time")


class Outcome(NamedTuple):
    """What an action did: ``status`` is ``done``, ``denied`` or ``failed``."""

    status: str
    message: str


class Plan(NamedTuple):
    """A checked action: what its confirmation page shows and how to run it."""

    action: str
    title: str
    summary: str
    #: ``[(name, value)]`` sent back by the confirmation form
    fields: list
    #: an offset reset's ``[{"topic", "partition", "current", "new"}]`` (else empty)
    rows: list
    danger: bool
    #: where "cancel" leads
    back: str
    #: where "continue" leads once the action is done
    after: str
    #: ``run(ops, who)`` -> Deferred[Outcome]; ``who`` is (principal, host)
    run: object


def _text(request, name, what):
    value = (param(request, name) or "").strip()
    if not value:
        raise PageError(400, f"{what} is missing")
    return value


def _topic(broker, request):
    name = _text(request, "topic", "the topic")
    meta = broker.coordinator.topics().get(name)
    if meta is None:
        raise state.NotFoundError(f"no topic {name!r}")
    return name, meta


def _url(*parts):
    return "/console/" + "/".join(quote(str(p), safe="") for p in parts)


def plan(broker, action, request):
    """A Deferred firing the :class:`Plan` of ``action`` with the request's
    parameters (an offset reset "to a time" looks the offsets up first, in
    the remote tier too); raises PageError (400) or NotFoundError (404)
    naming what is wrong."""
    if action == "reset-offsets":
        return _reset_plan(broker, request)
    return defer.succeed(_plan(broker, action, request))


def _plan(broker, action, request):
    if action == "create-topic":
        name = _text(request, "name", "the topic name")
        partitions = number(
            param(request, "partitions", "1"), "the partition count", 1, MAX_PARTITIONS
        )
        replication = number(
            param(request, "replication", "1"), "the replication factor", 1, MAX_REPLICATION
        )
        if name in broker.coordinator.topics():
            raise PageError(409, f"topic {name!r} already exists")
        return Plan(
            action,
            "Create topic",
            f"Create topic {name!r} with {partitions} partition(s) and replication "
            f"factor {replication}.",
            [("name", name), ("partitions", partitions), ("replication", replication)],
            [],
            False,
            "/console/topics",
            _url("topics", name),
            lambda ops, who: ops.create_topic(who, name, partitions, replication),
        )
    if action == "delete-topic":
        name, meta = _topic(broker, request)
        if broker.is_internal(name):
            raise PageError(400, f"{name!r} is an internal topic: it cannot be deleted")
        return Plan(
            action,
            "Delete topic",
            f"Delete topic {name!r} and all {meta.num_partitions} partition(s) of records. "
            "This cannot be undone.",
            [("topic", name)],
            [],
            True,
            _url("topics", name),
            "/console/topics",
            lambda ops, who: ops.delete_topic(who, name),
        )
    if action == "add-partitions":
        name, meta = _topic(broker, request)
        count = number(
            _text(request, "count", "the new partition count"),
            "the new partition count",
            meta.num_partitions + 1,
            MAX_PARTITIONS,
        )
        return Plan(
            action,
            "Add partitions",
            f"Grow topic {name!r} from {meta.num_partitions} to {count} partitions. "
            "Keys may map to other partitions afterwards; partitions cannot be removed.",
            [("topic", name), ("count", count)],
            [],
            False,
            _url("topics", name),
            _url("topics", name),
            lambda ops, who: ops.add_partitions(who, name, count),
        )
    raise PageError(404, "the console has no such action")


def _reset_plan(broker, request):
    group_id = _text(request, "group", "the group")
    group = state.group(broker, group_id)  # NotFoundError when not coordinated here
    if group["state"] not in ("Empty", "Dead"):
        raise PageError(
            409,
            f"group {group_id!r} is {group['state']} with {len(group['members'])} member(s): "
            "stop its consumers before resetting its offsets",
        )
    only = (param(request, "topic") or "").strip()
    to = (param(request, "to") or "").strip()
    if to not in RESET_TO:
        raise PageError(400, f"reset to must be one of {', '.join(RESET_TO)}, not {to!r}")
    value = (param(request, "value") or "").strip()
    target = None
    if to == "offset":
        target = number(value, "the offset")
    elif to == "time":
        target = timestamp(value) if value else None
        if target is None:
            raise PageError(400, "the time is missing")
    rows = []
    lookups = []
    for entry in group["offsets"]:
        if only and entry["topic"] != only:
            continue
        topic, index = entry["topic"], entry["partition"]
        new = target if to == "offset" else _resolve(broker, topic, index, to, target)
        row = {"topic": topic, "partition": index, "current": entry["offset"], "new": new}
        if isinstance(new, defer.Deferred):
            lookups.append(new.addCallback(lambda offset, row=row: row.update(new=offset)))
        rows.append(row)
    if not rows:
        where = f" on {only!r}" if only else ""
        raise PageError(400, f"group {group_id!r} has no committed offsets{where}")
    looked_up = defer.gatherResults(lookups, consumeErrors=True)
    # The first lookup's failure (a PageError), not gatherResults' wrapper.
    looked_up.addErrback(lambda failure: failure.value.subFailure)
    return looked_up.addCallback(lambda _: _reset_plan_of(group_id, only, to, value, rows))


def _reset_plan_of(group_id, only, to, value, rows):
    fields = [("group", group_id), ("topic", only), ("to", to), ("value", value)]
    offsets = [(r["topic"], r["partition"], r["new"]) for r in rows]
    scope = f"topic {only!r}" if only else "every partition it has committed"
    how = {"earliest": "the earliest offset", "latest": "the end (high watermark)"}.get(
        to, f"offset {value}" if to == "offset" else f"the first offset at or after {value}"
    )
    return Plan(
        "reset-offsets",
        "Reset offsets",
        f"Set group {group_id!r}'s committed offsets on {scope} to {how}.",
        fields,
        rows,
        True,
        _url("groups", group_id),
        _url("groups", group_id),
        lambda ops, who: ops.reset_offsets(who, group_id, offsets),
    )


def _resolve(broker, topic, index, to, at_ms):
    """The offset ``to`` names on a partition hosted here."""
    try:
        part = state.local_partition(broker, topic, index)
    except state.NotFoundError:
        raise PageError(
            409,
            f"partition {index} of {topic!r} is not hosted on broker {broker.node_id}: "
            "reset it to an explicit offset, or from its leader's console",
        ) from None
    if to == "earliest":
        # ListOffsets EARLIEST: the remote tier's start (tiered storage).
        earliest = part.earliest_offset
        if earliest is None:
            raise PageError(
                503, f"the remote tier of {topic!r} is still being loaded: retry in a moment"
            )
        return earliest
    if to == "latest":
        return part.high_watermark
    # ListOffsets' exact lookup, in the remote tier too: a Deferred.
    return browse.offset_at_time(part, at_ms)

"""Kafka's ZooKeeper layout: paths, znode JSON bodies and ``zookeeper.connect``.

Everything here is pure (no kazoo, no reactor) so tap.py can validate the
connect string cheaply and tests can check the JSON byte for byte against
what Kafka writes (``kafka.zk.ZkData``). Our own extras live in fields Kafka
ignores (``pluglog`` in the topic znode) and under ``/pluglog``, which Kafka
tooling never reads.
"""

import json
import re
import time

from pluglog import topicids
from pluglog.coordination.state import PartitionState
from pluglog.datadir import meta_properties, parse_properties  # noqa: F401 - re-exported

CLUSTER_ID = "/cluster/id"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN = "/admin/reassign_partitions"
PREFERRED_ELECTION = "/admin/preferred_replica_election"
#: Our extras: requests to the controller (elections, controlled shutdown),
#: each a sequential znode the controller answers by writing a result into it.
REQUESTS = "/pluglog/requests"
#: Kafka's log dir failure notifications: a broker whose log dir fails adds a
#: sequential ``log_dir_event_<n>`` child; the controller reads and deletes it.
LOG_DIR_EVENTS = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = LOG_DIR_EVENTS + "/log_dir_event_"
#: Our extra: ``<broker id>`` (ephemeral) lists the broker's replicas on failed
#: log dirs, written in the same transaction as the notification so the
#: controller always finds what the event is about (Kafka's controller asks
#: the broker with a LeaderAndIsr request instead).
OFFLINE_REPLICAS = "/pluglog/offline_replicas"

#: Paths every broker makes sure exist at start (Kafka's persistent paths).
PERSISTENT_PATHS = (
    BROKER_IDS,
    TOPICS,
    CONFIG_TOPICS,
    DELETE_TOPICS,
    "/admin",
    "/config/changes",
    "/isr_change_notification",
    REQUESTS,
    LOG_DIR_EVENTS,
    OFFLINE_REPLICAS,
)

_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")
_CHROOT = re.compile(r"^(/[A-Za-z0-9._-]+)+$")


def parse_connect(value):
    """``HOST:PORT[,HOST:PORT...][/chroot]`` -> ``(hosts, chroot)``; ValueError
    naming what is wrong."""
    value = (value or "").strip()
    if not value:
        raise ValueError("zookeeper.connect is empty")
    hosts, slash, chroot = value.partition("/")
    chroot = slash + chroot
    if chroot and chroot != "/" and not _CHROOT.match(chroot.rstrip("/")):
        raise ValueError(f"zookeeper.connect {value!r}: bad chroot {chroot!r}")
    for part in hosts.split(","):
        match = _HOST_PORT.match(part.strip())
        if not match or not 0 < int(match.group(2)) < 65536:
            raise ValueError(f"zookeeper.connect {value!r}: {part.strip()!r} is not HOST:PORT")
    return hosts, chroot.rstrip("/")


def dumps(data):
    return json.dumps(data, separators=(",", ":"), sort_keys=False).encode()


def loads(raw):
    return json.loads(raw.decode()) if raw else None


def now_ms_str():
    return str(int(time.time() * 1000))


def broker_path(broker_id):
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic):
    return f"{TOPICS}/{topic}"


def partitions_path(topic):
    return f"{TOPICS}/{topic}/partitions"


def state_path(topic, partition):
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def config_path(topic):
    return f"{CONFIG_TOPICS}/{topic}"


def broker_json(host, port, rack=None, http_url=None, endpoints=None):
    """Kafka's BrokerIdZNode version 5 body, plus pluglog's ``http_url`` (the
    ``--http`` listener, for forwarding schema registry writes; Kafka's own
    parser ignores unknown fields). ``endpoints`` is ``[(listener name,
    security protocol, host, port)]`` (default: one PLAINTEXT listener at
    host:port); the top-level host/port are the first PLAINTEXT endpoint's,
    or null/-1 without one, as Kafka writes them for older clients."""
    if endpoints is None:
        endpoints = [("PLAINTEXT", "PLAINTEXT", host, port)]
    plain = next(((h, p) for _n, proto, h, p in endpoints if proto == "PLAINTEXT"), (None, -1))
    body = {
        "listener_security_protocol_map": {name: proto for name, proto, _h, _p in endpoints},
        "endpoints": [f"{name}://{_bracket(h)}:{p}" for name, _proto, h, p in endpoints],
        "rack": rack or None,
        "jmx_port": -1,
        "features": {},
        "host": plain[0],
        "timestamp": now_ms_str(),
        "port": plain[1],
        "version": 5,
    }
    if http_url:
        body["http_url"] = http_url
    return body


def _bracket(host):
    return f"[{host}]" if ":" in host else host


def broker_endpoints(data):
    """``{listener name: (host, port)}`` of a broker registration."""
    out = {}
    for endpoint in data.get("endpoints") or ():
        name, _, address = endpoint.partition("://")
        h, _, p = address.rpartition(":")
        out[name] = (h.strip("[]"), int(p))
    if not out and data.get("host"):
        out["PLAINTEXT"] = (data["host"], int(data["port"]))
    return out


def broker_from_json(broker_id, data, listener=None):
    """-> ``(id, host, port, rack)`` with the address of ``listener`` (the
    inter-broker one), else of the first endpoint, else the legacy host/port."""
    endpoints = broker_endpoints(data)
    host, port = endpoints.get(listener) or next(iter(endpoints.values()), (None, -1))
    return (int(broker_id), host, int(port), data.get("rack") or None)


def log_dir_event_json(broker_id):
    """Kafka's LogDirEventNotificationSequenceZNode body (event 1: a log dir failed)."""
    return {"version": 1, "broker": broker_id, "event": 1}


def offline_replicas_path(broker_id):
    return f"{OFFLINE_REPLICAS}/{broker_id}"


def offline_replicas_json(log_dirs, partitions):
    return {
        "version": 1,
        "log_dirs": sorted(log_dirs),
        "partitions": [[t, p] for t, p in sorted(partitions)],
    }


def offline_replicas_from_json(data):
    """-> ``{(topic, partition)}`` of an offline-replicas znode."""
    return {(t, int(p)) for t, p in (data or {}).get("partitions") or ()}


def controller_json(broker_id):
    return {"version": 1, "brokerid": broker_id, "timestamp": now_ms_str()}


def new_topic_id():
    """A topic id (hex); stored in ZooKeeper as Kafka's URL-safe base64."""
    return topicids.new_topic_id()


def topic_id_to_zk(hex_id):
    return topicids.to_base64(hex_id)


def topic_id_from_zk(value):
    """The hex id of a znode's ``topic_id``; "" for none or an unreadable one
    (the controller then gives the topic a new id, as for a pre-2.8 topic)."""
    if not value:
        return ""
    try:
        return topicids.from_base64(value)
    except ValueError:
        return ""


def topic_json(assignment, topic_id, internal=False, adding=None, removing=None):
    """Kafka's TopicZNode plus our ``pluglog`` extras: version 3 with
    ``topic_id`` (base64) as Kafka 2.8+ writes it, 2 without."""
    data = {
        "version": 3 if topic_id else 2,
        "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted((adding or {}).items())},
        "removing_replicas": {str(p): list(r) for p, r in sorted((removing or {}).items())},
    }
    if topic_id:
        data["topic_id"] = topic_id_to_zk(topic_id)
    if internal:
        data["pluglog"] = {"internal": True}
    return data


def topic_from_json(data):
    """-> ``(assignment, topic_id, internal, adding, removing)``."""

    def intmap(key):
        return {int(p): [int(b) for b in r] for p, r in (data.get(key) or {}).items()}

    return (
        intmap("partitions"),
        topic_id_from_zk(data.get("topic_id")),
        bool((data.get("pluglog") or {}).get("internal", False)),
        intmap("adding_replicas"),
        intmap("removing_replicas"),
    )


def config_json(configs):
    return {"version": 1, "config": {k: str(v) for k, v in configs.items()}}


def config_from_json(data):
    return dict((data or {}).get("config") or {})


def state_from_znode(raw, stat):
    data = loads(raw)
    if not data:
        return None
    return PartitionState.from_json(data, stat.version)


def state_bytes(state):
    return dumps(state.to_json())


def reassign_json(entries):
    """``{(t, p): [replicas]}`` -> Kafka's /admin/reassign_partitions body."""
    return {
        "version": 1,
        "partitions": [
            {"topic": t, "partition": p, "replicas": list(r)}
            for (t, p), r in sorted(entries.items())
        ],
    }


def reassign_from_json(data):
    return {
        (e["topic"], int(e["partition"])): [int(b) for b in e["replicas"]]
        for e in (data or {}).get("partitions") or ()
    }

"""The Twisted admin client: topics, configs, partitions, groups, offsets.

Names follow aiokafka's AIOKafkaAdminClient (``create_topics``,
``describe_configs``, ``list_consumer_groups``...) with Deferreds. Topic
creation, deletion and new partitions go to the controller from the latest
metadata; group operations go to each group's coordinator; ListGroups asks
every broker. Any per-item Kafka error raises :class:`BrokerResponseError`
naming the item, unless ``raise_errors=False`` asks for the codes instead.
"""

from typing import NamedTuple

from twisted.internet import defer

from pluglog.client.assignors import decode_assignment, decode_subscription
from pluglog.client.cluster import ClusterClient, TopicPartition
from pluglog.client.config import ADMIN, client_config
from pluglog.client.errors import BrokerResponseError
from pluglog.protocol.api_keys import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    INCREMENTAL_ALTER_CONFIGS,
    LIST_GROUPS,
    LIST_OFFSETS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
)

RESOURCE_TYPES = {"topic": 2, "broker": 4}


class NewTopic(NamedTuple):
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    topic_configs: dict = {}


class ConfigResource(NamedTuple):
    """``resource_type``: "topic" or "broker"; ``configs``: for alter."""

    resource_type: str
    name: str
    configs: dict | None = None


def _check(results, raise_errors):
    if raise_errors:
        for where, (code, message) in results.items():
            if code:
                raise BrokerResponseError(code, message, str(where))
    return {k: code for k, (code, _) in results.items()}


class AdminClient:
    """Kafka admin operations on the reactor."""

    def __init__(self, reactor, bootstrap_servers=None, **kafka_config):
        self.config = client_config(ADMIN, kafka_config, bootstrap_servers=bootstrap_servers)
        self.reactor = reactor
        self.client = ClusterClient(reactor, self.config)

    def start(self):
        return self.client.start().addCallback(lambda _: self)

    def close(self):
        return self.client.close()

    stop = close

    def _timeout_ms(self):
        return self.config["request.timeout.ms"]

    @defer.inlineCallbacks
    def _controller(self):
        yield self.client.refresh_metadata()
        return self.client.controller_id if self.client.controller_id >= 0 else None

    # -- topics -----------------------------------------------------------------

    @defer.inlineCallbacks
    def create_topics(self, new_topics, validate_only=False, raise_errors=True):
        """Create topics (NewTopic or names); ``{name: error_code}``."""
        topics = [t if isinstance(t, NewTopic) else NewTopic(t) for t in new_topics]
        body = {
            "topics": [
                {
                    "name": t.name,
                    "num_partitions": t.num_partitions,
                    "replication_factor": t.replication_factor,
                    "assignments": [],
                    "configs": [
                        {"name": k, "value": str(v)} for k, v in (t.topic_configs or {}).items()
                    ],
                }
                for t in topics
            ],
            "timeout_ms": self._timeout_ms(),
            "validate_only": validate_only,
        }
        node = yield self._controller()
        response = yield self.client.send(node, CREATE_TOPICS, 4, body)
        results = {
            t["name"]: (t["error_code"], t.get("error_message")) for t in response["topics"]
        }
        return _check(results, raise_errors)

    @defer.inlineCallbacks
    def delete_topics(self, topics, raise_errors=True):
        body = {"topic_names": list(topics), "timeout_ms": self._timeout_ms()}
        node = yield self._controller()
        response = yield self.client.send(node, DELETE_TOPICS, 3, body)
        results = {r["name"]: (r["error_code"], None) for r in response["responses"]}
        return _check(results, raise_errors)

    @defer.inlineCallbacks
    def list_topics(self):
        """Names of every topic (internal ones included), sorted."""
        yield self.client.refresh_metadata()
        return sorted(self.client.partitions)

    @defer.inlineCallbacks
    def describe_topics(self, topics=None):
        """``[{"topic", "error_code", "partitions": [{"partition", "leader",
        "replicas", "isr"}]}]`` from Metadata."""
        response = yield self.client.refresh_metadata(list(topics) if topics else None)
        out = []
        for t in response["topics"]:
            out.append(
                {
                    "topic": t["name"],
                    "error_code": t["error_code"],
                    "is_internal": t.get("is_internal", False),
                    "partitions": [
                        {
                            "partition": p["partition_index"],
                            "leader": p["leader_id"],
                            "replicas": list(p["replica_nodes"]),
                            "isr": list(p["isr_nodes"]),
                        }
                        for p in sorted(t["partitions"], key=lambda p: p["partition_index"])
                    ],
                }
            )
        return out

    @defer.inlineCallbacks
    def create_partitions(self, counts, validate_only=False, raise_errors=True):
        """``counts``: {topic: new total partition count}."""
        body = {
            "topics": [{"name": t, "count": n, "assignments": None} for t, n in counts.items()],
            "timeout_ms": self._timeout_ms(),
            "validate_only": validate_only,
        }
        node = yield self._controller()
        response = yield self.client.send(node, CREATE_PARTITIONS, 1, body)
        results = {
            r["name"]: (r["error_code"], r.get("error_message")) for r in response["results"]
        }
        return _check(results, raise_errors)

    # -- configs ------------------------------------------------------------------

    def _resource_node(self, resource):
        if resource.resource_type == "broker":
            return int(resource.name)
        return None

    @defer.inlineCallbacks
    def describe_configs(self, resources):
        """``{(type, name): {config name: value}}`` for ConfigResources."""
        out = {}
        for resource in resources:
            body = {
                "resources": [
                    {
                        "resource_type": RESOURCE_TYPES[resource.resource_type],
                        "resource_name": resource.name,
                        "configuration_keys": list(resource.configs) if resource.configs else None,
                    }
                ],
                "include_synonyms": False,
            }
            response = yield self.client.send(
                self._resource_node(resource), DESCRIBE_CONFIGS, 2, body
            )
            for r in response["results"]:
                if r["error_code"]:
                    raise BrokerResponseError(
                        r["error_code"], r.get("error_message"), f"{resource.name}"
                    )
                out[(resource.resource_type, resource.name)] = {
                    c["name"]: c["value"] for c in r["configs"]
                }
        return out

    @defer.inlineCallbacks
    def alter_configs(self, resources, validate_only=False):
        """Set (or with a None value, delete) the given keys of each resource,
        leaving the others alone (IncrementalAlterConfigs)."""
        for resource in resources:
            body = {
                "resources": [
                    {
                        "resource_type": RESOURCE_TYPES[resource.resource_type],
                        "resource_name": resource.name,
                        "configs": [
                            {
                                "name": k,
                                "config_operation": 1 if v is None else 0,
                                "value": None if v is None else str(v),
                            }
                            for k, v in (resource.configs or {}).items()
                        ],
                    }
                ],
                "validate_only": validate_only,
            }
            response = yield self.client.send(
                self._resource_node(resource), INCREMENTAL_ALTER_CONFIGS, 1, body
            )
            for r in response["responses"]:
                if r["error_code"]:
                    raise BrokerResponseError(
                        r["error_code"], r.get("error_message"), f"{resource.name}"
                    )

    # -- groups -------------------------------------------------------------------

    @defer.inlineCallbacks
    def list_consumer_groups(self):
        """``[(group_id, protocol_type)]`` from every broker, sorted."""
        yield self.client.refresh_metadata()
        groups = set()
        for node in list(self.client.nodes):
            response = yield self.client.send(node, LIST_GROUPS, 2, {})
            if response["error_code"]:
                raise BrokerResponseError(response["error_code"], where=f"ListGroups {node}")
            groups.update((g["group_id"], g["protocol_type"]) for g in response["groups"])
        return sorted(groups)

    @defer.inlineCallbacks
    def describe_consumer_groups(self, group_ids):
        """Group state, protocol and members with decoded assignments."""
        out = []
        for group_id in group_ids:
            node = yield self.client.find_coordinator(group_id)
            body = {"groups": [group_id], "include_authorized_operations": False}
            response = yield self.client.send(node, DESCRIBE_GROUPS, 4, body)
            for g in response["groups"]:
                if g["error_code"]:
                    raise BrokerResponseError(g["error_code"], where=f"group {group_id}")
                members = []
                for m in g["members"]:
                    entry = {
                        "member_id": m["member_id"],
                        "group_instance_id": m.get("group_instance_id"),
                        "client_id": m["client_id"],
                        "client_host": m["client_host"],
                    }
                    if g["protocol_type"] == "consumer":
                        entry["assignment"] = [
                            TopicPartition(*tp) for tp in decode_assignment(m["member_assignment"])
                        ]
                        if m["member_metadata"]:
                            entry["topics"] = decode_subscription(m["member_metadata"]).topics
                    members.append(entry)
                out.append(
                    {
                        "group_id": g["group_id"],
                        "state": g["group_state"],
                        "protocol_type": g["protocol_type"],
                        "protocol": g["protocol_data"],
                        "members": members,
                    }
                )
        return out

    @defer.inlineCallbacks
    def delete_consumer_groups(self, group_ids, raise_errors=True):
        results = {}
        for group_id in group_ids:
            node = yield self.client.find_coordinator(group_id)
            response = yield self.client.send(node, DELETE_GROUPS, 1, {"groups_names": [group_id]})
            for r in response["results"]:
                results[r["group_id"]] = (r["error_code"], None)
        return _check(results, raise_errors)

    # -- offsets ------------------------------------------------------------------

    @defer.inlineCallbacks
    def list_consumer_group_offsets(self, group_id, partitions=None):
        """``{TopicPartition: committed offset}`` (every committed one by default)."""
        node = yield self.client.find_coordinator(group_id)
        topics = None
        if partitions is not None:
            by_topic = {}
            for tp in partitions:
                by_topic.setdefault(tp[0], []).append(tp[1])
            topics = [{"name": t, "partition_indexes": p} for t, p in by_topic.items()]
        response = yield self.client.send(
            node, OFFSET_FETCH, 5, {"group_id": group_id, "topics": topics}
        )
        if response.get("error_code"):
            raise BrokerResponseError(response["error_code"], where=f"group {group_id}")
        out = {}
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["committed_offset"] >= 0:
                    out[TopicPartition(t["name"], p["partition_index"])] = p["committed_offset"]
        return out

    @defer.inlineCallbacks
    def alter_consumer_group_offsets(self, group_id, offsets):
        """Commit ``{tp: offset}`` for a group with no active members."""
        node = yield self.client.find_coordinator(group_id)
        by_topic = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp[0], []).append(
                {"partition_index": tp[1], "committed_offset": offset, "committed_metadata": ""}
            )
        body = {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()],
        }
        response = yield self.client.send(node, OFFSET_COMMIT, 7, body)
        for t in response["topics"]:
            for p in t["partitions"]:
                if p["error_code"]:
                    raise BrokerResponseError(p["error_code"], where=f"{t['name']}")

    @defer.inlineCallbacks
    def delete_consumer_group_offsets(self, group_id, partitions):
        node = yield self.client.find_coordinator(group_id)
        by_topic = {}
        for tp in partitions:
            by_topic.setdefault(tp[0], []).append({"partition_index": tp[1]})
        body = {
            "group_id": group_id,
            "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()],
        }
        response = yield self.client.send(node, OFFSET_DELETE, 0, body)
        if response["error_code"]:
            raise BrokerResponseError(response["error_code"], where=f"group {group_id}")

    @defer.inlineCallbacks
    def list_offsets(self, timestamps):
        """``{tp: offset}`` for ``{tp: timestamp}`` (-2 earliest, -1 latest)."""
        yield self.client.refresh_metadata()
        by_node = {}
        for tp, ts in timestamps.items():
            by_node.setdefault(self.client.leader_for(TopicPartition(*tp)), []).append((tp, ts))
        out = {}
        for node, items in by_node.items():
            by_topic = {}
            for tp, ts in items:
                by_topic.setdefault(tp[0], []).append({"partition_index": tp[1], "timestamp": ts})
            body = {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()],
            }
            response = yield self.client.send(node, LIST_OFFSETS, 5, body)
            for t in response["topics"]:
                for p in t["partitions"]:
                    if p["error_code"]:
                        raise BrokerResponseError(p["error_code"], where=t["name"])
                    out[TopicPartition(t["name"], p["partition_index"])] = p["offset"]
        return out

    @defer.inlineCallbacks
    def delete_records(self, offsets):
        """Move log start offsets: ``{tp: offset}`` -> ``{tp: low watermark}``."""
        yield self.client.refresh_metadata()
        by_node = {}
        for tp, offset in offsets.items():
            node = self.client.leader_for(TopicPartition(*tp))
            by_node.setdefault(node, []).append((tp, offset))
        out = {}
        for node, items in by_node.items():
            by_topic = {}
            for tp, offset in items:
                by_topic.setdefault(tp[0], []).append({"partition_index": tp[1], "offset": offset})
            body = {
                "topics": [{"name": t, "partitions": p} for t, p in by_topic.items()],
                "timeout_ms": self._timeout_ms(),
            }
            response = yield self.client.send(node, DELETE_RECORDS, 1, body)
            for t in response["topics"]:
                for p in t["partitions"]:
                    if p["error_code"]:
                        raise BrokerResponseError(p["error_code"], where=t["name"])
                    out[TopicPartition(t["name"], p["partition_index"])] = p["low_watermark"]
        return out

"""Conformance kits for the smaller component kinds: partitioner, retention
policy, serializer, authorizer and coordinator.

Each class needs one fixture naming its provider (``partitioner``,
``policy``, ``serializer`` plus ``values``, ``authorizer``,
``coordinator``); see :mod:`pluglog.testing`. Coordinator methods return
Deferreds; the kit resolves them with :meth:`CoordinatorContract.resolve`,
which expects them fired (the ``local`` coordinator's are) and which a
networked coordinator's test class overrides to wait on its reactor.
"""

from types import SimpleNamespace

import pytest
from zope.interface.verify import verifyObject

from pluglog.config import TopicConfig
from pluglog.errors import KafkaError
from pluglog.interfaces import (
    IAuthorizer,
    ICoordinator,
    IPartitioner,
    IRetentionPolicy,
    ISerializer,
)
from pluglog.security.acls import AclBinding
from pluglog.storage.memory import MemoryPartitionLog
from pluglog.testing.storage import NOW, batch


class PartitionerContract:
    """Fixture ``partitioner``: an IPartitioner."""

    KEYS = [None, b"", b"a", b"key-1", bytes(range(256))]

    def test_provides_ipartitioner(self, partitioner):
        assert verifyObject(IPartitioner, partitioner)

    @pytest.mark.parametrize("count", [1, 2, 3, 7, 100])
    def test_partition_is_in_range(self, partitioner, count):
        for _ in range(3):
            for key in self.KEYS:
                chosen = partitioner.partition("t", key, count)
                assert isinstance(chosen, int) and 0 <= chosen < count

    def test_keyed_records_stay_together(self, partitioner):
        for key in self.KEYS[1:]:
            assert len({partitioner.partition("t", key, 12) for _ in range(5)}) == 1


class RetentionContract:
    """Fixture ``policy``: an IRetentionPolicy."""

    def _log(self, segments):
        log = MemoryPartitionLog("t", 0, TopicConfig(segment_bytes=200, retention_ms=-1))
        for i in range(segments * 2):
            log.append(batch(2, ts=1000 * i), NOW, 0, None)
            if i % 2:
                log.roll(NOW)
        return log

    def test_provides_iretentionpolicy(self, policy):
        assert verifyObject(IRetentionPolicy, policy)

    @pytest.mark.parametrize("config", [TopicConfig(), TopicConfig(retention_ms=0)])
    def test_count_never_includes_the_active_segment(self, policy, config):
        log = self._log(4)
        count = policy.segments_to_delete(log, config, NOW)
        assert isinstance(count, int) and 0 <= count < len(log.segment_infos())
        assert policy.segments_to_delete(self._log(0), config, NOW) == 0
        # The broker then deletes them: the log stays readable from its start.
        log.delete_oldest_segments(count)
        assert log.log_start_offset == log.segment_infos()[0].base_offset


class SerializerContract:
    """Fixtures ``serializer`` (an ISerializer) and ``values`` (a list of
    values it must round-trip)."""

    def test_provides_iserializer(self, serializer):
        assert verifyObject(ISerializer, serializer)

    def test_round_trip(self, serializer, values):
        for value in values:
            data = serializer.serialize("t", value)
            if value is None and data is None:
                # a null value stays null: a tombstone, as Kafka's serializers do
                assert serializer.deserialize("t", None) is None
                continue
            assert isinstance(data, bytes | bytearray)
            assert serializer.deserialize("t", bytes(data)) == value


class AuthorizerContract:
    """Fixture ``authorizer``: an IAuthorizer with no ACLs and no super
    users. Bindings and filters are Kafka's AclBinding / AclBindingFilter
    fields (``pluglog.security.acls.AclBinding``; ANY = 1)."""

    TOPIC, LITERAL, READ, WRITE, DENY, ALLOW = 2, 3, 3, 4, 2, 3

    def binding(self, principal, operation, permission, name="orders"):
        return AclBinding(self.TOPIC, name, self.LITERAL, principal, "*", operation, permission)

    def everything(self):
        return SimpleNamespace(
            resource_type=1,
            resource_name=None,
            pattern_type=1,
            principal=None,
            host=None,
            operation=1,
            permission_type=1,
        )

    def _done(self, value):
        # create_acls / delete_acls may answer with a Deferred
        out = []
        if hasattr(value, "addBoth"):
            value.addBoth(out.append)
            assert out, "the Deferred did not fire"
            return out[0]
        return value

    def test_provides_iauthorizer(self, authorizer):
        assert verifyObject(IAuthorizer, authorizer)

    def test_allow_deny_describe_delete(self, authorizer):
        alice, bob = "User:alice", "User:bob"
        results = self._done(
            authorizer.create_acls(
                [
                    self.binding(alice, self.READ, self.ALLOW),
                    self.binding(bob, self.READ, self.ALLOW),
                    self.binding(bob, self.READ, self.DENY),
                ]
            )
        )
        assert list(results) == [None, None, None]
        assert authorizer.authorize(alice, "10.0.0.1", self.READ, self.TOPIC, "orders")
        assert not authorizer.authorize(bob, "10.0.0.1", self.READ, self.TOPIC, "orders")
        assert len(authorizer.describe_acls(self.everything())) == 3
        (gone,) = self._done(authorizer.delete_acls([self.everything()]))
        assert len(gone) == 3 and authorizer.describe_acls(self.everything()) == []


class CoordinatorContract:
    """Fixture ``coordinator``: an ICoordinator, not started, alone in its
    cluster (its broker is the controller)."""

    def resolve(self, deferred):
        """The result of a fired Deferred (override to wait on a reactor)."""
        out = []
        deferred.addBoth(out.append)
        assert out, "the Deferred did not fire"
        if hasattr(out[0], "raiseException"):
            out[0].raiseException()
        return out[0]

    def test_provides_icoordinator(self, coordinator):
        assert verifyObject(ICoordinator, coordinator)

    def test_topic_lifecycle(self, coordinator):
        events = []
        self.resolve(coordinator.start())
        coordinator.add_listener(lambda event, meta: events.append((event, meta.name)))
        assert coordinator.brokers() and coordinator.controller_id() == coordinator.brokers()[0][0]
        assert coordinator.cluster_id()
        self.resolve(coordinator.create_topic("kit", 2, 1, {"retention.ms": "1000"}))
        meta = coordinator.topics()["kit"]
        assert meta.num_partitions == 2 and meta.configs == {"retention.ms": "1000"}
        assert ("created", "kit") in events
        with pytest.raises(KafkaError):
            self.resolve(coordinator.create_topic("kit", 1, 1, {}))
        self.resolve(coordinator.create_partitions("kit", 3))
        assert coordinator.topics()["kit"].num_partitions == 3
        self.resolve(coordinator.alter_topic_config("kit", {"retention.ms": "5"}))
        assert coordinator.topics()["kit"].configs == {"retention.ms": "5"}
        self.resolve(coordinator.delete_topic("kit"))
        assert "kit" not in coordinator.topics() and ("deleted", "kit") in events
        self.resolve(coordinator.stop())

"""pluglog's built-in providers pass the conformance kits of pluglog.testing."""

import sys

import pytest

from pluglog.storage import MemoryLogStorage, SegmentLogStorage
from pluglog.testing.components import (
    AuthorizerContract,
    CoordinatorContract,
    PartitionerContract,
    RetentionContract,
    SerializerContract,
)
from pluglog.testing.storage import StorageContract


class TestSegmentStorage(StorageContract):
    @pytest.fixture
    def storage_factory(self, tmp_path):
        return lambda: SegmentLogStorage(str(tmp_path / "data"))


class TestMemoryStorage(StorageContract):
    durable = False

    @pytest.fixture
    def storage_factory(self):
        return MemoryLogStorage


def _build(kind, name, tmp_path, *plugins):
    from twisted.internet.task import Clock

    from pluglog.config import BrokerConfig
    from pluglog.plugins import make_plugin_manager
    from pluglog.registry import Registry

    registry = Registry(make_plugin_manager(extra_plugins=plugins, autoload=False))
    return registry.build(kind, name, BrokerConfig(data_dir=str(tmp_path)), Clock())


@pytest.mark.parametrize("name", ["murmur2", "round_robin"])
class TestBuiltinPartitioners(PartitionerContract):
    @pytest.fixture
    def partitioner(self, name, tmp_path):
        return _build("partitioner", name, tmp_path)

    def test_keyed_records_stay_together(self, partitioner, name):
        if name == "murmur2":
            super().test_keyed_records_stay_together(partitioner)
        else:  # round_robin ignores keys by design: one key visits every partition
            assert {partitioner.partition("t", b"k", 12) for _ in range(12)} == set(range(12))


class TestDeletePolicy(RetentionContract):
    @pytest.fixture
    def policy(self, tmp_path):
        return _build("retention", "delete", tmp_path)


class TestExamplePartitioner(PartitionerContract):
    """The third-party example partitioner (tests/data/example_plugin)."""

    @pytest.fixture
    def partitioner(self, tmp_path):
        from tests.unit.test_plugins import EXAMPLE

        sys.path.insert(0, EXAMPLE)
        try:
            import pluglog_example

            yield _build("partitioner", "example-last", tmp_path, pluglog_example)
        finally:
            sys.path.remove(EXAMPLE)
            sys.modules.pop("pluglog_example", None)


class TestExampleRetentionPolicy(RetentionContract):
    """The third-party example retention policy (tests/data/example_retention)."""

    @pytest.fixture
    def policy(self, tmp_path):
        from tests.unit.test_retention_choice import example_plugin

        with example_plugin() as module:
            yield _build("retention", "example-keep-two", tmp_path, module)


SERIALIZER_VALUES = {
    "bytes": [b"", b"\x00\xff", b"x" * 1000],
    "string": ["", "naïve", "x" * 1000],
    "json": [None, 1, "s", [1, 2], {"a": {"b": [True, None]}}],
}


class TestBuiltinSerializers(SerializerContract):
    @pytest.fixture(params=sorted(SERIALIZER_VALUES))
    def name(self, request):
        return request.param

    @pytest.fixture
    def serializer(self, name, tmp_path):
        return _build("serializer", name, tmp_path)

    @pytest.fixture
    def values(self, name):
        return SERIALIZER_VALUES[name]


class TestAclAuthorizer(AuthorizerContract):
    @pytest.fixture
    def authorizer(self, tmp_path):
        return _build("authorizer", "acl", tmp_path)


class TestLocalCoordinator(CoordinatorContract):
    @pytest.fixture
    def coordinator(self, tmp_path):
        return _build("coordinator", "local", tmp_path)

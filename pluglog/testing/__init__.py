"""Conformance kits for plugin authors: pytest test classes to subclass.

Each kit is a class of ordinary pytest tests that exercise one interface
through its documented contract only (:mod:`pluglog.interfaces`,
:mod:`pluglog.storage.api`). A plugin's own test suite subclasses it and
provides one fixture that builds its provider; every test of the kit then
runs against that provider::

    import pytest
    from pluglog.testing.storage import StorageContract

    class TestMyStorage(StorageContract):
        @pytest.fixture
        def storage_factory(self, tmp_path):
            # called again on the same tmp_path to check recovery
            return lambda: MyStorage(str(tmp_path / "data"))

Kits: :class:`pluglog.testing.storage.StorageContract` (fixture
``storage_factory``), and in :mod:`pluglog.testing.components`
``PartitionerContract`` (``partitioner``), ``RetentionContract``
(``policy``), ``SerializerContract`` (``serializer`` and ``values``),
``AuthorizerContract`` (``authorizer``) and ``CoordinatorContract``
(``coordinator``). Tests of optional capabilities (compaction, replication,
interval flush) run when the provider declares them and are skipped
otherwise. pluglog runs every kit against its built-in providers
(tests/unit/test_conformance.py).

Importing this package needs pytest; the broker never imports it.
"""

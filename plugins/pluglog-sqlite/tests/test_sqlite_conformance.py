"""pluglog's storage conformance kit against the SQLite provider."""

import pytest
from pluglog_sqlite import SqliteStorage

from pluglog.testing.storage import StorageContract


class TestSqliteStorage(StorageContract):
    @pytest.fixture
    def storage_factory(self, tmp_path):
        return lambda: SqliteStorage(str(tmp_path / "sqlite"))


class TestSqliteStorageFsyncAlways(StorageContract):
    @pytest.fixture
    def storage_factory(self, tmp_path):
        return lambda: SqliteStorage(str(tmp_path / "sqlite"), fsync="always")

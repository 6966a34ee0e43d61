"""pluglog's storage conformance kit against the SQLite provider."""

import pytest
from pluglog_sqlite import SqliteStorage, make_sqlite_storage

from pluglog.testing.storage import StorageContract


class TestSqliteStorage(StorageContract):
    @pytest.fixture
    def storage_factory(self, tmp_path):
        return lambda: SqliteStorage(str(tmp_path / "sqlite"))


class TestSqliteStorageFsyncAlways(StorageContract):
    @pytest.fixture
    def storage_factory(self, tmp_path):
        return lambda: SqliteStorage(str(tmp_path / "sqlite"), fsync="always")


def test_factory_reads_its_config_section(tmp_path):
    from pluglog.config import BrokerConfig

    config = BrokerConfig(data_dir=str(tmp_path / "d"), fsync="always")
    assert make_sqlite_storage(config, None).directory == str(tmp_path / "d" / "sqlite")
    config = config.replace(plugin_sections={"sqlite": {"directory": str(tmp_path / "elsewhere")}})
    storage = make_sqlite_storage(config, None)
    assert storage.directory == str(tmp_path / "elsewhere") and storage.fsync == "always"

"""pluglog-sqlite: registers the ``sqlite`` storage provider through the entry point."""

from pluglog import hookimpl
from pluglog_sqlite.storage import SqliteLog, SqliteStorage

__all__ = ["SqliteLog", "SqliteStorage", "make_sqlite_storage"]


def make_sqlite_storage(config, reactor):
    """The provider: databases under ``<data-dir>/sqlite`` (or the config
    file's ``[sqlite] directory``), with the ``--fsync`` policy."""
    import os

    directory = config.plugin_section("sqlite").get("directory")
    if not directory:
        directory = os.path.join(config.data_dir, "sqlite")
    return SqliteStorage(directory, config.topic_defaults, config.fsync)


@hookimpl
def pluglog_register_storage():
    return {"sqlite": make_sqlite_storage}

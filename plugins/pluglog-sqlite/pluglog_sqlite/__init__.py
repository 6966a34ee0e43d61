"""pluglog-sqlite: registers the ``sqlite`` storage provider through the entry point."""

from pluglog import hookimpl
from pluglog_sqlite.storage import SqliteLog, SqliteStorage

__all__ = ["SqliteLog", "SqliteStorage", "make_sqlite_storage"]


def make_sqlite_storage(config, reactor):
    """The provider: databases under ``<data-dir>/sqlite``, ``--fsync`` policy."""
    import os

    return SqliteStorage(
        os.path.join(config.data_dir, "sqlite"), config.topic_defaults, config.fsync
    )


@hookimpl
def pluglog_register_storage():
    return {"sqlite": make_sqlite_storage}

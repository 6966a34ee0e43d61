"""The remote tier of tiered storage (KIP-405): providers, segment metadata, reads.

* :mod:`.metadata`: :class:`~.metadata.RemoteSegment`, the upload states
  and the object names in the store;
* :mod:`.s3` and :mod:`.filesystem`: the built-in
  :class:`~pluglog.interfaces.IRemoteLogStorage` providers, registered
  through ``pluglog_register_remote_storage`` by :mod:`pluglog.builtin`;
* :mod:`.tier`: :class:`~.tier.RemoteTier`, the remote part of one
  partition's log, which serves reads below the local log start from a
  bounded cache (:class:`~.tier.ChunkCache`).

What uploads, when local segments may go, and where the metadata is kept
durably is the remote log manager's (:mod:`pluglog.tiered`), which knows
partitions and leadership; this package knows only files and objects.
"""


def make_s3_storage(config, reactor):
    """The ``s3`` provider from the ``rsm.config.s3.*`` keys."""
    from pluglog.storage.remote.s3 import S3RemoteStorage  # imports boto3

    return S3RemoteStorage(
        config.rsm_config("s3.bucket"),
        config.rsm_config("s3.endpoint.url"),
        config.rsm_config("s3.region"),
        config.rsm_config("s3.prefix"),
        config.rsm_config("s3.multipart.threshold.bytes"),
    )


def make_filesystem_storage(config, reactor):
    """The ``filesystem`` provider under ``rsm.config.filesystem.root``."""
    from pluglog.storage.remote.filesystem import FilesystemRemoteStorage

    return FilesystemRemoteStorage(config.rsm_config("filesystem.root"))

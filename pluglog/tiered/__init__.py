"""Tiered storage's broker side (KIP-405): the remote log manager and its metadata.

* :mod:`.metadata_store`: ``__remote_log_metadata``, the compacted internal
  topic that durably records every remote segment's state;
* :mod:`.manager`: the remote log manager, a service that attaches a
  :class:`~pluglog.storage.remote.tier.RemoteTier` to the log of each
  partition of a topic with ``remote.storage.enable``, uploads the closed
  segments of the partitions this broker leads, and applies local and
  remote retention, deciding with:
* :mod:`.copier`: which segment goes up next and the upload itself (in a
  pool thread, under the copy quota);
* :mod:`.retention`: which local and remote segments retention deletes.

It sits above storage (the tier, the providers) and group (the internal
topic helpers) and below the broker's services; the broker core does not
know it (docs/architecture.rst, docs/storage.rst "Remote tier").
"""

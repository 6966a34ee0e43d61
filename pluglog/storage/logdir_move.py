"""Moving a partition's log to another log dir of the same broker
(AlterReplicaLogDirs, JBOD), crash-safe.

The move, all on the caller's (reactor) thread so no append interleaves:

1. the log is flushed and its files are copied into
   ``<dest>/<topic>-<partition>.<hex>-future`` (each file fsynced, then the
   dir and its parent), Kafka's name for a future log;
2. the source dir is renamed to ``*.deleted`` (it stops being the copy);
3. the future dir is renamed to ``<dest>/<topic>-<partition>``.

Start-up (:func:`resolve_futures`) then finds exactly one complete copy
whatever moment a crash hit: a future dir next to a live copy is an
unfinished copy and is removed; a future dir without one (a crash between
2 and 3) is complete, since it was fsynced before step 2, and is promoted.

Kafka copies in a background thread and catches the future log up before
the swap; this copy blocks the reactor for as long as the partition's files
take to copy (docs/storage.rst, "Several log dirs").
"""

import os
import shutil
import uuid

from pluglog.fileutil import fsync_directory
from pluglog.storage.filenames import parse_log_dir_name

FUTURE_SUFFIX = "-future"
_NAME_MAX = 255


def future_name(name):
    """``<topic>-<partition>.<hex>-future``, or None when it would not fit NAME_MAX."""
    future = f"{name}.{uuid.uuid4().hex}{FUTURE_SUFFIX}"
    return future if len(future) <= _NAME_MAX else None


def parse_future_name(name):
    """``(topic, partition)`` of a future dir's name, else None."""
    if not name.endswith(FUTURE_SUFFIX):
        return None
    stem = name[: -len(FUTURE_SUFFIX)]
    base, dot, tag = stem.rpartition(".")
    if not dot or len(tag) != 32:
        return None
    return parse_log_dir_name(base)


def copy_log_dir(source, target):
    """Copy the files of ``source`` into the new dir ``target``, durably."""
    os.mkdir(target)
    try:
        for name in sorted(os.listdir(source)):
            path = os.path.join(source, name)
            if not os.path.isfile(path):
                continue
            dest = os.path.join(target, name)
            shutil.copyfile(path, dest)
            fd = os.open(dest, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(target)
        fsync_directory(os.path.dirname(target))
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def resolve_futures(futures, live):
    """Start-up: ``futures`` is ``{(topic, partition): [future dir paths]}``,
    ``live`` the keys with a live copy. Removes unfinished futures and
    returns ``{key: path}`` of the ones to promote (renamed into place)."""
    promoted = {}
    for key, paths in futures.items():
        keep = None if key in live else max(paths, key=os.path.getmtime)
        for path in paths:
            if path != keep:
                shutil.rmtree(path, ignore_errors=True)
        if keep is not None:
            parent = os.path.dirname(keep)
            target = os.path.join(parent, f"{key[0]}-{key[1]}")
            os.replace(keep, target)
            fsync_directory(parent)
            promoted[key] = target
    return promoted

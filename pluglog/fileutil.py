"""Crash-safe small-file writes shared by storage, coordination and the broker.

``atomic_write`` replaces a file so that a crash at any point leaves either
the old or the new contents: write a ``.tmp`` sibling, fsync it, rename it
over the target, fsync the directory so the rename itself is durable.
"""

import os

TMP_SUFFIX = ".tmp"


def fsync_directory(path):
    """fsync a directory, making renames and unlinks inside it durable."""
    fd = os.open(path or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path, data):
    """Replace ``path`` with ``data`` (bytes) atomically and durably."""
    tmp = path + TMP_SUFFIX
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    fsync_directory(os.path.dirname(path))

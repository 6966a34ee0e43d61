"""File writes shared by storage, coordination and the broker.

``write_pieces`` writes a list of buffers at a file position with
``os.pwritev`` (the log's append path: no copy of batch bodies), finishing
short writes byte-exactly. ``atomic_write`` replaces a file so that a crash
at any point leaves either the old or the new contents: write a ``.tmp``
sibling, fsync it, rename it over the target, fsync the directory so the
rename itself is durable. ``syncfs`` syncs a whole file system at once
(Linux 5.8 and later, where it reports write-back errors), for a flush of
many files in one call. ``unlink_files`` removes files best effort (a
deleted segment's, in a pool thread).
"""

import ctypes
import os
import sys

TMP_SUFFIX = ".tmp"


def fsync_path(path, data_only=False):
    """fsync (``data_only``: fdatasync) the file or directory at ``path``
    (opened read-only: an fsync through any descriptor syncs the inode, and
    a directory opens no other way)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_directory(path):
    """fsync a directory, making renames and unlinks inside it durable."""
    fsync_path(path or ".")


def atomic_write(path, data, sync=True):
    """Replace ``path`` with ``data`` (bytes) atomically and durably.

    ``sync=False`` keeps the rename but skips both fsyncs: a process crash
    still leaves the old or the new contents, but an OS crash may leave
    either, or an empty or partial file under the name. Only for files
    whose readers discard a damaged copy (a cache of what the log holds)."""
    tmp = path + TMP_SUFFIX
    with open(tmp, "wb") as handle:
        handle.write(data)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_directory(os.path.dirname(path))


def _load_syncfs():
    """libc's ``syncfs`` where it reports write-back errors, else None.

    Linux documents syncfs as giving "the same guarantees as fsync() called
    on every file in the ... filesystem" (sync(2), NOTES), waiting for the
    writes; only since 5.8 does it return an error when write-back of any
    file there failed (before, it returned 0 regardless)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return None
    if (major, minor) < (5, 8):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_syncfs = _load_syncfs()


def syncfs_available():
    return _syncfs is not None


def syncfs(path):
    """Sync the whole file system holding ``path`` (data and metadata of
    every file, renames included); OSError if that failed. The GIL is
    released meanwhile (ctypes)."""
    if _syncfs is None:
        raise OSError("syncfs is not available here")
    fd = os.open(path, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"syncfs of {path}: {os.strerror(errno)}")
    finally:
        os.close(fd)


_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


def write_pieces(fd, pieces, position, total=None):
    """Write the concatenation of ``pieces`` at ``position`` (pwritev, IOV_MAX-sized);
    ``total``, their combined length if the caller knows it, saves summing it."""
    if len(pieces) <= _IOV_MAX:  # always, for a produced batch (two pieces)
        expected = sum(map(len, pieces)) if total is None else total
        written = os.pwritev(fd, pieces, position)
        if written < expected:
            _finish_write(fd, pieces, position, written)
        return position + expected
    for start in range(0, len(pieces), _IOV_MAX):
        chunk = pieces[start : start + _IOV_MAX]
        expected = sum(map(len, chunk))
        written = os.pwritev(fd, chunk, position)
        if written < expected:
            _finish_write(fd, chunk, position, written)
        position += expected
    return position


def _finish_write(fd, pieces, position, written):
    # Short writes on regular files mean a full disk or a signal; finish the
    # rest byte-exactly, and let a real error propagate.
    rest = memoryview(b"".join(pieces))[written:]
    while rest:
        n = os.pwrite(fd, rest, position + written)
        if n <= 0:
            raise OSError("pwrite wrote nothing")
        written += n
        rest = rest[n:]


def unlink_files(paths):
    """Unlink ``paths``; a file already gone is fine, and any other error
    leaves the file for whoever cleans up after (a segment's ``*.deleted``
    files are removed at the next start)."""
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass

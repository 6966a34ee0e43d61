"""The ``filesystem`` remote storage provider: segment objects in a directory.

``rsm.config.filesystem.root`` names the directory (for example a mounted
network filesystem); objects are files at the names of
:meth:`~pluglog.storage.remote.metadata.RemoteSegment.object_key`. Each is
written to a temporary name, fsynced and renamed, so a reader never sees a
partial object. Blocking: called in the broker's remote-storage threads.
"""

import os
import shutil
import uuid

from zope.interface import implementer

from pluglog.errors import RemoteStorageError
from pluglog.interfaces import IRemoteLogStorage
from pluglog.storage.remote.metadata import PART_SUFFIXES


@implementer(IRemoteLogStorage)
class FilesystemRemoteStorage:
    """IRemoteLogStorage over a directory tree."""

    def __init__(self, root):
        if not root:
            raise RemoteStorageError(
                "rsm.config.filesystem.root is not set (the remote tier's directory)"
            )
        self.root = os.path.abspath(root)

    def __repr__(self):
        return f"<FilesystemRemoteStorage {self.root}>"

    def _path(self, segment, part):
        return os.path.join(self.root, segment.object_key(part))

    def check(self):
        probe = os.path.join(self.root, f".pluglog-probe-{uuid.uuid4().hex}")
        try:
            os.makedirs(self.root, exist_ok=True)
            with open(probe, "wb") as handle:
                handle.write(b"ok")
            os.unlink(probe)
        except OSError as exc:
            raise RemoteStorageError(
                f"rsm.config.filesystem.root {self.root!r} is not a writable directory: "
                f"{exc.strerror or exc}"
            ) from None

    def copy_segment(self, segment, files):
        try:
            os.makedirs(os.path.dirname(self._path(segment, "log")), exist_ok=True)
            for part, source in files.items():
                target = self._path(segment, part)
                tmp = f"{target}.{uuid.uuid4().hex}.tmp"
                with open(tmp, "wb") as out:
                    if isinstance(source, bytes | bytearray | memoryview):
                        out.write(source)
                    else:
                        with open(source, "rb") as src:
                            shutil.copyfileobj(src, out, 1 << 20)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, target)
        except OSError as exc:
            raise RemoteStorageError(
                f"copying {segment.object_key('log')} to {self.root} failed: {exc}"
            ) from None

    def fetch(self, segment, part, start, end):
        path = self._path(segment, part)
        try:
            with open(path, "rb") as handle:
                handle.seek(start)
                return handle.read(-1 if end is None else max(0, end - start))
        except OSError as exc:
            raise RemoteStorageError(f"reading {path} failed: {exc.strerror or exc}") from None

    def delete_segment(self, segment):
        for part in PART_SUFFIXES:
            try:
                os.unlink(self._path(segment, part))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise RemoteStorageError(
                    f"deleting {self._path(segment, part)} failed: {exc.strerror or exc}"
                ) from None

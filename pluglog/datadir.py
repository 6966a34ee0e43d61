"""A broker's hold on its data dir: an exclusive lock and the cluster identity.

Lock: as Kafka's LogManager does, the broker takes a non-blocking exclusive
``flock`` on ``<data-dir>/.lock`` before anything reads or writes in the dir
(recovery, the clean-shutdown marker, the coordinator's files) and holds it
while the process lives; the kernel drops it when the process dies, SIGKILL
included. A second process on the same dir gets :class:`DataDirInUseError`
at once and writes nothing there (the lock file itself aside, if it was
missing). The holder writes its pid into the file, so the refusal names it.

Identity: Kafka's ``meta.properties`` (``version=0``, ``cluster.id``,
``broker.id``) ties the dir to one cluster. Both coordinators call
:func:`check_meta_properties` once they know the cluster id; a dir written
by the single-node ``local`` coordinator also carries
``pluglog.coordinator=local`` (Kafka ignores unknown keys), so a dir moves
between the modes only when the operator removes the file. A dir without the
file (older pluglog versions, the local coordinator never wrote one) gets
it on its first start.
"""

import fcntl
import os
import time

from pluglog.errors import ConfigError
from pluglog.fileutil import atomic_write

LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"
#: meta.properties key naming the coordinator of a non-ZooKeeper dir
COORDINATOR_KEY = "pluglog.coordinator"
LOCAL = "local"
ZOOKEEPER = "zookeeper"


class DataDirInUseError(ConfigError):
    """Another process holds the data dir's lock."""


class DataDirLock:
    """The held ``flock`` of one data dir (see the module docstring)."""

    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, LOCK_FILE)
        self._fd = None

    @classmethod
    def acquire(cls, data_dir):
        """Lock ``data_dir`` (created if missing); raise DataDirInUseError
        if another process holds it, ConfigError if it cannot be made."""
        lock = cls(data_dir)
        try:
            os.makedirs(data_dir, exist_ok=True)
            fd = os.open(lock.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ConfigError(f"cannot open data dir {data_dir}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_pid(fd)
            os.close(fd)
            raise DataDirInUseError(
                f"data dir {data_dir} is in use by another broker process "
                f"(lock {lock.path} held{f' by pid {holder}' if holder else ''})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        lock._fd = fd
        return lock

    @property
    def held(self):
        return self._fd is not None

    def release(self):
        """Unlock (closing the descriptor drops the flock); idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class DataDirLocks:
    """The locks of every log dir (``log.dirs``), taken in order; all or none."""

    def __init__(self, locks):
        self.locks = locks

    @classmethod
    def acquire(cls, data_dirs):
        locks = []
        try:
            for data_dir in data_dirs:
                locks.append(DataDirLock.acquire(data_dir))
        except BaseException:
            for lock in locks:
                lock.release()
            raise
        return cls(locks)

    @property
    def held(self):
        return all(lock.held for lock in self.locks)

    def release(self):
        for lock in self.locks:
            lock.release()


def check_all_meta_properties(data_dirs, cluster_id, broker_id, coordinator, wanted):
    """:func:`check_meta_properties` for each log dir: every dir must belong to
    the same cluster and broker (the first refusal names its dir)."""
    for data_dir in data_dirs:
        check_meta_properties(data_dir, cluster_id, broker_id, coordinator, wanted)


def _read_pid(fd):
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text if text.isdigit() else None


def meta_properties(cluster_id, broker_id, coordinator=ZOOKEEPER):
    """Kafka's ``meta.properties`` (version 0, ZooKeeper mode); a dir of
    another coordinator says which."""
    text = (
        f"#\n#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
        f"cluster.id={cluster_id}\nversion=0\nbroker.id={broker_id}\n"
    )
    if coordinator != ZOOKEEPER:
        text += f"{COORDINATOR_KEY}={coordinator}\n"
    return text


def parse_properties(text):
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def read_meta_properties(data_dir):
    """The data dir's meta.properties as a dict, or None if it has none."""
    path = os.path.join(data_dir, META_PROPERTIES)
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_properties(handle.read())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def _cluster(coordinator, cluster_id):
    if coordinator == LOCAL:
        return f"the single-node cluster {cluster_id} of a --coordinator local broker"
    return f"cluster {cluster_id} (--coordinator {coordinator})"


def _same_broker(stored, broker_id):
    try:
        return int(stored) == broker_id
    except ValueError:
        return False


def check_meta_properties(data_dir, cluster_id, broker_id, coordinator, wanted):
    """Refuse a data dir that belongs to another cluster or mode; write
    meta.properties if it has none. ``wanted`` describes the cluster this
    broker is starting in (for the message). Raises ConfigError, one line
    saying how to proceed. A ZooKeeper broker also refuses another
    ``broker.id``; a local one (its cluster's only broker) records the new id."""
    path = os.path.join(data_dir, META_PROPERTIES)
    props = read_meta_properties(data_dir)
    if props is None:
        os.makedirs(data_dir, exist_ok=True)
        atomic_write(path, meta_properties(cluster_id, broker_id, coordinator).encode())
        return
    stored_mode = props.get(COORDINATOR_KEY, ZOOKEEPER)
    stored_id = props.get("cluster.id") or ""
    if stored_mode != coordinator or (stored_id and stored_id != cluster_id):
        hint = f"start it with --coordinator {stored_mode}, " if stored_mode != coordinator else ""
        raise ConfigError(
            f"data dir {data_dir} belongs to {_cluster(stored_mode, stored_id)}, not to "
            f"{wanted}: {hint}use another --data-dir, or remove {path} if you really "
            "mean to reuse this data"
        )
    stored_broker = props.get("broker.id")
    if stored_broker and not _same_broker(stored_broker, broker_id):
        if coordinator == ZOOKEEPER:
            raise ConfigError(
                f"data dir {data_dir} belongs to broker.id={stored_broker}, not "
                f"broker.id={broker_id}: start it with --broker-id {stored_broker} "
                "or use another --data-dir"
            )
        atomic_write(path, meta_properties(cluster_id, broker_id, coordinator).encode())

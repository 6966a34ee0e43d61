"""Many logs made durable together (issue 24): new partitions and a clean stop.

pluglog.storage.batchsync writes the files first and then syncs each log
dir's file system once (syncfs), falling back to an fsync per file where
that does not apply or fails. Here the real storage runs over real files;
only syncfs itself is replaced by a recorder (or a failure), and the
process's fsync / fdatasync calls are recorded by the path they synced.
"""

import errno
import os

import pytest

from pluglog import errors, topicids
from pluglog.config import TopicConfig
from pluglog.storage import batchsync
from pluglog.storage.filenames import CLEAN_SHUTDOWN_FILE
from pluglog.storage.manager import SegmentLogStorage
from tests.unit.test_storage_segments import make_batch
from tests.unit.test_topic_ids import call, start

pytestmark = pytest.mark.unit

TOPIC_ID = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def syncs(monkeypatch):
    """Paths fsynced / fdatasynced, and the dirs syncfs was asked for."""
    return record_syncs(monkeypatch, batchsync)


def record_syncs(monkeypatch, *modules):
    """Record fsync / fdatasync calls by path, and replace the ``syncfs`` of
    ``modules`` (as available) by a recorder of the dirs asked for."""
    seen = {"fsync": [], "syncfs": []}
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def record(real):
        def call(fd):
            seen["fsync"].append(os.readlink(f"/proc/self/fd/{fd}"))
            return real(fd)

        return call

    monkeypatch.setattr(os, "fsync", record(real_fsync))
    monkeypatch.setattr(os, "fdatasync", record(real_fdatasync))
    for module in modules:
        if hasattr(module, "syncfs_available"):  # a module may ask batchsync's rule
            monkeypatch.setattr(module, "syncfs_available", lambda: True)
        monkeypatch.setattr(module, "syncfs", seen["syncfs"].append)
    return seen


def failing_syncfs(path):
    raise OSError(errno.EIO, f"syncfs of {path}: Input/output error")


def in_partition_dirs(paths, data_dir):
    """The synced paths that lie inside a partition directory."""
    return [p for p in paths if os.path.dirname(p) != str(data_dir) and p != str(data_dir)]


def filled_store(data_dir, logs, min_logs):
    store = SegmentLogStorage(str(data_dir))
    store.syncfs_min_logs = min_logs
    for partition in range(logs):
        log = store.open_log("t", partition, TopicConfig())
        for n in range(3):
            log.append(make_batch(1, value=b"record %d" % n), 1000)
    return store


def reopened_ends(data_dir, logs):
    store = SegmentLogStorage(str(data_dir))
    try:
        assert store.opened_clean
        return [store.get_log("t", p).log_end_offset for p in range(logs)]
    finally:
        store.close()


def test_a_clean_stop_of_many_logs_syncs_the_log_dir_once(tmp_path, syncs):
    data = tmp_path / "data"
    store = filled_store(data, logs=6, min_logs=5)
    syncs["fsync"].clear()
    store.close()
    assert syncs["syncfs"] == [str(data)]
    # No segment, index or epoch file was synced one by one ...
    assert in_partition_dirs(syncs["fsync"], data) == []
    # ... and the clean marker came after the one sync.
    assert (data / CLEAN_SHUTDOWN_FILE).exists()
    assert reopened_ends(data, 6) == [3] * 6


def test_a_failed_syncfs_at_stop_closes_log_by_log(tmp_path, syncs, monkeypatch):
    data = tmp_path / "data"
    store = filled_store(data, logs=6, min_logs=5)
    monkeypatch.setattr(batchsync, "syncfs", failing_syncfs)
    syncs["fsync"].clear()
    store.close()
    synced = in_partition_dirs(syncs["fsync"], data)
    for partition in range(6):
        assert str(data / f"t-{partition}" / "00000000000000000000.log") in synced
        assert str(data / f"t-{partition}" / "00000000000000000000.timeindex") in synced
    assert (data / CLEAN_SHUTDOWN_FILE).exists()
    assert reopened_ends(data, 6) == [3] * 6


def test_a_few_logs_are_closed_log_by_log(tmp_path, syncs):
    # syncfs also writes back other programs' dirty pages: not for a few logs.
    data = tmp_path / "data"
    store = filled_store(data, logs=3, min_logs=100)
    store.close()
    assert syncs["syncfs"] == []
    assert str(data / "t-0" / "00000000000000000000.log") in syncs["fsync"]
    assert reopened_ends(data, 3) == [3] * 3


def make_new_logs(store, count):
    files = {topicids.FILE_NAME: topicids.partition_metadata(TOPIC_ID)}
    paths = store.plan_new_logs([("new", p) for p in range(count)])
    store.prepare_new_logs(paths, files)
    return paths


def test_new_logs_of_a_log_dir_are_synced_with_one_syncfs(tmp_path, syncs):
    data = tmp_path / "data"
    store = SegmentLogStorage(str(data))
    store.syncfs_min_logs = 3
    paths = make_new_logs(store, 4)
    syncs["fsync"].clear()
    store.sync_new_logs(paths)
    assert syncs["syncfs"] == [str(data)]
    assert syncs["fsync"] == []
    # Opening them finds the prepared files: the log and its id are there.
    log = store.open_log("new", 2, TopicConfig())
    assert log.directory == paths[2]
    assert topicids.read_partition_metadata(log.directory) == TOPIC_ID
    log.append(make_batch(1), 1000)
    assert log.log_end_offset == 1
    store.close()


def test_a_failed_syncfs_of_new_logs_falls_back_to_an_fsync_per_file(tmp_path, syncs, monkeypatch):
    data = tmp_path / "data"
    store = SegmentLogStorage(str(data))
    store.syncfs_min_logs = 3
    paths = make_new_logs(store, 4)
    monkeypatch.setattr(batchsync, "syncfs", failing_syncfs)
    syncs["fsync"].clear()
    store.sync_new_logs(paths)
    for path in paths:
        assert os.path.join(path, topicids.FILE_NAME) in syncs["fsync"]
        assert path in syncs["fsync"]
    assert str(data) in syncs["fsync"]  # the new directories' names
    store.close()


def test_few_new_logs_are_synced_file_by_file(tmp_path, syncs):
    data = tmp_path / "data"
    store = SegmentLogStorage(str(data))
    paths = make_new_logs(store, 2)  # fewer than syncfs_min_logs (100)
    store.sync_new_logs(paths)
    assert syncs["syncfs"] == []
    assert os.path.join(paths[0], topicids.FILE_NAME) in syncs["fsync"]
    store.close()


def test_a_failing_fsync_of_a_new_log_is_a_storage_error_naming_it(tmp_path, monkeypatch):
    data = tmp_path / "data"
    store = SegmentLogStorage(str(data))
    paths = make_new_logs(store, 1)

    def fail(path):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(batchsync, "fsync_directory", fail)
    with pytest.raises(errors.KafkaStorageError, match="new-0.*Input/output error"):
        store.sync_new_logs(paths)
    store.close()


def test_a_new_log_deleted_before_its_sync_is_skipped(tmp_path, syncs):
    store = SegmentLogStorage(str(tmp_path / "data"))
    paths = make_new_logs(store, 2)
    os.rename(paths[0], paths[0] + ".gone")
    store.sync_new_logs(paths)  # no error: nothing left to make durable
    assert paths[1] in syncs["fsync"]
    store.close()


def test_preparing_leaves_an_existing_directory_alone(tmp_path):
    store = SegmentLogStorage(str(tmp_path / "data"))
    log = store.open_log("new", 0, TopicConfig())
    log.append(make_batch(1), 1000)
    log.flush()
    before = sorted(os.listdir(log.directory))
    store.prepare_new_logs([log.directory], {topicids.FILE_NAME: b"other"})
    assert sorted(os.listdir(log.directory)) == before
    assert log.log_end_offset == 1
    store.close()


def test_a_crash_part_way_through_preparing_leaves_logs_that_open(tmp_path):
    # What a SIGKILL can leave: a directory with some of its files, a
    # partition.metadata half written (its .tmp), another without any file.
    data = tmp_path / "data"
    data.mkdir()
    part = data / "new-0"
    part.mkdir()
    (part / "00000000000000000000.log").write_bytes(b"")
    (part / (topicids.FILE_NAME + ".tmp")).write_bytes(b"version: 0\ntop")
    (data / "new-1").mkdir()
    store = SegmentLogStorage(str(data))  # no clean marker: an unclean start
    for partition in (0, 1):
        log = store.get_log("new", partition)
        assert log.log_end_offset == 0
        log.append(make_batch(1), 1000)
        assert log.log_end_offset == 1
    assert not (part / (topicids.FILE_NAME + ".tmp")).exists()
    assert (part / "00000000000000000000.index").exists()
    store.close()


def test_create_topics_answers_kafka_storage_error_when_new_logs_cannot_be_synced(
    tmp_path, monkeypatch
):
    from pluglog import protocol as codec

    broker = start(tmp_path / "data")
    try:

        def fail(directories):
            raise errors.KafkaStorageError(f"fsync of new log {directories[0]} failed: EIO")

        monkeypatch.setattr(broker.storage, "sync_new_logs", fail)
        body = {
            "topics": [
                {
                    "name": "big",
                    "num_partitions": 3,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 1000,
            "validate_only": False,
        }
        answer = call(broker, codec.CREATE_TOPICS, 5, body)
        (topic,) = answer["topics"]
        assert topic["error_code"] == errors.KAFKA_STORAGE_ERROR
        assert "fsync of new log" in topic["error_message"]
        assert "big-0" in topic["error_message"]
        # The next creation, with working syncs, is answered without the error.
        monkeypatch.undo()
        body["topics"][0]["name"] = "fine"
        (topic,) = call(broker, codec.CREATE_TOPICS, 5, body)["topics"]
        assert topic["error_code"] == errors.NONE
    finally:
        from tests.unit.test_group_coordinator import result_of

        result_of(broker.stop())


class _Turn:
    """A queued slice of a creation (the fixture runs them one by one)."""

    def active(self):
        return True

    def cancel(self):
        pass


@pytest.fixture
def sliced(tmp_path, monkeypatch):
    """A broker whose reactor (a Clock) offers a thread pool, with pool calls
    run inline and one partition opened per slice: each ``advance(0)`` is
    the next reactor turn of a big creation."""
    from pluglog.broker import log_opening

    monkeypatch.setattr(log_opening, "SLICE_SECONDS", 0)
    monkeypatch.setattr(log_opening, "PREPARE_MIN", 0)  # files made "in a thread"
    monkeypatch.setattr(
        log_opening.threads,
        "deferToThreadPool",
        lambda _reactor, _pool, fn, *args: log_opening.defer.maybeDeferred(fn, *args),
    )
    broker = start(tmp_path / "data")
    clock = broker.reactor
    clock.getThreadPool = lambda: None
    turns = []
    real_later = clock.callLater

    def call_later(delay, fn, *args):
        if getattr(fn, "__self__", None) is broker.new_logs:
            turns.append((fn, args))
            return _Turn()
        return real_later(delay, fn, *args)

    clock.callLater = call_later

    def next_turn():
        fn, args = turns.pop(0)
        fn(*args)

    broker.next_turn = next_turn
    synced = []
    real = broker.storage.sync_new_logs
    monkeypatch.setattr(
        broker.storage, "sync_new_logs", lambda dirs: (synced.append(list(dirs)), real(dirs))
    )
    yield broker, synced
    from tests.unit.test_group_coordinator import result_of

    result_of(broker.stop())


def opened(broker, name):
    return sorted(p for t, p in broker.partitions if t == name)


def test_a_big_creation_opens_logs_turn_by_turn_and_answers_after_one_sync(sliced):
    broker, synced = sliced
    answers = []
    broker.create_topic("big", 4, 1).addCallback(answers.append)
    assert opened(broker, "big") == [0]  # the first slice, in the request's turn
    assert answers == [] and synced == []
    broker.next_turn()  # another turn: other clients were served before it
    assert opened(broker, "big") == [0, 1]
    for _ in range(2):
        broker.next_turn()
    assert opened(broker, "big") == [0, 1, 2, 3]
    assert answers == []
    broker.next_turn()  # the slice that finds nothing left, then the sync
    # Answered only after the new logs were synced, all four together.
    assert [len(dirs) for dirs in synced] == [4]
    assert [meta.name for meta in answers] == ["big"]


def test_a_topic_deleted_during_its_creation_stops_opening_and_is_answered(sliced):
    broker, synced = sliced
    answers = []
    broker.create_topic("big", 4, 1).addBoth(answers.append)
    broker.next_turn()
    from tests.unit.test_group_coordinator import result_of

    result_of(broker.delete_topic("big"))
    broker.next_turn()
    assert opened(broker, "big") == []
    assert len(answers) == 1 and not isinstance(answers[0], Exception)
    assert [len(dirs) for dirs in synced] == [2]  # what it had opened
    # The two whose files a thread had made, never opened, are gone too:
    # nothing would ever open or remove them.
    data = broker.storage.data_dir
    assert [n for n in os.listdir(data) if n.startswith("big-") and n[4:].isdigit()] == []
    # Created again at once: the new topic's partitions all open, fresh.
    again = []
    broker.create_topic("big", 3, 1).addCallback(again.append)
    for _ in range(3):
        broker.next_turn()
    assert opened(broker, "big") == [0, 1, 2] and again
    assert broker.partitions[("big", 1)].log.log_end_offset == 0


def crashed_store(data_dir, logs):
    """``logs`` logs with data never flushed, left without a clean stop (a
    SIGKILL: their writes are in the page cache, their epochs unsaved)."""
    store = SegmentLogStorage(str(data_dir))
    for partition in range(logs):
        log = store.open_log("t", partition, TopicConfig())
        log.append(make_batch(2), 1000, leader_epoch=3)
        log.leader_epochs.assign(3, 0)
    store.write_checkpoints = lambda: None  # the kill came first
    del store


def test_recovery_after_a_crash_syncs_each_log_dir_once(tmp_path, syncs, monkeypatch):
    data = tmp_path / "data"
    crashed_store(data, 6)
    monkeypatch.setattr(SegmentLogStorage, "syncfs_min_logs", 5)
    store = SegmentLogStorage(str(data))
    assert not store.opened_clean
    assert syncs["syncfs"] == [str(data)]
    # No re-scanned segment or repaired epoch file was synced one by one.
    assert in_partition_dirs(syncs["fsync"], data) == []
    for partition in range(6):
        log = store.get_log("t", partition)
        assert (log.recovery_point, log.log_end_offset) == (2, 2)
        assert log.leader_epochs.entries == [(3, 0)]
        assert not log.has_unflushed()
    store.close()
    from pluglog.storage.checkpoints import read_checkpoint

    points = read_checkpoint(str(data / "recovery-point-offset-checkpoint"))
    assert set(points.values()) == {2}


def test_recovery_with_a_failing_syncfs_syncs_log_by_log(tmp_path, syncs, monkeypatch):
    data = tmp_path / "data"
    crashed_store(data, 6)
    monkeypatch.setattr(SegmentLogStorage, "syncfs_min_logs", 5)
    monkeypatch.setattr(batchsync, "syncfs", failing_syncfs)
    store = SegmentLogStorage(str(data))
    synced = in_partition_dirs(syncs["fsync"], data)
    for partition in range(6):
        assert str(data / f"t-{partition}" / "00000000000000000000.log") in synced
        assert str(data / f"t-{partition}" / "leader-epoch-checkpoint") in synced
        assert store.get_log("t", partition).recovery_point == 2
    store.close()

"""SegmentLogStorage over several log dirs (JBOD): placement, a failed dir,
and the start-up states a crash can leave a move in
(pluglog.storage.logdir_move)."""

import os
import shutil

import pytest

from pluglog.config import TopicConfig
from pluglog.errors import KafkaStorageError
from pluglog.storage.manager import SegmentLogStorage
from pluglog.testing.storage import batch, read_all

HEX = "0123456789abcdef" * 2


def _storage(tmp_path):
    return SegmentLogStorage([str(tmp_path / "a"), str(tmp_path / "b")])


def _filled(tmp_path, count=5):
    storage = _storage(tmp_path)
    log = storage.open_log("t", 0)
    for _ in range(count):
        log.append(batch(3), 1000)
    expected = read_all(log)
    storage.close()
    return expected


def test_placement_by_fewest_partitions(tmp_path):
    storage = _storage(tmp_path)
    a, b = storage.data_dirs
    for index in range(3):
        storage.open_log("t", index)
    assert [storage.dir_of("t", i) for i in range(3)] == [a, b, a]
    storage.delete_log("t", 1)
    storage.open_log("u", 0)
    assert storage.dir_of("u", 0) == b
    storage.close()


def test_unfinished_future_next_to_the_live_copy_is_removed(tmp_path):
    expected = _filled(tmp_path)
    future = tmp_path / "b" / f"t-0.{HEX}-future"
    future.mkdir()
    (future / "00000000000000000000.log").write_bytes(b"half a copy")
    storage = _storage(tmp_path)
    assert not future.exists()
    assert storage.dir_of("t", 0) == str(tmp_path / "a")
    assert read_all(storage.get_log("t", 0)) == expected
    storage.close()


def test_complete_future_without_a_live_copy_is_promoted(tmp_path):
    # A crash between retiring the source and renaming the future into place.
    expected = _filled(tmp_path)
    shutil.copytree(tmp_path / "a" / "t-0", tmp_path / "b" / f"t-0.{HEX}-future")
    os.rename(tmp_path / "a" / "t-0", tmp_path / "a" / f"t-0.{HEX}.deleted")
    storage = _storage(tmp_path)
    assert storage.dir_of("t", 0) == str(tmp_path / "b")
    assert read_all(storage.get_log("t", 0)) == expected
    assert not [n for n in os.listdir(tmp_path / "a") if n.startswith("t-0")]
    storage.close()


def test_move_log_keeps_every_record_and_the_log_takes_appends(tmp_path):
    expected = _filled(tmp_path)
    storage = _storage(tmp_path)
    b = str(tmp_path / "b")
    moved = storage.move_log("t", 0, b)
    assert storage.dir_of("t", 0) == b and moved.directory == os.path.join(b, "t-0")
    assert read_all(moved) == expected
    moved.append(batch(2), 2000)
    assert moved.log_end_offset == len(expected) + 2
    storage.close()
    assert not (tmp_path / "a" / "t-0").exists()
    again = _storage(tmp_path)
    assert again.dir_of("t", 0) == b and again.get_log("t", 0).log_end_offset == len(expected) + 2
    again.close()


def test_failed_dir_takes_only_its_logs_offline(tmp_path):
    storage = _storage(tmp_path)
    a, b = storage.data_dirs
    storage.open_log("t", 0)
    storage.open_log("t", 1)
    os.rename(b, str(tmp_path / "gone"))
    assert list(storage.probe_dirs()) == [b]
    assert storage.failed_dirs().keys() == {b}
    with pytest.raises(KafkaStorageError, match=f"log dir {b} failed"):
        storage.open_log("t", 1)
    storage.open_log("t", 0).append(batch(1), 1000)
    storage.open_log("t", 2)
    assert storage.dir_of("t", 2) == a
    with pytest.raises(KafkaStorageError):
        storage.move_log("t", 0, b)
    storage.close()


def test_background_move_copies_in_rounds_while_the_log_takes_appends(tmp_path):
    """The rounds (storage.logdir_move.sync_files) copy only what changed:
    grown files get their tail, a rolled segment is new, a segment removed
    by retention goes; the last step copies the rest, so the moved log holds
    every record exactly once."""
    storage = SegmentLogStorage(
        [str(tmp_path / "a"), str(tmp_path / "b")],
        topic_defaults=TopicConfig().with_overrides({"segment.bytes": "16384"}),
    )
    log = storage.open_log("t", 0)
    for _ in range(40):
        log.append(batch(20), 1000)
    b = str(tmp_path / "b")
    move = storage.begin_move("t", 0, b)
    assert storage.moves() == {("t", 0): move} and os.path.isdir(move.future)
    first = storage.copy_step(move)
    assert first > 0 and storage.move_pending_bytes(move) == 0
    assert storage.copy_step(move) == 0  # nothing changed: nothing copied
    for _ in range(40):
        log.append(batch(20), 2000)  # grows the active segment, rolls new ones
    log.flush()
    pending = storage.move_pending_bytes(move)
    assert 0 < pending < first * 2
    assert storage.copy_step(move) == pending
    log.delete_oldest_segments(1)  # retention meanwhile
    log.append(batch(5), 3000)
    expected = read_all(log)
    moved = storage.finish_move(move)
    assert storage.moves() == {} and storage.dir_of("t", 0) == b
    assert read_all(moved) == expected
    storage.close()
    again = _storage(tmp_path)
    assert read_all(again.get_log("t", 0)) == expected
    assert not [n for n in os.listdir(tmp_path / "b") if n.endswith("-future")]
    again.close()


def test_an_aborted_move_leaves_the_log_where_it_was(tmp_path):
    expected = _filled(tmp_path)
    storage = _storage(tmp_path)
    move = storage.begin_move("t", 0, str(tmp_path / "b"))
    storage.copy_step(move)
    storage.abort_move(move)
    assert not os.path.exists(move.future) and storage.moves() == {}
    assert storage.dir_of("t", 0) == str(tmp_path / "a")
    assert read_all(storage.get_log("t", 0)) == expected
    storage.close()

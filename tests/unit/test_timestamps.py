"""ListOffsets by timestamp finds the first record, not the first batch."""

from twisted.internet.task import Clock

from pluglog.broker.timestamps import offset_for_timestamp
from pluglog.config import TopicConfig
from pluglog.protocol.records import Record, build_batch
from pluglog.storage import MemoryLogStorage, SegmentLogStorage


def _logs(tmp_path):
    for storage in (
        MemoryLogStorage(reactor=Clock()),
        SegmentLogStorage(str(tmp_path), reactor=Clock()),
    ):
        yield storage.open_log("t", 0, TopicConfig())


def test_first_record_inside_a_batch(tmp_path):
    for log in _logs(tmp_path):
        log.append(build_batch([Record(value=b"a", timestamp=t) for t in (100, 200)]), 0)
        log.append(
            build_batch([Record(value=b"b", timestamp=t) for t in (1000, 1001, 1002, 1003)]), 0
        )
        assert offset_for_timestamp(log, 1002, log.log_end_offset) == (4, 1002)
        assert offset_for_timestamp(log, 150, log.log_end_offset) == (1, 200)
        assert offset_for_timestamp(log, 0, log.log_end_offset) == (0, 100)
        assert offset_for_timestamp(log, 5000, log.log_end_offset) is None
        # Records at or past the high watermark are not visible yet.
        assert offset_for_timestamp(log, 1002, 4) is None


def test_out_of_order_timestamps(tmp_path):
    for log in _logs(tmp_path):
        log.append(build_batch([Record(value=b"x", timestamp=t) for t in (50, 500, 60)]), 0)
        assert offset_for_timestamp(log, 55, log.log_end_offset) == (1, 500)

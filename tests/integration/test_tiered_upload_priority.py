"""Upload priority end to end: a real broker, the real ``filesystem`` provider.

Uploads run in an idle-priority child (``SCHED_IDLE``) while they keep up
with local retention, and in a catch-up child (nice +10, ``SCHED_BATCH``)
once segments wait beyond ``local.retention.bytes`` for their upload, so a
broker that keeps its cores busy cannot starve them and grow the disk
without bound (pluglog.tiered.upload_process).
"""

import os
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tests.broker_process import BrokerProcess, free_port
from tests.integration.clients import create_topic, make_records
from tests.integration.test_tiered_storage import (
    LOCAL_RETENTION,
    TOPIC_CONFIG,
    local_bytes,
    local_segments,
    produce,
    remote_files,
    uploaded_down_to_retention,
    wait_for,
)


def scrape(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} is not in /metrics")


def children(pid):
    """(policy, nice) of the live child processes of ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            if parent == pid:
                out.append(
                    (
                        os.sched_getscheduler(int(entry)),
                        os.getpriority(os.PRIO_PROCESS, int(entry)),
                    )
                )
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return out


def test_uploads_yield_the_cpu_until_they_hold_data_beyond_local_retention(tmp_path):
    root = tmp_path / "remote"
    root.mkdir()
    http = free_port()
    broker = BrokerProcess(
        tmp_path / "data",
        settings={
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "filesystem",
            "rsm.config.filesystem.root": str(root),
            "remote.log.manager.task.interval.ms": "200",
            "log.retention.check.interval.ms": "200",
            "remote.log.metadata.topic.num.partitions": "1",
        },
        extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"],
    ).start()
    try:
        # Uploads keeping up: local retention far above what is written.
        roomy = "roomy-history"
        create_topic(
            broker.bootstrap, roomy, 1, {**TOPIC_CONFIG, "local.retention.bytes": str(1 << 30)}
        )
        produce(broker.bootstrap, roomy, make_records(8000, partitions=1))
        closed = len(local_segments(broker, roomy)) - 1
        assert closed >= 3
        wait_for(lambda: len(remote_files(str(root), roomy)) == closed, what="uploads of roomy")
        assert scrape(http, "pluglog_remote_catch_up_copies_total") == 0
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert (os.SCHED_IDLE, mine) in children(broker.proc.pid)
        assert os.SCHED_BATCH not in [policy for policy, _ in children(broker.proc.pid)]

        # Uploads behind: the store is gone while a backlog several times
        # the local retention is written, then back.
        behind = "behind-history"
        create_topic(broker.bootstrap, behind, 1, TOPIC_CONFIG)
        aside = tmp_path / "remote-away"
        os.rename(root, aside)
        root.write_text("not a directory: every upload fails")
        try:
            produce(broker.bootstrap, behind, make_records(8000, partitions=1))
            assert local_bytes(broker, behind) > 3 * LOCAL_RETENTION
        finally:
            root.unlink()
            os.rename(aside, root)
        uploaded_down_to_retention(broker, behind)
        assert scrape(http, "pluglog_remote_catch_up_copies_total") >= 2
        assert (os.SCHED_BATCH, min(19, mine + 10)) in children(broker.proc.pid)
    finally:
        broker.stop()

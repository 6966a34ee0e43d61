"""The twistd service: clean SIGTERM stop, restart without rescan; bad flags
and failed starts are one line, with no traceback and no claim of a clean stop."""

import os
import subprocess
import sys

from tests.broker_process import ROOT, TWISTD, BrokerProcess, assert_refused, free_port
from tests.integration.clients import (
    consume_kafka_python,
    create_topic,
    make_records,
    produce_confluent,
)


def test_sigterm_flushes_checkpoints_and_restart_does_not_rescan(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    create_topic(broker.bootstrap, "durable", partitions=2)
    records = make_records(4000, partitions=2)
    produce_confluent(broker.bootstrap, "durable", records, "gzip")
    # twistd re-raises SIGTERM after a clean shutdown, so -15 is the normal exit.
    assert broker.stop() in (0, -15)
    log = broker.log()
    assert "stopped cleanly" in log
    assert "Traceback" not in log
    assert (data / ".pluglog_cleanshutdown").exists()
    checkpoint = (data / "recovery-point-offset-checkpoint").read_text().split("\n")
    assert checkpoint[0] == "0"
    points = {tuple(line.split()[:2]): int(line.split()[2]) for line in checkpoint[2:] if line}
    assert points[("durable", "0")] + points[("durable", "1")] == 4000

    again = BrokerProcess(data, port=broker.port).start()
    try:
        got = consume_kafka_python(again.bootstrap, "durable", 2, len(records))
        assert sorted(map(repr, got)) == sorted(map(repr, records))
        assert "recovered durable" not in again.log()[len(log) :]
    finally:
        again.stop()


def test_memory_storage_runs(tmp_path):
    broker = BrokerProcess(tmp_path / "data", extra_args=["--storage", "memory"]).start()
    try:
        records = make_records(100, partitions=1)
        create_topic(broker.bootstrap, "mem", partitions=1)
        produce_confluent(broker.bootstrap, "mem", records)
        assert len(consume_kafka_python(broker.bootstrap, "mem", 1, 100)) == 100
        assert not any(p.startswith("mem-") for p in os.listdir(tmp_path / "data"))
    finally:
        broker.stop()


def test_bad_flag_prints_only_the_error(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, "-c", TWISTD, "-n", "--pidfile=", "pluglog", "--fsync", "sometimes"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    # The error first, not under twistd's 20 lines of help.
    lines = result.stderr.splitlines()
    assert lines[0] == "twistd pluglog: --fsync: 'sometimes' is not one of never, interval, always"
    assert "--help" in lines[1] and len(lines) == 2
    assert "Usage:" not in result.stdout + result.stderr


def test_port_in_use_is_one_line(tmp_path, shared_broker):
    exited = BrokerProcess(tmp_path / "data", port=shared_broker.port).run_until_exit()
    assert_refused(
        exited,
        "pluglog broker failed to start: Couldn't listen on 127.0.0.1:"
        f"{shared_broker.port}: [Errno 98] Address already in use",
    )
    assert shared_broker.alive()


def test_unreadable_tls_file_is_one_line(tmp_path):
    port, tls_port = free_port(), free_port()
    missing = tmp_path / "no-such-cert.pem"
    broker = BrokerProcess(
        tmp_path / "data",
        port=port,
        settings={
            "listeners": f"SSL://127.0.0.1:{tls_port},PLAINTEXT://127.0.0.1:{port}",
            "ssl.keystore.location": str(missing),
        },
    )
    assert_refused(
        broker.run_until_exit(),
        f"ssl.keystore.location: cannot read '{missing}': No such file or directory",
    )


def test_fsync_always_serves_and_survives_sigkill(tmp_path):
    broker = BrokerProcess(tmp_path / "data", extra_args=["--fsync", "always"]).start()
    records = make_records(2000, partitions=1)
    create_topic(broker.bootstrap, "synced", partitions=1)
    produce_confluent(broker.bootstrap, "synced", records, "zstd", **{"acks": "all"})
    broker.kill()
    again = BrokerProcess(tmp_path / "data", port=broker.port).start()
    try:
        got = consume_kafka_python(again.bootstrap, "synced", 1, len(records))
        assert got == records
    finally:
        again.stop()

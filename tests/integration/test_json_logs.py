"""``twistd pluglog --log-format json``: a real broker's log is JSON lines (issue 23).

Every line of the broker's output is one JSON object with ``time``, ``level``,
``namespace`` and ``message`` plus the event's own fields, from start-up to
the clean stop, warnings included.
"""

import json
import socket
import time
from datetime import datetime

import pytest
from confluent_kafka import Producer

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


def _lines(broker):
    return [line for line in broker.log().splitlines() if line.strip()]


def test_json_log_lines(tmp_path):
    broker = BrokerProcess(tmp_path / "data", extra_args=["--log-format", "json"]).start()
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("logged", b"value")
        assert producer.flush(20) == 0
        # Bad input: the broker warns and closes the connection.
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
            sock.sendall(b"\x7f\xff\xff\xff" + b"\x1b[31mjunk")
            sock.settimeout(5)
            assert sock.recv(1) == b""
        time.sleep(0.3)
    finally:
        broker.stop()
    events = [json.loads(line) for line in _lines(broker)]  # every line parses
    assert len(events) > 5
    for event in events:
        assert isinstance(event, dict)
        assert {"time", "level", "namespace", "message"} <= event.keys(), event
        assert event["level"] in ("debug", "info", "warn", "error", "critical"), event
        datetime.strptime(event["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
        assert not any(key.startswith("log_") for key in event), event
    (listening,) = [e for e in events if "listening on" in e["message"]]
    assert listening["namespace"] == "pluglog.service"
    assert listening["level"] == "info"
    assert listening["aport"] == broker.port and listening["host"] == "127.0.0.1"
    assert listening["data"] == str(tmp_path / "data")
    (closing,) = [e for e in events if e["message"].startswith("closing connection from")]
    assert closing["level"] == "warn"
    assert closing["namespace"] == "pluglog.server.protocol"
    assert closing["peer"].startswith("127.0.0.1:")
    assert "frame size" in closing["reason"]
    assert events[-1]["message"] == "Server Shut Down."
    assert any(e["message"].startswith("pluglog broker stopped cleanly") for e in events)

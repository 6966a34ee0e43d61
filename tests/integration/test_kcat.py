"""kcat (librdkafka 2.0 from Debian) against the broker: -L, -P, -C -e, -Q."""

import json
import subprocess
import time

import pytest

from tests.integration.clients import create_topic


def kcat(broker, *args, data=None, timeout=60):
    result = subprocess.run(
        ["kcat", "-b", broker.bootstrap, *args],
        input=data,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout.decode()


def test_metadata_list(shared_broker):
    create_topic(shared_broker.bootstrap, "kcat-meta", partitions=4)
    meta = json.loads(kcat(shared_broker, "-L", "-J"))
    assert (
        meta["brokers"] == [{"id": 0, "name": f"127.0.0.1:{shared_broker.port}"}]
        or meta["brokers"][0]["name"] == f"127.0.0.1:{shared_broker.port}"
    )
    topics = {t["topic"]: t for t in meta["topics"]}
    assert len(topics["kcat-meta"]["partitions"]) == 4
    assert all(p["leader"] == 0 for p in topics["kcat-meta"]["partitions"])


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_then_consume(shared_broker, codec):
    topic = f"kcat-pc-{codec}"
    lines = [f"line {i} {codec}" for i in range(500)]
    kcat(shared_broker, "-P", "-t", topic, "-p", "0", "-z", codec, data="\n".join(lines).encode())
    out = kcat(shared_broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert out.splitlines() == lines


def test_keys_headers_json(shared_broker):
    topic = "kcat-keys"
    kcat(
        shared_broker,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-K",
        ":",
        "-H",
        "trace=abc",
        data=b"k1:v1\nk2:v2\n",
    )
    out = kcat(shared_broker, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-J")
    msgs = [json.loads(line) for line in out.splitlines()]
    assert [(m["key"], m["payload"], m["offset"]) for m in msgs] == [
        ("k1", "v1", 0),
        ("k2", "v2", 1),
    ]
    assert msgs[0]["headers"] == ["trace", "abc"]


def test_offsets_by_time(shared_broker):
    topic = "kcat-time"
    create_topic(shared_broker.bootstrap, topic, partitions=1)
    kcat(shared_broker, "-P", "-t", topic, "-p", "0", data=b"a\nb\nc\n")
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    kcat(shared_broker, "-P", "-t", topic, "-p", "0", data=b"d\ne\n")
    out = kcat(shared_broker, "-Q", "-t", f"{topic}:0:{middle}")
    # kcat prints: "<topic> [0] offset 3"
    assert "offset 3" in out, out
    future = int(time.time() * 1000) + 3_600_000
    out = kcat(shared_broker, "-Q", "-t", f"{topic}:0:{future}")
    assert "offset -1" in out, out
    out = kcat(shared_broker, "-C", "-t", topic, "-o", f"s@{middle}", "-e", "-q")
    assert out.splitlines() == ["d", "e"]

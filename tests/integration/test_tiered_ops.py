"""Tiered storage as an operator meets it: ``topics describe``, credentials, the copy quota.

A real broker process, a real ``moto_server`` S3 and the real boto3 client
(tests/moto_s3.py), as in test_tiered_storage.py, whose helpers these
tests share. The credentials tests run moto with its IAM-like access
control on (``INITIAL_NO_AUTH_ACTION_COUNT``), so a wrong secret or a
revoked key is refused as AWS would refuse it.
"""

import json
import os
import time
import urllib.request
import uuid

import kafka
import kafka.protocol.consumer.offsets
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.broker_process import assert_refused, free_port
from tests.integration.clients import create_topic, make_records
from tests.integration.test_cli import cli
from tests.integration.test_tiered_storage import (
    TOPIC_CONFIG,
    latest_segments,
    local_bytes,
    metadata_states,
    produce,
    remote_ids,
    remote_log_bytes,
    settled_segments,
    tiered_broker,
    wait_for,
)
from tests.moto_s3 import MotoServer

pytestmark = pytest.mark.integration


def new_bucket(moto):
    name = f"pluglog-{uuid.uuid4().hex[:12]}"
    moto.client().create_bucket(Bucket=name)
    return name


def earliest_local(bootstrap, topic):
    spec = kafka.protocol.consumer.offsets.OffsetSpec
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    tp = kafka.TopicPartition(topic, 0)
    try:
        return admin.list_partition_offsets({tp: spec.EARLIEST_LOCAL})[tp].offset
    finally:
        admin.close()


def test_topics_describe_shows_local_and_remote_sizes_and_offsets(moto, tmp_path):
    bucket = new_bucket(moto)
    broker = tiered_broker(tmp_path, moto.url, bucket).start()
    try:
        topic = "described"
        create_topic(broker.bootstrap, topic, partitions=1, config=TOPIC_CONFIG)
        records = [(0, k, v, h) for _p, k, v, h in make_records(3000, partitions=1)]
        produce(broker.bootstrap, topic, records)
        settled_segments(broker, topic)
        # The ground truth, each from its own source: the bucket, the
        # broker's data dir, the metadata topic and ListOffsets.
        uploaded = [s for s in latest_segments(metadata_states(broker.bootstrap)).values() if s]
        uploaded = [s for s in uploaded if s.state == "COPY_SEGMENT_FINISHED"]
        assert len(uploaded) >= 3
        remote_end = max(s.end_offset for s in uploaded)
        first_local = earliest_local(broker.bootstrap, topic)
        assert 0 < first_local <= remote_end + 1

        described = json.loads(cli(broker, "topics", "describe", topic, "--json").stdout)
        (part,) = described["partitions"]
        assert part["start_offset"] == 0
        assert part["end_offset"] == len(records)
        assert part["local_start_offset"] == first_local
        assert part["local_bytes"] == local_bytes(broker, topic)
        assert part["remote_start_offset"] == 0
        assert part["remote_end_offset"] == remote_end
        assert part["remote_bytes"] == remote_log_bytes(moto, bucket, topic)

        out = cli(broker, "topics", "describe", topic).stdout
        assert (
            f"Start: 0\tEnd: {len(records)}\tLocalStart: {first_local}"
            f"\tLocalBytes: {part['local_bytes']}\tRemoteStart: 0\tRemoteEnd: {remote_end}"
            f"\tRemoteBytes: {part['remote_bytes']}"
        ) in out

        # An untiered topic's line and document stay as they were.
        create_topic(broker.bootstrap, "plain", partitions=1)
        plain = json.loads(cli(broker, "topics", "describe", "plain", "--json").stdout)
        assert "remote_bytes" not in plain["partitions"][0]
        assert "RemoteBytes" not in cli(broker, "topics", "describe", "plain").stdout
    finally:
        broker.stop()


# -- credentials: moto with its IAM-like access control on ------------------------------

_ALLOW = (
    '{"Version": "2012-10-17",'
    ' "Statement": [{"Effect": "Allow", "Action": "%s", "Resource": "*"}]}'
)


class AuthMoto:
    """A moto_server that checks every request's signature and the IAM
    policies of its user. Its first three actions (an admin user, its
    policy and its key) go unchecked, as INITIAL_NO_AUTH_ACTION_COUNT=3
    tells moto; everything after is signed by that admin or by the users
    it makes."""

    def __init__(self, directory):
        self.server = MotoServer(directory)
        self.admin = None

    def start(self):
        saved = os.environ.get("INITIAL_NO_AUTH_ACTION_COUNT")
        os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
        try:
            self.server.start()
        finally:
            if saved is None:
                os.environ.pop("INITIAL_NO_AUTH_ACTION_COUNT")
            else:
                os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = saved
        iam = self.client("iam", ("testing", "testing"))
        iam.create_user(UserName="admin")
        iam.put_user_policy(UserName="admin", PolicyName="all", PolicyDocument=_ALLOW % "*")
        key = iam.create_access_key(UserName="admin")["AccessKey"]
        self.admin = (key["AccessKeyId"], key["SecretAccessKey"])
        return self

    def client(self, service, credentials=None):
        import boto3

        key_id, secret = credentials or self.admin
        return boto3.client(
            service,
            endpoint_url=self.server.url,
            region_name="us-east-1",
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
        )

    def new_user(self):
        """A user allowed s3:* only, and its access key ``(id, secret)``."""
        name = f"broker-{uuid.uuid4().hex[:8]}"
        iam = self.client("iam")
        iam.create_user(UserName=name)
        iam.put_user_policy(UserName=name, PolicyName="s3", PolicyDocument=_ALLOW % "s3:*")
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return name, (key["AccessKeyId"], key["SecretAccessKey"])

    def new_bucket(self):
        name = f"pluglog-{uuid.uuid4().hex[:12]}"
        self.client("s3").create_bucket(Bucket=name)
        return name

    def object_count(self, bucket):
        listed = self.client("s3").list_objects_v2(Bucket=bucket)
        return listed.get("KeyCount", 0)


@pytest.fixture(scope="module")
def auth_moto(tmp_path_factory):
    server = AuthMoto(str(tmp_path_factory.mktemp("moto-auth"))).start()
    yield server
    server.server.stop()


def use_credentials(monkeypatch, credentials):
    """The broker processes started next get these (boto3's usual source)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", credentials[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", credentials[1])


def test_a_wrong_secret_stops_the_broker_with_one_line(auth_moto, monkeypatch, tmp_path):
    _user, (key_id, _secret) = auth_moto.new_user()
    bucket = auth_moto.new_bucket()
    use_credentials(monkeypatch, (key_id, "not-the-secret"))
    exited = tiered_broker(tmp_path, auth_moto.server.url, bucket).run_until_exit()
    assert_refused(exited, "rsm.config.s3.bucket", bucket, "refuses these credentials")


def scrape(port, topic):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("topic", topic) == topic:
                out[sample.name] = sample.value
    return out


def test_a_key_revoked_while_running_is_logged_counted_and_loses_nothing(
    auth_moto, monkeypatch, tmp_path
):
    user, credentials = auth_moto.new_user()
    bucket = auth_moto.new_bucket()
    use_credentials(monkeypatch, credentials)
    http = free_port()
    broker = tiered_broker(tmp_path, auth_moto.server.url, bucket)
    broker.extra_args += ["--http", f"tcp:{http}:interface=127.0.0.1"]
    broker.start()
    try:
        topic = "revoked"
        create_topic(broker.bootstrap, topic, partitions=1, config=TOPIC_CONFIG)
        before = [(0, k, v, h) for _p, k, v, h in make_records(3000, partitions=1)]
        produce(broker.bootstrap, topic, before)
        # The good key works: segments go up and local retention follows.
        wait_for(lambda: earliest_local(broker.bootstrap, topic) > 0, what="uploads")
        settled_segments(broker, topic)
        objects = auth_moto.object_count(bucket)
        assert objects > 0
        assert scrape(http, topic)["pluglog_remote_copy_failures_total"] == 0

        auth_moto.client("iam").delete_access_key(UserName=user, AccessKeyId=credentials[0])
        during = [(0, k, v, h) for _p, k, v, h in make_records(3000, partitions=1, seed=3000)]
        produce(broker.bootstrap, topic, during)  # produce does not need the store
        line = "remote storage of revoked-0 failed"
        wait_for(lambda: line in broker.log_since_start(), what="the failure log line")
        wait_for(
            lambda: scrape(http, topic)["pluglog_remote_copy_failures_total"] >= 2,
            what="the failure metric counting the passes that fail",
        )
        failed = [entry for entry in broker.log_since_start().splitlines() if line in entry]
        assert len(failed) == 1, failed  # one line, not one per pass
        assert "InvalidAccessKeyId" in failed[0]
        assert "Traceback" not in broker.log_since_start()
        # Nothing written since left the disk, and nothing remote was deleted.
        local_start = earliest_local(broker.bootstrap, topic)
        assert local_start <= len(before)
        assert local_bytes(broker, topic) > 2 * TOPIC_SEGMENT_BYTES
        assert auth_moto.object_count(bucket) == objects
        tail = read_from(broker.bootstrap, topic, local_start, len(before) + len(during))
        assert tail == [v for _p, _k, v, _h in (before + during)[local_start:]]
    finally:
        broker.stop()


TOPIC_SEGMENT_BYTES = int(TOPIC_CONFIG["segment.bytes"])


def read_from(bootstrap, topic, offset, end):
    """Values of ``topic``-0 from ``offset`` up to ``end`` (kafka-python)."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000)
    tp = kafka.TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, offset)
    got = []
    deadline = time.monotonic() + 30
    while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [(r.offset, r.value) for r in records]
    consumer.close()
    return [v for _o, v in got]


# -- ListOffsets by timestamp in the remote tier -----------------------------------------


def produce_timed(bootstrap, topic, count, first_ms, step_ms):
    """``count`` records whose timestamps grow by ``step_ms``, many to a batch."""
    import confluent_kafka

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 50}
    )
    for i in range(count):
        producer.produce(
            topic, value=b"v%05d-" % i + b"x" * 90, partition=0, timestamp=first_ms + i * step_ms
        )
        producer.poll(0)
    assert producer.flush(30) == 0


def lookups(bootstrap, topic, targets):
    """kafka-python's offsets_for_times: ``{target: (offset, timestamp)}``."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap)
    tp = kafka.TopicPartition(topic, 0)
    try:
        out = {}
        for target in targets:
            found = consumer.offsets_for_times({tp: target})[tp]
            out[target] = None if found is None else (found.offset, found.timestamp)
        return out
    finally:
        consumer.close()


def test_list_offsets_by_timestamp_into_a_remote_segment_answers_the_exact_record(moto, tmp_path):
    bucket = new_bucket(moto)
    broker = tiered_broker(tmp_path, moto.url, bucket).start()
    try:
        topic = "timed"
        # Uploaded but kept locally at first: the answers before tiering.
        config = {**TOPIC_CONFIG, "local.retention.bytes": str(100 << 20)}
        create_topic(broker.bootstrap, topic, partitions=1, config=config)
        first_ms, step = int(time.time() * 1000) - 3_600_000, 10
        count = 3000
        produce_timed(broker.bootstrap, topic, count, first_ms, step)
        wait_for(lambda: len(remote_ids(moto, bucket, topic)) >= 4, what="uploads")
        # Mid-batch and mid-segment targets: between two records (the later
        # answers), on a record, and the very first.
        targets = [first_ms - 1, first_ms + 5, first_ms + 317 * step - 3, first_ms + 555 * step]
        targets += [first_ms + k * step + 1 for k in (101, 402, 777)]
        before = lookups(broker.bootstrap, topic, targets)
        for target, answer in before.items():
            k = max(0, -(-(target - first_ms) // step))
            assert answer == (k, first_ms + k * step), target
        assert earliest_local(broker.bootstrap, topic) == 0

        cli(
            broker,
            "topics",
            "alter-config",
            topic,
            "--set",
            f"local.retention.bytes={TOPIC_CONFIG['local.retention.bytes']}",
        )
        wait_for(lambda: earliest_local(broker.bootstrap, topic) > 800, what="local retention")
        # Every target is below the local start now: the remote tier answers.
        assert lookups(broker.bootstrap, topic, targets) == before
    finally:
        broker.stop()


# -- the copy quota (KIP-956) -------------------------------------------------------------


def test_the_copy_quota_bounds_the_upload_rate(moto, tmp_path):
    rate = 48 * 1024  # bytes per second: 1.5 segments of 32 KiB a second
    bucket = new_bucket(moto)
    broker = tiered_broker(
        tmp_path,
        moto.url,
        bucket,
        **{"remote.log.manager.copy.max.bytes.per.second": str(rate)},
    ).start()
    try:
        topic = "paced"
        # Written before tiering is on, so every segment is ready at once
        # when it is: unpaced, they would go up in a fraction of a second.
        untiered = {k: v for k, v in TOPIC_CONFIG.items() if k != "remote.storage.enable"}
        create_topic(broker.bootstrap, topic, partitions=1, config=untiered)
        records = [(0, k, v, h) for _p, k, v, h in make_records(6000, partitions=1)]
        produce(broker.bootstrap, topic, records)
        cli(broker, "topics", "alter-config", topic, "--set", "remote.storage.enable=true")
        wait_for(lambda: len(remote_ids(moto, bucket, topic)) >= 6, what="uploads")
        states = metadata_states(broker.bootstrap)
        started = [
            json.loads(v)
            for k, v in states
            if k[0] == "segment" and v and b"COPY_SEGMENT_STARTED" in v
        ]
        finished = sorted(
            (json.loads(v) for k, v in states if v and b"COPY_SEGMENT_FINISHED" in v),
            key=lambda s: s["event_ms"],
        )
        assert len(finished) >= 6
        # Each copy starts only once the bytes before it had their time at
        # the rate: from the first copy's start to the last one's end at
        # least (all bytes but the last segment's) / rate. A slow machine
        # only makes it longer.
        first_start = min(s["event_ms"] for s in started)
        owed_s = sum(s["size_bytes"] for s in finished[:-1]) / rate
        assert (finished[-1]["event_ms"] - first_start) / 1000 >= owed_s * 0.999
        assert owed_s >= 2
    finally:
        broker.stop()

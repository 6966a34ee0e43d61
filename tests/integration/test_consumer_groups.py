"""KIP-848 consumer groups with confluent-kafka 2.16 (``group.protocol=consumer``)
against the real broker process.

The consumers are the worker processes of :mod:`tests.integration.test_groups`
(they record a record only once its commit succeeded), run with the consumer
protocol: the broker assigns, sets the session and heartbeat times, and hands
a partition to a new owner only after its old owner revoked it, which the
workers' rebalance callbacks (timestamped hand-overs) show.
"""

import signal
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient
from tests.broker_process import BrokerProcess
from tests.integration.clients import create_topic
from tests.integration.test_cli import cli
from tests.integration.test_groups import (
    Worker,
    assert_exactly_once,
    committed,
    produce,
    stall_dumps,
    wait_for,
)

pytestmark = pytest.mark.integration

SESSION_MS = 6000
SETTINGS = {
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.heartbeat.interval.ms": "500",
}


@pytest.fixture
def broker(tmp_path):
    proc = BrokerProcess(tmp_path / "data", settings=SETTINGS).start()
    yield proc
    proc.stop()


def describe(bootstrap, group):
    """DescribeConsumerGroups (ConsumerGroupDescribe): the group's description."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group])[group].result(timeout=20)


def assignments(bootstrap, group):
    """``{member id: {partition}}`` as DescribeConsumerGroups reports them."""
    described = describe(bootstrap, group)
    return {
        m.member_id: {tp.partition for tp in m.assignment.topic_partitions}
        for m in described.members
    }


def split(bootstrap, group, sizes, parts):
    """Wait until the members hold ``sizes`` partitions (sorted) covering all."""

    def done():
        held = assignments(bootstrap, group)
        flat = sorted(p for ps in held.values() for p in ps)
        return sorted(map(len, held.values())) == sizes and flat == list(range(parts))

    wait_for(done, 60, f"a {sizes} split", step=0.5)


def assert_one_owner_at_a_time(workers, killed):
    """Incremental revocation as the clients saw it: a partition is gained
    (on_assign) only after its previous owner lost it (on_revoke), or after
    that owner was SIGKILLed (``killed``: worker -> time)."""
    events = []
    for w in workers:
        events += [(t, kind, w, parts) for t, kind, parts in w.handovers()]
        if w in killed:
            events.append((killed[w], "L", w, set(range(64))))
    owner = {}
    for t, kind, w, parts in sorted(events, key=lambda e: e[0]):
        for p in parts:
            if kind == "G":
                assert p not in owner, (
                    f"partition {p} gained by {w.out} at {t} while {owner[p].out} held it"
                )
                owner[p] = w
            elif owner.get(p) is w:
                del owner[p]
    assert any(kind == "L" for w in workers for _t, kind, _p in w.handovers())


def test_three_members_leave_kill_join_exactly_once(broker, tmp_path):
    bootstrap = broker.bootstrap
    topic, group, parts, per_round = "kip848", "kip848-g", 12, 1200
    create_topic(bootstrap, topic, partitions=parts)
    spec = {
        "bootstrap": bootstrap,
        "topic": topic,
        "group": group,
        "protocol": "consumer",
        "delay": 0.05,
    }
    workers = [Worker(tmp_path, f"c{i}", **spec) for i in range(3)]
    produced = 0

    def more():
        nonlocal produced
        produce(bootstrap, topic, per_round, parts, start=produced)
        produced += per_round

    def progress():
        return len({r for w in workers for r in w.records()})

    try:
        split(bootstrap, group, [4, 4, 4], parts)
        described = describe(bootstrap, group)
        assert described.type == confluent_kafka.ConsumerGroupType.CONSUMER
        assert described.state == confluent_kafka.ConsumerGroupState.STABLE
        assert described.partition_assignor == "uniform"
        for member in described.members:
            assert member.target_assignment is not None
            assert {tp.partition for tp in member.target_assignment.topic_partitions} == {
                tp.partition for tp in member.assignment.topic_partitions
            }
        # pluglog's own CLI shows the members too (ConsumerGroupDescribe).
        out = cli(broker, "groups", "describe", group).stdout
        assert "State: Stable\tMembers: 3" in out
        rows = [line.split("\t") for line in out.splitlines() if line.startswith(topic + "\t")]
        assert sorted(int(r[1]) for r in rows) == list(range(parts))
        assert len({r[5] for r in rows}) == 3
        more()
        wait_for(lambda: progress() >= produced // 2, 60, "half of the first round")
        workers[0].stop(signal.SIGTERM)  # a clean close: epoch -1
        more()
        split(bootstrap, group, [6, 6], parts)
        wait_for(lambda: progress() >= produced - per_round // 2, 60, "the second round")
        victim = workers[1]
        assert victim.assigned()
        victim.stop(signal.SIGKILL)
        killed_at, killed_wall = time.monotonic(), time.time()
        more()
        split(bootstrap, group, [12], parts)
        # Session expiry, then the survivor's next heartbeats.
        assert time.monotonic() - killed_at < SESSION_MS / 1000 + 5
        workers.append(Worker(tmp_path, "c3", **spec))
        more()
        split(bootstrap, group, [6, 6], parts)
        more()
        try:
            wait_for(lambda: progress() >= produced, 90, "every record")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {progress()} of {produced}\n{stall_dumps(workers)}\n"
                f"--- broker log:\n{broker.log()[-8000:]}"
            ) from None
    finally:
        for w in workers:
            w.stop(signal.SIGTERM)
    per_partition = dict.fromkeys(range(parts), produced // parts)
    assert_one_owner_at_a_time(workers, {victim: killed_wall})
    assert_exactly_once([r for w in workers for r in w.records()], per_partition)
    assert committed(bootstrap, group, topic, parts) == per_partition
    # Everyone left: the group is empty and says so.
    assert describe(bootstrap, group).state == confluent_kafka.ConsumerGroupState.EMPTY


def test_group_survives_a_broker_restart(tmp_path):
    proc = BrokerProcess(tmp_path / "data", settings=SETTINGS).start()
    try:
        bootstrap = proc.bootstrap
        topic, group = "kip848-restart", "kip848-restart-g"
        create_topic(bootstrap, topic, partitions=4)
        spec = {"bootstrap": bootstrap, "topic": topic, "group": group, "protocol": "consumer"}
        workers = [Worker(tmp_path, f"r{i}", **spec) for i in range(2)]
        try:
            split(bootstrap, group, [2, 2], 4)
            before = assignments(bootstrap, group)
            proc.stop()
            proc.start()
            # The coordinator reloads the group from __consumer_offsets: same
            # members, same partitions, members carry on at their epochs.
            after = assignments(bootstrap, group)
            assert after == before
            split(bootstrap, group, [2, 2], 4)
            produce(bootstrap, topic, 400, 4)
            wait_for(
                lambda: len({r for w in workers for r in w.records()}) >= 400, 60, "the records"
            )
        finally:
            for w in workers:
                w.stop(signal.SIGTERM)
        assert_exactly_once(
            [r for w in workers for r in w.records()], dict.fromkeys(range(4), 100)
        )
    finally:
        proc.stop()


def group_epochs(bootstrap, group):
    """``(group epoch, {instance id: (member id, member epoch, {partition})})``."""
    host, port = bootstrap.split(":")
    with BlockingClient(host, int(port), timeout=5) as client:
        out = client.request(
            codec.CONSUMER_GROUP_DESCRIBE,
            0,
            {"group_ids": [group], "include_authorized_operations": False},
        )["groups"][0]
    return out["group_epoch"], {
        m["instance_id"]: (
            m["member_id"],
            m["member_epoch"],
            {p for tp in m["assignment"]["topic_partitions"] for p in tp["partitions"]},
        )
        for m in out["members"]
    }


def test_static_member_restart_keeps_its_partitions(broker, tmp_path):
    bootstrap = broker.bootstrap
    topic, group = "kip848-static", "kip848-static-g"
    create_topic(bootstrap, topic, partitions=4)
    spec = {"bootstrap": bootstrap, "topic": topic, "group": group, "protocol": "consumer"}
    a = Worker(tmp_path, "sa1", instance="sa", **spec)
    b = Worker(tmp_path, "sb", instance="sb", **spec)
    a2 = None
    try:
        split(bootstrap, group, [2, 2], 4)
        epoch, before = group_epochs(bootstrap, group)
        a.stop(signal.SIGTERM)  # librdkafka leaves with epoch -2: "back soon"
        wait_for(lambda: group_epochs(bootstrap, group)[1]["sa"][1] == -2, 30, "epoch -2")
        a2 = Worker(tmp_path, "sa2", instance="sa", **spec)
        wait_for(lambda: group_epochs(bootstrap, group)[1]["sa"][0] != before["sa"][0], 30, "a2")
        produce(bootstrap, topic, 400, 4)
        wait_for(lambda: len(set(a2.records() + b.records())) >= 400, 60, "the records")
        epoch_after, after = group_epochs(bootstrap, group)
        # The new instance took over the old one's partitions; b was not moved
        # and the group epoch did not change: no rebalance.
        assert after["sa"][2] == before["sa"][2] and after["sb"] == before["sb"]
        assert epoch_after == epoch
        assert {p for p, _ in a2.records()} == before["sa"][2]
    finally:
        for w in (a, b, a2):
            if w is not None:
                w.stop(signal.SIGTERM)
    assert_exactly_once(a2.records() + b.records() + a.records(), dict.fromkeys(range(4), 100))

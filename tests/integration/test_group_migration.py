"""KIP-1099: groups converting between the classic and the consumer protocol
(``group.consumer.migration.policy``), with real clients against the broker
process.

The consumers are the worker processes of :mod:`tests.integration.test_groups`
(they record a record only once its commit succeeded): librdkafka classic
members (eager ``range``) and a ``group.protocol=consumer`` member in one
group. No record may be lost or counted twice across the upgrade and the
downgrade.
"""

import json
import signal

import confluent_kafka
import pytest

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

SETTINGS = {
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "500",
}


def request(bootstrap, key, version, body):
    host, port = bootstrap.split(":")
    with BlockingClient(host, int(port), timeout=5) as client:
        return client.request(key, version, body)


def members(bootstrap, group):
    """ConsumerGroupDescribe v1: ``{member id: (member type, {partition})}``, or
    None while the group is not a consumer group."""
    body = {"group_ids": [group], "include_authorized_operations": False}
    out = request(bootstrap, codec.CONSUMER_GROUP_DESCRIBE, 1, body)["groups"][0]
    if out["error_code"] != 0:
        return None
    return {
        m["member_id"]: (
            m["member_type"],
            {p for tp in m["assignment"]["topic_partitions"] for p in tp["partitions"]},
        )
        for m in out["members"]
    }


def classic_state(bootstrap, group):
    """DescribeGroups: ``(state, protocol type, member count)``."""
    out = request(bootstrap, codec.DESCRIBE_GROUPS, 5, {"groups": [group]})["groups"][0]
    return out["group_state"], out["protocol_type"], len(out["members"])


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_classic_group_upgrades_and_downgrades_under_load(tmp_path, assignor):
    # range: eager members give up everything before they rejoin;
    # cooperative-sticky: they rejoin owning their partitions and revoke
    # only those the server-side assignor moves away.
    broker = BrokerProcess(tmp_path / "data", settings=SETTINGS).start()
    bootstrap, topic, group, parts, per_round = broker.bootstrap, "mig", "mig-g", 6, 600
    create_topic(bootstrap, topic, partitions=parts)
    spec = {"bootstrap": bootstrap, "topic": topic, "group": group, "delay": 0.05}
    workers = [Worker(tmp_path, f"k{i}", assignor=assignor, **spec) for i in range(2)]
    modern = None
    produced = 0

    def more():
        nonlocal produced
        produce(bootstrap, topic, per_round, parts, start=produced)
        produced += per_round

    def progress():
        return len({r for w in workers for r in w.records()})

    def split(types, sizes):
        def done():
            found = members(bootstrap, group)
            if found is None:
                return False
            held = sorted(p for _t, ps in found.values() for p in ps)
            return (
                sorted(t for t, _ps in found.values()) == types
                and sorted(len(ps) for _t, ps in found.values()) == sizes
                and held == list(range(parts))
            )

        wait_for(done, 60, f"members of types {types} holding {sizes}", step=0.5)

    try:
        wait_for(lambda: sorted(len(w.assigned()) for w in workers) == [3, 3], 60, "3+3")
        assert members(bootstrap, group) is None  # a classic group
        more()
        wait_for(lambda: progress() >= produced // 2, 60, "half of the first round")
        # A consumer-protocol member joins the live classic group: it
        # becomes a consumer group and the assignor splits it three ways.
        modern = Worker(tmp_path, "modern", protocol="consumer", **spec)
        workers.append(modern)
        split([0, 0, 1], [2, 2, 2])
        # pluglog's CLI names the protocol each member speaks (v1's MemberType).
        shown = json.loads(cli(broker, "groups", "describe", group, "--json").stdout)
        kinds = sorted(m["protocol"] for m in shown["members"])
        assert kinds == ["classic", "classic", "consumer"]
        assert "Protocols: classic,consumer" in cli(broker, "groups", "describe", group).stdout
        more()
        # All of it: the partitions the new member holds are read by it alone.
        wait_for(lambda: progress() >= produced, 60, "the second round")
        assert modern.records(), "the consumer-protocol member consumed nothing"
        # It leaves: only classic members remain, so the group is classic again.
        modern.stop(signal.SIGTERM)
        wait_for(lambda: members(bootstrap, group) is None, 30, "the downgrade")
        wait_for(
            lambda: classic_state(bootstrap, group) == ("Stable", "consumer", 2), 60, "Stable"
        )
        wait_for(lambda: sorted(len(w.assigned()) for w in workers[:2]) == [3, 3], 60, "3+3 again")
        more()
        try:
            wait_for(lambda: progress() >= produced, 90, "every record")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {progress()} of {produced}\n{stall_dumps(workers)}\n"
                f"--- broker log:\n{broker.log()[-8000:]}"
            ) from None
        for w in workers:
            w.stop(signal.SIGTERM)
        per_partition = dict.fromkeys(range(parts), produced // parts)
        assert_exactly_once([r for w in workers for r in w.records()], per_partition)
        assert committed(bootstrap, group, topic, parts) == per_partition
        # The classic members consumed after the downgrade too.
        after = [t for w in workers[:2] for t, _batch in w.batches()]
        assert max(after) > max(t for t, _b in modern.batches())
        log = broker.log()
        assert "classic group with 2 member(s) converted to a consumer group" in log
        assert "only classic members left; converted to a classic group" in log
        assert "Traceback" not in log
    finally:
        for w in workers:
            w.stop(signal.SIGTERM)
        broker.stop()


def test_disabled_policy_refuses_the_consumer_protocol_in_a_live_classic_group(tmp_path):
    # group.consumer.migration.policy=disabled keeps the classic group: the
    # new member is refused with GROUP_ID_NOT_FOUND, which librdkafka treats
    # as fatal; the classic member keeps its partitions. Once the classic
    # members are gone the empty group converts (under any policy).
    settings = {**SETTINGS, "group.consumer.migration.policy": "disabled"}
    broker = BrokerProcess(tmp_path / "data", settings=settings).start()
    bootstrap, topic, group = broker.bootstrap, "kip848-mixed", "kip848-mixed-g"
    create_topic(bootstrap, topic, partitions=2)
    classic = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    modern = None
    try:
        classic.subscribe([topic])
        wait_for(lambda: classic.poll(0.1) is None and len(classic.assignment()) == 2, 30, "a")
        modern = confluent_kafka.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer"}
        )
        modern.subscribe([topic])
        errors_seen = []

        def refused():
            classic.poll(0.05)
            m = modern.poll(0.05)
            if m is not None and m.error():
                errors_seen.append(m.error())
            return bool(errors_seen)

        wait_for(refused, 30, "the refusal")
        assert errors_seen[0].code() == confluent_kafka.KafkaError._FATAL
        assert "group id does not exist" in errors_seen[0].str()
        assert len(classic.assignment()) == 2
        assert members(bootstrap, group) is None
    finally:
        classic.close()
        if modern is not None:
            modern.close()
    # Empty now: a consumer-protocol member converts the group and gets both.
    later = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer"}
    )
    try:
        later.subscribe([topic])
        wait_for(lambda: later.poll(0.1) is None and len(later.assignment()) == 2, 30, "b")
        assert list(members(bootstrap, group).values())[0][0] == 1
    finally:
        later.close()
        broker.stop()


def test_bad_migration_policy_is_refused_in_one_line(tmp_path):
    exited = BrokerProcess(
        tmp_path / "data", settings={"group.consumer.migration.policy": "sideways"}
    ).run_until_exit()
    assert exited.returncode == 2
    # The setting is refused while the options are read: the reason first,
    # then the pointer to --help, and no traceback.
    lines = exited.stderr.splitlines()
    assert lines[0] == (
        "twistd pluglog: group.consumer.migration.policy: 'sideways' is not one of "
        "disabled, upgrade, downgrade, bidirectional"
    )
    assert len(lines) == 2 and "--help" in lines[1]
    assert "Traceback" not in exited.stderr + exited.log


def test_kafka_python_classic_member_through_upgrade_and_downgrade(tmp_path):
    broker = BrokerProcess(tmp_path / "data", settings=SETTINGS).start()
    bootstrap, topic, group = broker.bootstrap, "kp", "kp-g"
    create_topic(bootstrap, topic, partitions=4)
    spec = {"bootstrap": bootstrap, "topic": topic, "group": group}
    classic = Worker(tmp_path, "kp", client="kafka-python", **spec)
    modern = None
    try:
        wait_for(lambda: len(classic.assigned()) == 4, 60, "the classic member's 4")
        produce(bootstrap, topic, 400, 4)
        wait_for(lambda: len(classic.records()) >= 400, 60, "the first records")
        modern = Worker(tmp_path, "modern", protocol="consumer", **spec)

        def two_and_two():
            found = members(bootstrap, group)
            return found is not None and sorted((t, len(ps)) for t, ps in found.values()) == [
                (0, 2),
                (1, 2),
            ]

        wait_for(two_and_two, 60, "a classic and a consumer member with 2 each")
        produce(bootstrap, topic, 400, 4, start=400)
        wait_for(lambda: len(set(classic.records() + modern.records())) >= 800, 60, "round 2")
        assert modern.records(), "the consumer-protocol member consumed nothing"
        modern.stop(signal.SIGTERM)
        wait_for(lambda: members(bootstrap, group) is None, 30, "the downgrade")
        wait_for(lambda: len(classic.assigned()) == 4, 60, "all 4 back")
        produce(bootstrap, topic, 400, 4, start=800)
        wait_for(lambda: len(set(classic.records() + modern.records())) >= 1200, 60, "round 3")
    finally:
        classic.stop(signal.SIGTERM)
        if modern is not None:
            modern.stop(signal.SIGTERM)
        broker.stop()
    assert_exactly_once(classic.records() + modern.records(), dict.fromkeys(range(4), 300))

"""Pure parts of the zookeeper coordinator: Kafka's replica assignment, the
controller's election rules, zookeeper.connect parsing and the znode JSON."""

import pytest
from twisted.python import usage

from pluglog.coordination import assignment as assign
from pluglog.coordination import election
from pluglog.coordination import zkdata as z
from pluglog.coordination.state import NO_LEADER, PartitionState
from pluglog.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError


def test_round_robin_matches_kafka():
    # kafka.admin.AdminTest.testReplicaAssignment (5 brokers, 10 partitions, RF 3, start 0).
    brokers = [(b, None) for b in range(5)]
    expected = {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }
    assert assign.assign_replicas(brokers, 10, 3, start_index=0) == expected


def test_rack_aware_matches_kafka():
    # kafka.admin.AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert assign.rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    result = assign.assign_replicas(list(racks.items()), 7, 3, start_index=0)
    assert result == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }
    for replicas in result.values():
        assert len({racks[b] for b in replicas}) == 3


def test_random_start_still_spreads_evenly():
    result = assign.assign_replicas([(b, None) for b in (1, 2, 3)], 6, 2)
    leaders = [r[0] for r in result.values()]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]
    assert all(len(set(r)) == 2 for r in result.values())


def test_replication_factor_larger_than_brokers():
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 available"):
        assign.assign_replicas([(1, None), (2, None)], 1, 3)
    with pytest.raises(InvalidReplicationFactorError):
        assign.assign_replicas([(1, None)], 1, 0)


def test_new_partitions_continue_round_robin():
    brokers = [(b, None) for b in range(3)]
    existing = assign.assign_replicas(brokers, 3, 2, start_index=0)
    added = assign.assign_new_partitions(brokers, existing, 5)
    assert sorted(added) == [3, 4]
    assert all(len(set(r)) == 2 for r in added.values())


def test_explicit_assignment_checks():
    assert assign.validate_assignment({0: [1, 2], 1: [2, 1]}, {1, 2}) == {0: [1, 2], 1: [2, 1]}
    for bad, match in (
        ({0: [1, 1]}, "twice"),
        ({0: [1, 9]}, "unknown broker"),
        ({0: [1], 1: [1, 2]}, "same"),
        ({1: [1]}, "partitions"),
    ):
        with pytest.raises(InvalidReplicaAssignmentError, match=match):
            assign.validate_assignment(bad, {1, 2})


def st(leader, isr, epoch=3):
    return PartitionState(leader, epoch, tuple(isr), 1, 7)


def test_offline_election_clean_unclean_and_offline():
    live = {2, 3}
    # Leader 1 died: first live replica in assignment order that is in the ISR.
    new = election.offline([1, 3, 2], st(1, [1, 2, 3]), live, set(), lambda: False)
    assert (new.leader, new.leader_epoch, new.isr) == (3, 4, (2, 3))
    # Only a follower died: same leader, ISR shrinks, epoch bumps.
    new = election.offline([2, 1, 3], st(2, [2, 1, 3]), live, set(), lambda: False)
    assert (new.leader, new.leader_epoch, new.isr) == (2, 4, (2, 3))
    # Nothing to do.
    assert election.offline([2, 3], st(2, [2, 3]), live, set(), lambda: False) is None
    # No ISR member alive: offline keeping the ISR, or unclean when allowed.
    new = election.offline([1, 3], st(1, [1]), live, set(), lambda: False)
    assert (new.leader, new.isr) == (NO_LEADER, (1,))
    new = election.offline([1, 3], st(1, [1]), live, set(), lambda: True)
    assert (new.leader, new.isr) == (3, (3,))
    # Already offline and still no candidate: no write.
    assert election.offline([1], st(NO_LEADER, [1]), live, set(), lambda: False) is None


def test_preferred_unclean_and_shutdown_rules():
    live = {1, 2, 3}
    assert election.preferred([1, 2], st(1, [1, 2]), live, set()) == (None, election.NOT_NEEDED)
    code = election.preferred([1, 2], st(2, [2]), live, set())[1]
    assert code == election.PREFERRED_NOT_AVAILABLE
    new, code = election.preferred([1, 2], st(2, [2, 1]), live, set())
    assert (new.leader, code) == (1, election.OK)
    assert election.unclean([1, 2], st(1, [1]), live)[1] == election.NOT_NEEDED
    new, code = election.unclean([1, 2], st(NO_LEADER, [1]), {2})
    assert (new.leader, new.isr, code) == (2, (2,), election.OK)
    assert election.unclean([1], st(NO_LEADER, [1]), {2})[1] == election.NOT_ELIGIBLE
    new = election.shutdown([1, 2, 3], st(1, [1, 2, 3]), 1, live, {1})
    assert (new.leader, new.isr) == (2, (2, 3))
    new = election.shutdown([2, 1], st(2, [2, 1]), 1, live, {1})
    assert (new.leader, new.isr) == (2, (2,))
    assert election.shutdown([1, 2], st(1, [1]), 1, live, {1}) is None


def test_leader_imbalance_rule():
    # Broker 1 prefers ten partitions: one led away is 10 %, not more.
    balanced = [(p, [1, 2], st(1, [1, 2])) for p in range(9)]
    one_away = [(9, [1, 2], st(2, [2, 1]))]
    assert election.imbalanced(balanced + one_away, {1, 2}) == {}
    two_away = [(p, [1, 2], st(2, [2, 1])) for p in (8, 9)]
    assert election.imbalanced(balanced[:8] + two_away, {1, 2}) == {1: [8, 9]}
    # Not live, or in no ISR of those led away: nothing could move back yet.
    assert election.imbalanced(balanced[:8] + two_away, {2}) == {}
    out_of_sync = [(p, [1, 2], st(2, [2])) for p in (8, 9)]
    assert election.imbalanced(balanced[:8] + out_of_sync, {1, 2}) == {}
    # One in sync is enough to ask; all led away are named (the election
    # refuses the others); partitions without a state or replicas count not.
    mixed = [
        (8, [1, 2], st(2, [2])),
        (9, [1, 2], st(2, [2, 1])),
        (10, [1, 2], None),
        (11, [], None),
    ]
    assert election.imbalanced(balanced[:8] + mixed, {1, 2}) == {1: [8, 9]}


def test_parse_connect():
    assert z.parse_connect("127.0.0.1:2181") == ("127.0.0.1:2181", "")
    assert z.parse_connect("a:1,b.example:2/kafka/x") == ("a:1,b.example:2", "/kafka/x")
    for bad in ("", "host", "host:0", "host:99999", "a:1,/x", "a:1/bad path", "a:b"):
        with pytest.raises(ValueError, match="zookeeper.connect"):
            z.parse_connect(bad)


def test_znode_bodies_are_kafkas():
    body = z.broker_json("h", 9092, "r1")
    assert body["version"] == 5 and body["endpoints"] == ["PLAINTEXT://h:9092"]
    assert body["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert (body["rack"], body["jmx_port"], body["host"], body["port"]) == ("r1", -1, "h", 9092)
    assert z.broker_from_json("4", body) == (4, "h", 9092, "r1")
    tid = z.new_topic_id()
    topic = z.topic_json({0: [1, 2]}, tid, internal=True)
    assert topic["version"] == 3 and topic["partitions"] == {"0": [1, 2]}
    assert topic["adding_replicas"] == {} and topic["removing_replicas"] == {}
    assert len(topic["topic_id"]) == 22
    assert z.topic_from_json(z.loads(z.dumps(topic))) == ({0: [1, 2]}, tid, True, {}, {})
    assert z.config_json({"retention.ms": 5}) == {"version": 1, "config": {"retention.ms": "5"}}
    props = z.parse_properties(z.meta_properties("cid", 3))
    assert props == {"cluster.id": "cid", "version": "0", "broker.id": "3"}


def test_tap_refuses_bad_zookeeper_options(tmp_path):
    from pluglog.tap import Options

    def parse(*args):
        options = Options()
        options.parseOptions(["--data-dir", str(tmp_path), *args])
        return options

    with pytest.raises(usage.UsageError, match="zookeeper.connect"):
        parse("--coordinator", "zookeeper", "--broker-id", "1")
    with pytest.raises(usage.UsageError, match="not HOST:PORT"):
        parse("--coordinator", "zookeeper", "--set", "zookeeper.connect=nohost")
    ini = tmp_path / "b.ini"
    ini.write_text("[broker]\nzookeeper.connect = 127.0.0.1:2181/c\n")
    options = parse("--coordinator", "zookeeper", "--config", str(ini), "--broker-id", "2")
    assert options.broker_config.zookeeper_connect == "127.0.0.1:2181/c"
    assert options.broker_config.broker_id == 2

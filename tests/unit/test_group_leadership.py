"""The group coordinator follows the leadership of ``__consumer_offsets`` partitions.

A real Broker on in-memory storage with the ``local`` coordinator; leadership
of an offsets partition is flipped the way the replica manager does it
(``Partition.become_follower`` / ``become_leader`` followed by
``Broker.leadership_changed``), and everything is driven by a Clock. With
three offsets partitions, group "c" lives in partition 0, "g" in 1, "b" in 2.
"""

import dataclasses

import pytest
from twisted.internet import defer

from pluglog import errors
from pluglog import protocol as codec
from pluglog.coordination.state import TopicMetadata
from pluglog.group import OFFSETS_TOPIC, GroupCoordinator
from pluglog.group.model import DEAD, PREPARING_REBALANCE, STABLE, OffsetAndMetadata
from pluglog.group.store import group_key, offset_key, offset_value, partition_for
from pluglog.protocol import records
from tests.unit.test_group_coordinator import SESSION, Env, pending, result_of
from tests.unit.test_group_handlers import call
from tests.unit.test_group_offsets import commit, fetch

FOLLOWER_OF = 1  # the other broker that leads a partition we lost


@pytest.fixture
def env(tmp_path):
    env = Env(tmp_path)
    # What Broker.start wires in a real broker: leadership changes reach it.
    env.broker.group_coordinator = env.gc
    result_of(env.broker.create_topic("t", 4, 1))
    result_of(env.gc.ensure_offsets_topic())
    assert [partition_for(g, 3) for g in ("c", "g", "b")] == [0, 1, 2]
    # The cluster's view agrees with the flips below: an offsets partition
    # this broker lost is led by FOLLOWER_OF there too.
    env.led_elsewhere = set()
    cluster_state = env.broker.coordinator.partition_state

    def partition_state(topic, index):
        state = cluster_state(topic, index)
        if state is not None and (topic, index) in env.led_elsewhere:
            return dataclasses.replace(state, leader=FOLLOWER_OF)
        return state

    env.broker.coordinator.partition_state = partition_state
    return env


def offsets_part(env, index):
    return env.broker.partitions[(OFFSETS_TOPIC, index)]


def lose(env, index):
    """Another broker now leads offsets partition ``index``."""
    part = offsets_part(env, index)
    env.led_elsewhere.add((OFFSETS_TOPIC, index))
    part.become_follower(FOLLOWER_OF, part.leader_epoch + 1, (0, FOLLOWER_OF), (FOLLOWER_OF,))
    env.broker.leadership_changed(part)


def win(env, index, isr=(0,)):
    """This broker leads offsets partition ``index`` again, in a newer epoch."""
    part = offsets_part(env, index)
    env.led_elsewhere.discard((OFFSETS_TOPIC, index))
    part.become_leader(part.leader_epoch + 1, (0, FOLLOWER_OF), isr, env.broker.now_ms())
    env.broker.leadership_changed(part)
    return part


def join(env, group, member_id=""):
    return env.join(member_id, group=group)


def stable(env, group):
    """One member joined and synced; returns (member id, generation)."""
    joined = result_of(join(env, group))
    member, generation = joined["member_id"], joined["generation_id"]
    synced = result_of(env.sync(member, generation, {member: b"A"}, group=group))
    assert synced["error_code"] == errors.NONE
    return member, generation


def replicate(env, index, group, topic, partition, offset):
    """Append an offset commit to the partition as a follower would, i.e.
    what the partition's other leader wrote while this broker followed."""
    part = offsets_part(env, index)
    now = env.broker.now_ms()
    om = OffsetAndMetadata(offset, -1, "", now, -1)
    batch = records.build_batch(
        [records.Record(offset_key(group, topic, partition), offset_value(om), (), now)],
        base_offset=part.log.log_end_offset,
        base_timestamp=now,
        partition_leader_epoch=part.leader_epoch,
    )
    part.append_replicated(batch, part.log.log_end_offset + 1, now)


def every_api_error(env, group, member="m", generation=1):
    """The error each group API answers for ``group`` right now."""
    items = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}]
    committed = result_of(env.gc.commit_offsets(group, generation, member, None, -1, items))
    return {
        "join": result_of(join(env, group))["error_code"],
        "sync": result_of(env.sync(member, generation, group=group))["error_code"],
        "heartbeat": env.heartbeat(member, generation, group=group),
        "leave": env.gc.leave_group(group, [(member, None)])[0],
        "commit": committed[0]["partitions"][0]["error_code"],
        "fetch": env.gc.fetch_offsets(group, [("t", [0])])[0],
        "describe": env.gc.describe_group(group)["error_code"],
        "delete": result_of(env.gc.delete_groups([group]))[0][1],
        "offset_delete": result_of(env.gc.delete_offsets(group, [("t", [0])]))[0],
    }


# -- NOT_COORDINATOR and unloading ------------------------------------------------


def test_a_partition_the_cluster_names_here_but_not_open_yet_is_loading(env):
    """FindCoordinator names this broker from the cluster's state while the
    new log is still being opened (log_opening's slices): every group API
    then answers COORDINATOR_LOAD_IN_PROGRESS, which clients retry here,
    not NOT_COORDINATOR, which sends them looking elsewhere."""
    member, gen = stable(env, "g")
    env.broker.partitions.pop((OFFSETS_TOPIC, 1))
    answers = every_api_error(env, "g", member, gen)
    assert answers == dict.fromkeys(answers, errors.COORDINATOR_LOAD_IN_PROGRESS)
    # Led elsewhere in the cluster's view: NOT_COORDINATOR again.
    env.led_elsewhere.add((OFFSETS_TOPIC, 1))
    answers = every_api_error(env, "g", member, gen)
    assert answers == dict.fromkeys(answers, errors.NOT_COORDINATOR)


def test_every_group_api_says_not_coordinator_for_a_partition_led_elsewhere(env):
    member, gen = stable(env, "g")
    assert commit(env, {("t", 0): 5}, group="c") == {("t", 0): 0}
    lose(env, 1)
    answers = every_api_error(env, "g", member, gen)
    assert answers == dict.fromkeys(answers, errors.NOT_COORDINATOR)
    # The group of a partition still led here is untouched.
    assert fetch(env, [("t", [0])], group="c") == (0, {("t", 0): (5, "", -1)})
    assert env.gc.list_groups() == (0, [("c", "", "Empty", "classic")])


def test_losing_leadership_unloads_the_partitions_groups(env):
    member, gen = stable(env, "g")
    other, other_gen = stable(env, "b")
    parked_join = pending(join(env, "g"))  # a second member waits for "g" to rebalance
    group = env.gc.groups["g"]
    lose(env, 1)
    assert result_of(parked_join)["error_code"] == errors.NOT_COORDINATOR
    assert group.state == DEAD
    assert "g" not in env.gc.groups and 1 not in env.gc.owned
    # Its timers went with it; the other group's are still running.
    calls = env.clock.getDelayedCalls()
    assert not [c for c in calls if group in c.args]
    assert [c for c in calls if env.gc.groups["b"] in c.args]
    env.clock.advance(SESSION / 1000.0 * 3)
    assert env.heartbeat(other, other_gen, group="b") == errors.UNKNOWN_MEMBER_ID


def test_a_parked_sync_is_answered_not_coordinator(env):
    first = result_of(join(env, "g"))
    second = join(env, "g")
    rejoined = result_of(join(env, "g", first["member_id"]))
    second = result_of(second)
    parked = pending(env.sync(second["member_id"], rejoined["generation_id"], group="g"))
    lose(env, 1)
    assert result_of(parked)["error_code"] == errors.NOT_COORDINATOR


def test_a_missed_notification_heals_on_the_next_request(env):
    member, gen = stable(env, "g")
    part = offsets_part(env, 1)
    part.go_offline()  # a lost ZooKeeper session: no leadership_changed call
    assert env.heartbeat(member, gen, group="g") == errors.NOT_COORDINATOR
    assert "g" not in env.gc.groups


def test_a_lost_session_unloads_everything_and_the_restored_one_reloads(env):
    member, gen = stable(env, "g")
    assert commit(env, {("t", 0): 4}, group="c") == {("t", 0): 0}
    parked = pending(join(env, "g"))
    env.broker.coordinator._notify("session", "lost")
    assert result_of(parked)["error_code"] == errors.NOT_COORDINATOR
    assert env.gc.groups == {} and env.gc.owned == {}
    assert env.heartbeat(member, gen, group="g") == errors.NOT_COORDINATOR
    # Registered again: the replica manager re-applies the states, leading again.
    env.broker.coordinator._notify("session", "restored")
    env.clock.advance(0)
    assert fetch(env, [("t", [0])], group="c") == (0, {("t", 0): (4, "", -1)})
    # The group comes back as last stored: Stable, the unfinished rebalance gone.
    assert env.heartbeat(member, gen, group="g") == errors.NONE
    assert list(env.gc.groups["g"].members) == [member]


# -- loading on becoming leader ---------------------------------------------------


def test_a_new_leader_loads_the_partition_and_serves_its_groups(env):
    member, gen = stable(env, "g")
    assert commit(env, {("t", 1): 7}, group="g", generation=gen, member=member) == {("t", 1): 0}
    lose(env, 1)
    # While another broker leads, it takes a commit of "g" that replicates here.
    replicate(env, 1, "g", "t", 2, 42)
    win(env, 1)
    assert env.heartbeat(member, gen, group="g") == errors.COORDINATOR_LOAD_IN_PROGRESS
    assert env.gc.fetch_offsets("g", None)[0] == errors.COORDINATOR_LOAD_IN_PROGRESS
    assert env.gc.list_groups() == (errors.COORDINATOR_LOAD_IN_PROGRESS, [])
    # Groups of other partitions are served meanwhile.
    assert commit(env, {("t", 0): 1}, group="c") == {("t", 0): 0}
    env.clock.advance(0)
    assert env.heartbeat(member, gen, group="g") == errors.NONE
    assert fetch(env, None, group="g") == (0, {("t", 1): (7, "", -1), ("t", 2): (42, "", -1)})
    group = env.gc.groups["g"]
    assert (group.state, group.generation_id, list(group.members)) == (STABLE, gen, [member])
    # Loaded members have session timers: one that never comes back expires.
    env.clock.advance(SESSION / 1000.0 + 0.1)
    assert env.heartbeat(member, gen, group="g") == errors.UNKNOWN_MEMBER_ID


def test_leadership_in_the_same_epoch_does_not_reload(env):
    member, gen = stable(env, "g")
    part = offsets_part(env, 1)
    before = env.gc.owned[1]
    env.broker.leadership_changed(part)  # e.g. a re-announced state
    assert env.gc.owned[1] is before
    assert env.heartbeat(member, gen, group="g") == errors.NONE


def test_a_newer_epoch_reloads_even_without_an_intermediate_follower_state(env):
    """ZooKeeper watches may skip states: led in epoch N, then in N+2."""
    member, gen = stable(env, "g")
    env.clock.advance(1)
    group = env.gc.groups["g"]
    replicate_at = offsets_part(env, 1)
    replicate_at.become_follower(FOLLOWER_OF, replicate_at.leader_epoch + 1, (0, 1), (1,))
    replicate(env, 1, "g", "t", 3, 9)
    win(env, 1)
    assert group.state == DEAD
    env.clock.advance(0)
    assert fetch(env, [("t", [3])], group="g") == (0, {("t", 3): (9, "", -1)})
    assert env.gc.groups["g"] is not group


def test_a_flip_back_during_loading_abandons_the_first_load(env):
    stable(env, "g")
    lose(env, 1)
    win(env, 1)
    first = env.gc.owned[1]
    lose(env, 1)
    env.clock.advance(0)  # the abandoned load's next step sees it is unwanted
    assert "g" not in env.gc.groups and 1 not in env.gc.owned
    assert first.error == errors.COORDINATOR_LOAD_IN_PROGRESS
    win(env, 1)
    env.clock.advance(0)
    assert "g" in env.gc.groups


def test_start_loads_only_the_partitions_led_here(env):
    for group in ("c", "g", "b"):
        assert commit(env, {("t", 0): 1}, group=group) == {("t", 0): 0}
    result_of(env.gc.stop())
    part = offsets_part(env, 1)
    env.led_elsewhere.add((OFFSETS_TOPIC, 1))
    part.become_follower(FOLLOWER_OF, part.leader_epoch + 1, (0, 1), (1,))
    gc = GroupCoordinator(env.broker)
    started = gc.start()
    env.clock.advance(0)
    assert result_of(started) is gc
    assert sorted(gc.groups) == ["b", "c"]
    assert sorted(gc.owned) == [0, 2]
    assert gc.fetch_offsets("g", [("t", [0])])[0] == errors.NOT_COORDINATOR


# -- FindCoordinator --------------------------------------------------------------


class ClusterView:
    """The coordinator's answers a three-broker cluster would give, on top of
    the local coordinator (a twin for FindCoordinator's lookups)."""

    def __init__(self, local, leaders, remote_topics=()):
        self.local = local
        self.leaders = leaders  # offsets partition -> leader id (or -1)
        self.remote = {meta.name: meta for meta in remote_topics}  # hosted elsewhere
        self.creating = []

    def topics(self):
        return {**self.local.topics(), **self.remote}

    def create_topic(self, name, *args, **kwargs):
        # Creation through ZooKeeper completes later.
        partitions, replication_factor = args[:2]
        self.creating.append((name, partitions, replication_factor))
        return defer.Deferred()

    def brokers(self):
        return [(0, "h0", 9090, None), (1, "h1", 9091, None), (2, "h2", 9092, None)]

    def partition_state(self, topic, index):
        state = self.local.partition_state(topic, index)
        if topic == OFFSETS_TOPIC and index in self.leaders:
            return dataclasses.replace(state, leader=self.leaders[index])
        return state

    def __getattr__(self, name):
        return getattr(self.local, name)


def test_coordinator_node_is_the_leader_of_the_groups_partition(env):
    env.broker.advertised = ("me.example", 19092)
    env.broker.coordinator = ClusterView(env.broker.coordinator, {1: 2, 2: -1})
    assert env.gc.coordinator_node("c") == (0, "me.example", 19092)
    assert env.gc.coordinator_node("g") == (2, "h2", 9092)
    assert env.gc.coordinator_node("b") is None  # no leader: COORDINATOR_NOT_AVAILABLE
    env.broker.coordinator.leaders[1] = 7  # a leader that is not a live broker
    assert env.gc.coordinator_node("g") is None


@pytest.mark.parametrize("version", [0, 1, 2])
def test_find_coordinator_on_the_wire_names_the_partition_leader(env, version):
    env.broker.coordinator = ClusterView(env.broker.coordinator, {1: 2, 2: -1})

    def find(group):
        out = call(env, codec.FIND_COORDINATOR, version, {"key": group, "key_type": 0})
        return out["error_code"], out["node_id"], out["host"], out["port"]

    assert find("g") == (0, 2, "h2", 9092)
    assert find("b") == (errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1)
    env.broker.advertised = ("me.example", 19092)
    assert find("c") == (0, 0, "me.example", 19092)


def test_offsets_topic_replication_factor_is_capped_at_the_live_brokers(tmp_path):
    env = Env(tmp_path, offsets_topic_replication_factor=3)
    store = env.gc.store
    assert store.replication_factor() == 1
    env.broker.coordinator = ClusterView(env.broker.coordinator, {})
    assert store.replication_factor() == 3
    env.broker.config = env.broker.config.replace(offsets_topic_replication_factor=2)
    assert store.replication_factor() == 2


def test_the_offsets_topic_is_created_with_kafkas_configs(env):
    meta = env.broker.coordinator.topics()[OFFSETS_TOPIC]
    assert meta.internal
    assert meta.configs == {
        "cleanup.policy": "compact",
        "segment.bytes": "104857600",
        "compression.type": "producer",
    }


def test_commits_for_partitions_hosted_on_other_brokers_are_accepted(env):
    remote = TopicMetadata("remote", 2, assignment={0: [1, 2], 1: [2, 1]})
    env.broker.coordinator = ClusterView(env.broker.coordinator, {}, [remote])
    assert ("remote", 0) not in env.broker.partitions
    assert commit(env, {("remote", 1): 8, ("remote", 2): 9}, group="g") == {
        ("remote", 1): 0,
        ("remote", 2): errors.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert fetch(env, None, group="g") == (0, {("remote", 1): (8, "", -1)})


def test_group_requests_before_the_offsets_topic_exists_create_it(tmp_path):
    env = Env(tmp_path, offsets_topic_replication_factor=3)
    env.broker.coordinator = ClusterView(env.broker.coordinator, {})
    assert result_of(join(env, "g"))["error_code"] == errors.COORDINATOR_NOT_AVAILABLE
    assert env.heartbeat("m", 1, group="g") == errors.COORDINATOR_NOT_AVAILABLE
    # One creation, with the replication factor three live brokers allow.
    assert env.broker.coordinator.creating == [(OFFSETS_TOPIC, 3, 3)]


# -- durable writes ---------------------------------------------------------------


def replicated_offsets_partition(env, index, min_isr=1):
    """Make this broker lead ``index`` with follower 1 in the ISR, so the HW
    waits for the follower's fetches."""
    part = win(env, index, isr=(0, FOLLOWER_OF))
    part.config = dataclasses.replace(part.config, min_insync_replicas=min_isr)
    env.clock.advance(0)
    return part


def test_a_commit_answers_once_the_high_watermark_covers_it(env):
    part = replicated_offsets_partition(env, 1)
    body = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 11}]}]
    d = pending(env.gc.commit_offsets("g", -1, "", None, -1, body))
    # Not acknowledged: nobody sees the offset yet, not even OffsetFetch.
    assert fetch(env, [("t", [0])], group="g") == (0, {("t", 0): None})
    part.update_follower(FOLLOWER_OF, part.log.log_end_offset, env.broker.now_ms())
    assert result_of(d)[0]["partitions"][0]["error_code"] == errors.NONE
    assert fetch(env, [("t", [0])], group="g") == (0, {("t", 0): (11, "", -1)})


def test_a_commit_the_isr_never_covers_times_out_as_coordinator_not_available(env):
    part = replicated_offsets_partition(env, 1)
    body = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 11}]}]
    d = pending(env.gc.commit_offsets("g", -1, "", None, -1, body))
    env.clock.advance(env.broker.config.offsets_commit_timeout_ms / 1000.0)
    assert result_of(d)[0]["partitions"][0]["error_code"] == errors.COORDINATOR_NOT_AVAILABLE
    assert fetch(env, [("t", [0])], group="g") == (0, {("t", 0): None})
    assert part.high_watermark < part.log.log_end_offset


def test_too_few_in_sync_replicas_refuse_the_commit(env):
    win(env, 1)  # ISR is this broker alone
    part = offsets_part(env, 1)
    part.config = dataclasses.replace(part.config, min_insync_replicas=2)
    env.clock.advance(0)
    end = part.log.log_end_offset
    assert commit(env, {("t", 0): 3}, group="g") == {("t", 0): errors.COORDINATOR_NOT_AVAILABLE}
    assert part.log.log_end_offset == end  # NOT_ENOUGH_REPLICAS: nothing appended


def test_losing_leadership_during_the_wait_answers_not_coordinator(env):
    replicated_offsets_partition(env, 1)
    body = [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 11}]}]
    d = pending(env.gc.commit_offsets("g", -1, "", None, -1, body))
    lose(env, 1)
    assert result_of(d)[0]["partitions"][0]["error_code"] == errors.NOT_COORDINATOR


def test_sync_group_waits_for_the_high_watermark_too(env):
    part = replicated_offsets_partition(env, 1)
    joined = result_of(join(env, "g"))
    member, gen = joined["member_id"], joined["generation_id"]
    # The empty group's write from JoinGroup is still unacknowledged: catch up.
    part.update_follower(FOLLOWER_OF, part.log.log_end_offset, env.broker.now_ms())
    synced = pending(env.sync(member, gen, {member: b"A"}, group="g"))
    assert env.gc.groups["g"].state != STABLE
    part.update_follower(FOLLOWER_OF, part.log.log_end_offset, env.broker.now_ms())
    assert result_of(synced) == {"error_code": errors.NONE, "assignment": b"A"}
    assert env.gc.groups["g"].state == STABLE


def test_a_sync_the_isr_never_covers_fails_and_the_group_rebalances(env):
    replicated_offsets_partition(env, 1)
    joined = result_of(join(env, "g"))
    member, gen = joined["member_id"], joined["generation_id"]
    synced = pending(env.sync(member, gen, {member: b"A"}, group="g"))
    env.clock.advance(env.broker.config.offsets_commit_timeout_ms / 1000.0)
    assert result_of(synced)["error_code"] == errors.COORDINATOR_NOT_AVAILABLE
    assert env.gc.groups["g"].state == PREPARING_REBALANCE


def test_single_broker_writes_are_acknowledged_at_once(env):
    """One replica: the HW passes every write immediately, nothing waits."""
    member, gen = stable(env, "g")
    assert commit(env, {("t", 0): 1}, group="g", generation=gen, member=member) == {("t", 0): 0}
    part = offsets_part(env, 1)
    assert part.high_watermark == part.log.log_end_offset
    keys = [r.key for r in records.iter_records(part.log.read(0, 1 << 20).records)]
    assert group_key("g") in keys

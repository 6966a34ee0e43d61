"""Replica assignment for new topics and partitions: Kafka's AdminUtils scheme.

:func:`assign_replicas` is ``AdminUtils.assignReplicasToBrokers``: the first
replica of partition ``p`` is broker ``(p + start) % n`` of the id-sorted
list, the others follow at a shift that grows every ``n`` partitions, so
leaders and followers spread evenly. When every broker has a rack, the
rack-aware variant walks a rack-alternating broker list and places each
further replica on a rack (and broker) that has none yet while one exists.
:func:`assign_new_partitions` is ``AdminZkClient.createNewPartitionsAssignment``.
:func:`validate_assignment` checks explicit CreateTopics/CreatePartitions
assignments.
"""

import random

from pluglog.errors import InvalidReplicaAssignmentError, InvalidReplicationFactorError


def _replica_index(first, shift, index, n):
    return (first + 1 + (shift + index) % (n - 1)) % n


def rack_alternated(racks):
    """``{broker: rack}`` -> brokers ordered rack by rack in turn (racks sorted,
    brokers within a rack by id): Kafka's getRackAlternatedBrokerList."""
    by_rack = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    names = sorted(by_rack)
    iterators = {rack: iter(by_rack[rack]) for rack in names}
    result = []
    index = 0
    while len(result) < len(racks):
        broker = next(iterators[names[index]], None)
        if broker is not None:
            result.append(broker)
        index = (index + 1) % len(names)
    return result


def assign_replicas(
    brokers, num_partitions, replication_factor, start_index=-1, start_partition=-1, rng=None
):
    """``brokers``: ``[(id, rack or None)]`` of live brokers. Returns
    ``{partition: [broker ids]}``, preferred leader first."""
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"replication factor must be larger than 0, got {replication_factor}"
        )
    if num_partitions <= 0:
        raise InvalidReplicaAssignmentError(
            f"number of partitions must be larger than 0, got {num_partitions}"
        )
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is larger than the "
            f"{len(brokers)} available broker(s)"
        )
    rng = rng or random
    racks = {b: r for b, r in brokers}
    if all(racks.values()):
        ordered = rack_alternated(racks)
        num_racks = len(set(racks.values()))
    else:
        ordered = sorted(racks)
        num_racks = 0
    n = len(ordered)
    start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    partition = max(0, start_partition)
    result = {}
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = ordered[first]
        replicas = [leader]
        if num_racks:
            used_racks = {racks[leader]}
            used = {leader}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    broker = ordered[_replica_index(first, shift * num_racks, k, n)]
                    k += 1
                    rack = racks[broker]
                    if (rack not in used_racks or len(used_racks) == num_racks) and (
                        broker not in used or len(used) == n
                    ):
                        replicas.append(broker)
                        used_racks.add(rack)
                        used.add(broker)
                        break
        else:
            for j in range(replication_factor - 1):
                replicas.append(ordered[_replica_index(first, shift, j, n)])
        result[partition] = replicas
        partition += 1
    return result


def assign_new_partitions(brokers, existing, total_count):
    """Replicas for partitions ``len(existing)..total_count-1``, continuing
    the round robin from where partition 0's first replica sits."""
    ids = sorted(b for b, _ in brokers)
    first = existing[0][0]
    start = next((i for i, b in enumerate(ids) if b >= first), 0)
    return assign_replicas(
        brokers,
        total_count - len(existing),
        len(existing[0]),
        start_index=start,
        start_partition=len(existing),
    )


def validate_assignment(assignment, known_brokers, first_partition=0):
    """Check explicit ``{partition: [ids]}``: contiguous partitions from
    ``first_partition``, equal non-zero sizes, distinct registered brokers."""
    if not assignment:
        raise InvalidReplicaAssignmentError("the replica assignment is empty")
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise InvalidReplicaAssignmentError(
            f"partitions of the assignment must be {expected}, got {sorted(assignment)}"
        )
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise InvalidReplicaAssignmentError(
            "every partition needs the same, non-zero number of replicas"
        )
    for partition, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"partition {partition} lists a broker twice: {replicas}"
            )
        unknown = [b for b in replicas if b not in known_brokers]
        if unknown:
            raise InvalidReplicaAssignmentError(
                f"partition {partition} names unknown broker(s) {unknown}"
            )
    return {p: list(r) for p, r in assignment.items()}

"""Partition leader election rules of the controller (pure functions).

Each rule takes the partition's replica list (preferred leader first), its
current :class:`PartitionState` and the live brokers, and returns the next
state (leader epoch + 1) or ``None`` when nothing changes; the ElectLeaders
rules also return Kafka's error code for the partition.
"""

from pluglog.coordination.state import NO_LEADER, PartitionState
from pluglog.errors import (
    ELECTION_NOT_NEEDED,
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    PREFERRED_LEADER_NOT_AVAILABLE,
    UNKNOWN_TOPIC_OR_PARTITION,
)

OK = 0
UNKNOWN = UNKNOWN_TOPIC_OR_PARTITION
NOT_NEEDED = ELECTION_NOT_NEEDED
PREFERRED_NOT_AVAILABLE = PREFERRED_LEADER_NOT_AVAILABLE
NOT_ELIGIBLE = ELIGIBLE_LEADERS_NOT_AVAILABLE


def bump(state, leader, isr):
    return PartitionState(leader, state.leader_epoch + 1, tuple(isr), state.controller_epoch)


def offline(replicas, state, live, excluded, unclean_allowed):
    """After broker changes: keep a live leader (dropping dead brokers from
    the ISR); else the first live replica in assignment order that is in
    the ISR (brokers shutting down last); else, only if ``unclean_allowed()``,
    the first live replica; else no leader, the ISR kept as it was."""
    if state.leader != NO_LEADER and state.leader in live:
        if any(b not in live for b in state.isr):
            return bump(state, state.leader, [b for b in state.isr if b in live])
        return None
    in_sync = [r for r in replicas if r in live and r in state.isr]
    candidates = [r for r in in_sync if r not in excluded] or in_sync
    if candidates:
        return bump(state, candidates[0], [b for b in state.isr if b in live])
    alive = [r for r in replicas if r in live]
    if alive and unclean_allowed():
        return bump(state, alive[0], [alive[0]])
    if state.leader == NO_LEADER:
        return None
    return bump(state, NO_LEADER, state.isr)


def preferred(replicas, state, live, shutting_down):
    """ElectionType.PREFERRED: the first assigned replica, if live and in sync."""
    first = replicas[0]
    if state.leader == first:
        return None, NOT_NEEDED
    if first not in live or first in shutting_down or first not in state.isr:
        return None, PREFERRED_NOT_AVAILABLE
    return bump(state, first, state.isr), OK


def imbalanced(partitions, live, ratio=0.10):
    """Kafka's leader-imbalance check. ``partitions`` yields ``(key, replicas,
    state)``; returns ``{preferred broker: [keys led by another]}`` for each
    live preferred leader that more than ``ratio`` of its partitions are led
    away from, and that is in the ISR of one of them at least (else no
    preferred election could move one back yet)."""
    by_preferred = {}
    for key, replicas, state in partitions:
        if state is not None and replicas:
            by_preferred.setdefault(replicas[0], []).append((key, state))
    found = {}
    for broker, led in sorted(by_preferred.items()):
        off = [(key, state) for key, state in led if state.leader != broker]
        if broker not in live or len(off) / len(led) <= ratio:
            continue
        if any(broker in state.isr for _, state in off):
            found[broker] = [key for key, _ in off]
    return found


def unclean(replicas, state, live):
    """ElectionType.UNCLEAN: only for a partition without a live leader; an
    in-sync replica if one is live, else any live replica."""
    if state.leader != NO_LEADER and state.leader in live:
        return None, NOT_NEEDED
    in_sync = [r for r in replicas if r in live and r in state.isr]
    if in_sync:
        return bump(state, in_sync[0], [b for b in state.isr if b in live]), OK
    alive = [r for r in replicas if r in live]
    if alive:
        return bump(state, alive[0], [alive[0]]), OK
    return None, NOT_ELIGIBLE


def shutdown(replicas, state, broker, live, shutting_down):
    """Controlled shutdown of ``broker``: hand its leadership to the first
    other live in-sync replica and take it out of the ISR."""
    if state.leader == broker:
        candidates = [
            r
            for r in replicas
            if r != broker and r in live and r not in shutting_down and r in state.isr
        ]
        if not candidates:
            return None
        return bump(state, candidates[0], [b for b in state.isr if b != broker])
    if broker in state.isr and len(state.isr) > 1:
        return bump(state, state.leader, [b for b in state.isr if b != broker])
    return None

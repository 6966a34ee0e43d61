"""Partition reassignment in the controller: Kafka's ZooKeeper-era algorithm.

A request in ``/admin/reassign_partitions`` names the target replicas TRS of
a partition whose current replicas are ORS. The controller writes RS = TRS
followed by the rest of ORS into the topic znode together with
``adding_replicas`` (TRS - ORS) and ``removing_replicas`` (ORS - TRS) and
bumps the leader epoch, so the new replicas open the partition and start
fetching. Each change of the partition's state (the leader adding a caught-up
replica to the ISR) makes it look again; once every TRS member is in the
ISR it moves leadership into TRS if needed, shrinks the ISR to TRS (leader
epoch + 1), writes the assignment TRS and drops the request entry. A
request whose TRS is the original replica set is a cancellation.
"""

from kazoo.exceptions import BadVersionError, NoNodeError

from pluglog.coordination import election
from pluglog.coordination import zkdata as z
from pluglog.coordination.state import NO_LEADER


class ReassignmentMixin:
    """Methods of :class:`pluglog.coordination.controller.Controller`."""

    def on_reassign(self):
        if not self.active:
            return
        client = self.client
        read = self._read_watched(z.REASSIGN, self.on_reassign)
        if read is None:
            self.reassigning = set()
            return
        raw, stat = read
        entries = z.reassign_from_json(z.loads(raw))
        topics, _states = self.load()
        done = {tp for tp, target in entries.items() if self._reassign_step(*tp, target, topics)}
        self.reassigning = set(entries) - done
        if not done:
            return
        remaining = {tp: r for tp, r in entries.items() if tp not in done}
        try:
            if remaining:
                client.set(z.REASSIGN, z.dumps(z.reassign_json(remaining)), stat.version)
            else:
                client.delete(z.REASSIGN, version=stat.version)
        except (BadVersionError, NoNodeError):
            # New entries arrived meanwhile: look again.
            self.post(self.on_reassign)

    def _write_topic(self, topic, view):
        tx = self.client.transaction()
        tx.check(z.CONTROLLER_EPOCH, self.epoch_version)
        body = z.topic_json(
            view.assignment,
            view.topic_id,
            view.internal,
            {p: r for p, r in view.adding.items() if r},
            {p: r for p, r in view.removing.items() if r},
        )
        tx.set_data(z.topic_path(topic), z.dumps(body), version=view.version)
        (result,) = self._commit(tx)
        if isinstance(result, Exception):
            raise BadVersionError(f"topic {topic} changed during reassignment")
        view.version = result.version

    def _reassign_step(self, topic, partition, target, topics):
        """Start or advance one reassignment; True once finished (or moot)."""
        view = topics.get(topic)
        if view is None or partition not in view.assignment or not target:
            return True
        current = view.assignment[partition]
        adding = view.adding.get(partition, [])
        removing = view.removing.get(partition, [])
        if current == target and not adding and not removing:
            return True
        original = [r for r in current if r not in adding]
        # Never drop a current replica before the target set is in sync.
        full = list(target) + [r for r in current if r not in target]
        new_adding = [r for r in target if r not in original]
        new_removing = [r for r in original if r not in target]
        if (full, new_adding, new_removing) != (current, adding, removing):
            view.assignment[partition] = full
            view.adding[partition] = new_adding
            view.removing[partition] = new_removing
            try:
                self._write_topic(topic, view)
            except BadVersionError:
                self.post(self.on_reassign)
                return False
            self.update(
                topic,
                partition,
                full,
                self.read_state(topic, partition),
                lambda r, s: election.bump(s, s.leader, s.isr),
            )
            self.say(
                "reassigning {t}-{p}: {cur} -> {tgt}",
                t=topic,
                p=partition,
                cur=current,
                tgt=target,
            )
        state = self.read_state(topic, partition)
        if state is None or not all(r in state.isr for r in target):
            return False  # wait: the leader's ISR expansion triggers another look

        def finish(replicas, s):
            isr = [b for b in s.isr if b in target]
            leader = s.leader
            if leader not in target or leader not in self.live:
                candidates = [b for b in target if b in isr and b in self.live]
                leader = candidates[0] if candidates else NO_LEADER
            if leader == s.leader and tuple(isr) == s.isr:
                return None
            return election.bump(s, leader, isr)

        self.update(topic, partition, full, state, finish)
        view.assignment[partition] = list(target)
        view.adding.pop(partition, None)
        view.removing.pop(partition, None)
        try:
            self._write_topic(topic, view)
        except BadVersionError:
            self.post(self.on_reassign)
            return False
        self.say("reassignment of {t}-{p} to {tgt} done", t=topic, p=partition, tgt=target)
        return True

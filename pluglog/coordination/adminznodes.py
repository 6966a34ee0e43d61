"""The controller's work queues in ZooKeeper: admin znodes and broker requests.

Kafka's tools and pluglog's brokers ask the controller for work by writing
znodes, which it watches and answers on its event thread:

* ``/admin/delete_topics/<topic>``: the controller deletes the topic's
  znodes (states, partitions, assignment, config) and the request in one
  transaction fenced by the controller epoch;
* ``/admin/preferred_replica_election``: a preferred-leader election for the
  listed partitions, then the znode is deleted;
* ``/pluglog/requests/<n>``: an ``elect`` (preferred or unclean) or a
  ``controlled_shutdown`` from any broker. The answer is written back into
  the same znode as ``result``, where the asking broker waits for it.

Reassignment (``/admin/reassign_partitions``) is
:mod:`pluglog.coordination.reassignment`.
"""

from kazoo.exceptions import BadVersionError, NoNodeError

from pluglog.coordination import zkdata as z


class AdminZnodesMixin:
    """Methods of :class:`pluglog.coordination.controller.Controller`."""

    def on_delete_topics(self):
        if not self.active:
            return
        client = self.client
        for topic in client.get_children(
            z.DELETE_TOPICS, watch=self._watcher(self.on_delete_topics)
        ):
            paths = []
            try:
                for p in client.get_children(z.partitions_path(topic)):
                    if client.exists(z.state_path(topic, p)):
                        paths.append(z.state_path(topic, p))
                    paths.append(f"{z.partitions_path(topic)}/{p}")
                paths.append(z.partitions_path(topic))
            except NoNodeError:
                pass
            for path in (z.topic_path(topic), z.config_path(topic)):
                if client.exists(path):
                    paths.append(path)
            paths.append(f"{z.DELETE_TOPICS}/{topic}")
            tx = client.transaction()
            tx.check(z.CONTROLLER_EPOCH, self.epoch_version)
            for path in paths:
                tx.delete(path)
            results = self._commit(tx)
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                self.say("deleting topic {t} failed: {e!r}; retrying", t=topic, e=failed[0])
                self.post(self.on_delete_topics)
            else:
                self.say("deleted topic {t}", t=topic)

    def on_preferred_admin(self):
        """Kafka tooling's /admin/preferred_replica_election."""
        if not self.active:
            return
        read = self._read_watched(z.PREFERRED_ELECTION, self.on_preferred_admin)
        if read is None:
            return
        raw, stat = read
        data = z.loads(raw) or {}
        tps = [(e["topic"], int(e["partition"])) for e in data.get("partitions") or ()]
        self.elect_partitions(tps, preferred=True)
        try:
            self.client.delete(z.PREFERRED_ELECTION, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
        self.client.exists(z.PREFERRED_ELECTION, watch=self._watcher(self.on_preferred_admin))

    def on_requests(self):
        """Answer request znodes under /pluglog/requests."""
        if not self.active:
            return
        client = self.client
        for child in sorted(
            client.get_children(z.REQUESTS, watch=self._watcher(self.on_requests))
        ):
            path = f"{z.REQUESTS}/{child}"
            try:
                raw, stat = client.get(path)
            except NoNodeError:
                continue
            request = z.loads(raw) or {}
            if "result" in request:
                continue
            if request.get("type") == "elect":
                codes = self.elect_partitions(
                    [(t, int(p)) for t, p in request.get("partitions", ())],
                    preferred=bool(request.get("preferred", True)),
                )
                request["result"] = [[t, p, c] for (t, p), c in sorted(codes.items())]
            elif request.get("type") == "controlled_shutdown":
                broker = int(request["broker"])
                if self._stale_epoch(broker, request.get("broker_epoch")):
                    request["result"] = {"error": "STALE_BROKER_EPOCH"}
                else:
                    request["result"] = {"remaining": self.controlled_shutdown(broker)}
            else:
                request["result"] = {"error": f"unknown request type {request.get('type')!r}"}
            try:
                client.set(path, z.dumps(request), version=stat.version)
            except (NoNodeError, BadVersionError):
                pass
            if (
                request.get("type") == "controlled_shutdown"
                and request["broker"] == self.broker_id
                and "remaining" in request["result"]
            ):
                self.resign()
                return

    def _stale_epoch(self, broker, epoch):
        """Kafka's STALE_BROKER_EPOCH: a controlled shutdown asked for by an
        earlier registration of ``broker`` (a request left behind by a
        broker that was restarted since) must not take leadership and ISR
        places from the one registered now. A request without an epoch
        (written by hand, or by an older broker) is served as before."""
        if epoch is None:
            return False
        # Read here, not from self.epochs: on_brokers_changed compares those
        # with the next read to notice a quick restart.
        stat = self.client.exists(z.broker_path(broker))
        return stat is None or stat.czxid != epoch

    def on_log_dir_events(self):
        """Kafka's LogDirEventNotification: handle and delete each, then
        move leadership off the replicas now offline."""
        if not self.active:
            return
        client = self.client
        children = client.get_children(
            z.LOG_DIR_EVENTS, watch=self._watcher(self.on_log_dir_events)
        )
        if not children:
            return
        brokers = set()
        for child in sorted(children):
            path = f"{z.LOG_DIR_EVENTS}/{child}"
            try:
                raw, _ = client.get(path)
                brokers.add(int((z.loads(raw) or {}).get("broker", -1)))
                client.delete(path)
            except NoNodeError:
                continue
            except (TypeError, ValueError):
                client.delete(path)  # not one of ours: nothing to do with it
        offline = self.offline_replicas()
        for broker in sorted(brokers):
            count = sum(1 for held in offline.values() if broker in held)
            self.say(
                "log dir failure on broker {b}: {n} of its replicas offline", b=broker, n=count
            )
        self.reconcile()

    def offline_replicas(self):
        """``{(topic, partition): {broker ids}}``: live brokers' replicas on
        failed log dirs (``/pluglog/offline_replicas``). The znodes are
        ephemeral, so a broker restarted with healthy dirs has none."""
        client = self.client
        pending = {
            int(child): client.get_async(z.offline_replicas_path(child))
            for child in client.get_children(z.OFFLINE_REPLICAS)
            if child.isdigit() and int(child) in self.live
        }
        out = {}
        for broker, result in pending.items():
            try:
                raw, _ = result.get()
            except NoNodeError:
                continue
            for key in z.offline_replicas_from_json(z.loads(raw)):
                out.setdefault(key, set()).add(broker)
        return out

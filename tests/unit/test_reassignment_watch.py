"""The controller's reassignment watch: a request created between its read
of ``/admin/reassign_partitions`` (no node) and the watch it then sets.

A CI run lost such a request: the move right after another one finished
never started (tests/replication/test_throttle.py waited 90 s). ZooKeeper
sets no watch on a read of a missing node, and ``exists`` on a node that
exists by then sets a watch that fires only on its next change, so the
controller must look at it at once.
"""

from kazoo.exceptions import NoNodeError

from pluglog.coordination import zkdata as z
from pluglog.coordination.adminznodes import AdminZnodesMixin
from pluglog.coordination.controller import Controller
from pluglog.coordination.reassignment import ReassignmentMixin


class _Client:
    """``get`` finds no node; ``exists`` then finds it (created meanwhile)."""

    def __init__(self, created_meanwhile):
        self.created_meanwhile = created_meanwhile
        self.watched = []

    def get(self, path, watch=None):
        raise NoNodeError(path)

    def exists(self, path, watch=None):
        self.watched.append((path, watch))
        return object() if self.created_meanwhile else None


class _Controller(ReassignmentMixin, AdminZnodesMixin):
    active = True
    _read_watched = Controller._read_watched

    def __init__(self, client):
        self.client = client
        self.reassigning = {("t", 0)}
        self.posted = []

    def _watcher(self, handler):
        return handler

    def post(self, handler):
        self.posted.append(handler)


def test_a_request_created_after_the_read_is_looked_at_at_once():
    controller = _Controller(_Client(created_meanwhile=True))
    controller.on_reassign()
    assert controller.client.watched == [(z.REASSIGN, controller.on_reassign)]
    assert controller.posted == [controller.on_reassign]
    assert controller.reassigning == set()


def test_no_request_leaves_only_the_watch():
    controller = _Controller(_Client(created_meanwhile=False))
    controller.on_reassign()
    assert controller.client.watched == [(z.REASSIGN, controller.on_reassign)]
    assert controller.posted == []


def test_a_preferred_election_request_created_after_the_read_is_looked_at_at_once():
    controller = _Controller(_Client(created_meanwhile=True))
    controller.on_preferred_admin()
    assert controller.client.watched == [(z.PREFERRED_ELECTION, controller.on_preferred_admin)]
    assert controller.posted == [controller.on_preferred_admin]

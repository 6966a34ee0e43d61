"""Sending the CLI's partition requests to each partition's leader.

ListOffsets, Produce and Fetch are answered only by a partition's leader
(others say NOT_LEADER_OR_FOLLOWER), so with several brokers the commands
look the leaders up in Metadata from the bootstrap broker and open one
extra connection per other leader, kept for the rest of the command. With
one broker every request stays on the bootstrap connection.

When a broker goes away in the middle of a command (a failover), the
producer and consumer loops call :meth:`Router.reset`: connections are
dropped, and the next lookup asks any broker that answers (the ``-b``
addresses, then every broker seen in Metadata) for the new leaders.
"""

import weakref

from pluglog.cli.common import CliError, check, metadata
from pluglog.client.blocking import BlockingClient, ProtocolError

_ROUTERS = weakref.WeakKeyDictionary()

#: Errors after which a request may succeed once it goes to the new leader.
CONNECTION_ERRORS = (OSError, ProtocolError)


class NoLeaderError(CliError):
    """A partition has no live leader right now (an election is under way)."""


class Router:
    """Leaders of the topics a command touches and connections to them."""

    def __init__(self, client):
        self.client = client
        #: The ``-b`` addresses, tried again when the known brokers fail.
        self.seeds = list(getattr(client, "seeds", None) or [client.address])
        self.client_ok = True
        self.brokers = {}
        self.leaders = {}
        self.peers = {}  # (host, port) -> BlockingClient

    def _connect(self, address):
        if address == self.client.address and self.client_ok:
            return self.client
        peer = self.peers.get(address)
        if peer is None:
            peer = self.peers[address] = BlockingClient(*address, client_id=self.client.client_id)
        return peer

    def refresh(self, topic):
        """Leaders of ``topic`` from the first broker that answers Metadata."""
        candidates = [self.client.address] if self.client_ok else []
        candidates += [a for a in self.seeds + list(self.brokers.values()) if a not in candidates]
        failure = None
        for address in candidates:
            try:
                meta = metadata(self._connect(address), [topic])
            except CONNECTION_ERRORS as exc:
                failure = exc
                self._drop(address)
                continue
            break
        else:
            raise failure or OSError("no broker to ask")
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in meta["brokers"]}
        (entry,) = meta["topics"]
        check(entry["error_code"], topic)
        for part in entry["partitions"]:
            self.leaders[(topic, part["partition_index"])] = part["leader_id"]

    def _drop(self, address):
        if address == self.client.address and self.client_ok:
            self.client_ok = False  # the caller's; a new connection replaces it
            return
        peer = self.peers.pop(address, None)
        if peer is not None:
            peer.close()

    def reset(self):
        """Forget leaders and connections after a failure: the next
        :meth:`by_leader` asks again."""
        for address in list(self.peers):
            self._drop(address)
        self.client_ok = False
        self.leaders.clear()

    def client_for(self, node):
        address = self.brokers.get(node)
        if address is None:
            raise CliError(f"broker {node} is not alive")
        try:
            return self._connect(address)
        except OSError as exc:
            raise NoLeaderError(
                f"cannot reach broker {node} at {address[0]}:{address[1]}: {exc.strerror or exc}"
            ) from None

    def by_leader(self, topic, partitions, skip_leaderless=False):
        """``[(client, [partitions])]``, one entry per leader. A partition
        without a leader is an error (LEADER_NOT_AVAILABLE), or left out
        with ``skip_leaderless``."""
        if any((topic, p) not in self.leaders for p in partitions):
            self.refresh(topic)
        grouped = {}
        for p in partitions:
            node = self.leaders.get((topic, p), -1)
            if node < 0 or node not in self.brokers:
                if skip_leaderless:
                    continue
                self.leaders.pop((topic, p), None)  # ask again next time
                raise NoLeaderError(f"{topic}-{p}: LEADER_NOT_AVAILABLE (5): no live leader")
            grouped.setdefault(node, []).append(p)
        return [(self.client_for(node), parts) for node, parts in sorted(grouped.items())]


def router(client):
    """The command's Router for this bootstrap client."""
    found = _ROUTERS.get(client)
    if found is None:
        found = _ROUTERS[client] = Router(client)
    return found

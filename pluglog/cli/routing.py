"""Sending the CLI's partition requests to each partition's leader.

ListOffsets, Produce and Fetch are answered only by a partition's leader
(others say NOT_LEADER_OR_FOLLOWER), so with several brokers the commands
look the leaders up in Metadata from the bootstrap broker and open one
extra connection per other leader, kept for the rest of the command. With
one broker every request stays on the bootstrap connection.
"""

import weakref

from pluglog.cli.common import CliError, check, metadata
from pluglog.client.blocking import BlockingClient

_ROUTERS = weakref.WeakKeyDictionary()


class Router:
    """Leaders of the topics a command touches and connections to them."""

    def __init__(self, client):
        self.client = client
        self.brokers = {}
        self.leaders = {}
        self.peers = {}

    def refresh(self, topic):
        meta = metadata(self.client, [topic])
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in meta["brokers"]}
        (entry,) = meta["topics"]
        check(entry["error_code"], topic)
        for part in entry["partitions"]:
            self.leaders[(topic, part["partition_index"])] = part["leader_id"]

    def client_for(self, node):
        address = self.brokers.get(node)
        if address is None:
            raise CliError(f"broker {node} is not alive")
        if address == self.client.address:
            return self.client
        peer = self.peers.get(node)
        if peer is None:
            try:
                peer = BlockingClient(*address, client_id=self.client.client_id)
            except OSError as exc:
                raise CliError(
                    f"cannot reach broker {node} at {address[0]}:{address[1]}: "
                    f"{exc.strerror or exc}"
                ) from None
            self.peers[node] = peer
        return peer

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
                raise CliError(f"{topic}-{p}: LEADER_NOT_AVAILABLE (5): no live leader")
            grouped.setdefault(node, []).append(p)
        return [(self.client_for(node), parts) for node, parts in sorted(grouped.items())]


def router(client):
    """The command's Router for this bootstrap client."""
    found = _ROUTERS.get(client)
    if found is None:
        found = _ROUTERS[client] = Router(client)
    return found

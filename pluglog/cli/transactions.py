"""``pluglog transactions``: list, describe and abort transactions.

The equivalent of Kafka's kafka-transactions.sh for the transactions the
brokers' transaction coordinators know:

- ``list`` asks every broker (each coordinator lists the transactional ids
  of its own ``__transaction_state`` partitions) with ListTransactions;
  ``--state`` and ``--producer-id`` filter as Kafka's ListTransactions does.
- ``describe --transactional-id ID`` asks the id's coordinator
  (FindCoordinator key type 1) with DescribeTransactions.
- ``abort --transactional-id ID`` ends the open transaction of ``ID`` by
  sending InitProducerId with that transactional id, as a new producer with
  the id would: the coordinator bumps the epoch, which fences the producer
  that left the transaction open, and aborts the transaction (answering
  CONCURRENT_TRANSACTIONS until the abort markers are written; the command
  retries). This is not how Kafka's ``kafka-transactions.sh abort`` works:
  that one aborts a *hanging* transaction, one a partition holds open though
  its coordinator has forgotten it, by topic, partition and start offset
  with DescribeProducers and WriteTxnMarkers (an inter-broker request).
  A hanging transaction in that sense does not arise with pluglog's
  coordinator, which writes every marker before it completes a
  transaction; an open transaction the coordinator knows is what this
  command ends.
"""

import time

from pluglog import errors
from pluglog import protocol as codec
from pluglog.cli.common import CliError, add_json_flag, check, metadata, print_json
from pluglog.cli.groups import _connected

#: How long a command waits for a coordinator that is moving or loading, or
#: for an abort to complete.
COORDINATOR_WAIT_S = 30.0
_RETRIABLE = (
    errors.COORDINATOR_NOT_AVAILABLE,
    errors.COORDINATOR_LOAD_IN_PROGRESS,
    errors.NOT_COORDINATOR,
    errors.CONCURRENT_TRANSACTIONS,
)
#: States in which a transaction is open (abort has something to do).
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence")


def add_parser(sub):
    parser = sub.add_parser("transactions", help="list, describe and abort transactions")
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="transactional ids and their states")
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        help="only transactions in this state (Ongoing, CompleteCommit, ...); repeatable",
    )
    listing.add_argument(
        "--producer-id", type=int, action="append", default=[], help="only this producer id"
    )
    add_json_flag(listing)
    listing.set_defaults(run=list_transactions)
    describe = actions.add_parser("describe", help="one transactional id's transaction")
    describe.add_argument("--transactional-id", required=True)
    add_json_flag(describe)
    describe.set_defaults(run=describe_transaction)
    abort = actions.add_parser(
        "abort", help="abort a transactional id's open transaction (fences its producer)"
    )
    abort.add_argument("--transactional-id", required=True)
    add_json_flag(abort)
    abort.set_defaults(run=abort_transaction)


def _retry(call, what):
    """Run ``call()`` -> (error code, result) until the coordinator is ready."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        code, result = call()
        if code not in _RETRIABLE or time.monotonic() >= deadline:
            check(code, what)
            return result
        time.sleep(0.1)


def _find(client, txn_id):
    """``(node id, host, port)`` of ``txn_id``'s transaction coordinator."""

    def find():
        resp = client.request(codec.FIND_COORDINATOR, 2, {"key": txn_id, "key_type": 1})
        return resp["error_code"], resp

    found = _retry(find, f"FindCoordinator {txn_id!r}")
    return found["node_id"], found["host"], found["port"]


def _describe(client, txn_id):
    """The DescribeTransactions entry of ``txn_id`` and its coordinator id."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        node, host, port = _find(client, txn_id)
        with _connected(client, host, port) as coord:
            resp = coord.request(codec.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn_id]})
        (state,) = resp["transaction_states"]
        if state["error_code"] not in _RETRIABLE or time.monotonic() >= deadline:
            break
        time.sleep(0.1)  # the coordinator moved or is loading: find it again
    if state["error_code"] == errors.TRANSACTIONAL_ID_NOT_FOUND:
        raise CliError(f"transactional id {txn_id!r} not found")
    check(state["error_code"], f"DescribeTransactions {txn_id!r}")
    return state, node


def _summary(state, node):
    start = state["transaction_start_time_ms"]
    return {
        "transactional_id": state["transactional_id"],
        "coordinator": node,
        "producer_id": state["producer_id"],
        "producer_epoch": state["producer_epoch"],
        "state": state["transaction_state"],
        "timeout_ms": state["transaction_timeout_ms"],
        "start_time_ms": start if start >= 0 else None,
        "duration_ms": int(time.time() * 1000) - start if start >= 0 else None,
        "partitions": sorted(
            f"{topic['topic']}-{p}" for topic in state["topics"] for p in topic["partitions"]
        ),
    }


def list_transactions(client, args):
    rows = []
    for broker in metadata(client, [])["brokers"]:
        with _connected(client, broker["host"], broker["port"]) as other:

            def ask(other=other):
                body = {
                    "state_filters": args.state,
                    "producer_id_filters": args.producer_id,
                    "duration_filter": -1,
                }
                resp = other.request(codec.LIST_TRANSACTIONS, 1, body)
                return resp["error_code"], resp

            resp = _retry(ask, f"ListTransactions on broker {broker['node_id']}")
        if resp["unknown_state_filters"]:
            raise CliError(
                "unknown --state " + ", ".join(resp["unknown_state_filters"]) + " (states: "
                "Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort, "
                "Dead, PrepareEpochFence)"
            )
        rows += [
            {
                "transactional_id": t["transactional_id"],
                "coordinator": broker["node_id"],
                "producer_id": t["producer_id"],
                "state": t["transaction_state"],
            }
            for t in resp["transaction_states"]
        ]
    rows.sort(key=lambda r: r["transactional_id"])
    if args.json:
        return print_json(rows)
    print("TRANSACTIONAL-ID\tCOORDINATOR\tPRODUCER-ID\tSTATE")
    for row in rows:
        print(
            f"{row['transactional_id']}\t{row['coordinator']}\t{row['producer_id']}\t{row['state']}"
        )


def describe_transaction(client, args):
    state, node = _describe(client, args.transactional_id)
    row = _summary(state, node)
    if args.json:
        return print_json(row)
    print(
        "TRANSACTIONAL-ID\tCOORDINATOR\tPRODUCER-ID\tPRODUCER-EPOCH\tSTATE\tTIMEOUT-MS"
        "\tSTART-TIME-MS\tDURATION-MS\tPARTITIONS"
    )
    print(
        "\t".join(
            str(row[k] if row[k] is not None else "-")
            for k in (
                "transactional_id",
                "coordinator",
                "producer_id",
                "producer_epoch",
                "state",
                "timeout_ms",
                "start_time_ms",
                "duration_ms",
            )
        )
        + "\t"
        + (",".join(row["partitions"]) or "-")
    )


def abort_transaction(client, args):
    txn_id = args.transactional_id
    before, _node = _describe(client, txn_id)
    if before["transaction_state"] not in OPEN_STATES:
        raise CliError(
            f"transactional id {txn_id!r} has no open transaction "
            f"(state {before['transaction_state']})"
        )
    body = {
        "transactional_id": txn_id,
        # The transaction's own timeout: within the broker's maximum, since
        # the broker accepted it before.
        "transaction_timeout_ms": before["transaction_timeout_ms"] or 60000,
        "producer_id": -1,
        "producer_epoch": -1,
    }

    def init():
        _node, host, port = _find(client, txn_id)
        with _connected(client, host, port) as coord:
            resp = coord.request(codec.INIT_PRODUCER_ID, 4, body)
        return resp["error_code"], resp

    resp = _retry(init, f"InitProducerId {txn_id!r}")
    after, node = _describe(client, txn_id)
    result = {
        **_summary(after, node),
        "aborted_producer_id": before["producer_id"],
        "aborted_producer_epoch": before["producer_epoch"],
        "previous_state": before["transaction_state"],
    }
    result["producer_id"], result["producer_epoch"] = resp["producer_id"], resp["producer_epoch"]
    if args.json:
        return print_json(result)
    ended = "committed" if before["transaction_state"] == "PrepareCommit" else "aborted"
    print(
        f"Transaction of {txn_id} (producer id {before['producer_id']}, epoch "
        f"{before['producer_epoch']}) {ended}; the id's producer epoch is now "
        f"{resp['producer_epoch']}, fencing its producer."
    )

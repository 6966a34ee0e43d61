"""Bad group requests over the wire get Kafka's error codes from the real broker."""

import time

from pluglog import errors
from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient

PROTOCOLS = [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"}]


def _join(
    client, group, member_id="", protocol_type="consumer", protocols=PROTOCOLS, session=10000
):
    return client.request(
        codec.JOIN_GROUP,
        5,
        {
            "group_id": group,
            "session_timeout_ms": session,
            "rebalance_timeout_ms": 10000,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": protocol_type,
            "protocols": protocols,
        },
    )


def _coordinator_ready(client, group):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        resp = client.request(codec.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
        if resp["error_code"] == 0:
            return resp
        time.sleep(0.1)
    raise AssertionError(f"coordinator never ready: {resp}")


def test_bad_group_requests(shared_broker):
    with BlockingClient("127.0.0.1", shared_broker.port) as client:
        found = _coordinator_ready(client, "bad-g")
        assert (found["host"], found["port"]) == ("127.0.0.1", shared_broker.port)
        assert (
            _join(client, "bad-g", protocols=[])["error_code"]
            == errors.INCONSISTENT_GROUP_PROTOCOL
        )
        assert (
            _join(client, "bad-g", session=10**9)["error_code"] == errors.INVALID_SESSION_TIMEOUT
        )
        assert _join(client, "", session=10000)["error_code"] == errors.INVALID_GROUP_ID
        # A real member, then a join with another protocol type.
        first = _join(client, "bad-g")
        assert first["error_code"] == errors.MEMBER_ID_REQUIRED
        joined = _join(client, "bad-g", member_id=first["member_id"])
        assert joined["error_code"] == 0
        synced = client.request(
            codec.SYNC_GROUP,
            3,
            {
                "group_id": "bad-g",
                "generation_id": joined["generation_id"],
                "member_id": joined["member_id"],
                "group_instance_id": None,
                "assignments": [{"member_id": joined["member_id"], "assignment": b""}],
            },
        )
        assert synced["error_code"] == 0
        other = _join(client, "bad-g", protocol_type="connect")
        assert other["error_code"] == errors.INCONSISTENT_GROUP_PROTOCOL
        commit = client.request(
            codec.OFFSET_COMMIT,
            7,
            {
                "group_id": "bad-g",
                "generation_id_or_member_epoch": joined["generation_id"] + 5,
                "member_id": joined["member_id"],
                "group_instance_id": None,
                "topics": [
                    {
                        "name": "anything",
                        "partitions": [
                            {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                        ],
                    }
                ],
            },
        )
        assert commit["topics"][0]["partitions"][0]["error_code"] == errors.ILLEGAL_GENERATION
        stranger = client.request(
            codec.HEARTBEAT,
            3,
            {
                "group_id": "bad-g",
                "generation_id": 1,
                "member_id": "nobody",
                "group_instance_id": None,
            },
        )
        assert stranger["error_code"] == errors.UNKNOWN_MEMBER_ID
    assert shared_broker.alive()

"""The produce fast lane's request parse: C (pluglog._recordwalk.produce_shape)
against the Python reference (fastlane._py_produce_shape), byte for byte."""

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pluglog._recordwalk import produce_shape
from pluglog.server.fastlane import _py_produce_shape
from tests.unit.test_server_fastlane import batch, one_partition, produce_request


def payload(version=8, acks=1, client_id="c", transactional_id=None, topic_data=None):
    topic_data = topic_data or one_partition(batch([b"a", b"bc"]))
    return produce_request(topic_data, version, acks, client_id, 7, transactional_id)[4:]


def both(data):
    expected = _py_produce_shape(memoryview(data))
    assert produce_shape(memoryview(data)) == expected
    assert produce_shape(bytes(data)) == expected
    return expected


def test_the_fast_lane_shape_is_parsed_alike():
    for version in range(3, 12):
        for acks in (1, -1):
            got = both(payload(version, acks, client_id="prod-é"))
            assert got is not None
            assert got[:4] == (version, 7, acks, "t")
    got = both(payload(client_id=None))
    data = payload(client_id=None)
    _, _, _, name, name_at, name_end, index, records_at = got
    assert data[name_at:name_end] == b"\x00\x01t" and index == 0
    assert data[records_at:] == batch([b"a", b"bc"])


def test_other_shapes_are_declined_alike():
    declined = [
        payload(acks=0),
        payload(acks=2),
        payload(transactional_id="tx"),
        payload(topic_data=one_partition(batch()) * 2),
        payload(
            topic_data=[
                {
                    "name": "t",
                    "partition_data": [{"index": i, "records": batch()} for i in (0, 1)],
                }
            ]
        ),
        payload(topic_data=one_partition(batch() + batch())),
        payload(topic_data=one_partition(batch()[:60])),
        b"",
        b"\x00" * 9,
    ]
    bad_client = bytearray(payload(client_id="cc"))
    bad_client[10] = 0xFF  # not UTF-8
    surrogate = bytearray(payload(client_id="ccc"))
    surrogate[10:13] = b"\xed\xa0\x80"  # a UTF-16 surrogate: refused by strict UTF-8
    bad_topic = bytearray(payload())
    at = bad_topic.index(b"\x00\x01t") + 2
    bad_topic[at] = 0x80
    negative_client = bytearray(payload(client_id=None))
    struct.pack_into(">h", negative_client, 8, -2)
    declined += [bad_client, surrogate, bad_topic, negative_client, payload() + b"\x00"]
    for data in declined:
        assert both(bytes(data)) is None, data
    # The flexible versions (v9-v11) alike.
    flex = [
        payload(10, acks=0),
        payload(10, transactional_id="tx"),
        payload(10, topic_data=one_partition(batch()) * 2),
        payload(10, topic_data=one_partition(batch() + batch())),
        payload(11, topic_data=one_partition(None)),
        payload(9) + b"\x00",
    ]
    tagged = bytearray(payload(10, client_id="c"))
    tagged[11] = 1  # a header tag
    flex.append(tagged)
    for data in flex:
        assert both(bytes(data)) is None, data


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    st.integers(3, 11),
    st.sampled_from([1, -1, 0]),
    st.one_of(st.none(), st.text(max_size=6)),
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
    st.integers(0, 420),
)
def test_mutated_payloads_parse_alike(version, acks, client_id, flips, cut):
    data = bytearray(payload(version, acks, client_id))
    for position, value in flips:
        if position < len(data):
            data[position] = value
    both(bytes(data))
    both(bytes(data[:cut]))

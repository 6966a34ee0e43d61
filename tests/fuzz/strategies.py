"""Hypothesis strategies for every request the broker advertises, from the codec's schemas.

:func:`request_bodies` walks an :class:`~pluglog.protocol.schema.Api`'s
request fields for one version (pluglog/protocol/schema.py: primitives,
primitive arrays, struct arrays, nested structs, nullability, tagged fields)
and builds a strategy for a body dict the codec can encode; :func:`frames`
draws an advertised (api key, version) from ``SUPPORTED`` and encodes a
whole request frame.

Values are hostile but bounded where the bound is another part of #13 or a
timeout the probe would wait for:

* names come from a small pool (plus short random text with control
  characters), so auto-creation cannot create thousands of topics;
* fields that size work or memory (partition counts, replication factors,
  timeouts, long-poll waits, rebalance and session timeouts) are small.
  Huge partition counts are the partition cap's business (issue #13,
  another branch); this harness is about the codec and handlers.

The verification topic (:data:`PROTECTED_TOPIC`) is never named, so a
fuzzed DeleteTopics or DeleteRecords cannot "lose" its records.
"""

import uuid

from hypothesis import strategies as st

from pluglog import protocol as codec
from pluglog.protocol.apis import APIS, SUPPORTED
from pluglog.protocol.records import Record, build_batch

PROTECTED_TOPIC = "fuzz-verify"
TOPIC_POOL = ["fuzz-a", "fuzz-b", "__consumer_offsets", "", "fuzz\x1b[31mred", "x" * 249]
GROUP_POOL = ["fuzz-g", "", "g\nforged log line", "fuzz-g2"]

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
# Field names whose value sizes work, memory or a wait: kept small.
_SMALL = (
    "partitions",
    "replication",
    "count",
    "timeout",
    "wait",
    "rebalance",
    "session",
    "assignment",
    "replica",
)
_TOPIC_FIELDS = ("name", "topic", "topic_names", "topics", "resource_name")
_GROUP_FIELDS = ("group_id", "groups", "groups_names", "member_id", "group_instance_id")


def _ints(type_, name):
    lo, hi = _INT_RANGES[type_]
    if any(word in name for word in _SMALL):
        return st.integers(max(lo, -2), min(hi, 8))
    edges = st.sampled_from(sorted({lo, hi, -1, 0, 1, min(hi, 2**31 - 1)}))
    return st.one_of(st.integers(max(lo, -2), min(hi, 1000)), edges)


def _text():
    return st.text(alphabet=st.characters(max_codepoint=0x2FF), max_size=12)


def _records():
    batch = st.lists(
        st.builds(
            Record,
            key=st.none() | st.binary(max_size=16),
            value=st.binary(max_size=64),
            headers=st.just(()),
            timestamp=st.none(),
            offset_delta=st.none(),
            offset=st.none(),
        ),
        min_size=1,
        max_size=4,
    ).map(build_batch)
    return st.one_of(st.none(), batch, st.binary(max_size=128))


def _primitive(type_, name):
    if type_ in _INT_RANGES:
        return _ints(type_, name)
    if type_ == "float64":
        return st.floats(allow_nan=True)
    if type_ == "bool":
        return st.booleans()
    if type_ == "string":
        if any(word in name for word in _TOPIC_FIELDS):
            return st.one_of(st.sampled_from(TOPIC_POOL), _text())
        if any(word in name for word in _GROUP_FIELDS):
            return st.one_of(st.sampled_from(GROUP_POOL), _text())
        return _text()
    if type_ == "bytes":
        return st.binary(max_size=64)
    if type_ == "records":
        return _records()
    if type_ == "uuid":
        # Topic ids (KIP-516): the zero id ("none"), random ones, and raw
        # 16-byte values hypothesis' uuids() would never make.
        return st.one_of(
            st.just(uuid.UUID(int=0)),
            st.uuids(),
            st.binary(min_size=16, max_size=16).map(lambda raw: uuid.UUID(bytes=raw)),
        )
    raise ValueError(type_)


def _field(field, version):
    if field.is_struct_array:
        value = st.lists(_struct(field.type, version), max_size=3)
    elif field.is_struct:
        value = _struct(field.type.fields, version)
    elif field.is_primitive_array:
        value = st.lists(_primitive(field.type[2:], field.name), max_size=4)
    else:
        value = _primitive(field.type, field.name)
    if field.nullable_in(version):
        value = st.one_of(st.none(), value)
    return value


def _struct(fields, version):
    present = [f for f in fields if f.present(version)]
    return st.fixed_dictionaries({f.name: _field(f, version) for f in present})


def request_bodies(api_key, version):
    """A strategy for request body dicts of ``api_key`` at ``version``."""
    return _struct(APIS[api_key].request, version)


def advertised():
    """Every advertised (api key, version) pair."""
    return [(key, v) for key, (lo, hi) in sorted(SUPPORTED.items()) for v in range(lo, hi + 1)]


@st.composite
def frames(draw, pairs=None):
    """A whole request frame (size prefix included) and its (api key, version)."""
    api_key, version = draw(st.sampled_from(pairs or advertised()))
    body = draw(request_bodies(api_key, version))
    client_id = draw(st.one_of(st.none(), _text()))
    correlation_id = draw(st.integers(-(2**31), 2**31 - 1))
    try:
        frame = codec.encode_request(api_key, version, correlation_id, client_id, body)
    except (codec.EncodeError, ValueError, OverflowError):
        # The codec refuses a value (e.g. an over-long string): send it anyway
        # with the body cut to nothing, which the broker must refuse.
        frame = codec.encode_request(api_key, version, correlation_id, client_id, {})[:-1]
        frame = len(frame[4:]).to_bytes(4, "big") + frame[4:]
    return api_key, version, frame

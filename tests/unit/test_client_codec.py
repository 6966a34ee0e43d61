"""pluglog._clientcodec held to the Python codec, and the producer's fast Deferreds.

The C encoder must produce exactly ``records.encode_record_fields``'s bytes
and the C decoder exactly the Python decoder's records (or refuse what it
refuses) -- on random records and on randomly mutated record arrays.
``fire_acks`` must leave a Deferred in the state ``callback()`` leaves it in.
"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet import defer

from pluglog.client import codec
from pluglog.client.batches import RecordDeferred, RecordMetadata, fire_acks
from pluglog.client.fetcher import ConsumerRecord
from pluglog.errors import InvalidRecordError
from pluglog.protocol.records import encode_record_fields

FIELD = st.one_of(st.none(), st.binary(max_size=300))
HEADERS = st.lists(
    st.tuples(st.one_of(st.text(max_size=8), st.binary(max_size=8)), FIELD), max_size=4
)
TS_DELTA = st.one_of(st.integers(0, 20000), st.integers(-(2**63), 2**63 - 1))
OFFSET_DELTA = st.one_of(st.integers(0, 20000), st.integers(-(2**31), 2**31 - 1))


def test_the_c_codec_is_built_and_used():
    # setup.py builds it (build_ext --inplace); without it the client is
    # correct but several times slower per record.
    assert codec.BUILT, "run: python3 setup.py build_ext --inplace"
    assert codec.encode_record is not encode_record_fields


@settings(max_examples=120, deadline=None, database=None)
@given(key=FIELD, value=FIELD, headers=HEADERS, ts_delta=TS_DELTA, offset_delta=OFFSET_DELTA)
def test_encode_matches_python(key, value, headers, ts_delta, offset_delta):
    expected = encode_record_fields(key, value, headers, ts_delta, offset_delta)
    assert codec.encode_record(key, value, headers, ts_delta, offset_delta) == expected
    # Any bytes-like key/value, tuples or lists as pairs.
    as_views = codec.encode_record(
        None if key is None else memoryview(key),
        None if value is None else bytearray(value),
        [list(h) for h in headers],
        ts_delta,
        offset_delta,
    )
    assert as_views == expected


def test_encode_refuses_bad_input():
    with pytest.raises(TypeError):
        codec.encode_record("text", b"v", (), 0, 0)  # str values are serialised first
    with pytest.raises(TypeError):
        codec.encode_record(None, b"v", [("a", "text")], 0, 0)
    with pytest.raises(TypeError):
        codec.encode_record(None, b"v", [("a",)], 0, 0)
    with pytest.raises(ValueError):
        codec.encode_record(None, b"v", (), 0, 2**31)
    with pytest.raises(OverflowError):
        codec.encode_record(None, b"v", (), 2**63, 0)


def _array(records):
    return b"".join(
        encode_record_fields(k, v, h, ts, i) for i, (k, v, h, ts) in enumerate(records)
    )


RECORDS = st.lists(
    st.tuples(FIELD, FIELD, st.lists(st.tuples(st.text(max_size=8), FIELD), max_size=3), TS_DELTA),
    min_size=1,
    max_size=8,
)


def _both(data, count, base_offset, min_offset, append):
    args = (data, count, base_offset, 1_700_000_000_000, min_offset, ConsumerRecord, "t", 3, 1)
    results = []
    for decode in (codec.decode_consumer_records, codec.py_decode_consumer_records):
        try:
            results.append(decode(*args, append))
        except (InvalidRecordError, ValueError) as exc:
            results.append(type(exc) if isinstance(exc, UnicodeDecodeError) else "refused")
    return results


@settings(max_examples=120, deadline=None, database=None)
@given(records=RECORDS, base_offset=st.integers(0, 2**40), skip=st.integers(0, 9))
def test_decode_matches_python(records, base_offset, skip):
    data = _array(records)
    for append in (None, 1_800_000_000_000):
        c, py = _both(data, len(records), base_offset, base_offset + skip, append)
        assert c == py
        assert [type(r) for r in c] == [ConsumerRecord] * len(c)
        assert len(c) == max(0, len(records) - skip)


@settings(max_examples=250, deadline=None, database=None)
@given(records=RECORDS, seed=st.integers(0, 2**32 - 1))
def test_decode_mutations_match_python(records, seed):
    # Random byte flips, truncations and wrong counts: the C decoder accepts
    # exactly what the Python one accepts, with the same records.
    rng = random.Random(seed)
    data = bytearray(_array(records))
    for _ in range(rng.randint(1, 3)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    if rng.random() < 0.3:
        del data[rng.randrange(len(data)) :]
    count = len(records) + rng.choice((0, 0, 0, -1, 1))
    c, py = _both(bytes(data), count, 100, 0, None)
    assert c == py


def test_decode_refuses_a_record_running_past_the_end():
    data = encode_record_fields(b"k", b"value", (), 0, 0)
    with pytest.raises(InvalidRecordError, match="past the end"):
        codec.decode_consumer_records(data[:-2], 1, 0, 0, 0, ConsumerRecord, "t", 0, 0, None)


# -- the producer's Deferreds -------------------------------------------------


def test_fire_acks_leaves_deferreds_as_callback_does():
    plain = defer.Deferred()
    plain.callback(RecordMetadata("t", 1, 7, 42))
    fast = RecordDeferred()
    fire_acks([fast], "t", 1, 7, 42)
    assert fast.called and plain.called
    assert fast.result == plain.result == RecordMetadata("t", 1, 7, 42)
    assert type(fast.result) is RecordMetadata
    got = []
    fast.addCallback(got.append)
    assert got == [RecordMetadata("t", 1, 7, 42)]
    with pytest.raises(defer.AlreadyCalledError):
        fast.callback(None)


def test_fire_acks_runs_callbacks_added_before_the_ack():
    deferreds = [RecordDeferred() for _ in range(4)]
    got = []
    deferreds[1].addCallback(lambda m: got.append(m.offset) or "chained")
    deferreds[2].pause()
    fire_acks(list(deferreds), "t", 0, 100, 5)  # the list is handed over
    assert got == [101]
    assert deferreds[1].result == "chained"
    assert not hasattr(deferreds[2], "result") or deferreds[2].result.offset == 102
    deferreds[2].unpause()
    assert [d.result.offset for d in (deferreds[0], deferreds[2], deferreds[3])] == [100, 102, 103]


def test_fire_acks_under_acks_0_and_after_cancel():
    cancelled = RecordDeferred()
    cancelled.cancel()
    other = RecordDeferred()
    fire_acks([cancelled, other], "t", 2, -1, -1)  # a cancelled one stays cancelled
    assert other.result == RecordMetadata("t", 2, -1, -1)
    failures = []
    cancelled.addErrback(failures.append)
    assert failures[0].check(defer.CancelledError)


def test_inline_callbacks_wait_on_a_record_deferred():
    d = RecordDeferred()

    @defer.inlineCallbacks
    def waiter():
        meta = yield d
        return meta.offset

    result = waiter()
    fire_acks([d], "t", 0, 9, 1)
    assert result.result == 9


def test_decode_sums_past_int64_as_python_does():
    # Found by Hypothesis in CI-like runs: base timestamp + a huge delta (and
    # base offset + delta) must not wrap in C; Python's ints do not.
    data = _array([(None, b"v", [], 2**63 - 2), (None, b"w", [], 0)])
    for base_offset in (100, 2**63 - 1):
        c, py = _both(data, 2, base_offset, 0, None)
        assert c == py
        assert c[0].timestamp == 1_700_000_000_000 + 2**63 - 2
        assert c[1].offset == base_offset + 1

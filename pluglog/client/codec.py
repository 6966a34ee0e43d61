"""The client's per-record codec: the C helper when built, else Python.

:func:`encode_record` is :func:`pluglog.protocol.records.encode_record_fields`
and :func:`decode_consumer_records` turns a batch's uncompressed record array
into :class:`~pluglog.client.fetcher.ConsumerRecord` tuples. Both run once per
record, so pluglog/_clientcodec.c does them in C (``python3 setup.py
build_ext --inplace`` builds it); without a compiler these Python versions
give the same results, only slower. ``BUILT`` says which is in use.
"""

from pluglog.errors import InvalidRecordError
from pluglog.protocol.records import decode_records, encode_record_fields

try:
    from pluglog import _clientcodec
except ImportError:  # pragma: no cover - the install script builds it
    _clientcodec = None  # type: ignore[assignment]  # the Python codec below serves

BUILT = _clientcodec is not None


def py_decode_consumer_records(
    data, count, base_offset, base_timestamp, min_offset, cls, topic, partition, ts_type, append
):
    """The Python reference of the C ``decode_consumer_records``."""
    return [
        cls(
            topic,
            partition,
            r.offset,
            r.timestamp if append is None else append,
            ts_type,
            r.key,
            r.value,
            r.headers,
        )
        for r in decode_records(data, count, base_offset, base_timestamp)
        if r.offset >= min_offset
    ]


if BUILT:
    encode_record = _clientcodec.encode_record
    _c_decode = _clientcodec.decode_consumer_records

    def decode_consumer_records(*args):
        try:
            return _c_decode(*args)
        except UnicodeDecodeError:
            raise
        except ValueError as exc:
            raise InvalidRecordError(str(exc)) from None

else:  # pragma: no cover
    encode_record = encode_record_fields
    decode_consumer_records = py_decode_consumer_records

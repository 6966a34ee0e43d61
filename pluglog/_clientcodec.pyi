# Type stub of the C extension pluglog/_clientcodec.c (the Twisted client's
# per-record codec); pluglog/client/codec.py has the Python fallback.
from typing import Any

def encode_record(
    key: bytes | None,
    value: bytes | None,
    headers: Any,
    timestamp_delta: int,
    offset_delta: int,
) -> bytes: ...
def decode_consumer_records(
    data: Any,
    count: int,
    base_offset: int,
    base_timestamp: int,
    min_offset: int,
    cls: type,
    topic: str,
    partition: int,
    timestamp_type: int,
    append_time: int,
) -> list[Any]: ...

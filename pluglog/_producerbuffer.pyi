# Type stub of the C extension pluglog/_producerbuffer.c (the Twisted
# producer's send/ack path); pluglog/client/batches.py has the Python fallback.
from typing import Any

class RecordBuffer:
    records: list[bytes]
    deferreds: list[Any]
    base_ts: int | None
    max_ts: int | None
    size: int
    limit: int
    def add(self, value: Any, timestamp_ms: int, producer: Any) -> Any: ...

class FastSend:
    def __init__(self, *args: Any) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

def set_deferred_type(cls: type, /) -> None: ...
def track(obj: object, /) -> None: ...
def fire_acks(
    deferreds: list[Any],
    topic: str,
    partition: int,
    base_offset: int,
    timestamp: int,
    meta_cls: type,
) -> None: ...

# Type stub of the C extension pluglog/_recordwalk.c (the produce-time record
# walk and the fast lane's request parse); Python references live beside the
# callers (pluglog/broker/validation.py, pluglog/server/fastlane.py).
from typing import Any

def walk(records: Any, count: int, /) -> None: ...
def produce_shape(request: Any, /) -> Any: ...

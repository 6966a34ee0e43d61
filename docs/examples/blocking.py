"""The blocking client: one request at a time, no reactor (scripts, Spark).

python docs/examples/blocking.py 127.0.0.1:9092
"""

import sys

from pluglog import protocol as codec
from pluglog.client.blocking import BlockingClient


def main(bootstrap="127.0.0.1:9092"):
    with BlockingClient.from_bootstrap(bootstrap) as client:
        meta = client.request(codec.METADATA, 8, {"topics": None})
        for topic in sorted(meta["topics"], key=lambda t: t["name"]):
            print(topic["name"], len(topic["partitions"]), "partitions")
        for part in client.fetch("example-orders", {0: 0}):
            print("partition", part["partition_index"], "high watermark", part["high_watermark"])


if __name__ == "__main__":
    main(*sys.argv[1:])

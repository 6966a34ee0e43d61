"""What the request metrics add per request, measured in one process, A/B interleaved.

    python3 bench/metrics_cost.py [--blocks 40] [--block 2000] [--storage segments]

One broker (real storage in a temp dir, the reactor replaced by a Clock) and
two client connections on the real KafkaServerProtocol: one from a listener
with pluglog.metrics' RequestMetrics, one without (``metrics.enabled=false``).
Blocks of ``--block`` requests alternate between the two, so load from other
processes falls on both alike; per block the process CPU time
(``time.process_time``) per request is taken, and the medians compared.
Requests: the produce fast lane's shape (Produce v8, one batch of 50 x 200 B,
acks=1) and a consumer Fetch v11 of 32 KB from offset 0 (general path, its
answer walked for errors and bytes out). Warm caches: the figure is the
metrics' own cost, not the cold-cache cost the live broker sees per layer
(bench/produce_latency.py --metrics-compare measures the live broker).
Partition's records/bytes-in counters are unconditional (two integer
additions per batch) and in both figures.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from twisted.internet.task import Clock  # noqa: E402
from twisted.internet.testing import StringTransport  # noqa: E402

from pluglog import protocol as codec  # noqa: E402
from pluglog.broker.core import Broker  # noqa: E402
from pluglog.config import BrokerConfig  # noqa: E402
from pluglog.metrics.recorder import RequestMetrics  # noqa: E402
from pluglog.plugins import make_plugin_manager  # noqa: E402
from pluglog.protocol.records import Record, build_batch  # noqa: E402
from pluglog.registry import Registry  # noqa: E402
from pluglog.server.protocol import KafkaServerFactory  # noqa: E402


def produce_frame(batch):
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}],
    }
    return codec.encode_request(codec.PRODUCE, 8, 1, "bench", body)


def fetch_frame():
    partition = {
        "partition": 0,
        "current_leader_epoch": -1,
        "fetch_offset": 0,
        "log_start_offset": -1,
        "partition_max_bytes": 32768,
    }
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 32768,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": "t", "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return codec.encode_request(codec.FETCH, 11, 2, "bench", body)


def connection(broker, metrics):
    proto = KafkaServerFactory(broker, None, metrics).buildProtocol(None)
    transport = StringTransport()
    proto.makeConnection(transport)
    return proto, transport


def block_cpu(proto, transport, frame, count):
    start = time.process_time()
    for _ in range(count):
        proto.dataReceived(frame)
        transport.clear()
    return 1e6 * (time.process_time() - start) / count


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--block", type=int, default=2000)
    parser.add_argument("--storage", default="segments")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="pluglog-metrics-cost-")
    try:
        clock = Clock()
        clock.advance(1_700_000_000)
        config = BrokerConfig(data_dir=work, storage=args.storage, fsync="never")
        broker = Broker(config, Registry(make_plugin_manager(autoload=False)), clock)
        broker.start()
        broker.create_topic("t", 1, configs={"segment.bytes": str(1 << 30)})
        on = connection(broker, RequestMetrics())
        off = connection(broker, None)
        produce = produce_frame(build_batch([Record(None, b"x" * 200) for _ in range(50)]))
        fetch = fetch_frame()
        results = {}
        for name, frame in (("produce", produce), ("fetch", fetch)):
            for proto, transport in (on, off):  # warm-up
                block_cpu(proto, transport, frame, args.block)
            for number in range(args.blocks):
                pair = [("on", on), ("off", off)]
                if number % 2:
                    pair.reverse()
                for label, (proto, transport) in pair:
                    cpu = block_cpu(proto, transport, frame, args.block)
                    results.setdefault((name, label), []).append(cpu)
        for name in ("produce", "fetch"):
            cpu_on = statistics.median(results[(name, "on")])
            cpu_off = statistics.median(results[(name, "off")])
            added = cpu_on - cpu_off
            print(
                f"{name}: metrics off {cpu_off:.2f} us/request, on {cpu_on:.2f} us/request, "
                f"added {added:+.2f} us ({100 * added / cpu_off:+.1f} %)"
            )
        print(f"load average at the end: {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Produce and consume throughput over PLAINTEXT, SSL and SASL_SSL in one run.

One broker (tests/broker_process.py) with three listeners, test certificates
from tests/tls_certs.py and a SCRAM-SHA-256 user; confluent-kafka produces
N records of S bytes to a fresh topic per listener, then consumes them back.
Prints a Markdown table row per listener (records/s, MB/s) so the TLS cost is
measured on the same machine at the same time.

    python3 bench/security_bench.py [--records 200000] [--size 200]
"""

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.broker_process import BrokerProcess, free_port  # noqa: E402
from tests.integration.secure_broker import add_user  # noqa: E402
from tests.tls_certs import make_certs  # noqa: E402


def client_conf(protocol, port, certs):
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = certs["ca"]
    if protocol.startswith("SASL"):
        conf.update(
            {
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "bench",
                "sasl.password": "bench-pw",
            }
        )
    return conf


def run_one(protocol, port, certs, records, size):
    from confluent_kafka import Consumer, Producer

    conf = client_conf(protocol, port, certs)
    topic = f"bench-{protocol.lower()}-{os.getpid()}"
    producer = Producer({**conf, "linger.ms": 5, "batch.size": 1_000_000, "acks": 1})
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    produce_s = time.perf_counter() - start
    consumer = Consumer(
        {
            **conf,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = 0
    start = None
    while got < records:
        batch = consumer.consume(10_000, 1.0)
        if batch and start is None:
            start = time.perf_counter()
        got += sum(1 for m in batch if m.error() is None)
    consume_s = time.perf_counter() - start
    consumer.close()
    mb = records * size / 1e6
    return records / produce_s, mb / produce_s, records / consume_s, mb / consume_s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        certs = make_certs(os.path.join(tmp, "certs"))
        data = os.path.join(tmp, "data")
        add_user(data, "bench", "bench-pw")
        ports = {"SSL": free_port(), "SASL_SSL": free_port(), "PLAINTEXT": free_port()}
        listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items())
        broker = BrokerProcess(
            data,
            port=ports["PLAINTEXT"],
            settings={
                "listeners": listeners,
                "ssl.keystore.location": certs["server_cert"],
                "ssl.key.location": certs["server_key"],
            },
        ).start()
        try:
            print(f"{args.records} records of {args.size} bytes, confluent-kafka, acks=1")
            print("| listener | produce rec/s | produce MB/s | consume rec/s | consume MB/s |")
            print("|---|---|---|---|---|")
            for protocol in ("PLAINTEXT", "SSL", "SASL_SSL"):
                p_rs, p_mb, c_rs, c_mb = run_one(
                    protocol, ports[protocol], certs, args.records, args.size
                )
                print(f"| {protocol} | {p_rs:,.0f} | {p_mb:.1f} | {c_rs:,.0f} | {c_mb:.1f} |")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()

"""A bounded fuzz campaign against the broker process (bench/fuzz.py runs long ones).

Every advertised request type and version (Hypothesis, from the codec's
schemas), mutated requests captured from confluent-kafka and kafka-python,
random frames and raw streams: the broker must answer or close each
connection, stay up, keep serving a verification producer/consumer with
nothing lost, and restart cleanly afterwards.
"""

from tests.broker_process import BrokerProcess, free_port
from tests.fuzz.capture import RecordingProxy, capture_corpus
from tests.fuzz.harness import Target, Verifier
from tests.fuzz.runner import run_campaign
from tests.fuzz.strategies import PROTECTED_TOPIC, advertised
from tests.integration.clients import create_topic


def test_fuzz_campaign(tmp_path):
    proxy_port = free_port()
    proc = BrokerProcess(
        tmp_path / "data", extra_args=["--advertised-listener", f"127.0.0.1:{proxy_port}"]
    ).start()
    proxy = RecordingProxy(proxy_port, ("127.0.0.1", proc.port))
    try:
        corpus = capture_corpus(proxy)
        # Both clients' requests are in the corpus: produce, fetch, groups, admin.
        assert len({frame[4:6] for frame in corpus}) >= 10, len(corpus)
        create_topic(f"127.0.0.1:{proxy_port}", PROTECTED_TOPIC, partitions=1)
        target = Target("127.0.0.1", proc.port, proc.proc.pid)
        # The verifier talks through the advertised (proxy) address too.
        verifier = Verifier(f"127.0.0.1:{proxy_port}")
        verifier.produce()
        stats = run_campaign(target, verifier, corpus, rounds=2, per_pair=2, mutated=300)
        print(stats.line())
        assert stats.structured == 2 * 2 * len(advertised())
        assert stats.acked >= 60 and stats.lost == 0
        assert stats.answered > 0 and stats.closed > 0
        assert proc.alive()
        log = proc.log()
        assert "Unhandled Error" not in log
    finally:
        proxy.close()
        proc.stop()
    proc.start()  # the data the fuzzer left behind must not stop a restart
    proc.stop()

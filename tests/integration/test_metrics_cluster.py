"""Cluster health through Prometheus: a SIGKILLed broker and its restart (issue 23).

Three brokers (ZooKeeper coordinator, tests/cluster.py's short timeouts),
each with ``--http``; a real Prometheus scrapes all three every second.
When one broker is SIGKILLed, the leaders on the survivors drop it from
their ISRs, so ``pluglog_under_replicated_partitions`` rises on them (read
through Prometheus, from the survivors' own series); once it is restarted
and caught up, the sum returns to 0 with all three targets up.
"""

import os

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster import Cluster
from tests.prometheus import BINARY, PrometheusProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not os.path.exists(BINARY), reason="Debian's prometheus is not installed"),
]

URP = "sum(pluglog_under_replicated_partitions)"


def test_under_replicated_gauge_follows_a_killed_broker(tmp_path, zk_connect):
    cluster = Cluster(tmp_path, zk_connect, brokers=3, http=True).start()
    prometheus = None
    try:
        targets = [f"127.0.0.1:{port}" for port in cluster.http_ports.values()]
        prometheus = PrometheusProcess(tmp_path / "prometheus", targets).start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.create_topics([NewTopic("replicated", 3, 3)]).values():
            future.result(30)
        cluster.wait_for_isr("replicated", 3, 3)
        prometheus.wait_value('count(up{job="pluglog"} == 1)', lambda v: v == 3)
        prometheus.wait_value(URP, lambda v: v == 0)
        assert prometheus.wait_value("sum(pluglog_controller)", lambda v: v == 1) == 1
        connected = 'sum(pluglog_zookeeper_session_state{state="CONNECTED"})'
        assert prometheus.wait_value(connected, lambda v: v == 3) == 3
        assert prometheus.value("sum(pluglog_offline_partitions)") == 0

        victim = 3
        cluster.kill(victim)
        survivors = {f"127.0.0.1:{cluster.http_ports[n]}" for n in (1, 2)}
        prometheus.wait_value(URP, lambda v: v > 0, timeout=60)
        rising = prometheus.query("pluglog_under_replicated_partitions > 0")
        assert rising and {r["metric"]["instance"] for r in rising} <= survivors, rising
        assert prometheus.value(f'up{{instance="127.0.0.1:{cluster.http_ports[victim]}"}}') == 0
        assert prometheus.wait_value("sum(pluglog_isr_shrinks_total)", lambda v: v > 0) > 0

        cluster.restart(victim)
        cluster.wait_for_isr("replicated", 3, 3, timeout=60)
        prometheus.wait_value('count(up{job="pluglog"} == 1)', lambda v: v == 3)
        prometheus.wait_value(URP, lambda v: v == 0, timeout=60)
        assert prometheus.wait_value("sum(pluglog_isr_expands_total)", lambda v: v > 0) > 0
    finally:
        if prometheus is not None:
            prometheus.stop()
        cluster.stop()

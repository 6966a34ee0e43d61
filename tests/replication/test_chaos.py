"""A short run of bench/chaos.py: seeded random victims, nothing acknowledged lost."""

from tests.chaos import compare_replicas, run_chaos


def test_chaos_rounds_lose_nothing(cluster):
    c = cluster(3)
    figures = run_chaos(c, "chaos", rounds=3, seed=11, partitions=2, rate=800, settle_s=1.0)
    print(figures)
    assert figures["acked"] > 1000
    assert figures["lost"] == 0, figures
    # Failover within 2 x the 4 s ZooKeeper session timeout.
    assert figures["failover_max_s"] is None or figures["failover_max_s"] < 8.0, figures
    assert figures["longest_without_leader_s"] <= 8.0, figures
    # Started again at once after SIGKILL: the broker waits for its old session.
    assert figures["restart_failures"] == 0, figures
    assert compare_replicas(c, "chaos", 2) == []

"""The console's overview of a ZooKeeper cluster (issue 23).

Three brokers on three racks, each with ``--http``. The overview of any
one of them shows the whole cluster from the coordinator's metadata: every
registered broker with its rack, leaders and replicas (and a link to its
own console), the controller, and partition health cluster-wide. When a
broker stops, the others' overviews show it down (its replicas are still
assigned to it) and the partitions it held under-replicated.
"""

import re
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster import Cluster

pytestmark = pytest.mark.cluster


def overview(cluster, node):
    with urllib.request.urlopen(cluster.url(node) + "/console/", timeout=30) as response:
        return response.read().decode("utf-8")


def row(page, node):
    found = re.search(rf'<tr id="broker-{node}">(.*?)</tr>', page, re.S)
    assert found, page
    return re.sub(r"<[^>]+>", "|", found.group(1))


def figure(page, css_id):
    return re.search(rf'<dd id="{css_id}"[^>]*>([^<]*)</dd>', page).group(1)


def test_overview_shows_the_whole_cluster(tmp_path, zk_connect):
    racks = {1: "rack-a", 2: "rack-b", 3: "rack-c"}
    cluster = Cluster(tmp_path, zk_connect, brokers=3, racks=racks, http=True).start()
    try:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for future in admin.create_topics([NewTopic("spread", 2, 3)]).values():
            future.result(30)
        cluster.wait_for_isr("spread", 2, 3)
        controller = cluster.controller()
        page = overview(cluster, 1)
        assert figure(page, "controller") == str(controller)
        assert figure(page, "broker-count") == "3"
        assert figure(page, "under-replicated") == "0"
        assert "Racks: rack-a, rack-b, rack-c." in page
        leaders = 0
        for node in (1, 2, 3):
            cells = row(page, node)
            assert f"|{racks[node]}|" in cells and "|live|" in cells, cells
            assert ("controller" in cells) == (node == controller), cells
            after = page.split(f'id="broker-{node}"')[1]
            assert re.search(r'class="replicas">(\d+)', after).group(1) == "2"
            leaders += int(re.search(r'class="leaders">(\d+)', after).group(1))
        assert leaders == 2
        # Each other broker links to its own console.
        assert f'<a href="{cluster.url(2)}/console/">2</a>' in page

        cluster.brokers[3].stop()
        cluster.wait_for(
            lambda: figure(overview(cluster, 1), "under-replicated") == "2",
            timeout=30,
            what="both partitions under-replicated in broker 1's overview",
        )
        page = overview(cluster, 2)  # any survivor: the same cluster-wide view
        assert figure(page, "broker-count") == "2 of 3"
        assert "|down (not registered)|" in row(page, 3)
        assert figure(page, "under-replicated") == "2" and figure(page, "offline") == "0"
        assert page.count("under-replicated</td></tr>") == 2  # the unhealthy partitions table
    finally:
        cluster.stop()

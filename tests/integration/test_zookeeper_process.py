"""The ZooKeeper test helper itself: serves, isolates tests by chroot, restarts without loss."""

from kazoo.client import KazooClient

from tests.zookeeper import four_letter


def _client(hosts):
    client = KazooClient(hosts=hosts, timeout=5)
    client.start(timeout=10)
    return client


def test_ruok_and_chroot_isolation(zookeeper, zk_connect):
    assert four_letter(zookeeper.port) == "imok"
    chroot = zk_connect[len(zookeeper.hosts) :]
    assert chroot.startswith("/t")
    root = _client(zookeeper.hosts)
    try:
        root.ensure_path(chroot)
        inner = _client(zk_connect)
        try:
            inner.create("/brokers/ids/1", b"x", makepath=True)
            assert root.get(chroot + "/brokers/ids/1")[0] == b"x"
            assert not root.exists("/brokers/ids/1")
        finally:
            inner.stop()
    finally:
        root.stop()


def test_restart_keeps_data(zookeeper, zk_connect):
    root = _client(zookeeper.hosts)
    path = zk_connect[len(zookeeper.hosts) :] + "/kept"
    root.create(path, b"v", makepath=True)
    root.stop()
    zookeeper.restart()
    assert four_letter(zookeeper.port) == "imok"
    again = _client(zookeeper.hosts)
    try:
        assert again.get(path)[0] == b"v"
    finally:
        again.stop()

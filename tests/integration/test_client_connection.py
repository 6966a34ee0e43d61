"""KafkaClientProtocol against the real broker process on the real reactor."""

import os
import shutil
import tempfile

from twisted.internet import defer, reactor
from twisted.trial import unittest

from pluglog.client.connection import connect
from pluglog.client.errors import KafkaConnectionError
from pluglog.protocol.api_keys import API_VERSIONS, CREATE_TOPICS, METADATA
from pluglog.protocol.apis import SUPPORTED
from tests.broker_process import BrokerProcess, free_port


class ConnectionAgainstBroker(unittest.TestCase):
    timeout = 60

    def setUp(self):
        # Not self.mktemp(): under pytest that is relative to the checkout.
        root = tempfile.mkdtemp(prefix="pluglog-conn-")
        self.addCleanup(shutil.rmtree, root, True)
        self.broker = BrokerProcess(os.path.join(root, "data")).start()
        self.addCleanup(self.broker.stop)

    @defer.inlineCallbacks
    def test_negotiate_pipeline_and_close(self):
        conn = yield connect(reactor, "127.0.0.1", self.broker.port, client_id="it")
        self.assertEqual(conn.api_versions[API_VERSIONS], SUPPORTED[API_VERSIONS])
        self.assertEqual(conn.version_for(METADATA, 13), SUPPORTED[METADATA][1])
        created = yield conn.request(
            CREATE_TOPICS,
            conn.version_for(CREATE_TOPICS, 4),
            {
                "topics": [
                    {
                        "name": "conn-t",
                        "num_partitions": 3,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 5000,
                "validate_only": False,
            },
        )
        self.assertEqual(created["topics"][0]["error_code"], 0)
        # Twenty pipelined Metadata requests, answered in order.
        version = conn.version_for(METADATA, 8)
        body = {"topics": [{"name": "conn-t"}], "allow_auto_topic_creation": False}
        results = yield defer.gatherResults(
            [conn.request(METADATA, version, body) for _ in range(20)]
        )
        for meta in results:
            self.assertEqual(len(meta["topics"][0]["partitions"]), 3)
        yield conn.close()
        self.assertTrue(conn.closed)

    @defer.inlineCallbacks
    def test_broker_stop_fails_pending_and_fires_lost(self):
        conn = yield connect(reactor, "127.0.0.1", self.broker.port)
        self.broker.stop()
        reason = yield conn.lost
        self.assertIsNotNone(reason)
        with self.assertRaises(KafkaConnectionError):
            yield conn.request(METADATA, 8, {"topics": None, "allow_auto_topic_creation": False})

    @defer.inlineCallbacks
    def test_no_listener(self):
        with self.assertRaises(KafkaConnectionError) as cm:
            yield connect(reactor, "127.0.0.1", free_port(), timeout=5)
        self.assertIn("cannot connect", str(cm.exception))

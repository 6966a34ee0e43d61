"""Client quotas: rates, precedence, throttle times and the muted channel (Clock)."""

import tempfile

import pytest
from twisted.internet.task import Clock

from pluglog import protocol as codec
from pluglog.broker.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    ClientQuotas,
    Rate,
    apply_ops,
    make_entity,
)
from pluglog.config import BrokerConfig, ConfigError, parse_settings
from pluglog.errors import InvalidRequestError
from tests.unit.test_server_protocol import (
    connect,
    fetch_body,
    make_broker,
    produce_body,
    req,
    responses,
)

CLIENT = (("client-id", "app"),)


def test_rate_pads_to_full_windows_and_forgets_old_samples():
    rate = Rate(11, 1000)
    rate.record(10_000, 0)
    assert rate.measure(0) == pytest.approx(1000)  # 10 kB over the padded 10 s
    for second in range(1, 30):
        rate.record(1000, second * 1000)
    # 11 one-second samples of 1000 bytes, 10 s elapsed since the oldest.
    assert rate.measure(29_000) == pytest.approx(11_000 / 10)


def test_precedence_follows_kafka():
    quotas = ClientQuotas(BrokerConfig())
    quotas.update(
        {
            make_entity([("client-id", None)]): {PRODUCER_BYTE_RATE: 1.0},
            make_entity([("client-id", "app")]): {PRODUCER_BYTE_RATE: 2.0},
            make_entity([("user", None)]): {PRODUCER_BYTE_RATE: 3.0},
            make_entity([("user", "alice"), ("client-id", "app")]): {PRODUCER_BYTE_RATE: 4.0},
        }
    )
    assert quotas.quota_for(PRODUCER_BYTE_RATE, "alice", "app") == (4.0, ("alice", "app"))
    # A default user entity beats client-id-only entities.
    assert quotas.quota_for(PRODUCER_BYTE_RATE, "bob", "app") == (3.0, ("bob", ""))
    quotas.update({k: v for k, v in quotas.quotas.items() if k != (("user", None),)})
    assert quotas.quota_for(PRODUCER_BYTE_RATE, "bob", "app") == (2.0, ("", "app"))
    # A default client-id quota limits each client id on its own.
    assert quotas.quota_for(PRODUCER_BYTE_RATE, "bob", "other") == (1.0, ("", "other"))
    assert quotas.quota_for(CONSUMER_BYTE_RATE, "bob", "other") == (None, None)


def test_static_broker_default_and_bad_settings():
    config = parse_settings({"quota.producer.default": "1000", "quota.window.num": "3"})
    quotas = ClientQuotas(config)
    assert quotas.enabled
    assert quotas.quota_for(PRODUCER_BYTE_RATE, "ANONYMOUS", "x") == (1000.0, ("", "x"))
    assert not ClientQuotas(BrokerConfig()).enabled
    with pytest.raises(ConfigError, match="quota.window.num"):
        parse_settings({"quota.window.num": "0"})


def test_throttle_time_is_kafkas_formula_capped_at_one_window():
    quotas = ClientQuotas(BrokerConfig(quota_window_num=11, quota_window_size_seconds=1))
    quotas.update({CLIENT: {PRODUCER_BYTE_RATE: 1000.0}})
    assert quotas.record(PRODUCER_BYTE_RATE, "u", "app", 5000, 0) == 0  # 500 B/s padded
    # 15 kB over 10 s = 1500 B/s: (1500 - 1000) / 1000 * 10 s = 5 s, capped at 1 s.
    assert quotas.record(PRODUCER_BYTE_RATE, "u", "app", 10_000, 0) == 1000
    quotas.update({CLIENT: {PRODUCER_BYTE_RATE: 1400.0}})
    # 15.1 kB / 10 s = 1510 B/s against 1400: 110 / 1400 * 10 s = 785 ms.
    assert quotas.record(PRODUCER_BYTE_RATE, "u", "app", 100, 0) == 785
    assert quotas.record(PRODUCER_BYTE_RATE, "u", "other", 10**9, 0) == 0  # unlimited


def test_entities_and_ops_are_validated():
    with pytest.raises(InvalidRequestError, match="ip"):
        make_entity([("ip", "1.2.3.4")])
    with pytest.raises(InvalidRequestError):
        make_entity([("user", "a"), ("user", "b")])
    with pytest.raises(InvalidRequestError, match="unknown quota key"):
        apply_ops({}, [("bytes_per_hour", 1.0, False)])
    with pytest.raises(InvalidRequestError, match="above 0"):
        apply_ops({}, [(PRODUCER_BYTE_RATE, 0.0, False)])
    assert apply_ops({PRODUCER_BYTE_RATE: 1.0}, [(PRODUCER_BYTE_RATE, 0, True)]) == {}


class TestConnection:
    """A quota on the real protocol: throttle_time_ms, then no reading until it passed."""

    def setup_method(self):
        self.broker = make_broker(tempfile.mkdtemp(prefix="pluglog-quota-"))
        self.clock = self.broker.reactor
        assert isinstance(self.clock, Clock)

    def alter(self, proto, transport, entity, ops):
        body = {
            "entries": [
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops],
                }
            ],
            "validate_only": False,
        }
        proto.dataReceived(req(codec.ALTER_CLIENT_QUOTAS, 0, 1, body))
        [(_, answer)] = responses(transport, [(codec.ALTER_CLIENT_QUOTAS, 0)])
        return answer

    def test_produce_over_quota_is_throttled_and_muted(self):
        proto, transport = connect(self.broker)
        answer = self.alter(
            proto, transport, [("client-id", "test")], [(PRODUCER_BYTE_RATE, 100, False)]
        )
        assert answer["entries"][0]["error_code"] == 0
        proto.dataReceived(req(codec.PRODUCE, 8, 2, produce_body("t", 0, [b"x" * 2000])))
        [(_, first)] = responses(transport, [(codec.PRODUCE, 8)])
        assert first["responses"][0]["partition_responses"][0]["error_code"] == 0
        assert first["throttle_time_ms"] == 1000  # over 100 B/s: one window
        assert transport.producerState == "paused"
        self.clock.advance(1.0)
        assert transport.producerState == "producing"
        # Another client id is not limited.
        other, other_transport = connect(self.broker)
        frame = codec.encode_request(
            codec.PRODUCE, 8, 3, "free", produce_body("t", 0, [b"y" * 2000])
        )
        other.dataReceived(frame)
        [(_, free)] = responses(other_transport, [(codec.PRODUCE, 8)])
        assert free["throttle_time_ms"] == 0 and other_transport.producerState == "producing"

    def test_fetch_bytes_count_against_the_consumer_quota(self):
        proto, transport = connect(self.broker)
        self.alter(proto, transport, [("client-id", None)], [(CONSUMER_BYTE_RATE, 100, False)])
        proto.dataReceived(req(codec.PRODUCE, 8, 2, produce_body("t", 0, [b"x" * 3000])))
        responses(transport, [(codec.PRODUCE, 8)])  # producing is not limited
        self.clock.advance(1.0)
        proto.dataReceived(req(codec.FETCH, 11, 3, fetch_body("t", 0, 0)))
        [(_, fetched)] = responses(transport, [(codec.FETCH, 11)])
        assert fetched["throttle_time_ms"] > 0
        assert transport.producerState == "paused"

    def test_describe_filters_and_persistence(self):
        proto, transport = connect(self.broker)
        self.alter(proto, transport, [("client-id", "a")], [(PRODUCER_BYTE_RATE, 5, False)])
        self.alter(
            proto,
            transport,
            [("user", "u"), ("client-id", None)],
            [(CONSUMER_BYTE_RATE, 7, False)],
        )
        bad = self.alter(proto, transport, [("ip", "x")], [(PRODUCER_BYTE_RATE, 5, False)])
        assert bad["entries"][0]["error_code"] == 42  # INVALID_REQUEST

        def describe(components, strict):
            body = {
                "components": [
                    {"entity_type": t, "match_type": m, "match": n} for t, m, n in components
                ],
                "strict": strict,
            }
            proto.dataReceived(req(codec.DESCRIBE_CLIENT_QUOTAS, 1, 9, body))
            [(_, answer)] = responses(transport, [(codec.DESCRIBE_CLIENT_QUOTAS, 1)])
            return [
                (
                    {e["entity_type"]: e["entity_name"] for e in entry["entity"]},
                    {v["key"]: v["value"] for v in entry["values"]},
                )
                for entry in answer["entries"]
            ]

        assert describe([("client-id", 0, "a")], True) == [
            ({"client-id": "a"}, {PRODUCER_BYTE_RATE: 5.0})
        ]
        assert describe([("client-id", 1, None)], False) == [
            ({"client-id": None, "user": "u"}, {CONSUMER_BYTE_RATE: 7.0})
        ]
        assert len(describe([("client-id", 2, None)], False)) == 2
        assert describe([("client-id", 2, None)], True) == [
            ({"client-id": "a"}, {PRODUCER_BYTE_RATE: 5.0})
        ]
        # Persisted in the local coordinator's metadata file.
        from pluglog.coordination.local import LocalCoordinator

        again = LocalCoordinator(self.broker.config)
        again.start()
        assert again.client_quotas() == self.broker.coordinator.client_quotas()
        # Removing the last key removes the entity.
        self.alter(proto, transport, [("client-id", "a")], [(PRODUCER_BYTE_RATE, 0, True)])
        assert describe([("client-id", 0, "a")], True) == []


def test_request_percentage_throttles_any_api(tmp_path):
    from pluglog.broker.quotas import REQUEST_PERCENTAGE

    broker = make_broker(tmp_path)
    broker.quotas.update({(("user", "ANONYMOUS"),): {REQUEST_PERCENTAGE: 0.0001}})
    proto, transport = connect(broker)
    body = {"topics": None, "allow_auto_topic_creation": False}
    proto.dataReceived(req(codec.METADATA, 1, 5, body))
    [(_, answer)] = responses(transport, [(codec.METADATA, 1)])
    assert answer["brokers"]  # answered at once
    assert transport.producerState == "paused"  # then muted: handler time is over the quota
    broker.reactor.advance(1.0)
    assert transport.producerState == "producing"

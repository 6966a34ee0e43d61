"""Check the hand-written schemas against Kafka's message JSON specs.

The JSON files ship inside kafka-python (a test-only dependency here); the broker
never loads them.  For every version pluglog defines, the fields on the wire must
match the spec in order, name (snake_case), type, nullability, tag and default.
"""

import json
import os
import re

import kafka
import pytest

from pluglog.protocol.apis import APIS, SUPPORTED
from pluglog.protocol.schema import parse_versions

RESOURCES = os.path.join(os.path.dirname(kafka.__file__), "protocol", "schemas", "resources")


def load_spec(name):
    with open(os.path.join(RESOURCES, name + ".json")) as fh:
        text = re.sub(r"^\s*//.*$", "", fh.read(), flags=re.M)
    return json.loads(text)


def snake(name):
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def _in(spec, version):
    lo, hi = parse_versions(spec)
    return lo <= version <= hi


def _json_default(jf):
    raw = jf["default"]
    if raw == "null":
        return None
    if jf["type"] == "bool":
        return raw in (True, "true")
    if jf["type"].startswith("int"):
        return int(raw, 0) if isinstance(raw, str) else raw
    return raw


def compare(ours, jfields, version, flexible, path, common=None):
    common = common or {}
    json_present = [jf for jf in jfields if _in(jf.get("versions"), version)]
    our_present = [f for f in ours if f.present(version)]
    assert [snake(jf["name"]) for jf in json_present] == [f.name for f in our_present], path
    for jf, f in zip(json_present, our_present):
        where = f"{path}.{f.name} v{version}"
        jtype = jf["type"]
        if "fields" not in jf and jtype.removeprefix("[]") in common:
            # A struct the spec defines once under commonStructs.
            jf = dict(jf, fields=common[jtype.removeprefix("[]")])
        if "fields" in jf:
            if jtype.startswith("[]"):
                assert f.is_struct_array, where
                compare(f.type, jf["fields"], version, flexible, where, common)
            else:
                assert f.is_struct, where
                compare(f.type.fields, jf["fields"], version, flexible, where, common)
        else:
            assert f.type == jtype, where
        assert f.nullable_in(version) == _in(jf.get("nullableVersions"), version), where
        tagged = flexible and _in(jf.get("taggedVersions"), version)
        assert (flexible and f.tagged_in(version)) == tagged, where
        if tagged:
            assert f.tag == jf["tag"], where
        if "default" in jf and "fields" not in jf and jtype not in common:
            assert f.default(version) == _json_default(jf), where


#: kafka-python 3.0.12 ships no specs of the KIP-848 APIs (68, 69); their
#: layouts are checked field by field in tests/unit/test_consumer_groups.py.
WITH_SPECS = sorted(
    k for k in APIS if os.path.exists(os.path.join(RESOURCES, APIS[k].name + "Request.json"))
)


def test_only_the_kip848_apis_lack_a_spec():
    assert set(APIS) - set(WITH_SPECS) == {68, 69}


@pytest.mark.parametrize("key", WITH_SPECS)
@pytest.mark.parametrize("kind", ["Request", "Response"])
def test_schema_matches_kafka_json(key, kind):
    api = APIS[key]
    spec = load_spec(api.name + kind)
    assert spec["apiKey"] == key
    assert api.flexible == parse_versions(spec["flexibleVersions"])
    fields = api.request if kind == "Request" else api.response
    lo, hi = api.versions
    for version in range(lo, hi + 1):
        common = {c["name"]: c["fields"] for c in spec.get("commonStructs", [])}
        compare(fields, spec["fields"], version, api.is_flexible(version), api.name + kind, common)


def test_supported_within_defined():
    for key, (lo, hi) in SUPPORTED.items():
        assert APIS[key].defines(lo) and APIS[key].defines(hi)
    assert SUPPORTED[17] == (0, 1) and SUPPORTED[36] == (0, 2) and SUPPORTED[60] == (0, 2)
    # DescribeLogDirs v5 would make kafka-python infer a Kafka 4.3 broker.
    assert SUPPORTED[35] == (0, 4)
    # #26: the data path up to Kafka 3.9/4.0's versions, minima unchanged.
    assert SUPPORTED[0] == (0, 11) and SUPPORTED[1] == (4, 17) and SUPPORTED[18] == (0, 4)
    assert SUPPORTED[3] == (0, 13) and SUPPORTED[19] == (0, 7) and SUPPORTED[20] == (0, 6)
    assert SUPPORTED[22] == (0, 5)


#: aiokafka 0.14's request structs (shared protocol notes §1.5): it picks the
#: highest inside the broker's range, so each range must hold one of them.
_AIOKAFKA = {0: range(3, 8), 1: range(1, 12), 3: range(0, 6), 19: range(0, 4), 20: range(0, 4)}
_AIOKAFKA[22] = range(0, 1)


@pytest.mark.parametrize("key", sorted(_AIOKAFKA))
def test_every_raised_range_keeps_a_non_flexible_version_aiokafka_has(key):
    lo, hi = SUPPORTED[key]
    ours = [v for v in _AIOKAFKA[key] if lo <= v <= hi and not APIS[key].is_flexible(v)]
    assert ours, f"api {key}: {lo}-{hi} holds none of aiokafka's {list(_AIOKAFKA[key])}"


def test_no_advertised_version_is_flexible_except_known_ones():
    # The "Recommend" set stays below flexible versions except ApiVersions 3-4 and
    # IncrementalAlterConfigs 1 (whose v1 is flexible), and the cluster operator's
    # APIs, which the admin clients send in their flexible versions.
    flexible = {
        (key, v)
        for key, (lo, hi) in SUPPORTED.items()
        for v in range(lo, hi + 1)
        if APIS[key].is_flexible(v)
    }
    operator = {(34, 2), (35, 2), (35, 3), (35, 4), (43, 2), (45, 0), (45, 1), (46, 0)}
    operator |= {(60, 0), (60, 1), (60, 2)}
    # Client quotas (v1) and InitProducerId v2-4, which kafka-python sends
    # once the quota APIs make it infer Kafka 2.6.
    quotas = {(48, 1), (49, 1), (22, 2), (22, 3), (22, 4)}
    # SaslAuthenticate v2 (#16): flexible, sent by current librdkafka.
    sasl = {(36, 2)}
    # Describe/AlterUserScramCredentials (#16): flexible from v0.
    sasl |= {(50, 0), (51, 0)}
    # DescribeConfigs v4 (#26): kafka-python 3 sends it; v3 keeps a
    # non-flexible version with types and documentation for the others.
    configs = {(32, 4)}
    # ListOffsets v6-v9 (#25): v8 carries EARLIEST_LOCAL (-4, tiered
    # storage), v9 LATEST_TIERED (-5, KIP-1005); v5 stays for aiokafka.
    configs |= {(2, 6), (2, 7), (2, 8), (2, 9)}
    # Transactions (#22): v3 of the producer's APIs is what kafka-python
    # sends; WriteTxnMarkers v1 and the operators' APIs are flexible only.
    txn = {(24, 3), (25, 3), (26, 3), (27, 1), (28, 3), (61, 0), (65, 0), (66, 0), (66, 1)}
    # The group APIs (#26): Kafka 4.0's maxima, each above a non-flexible
    # range that old librdkafka and aiokafka use.
    groups = {(8, 8), (8, 9), (9, 6), (9, 7), (9, 8), (9, 9), (42, 2)}
    groups |= {(10, v) for v in range(3, 7)} | {(11, v) for v in range(6, 10)}
    groups |= {(12, 4), (13, 4), (13, 5), (14, 4), (14, 5), (15, 5), (15, 6)}
    groups |= {(16, 3), (16, 4), (16, 5)}
    # KIP-848's APIs (#26) are flexible from v0.
    groups |= {(68, 0), (68, 1), (69, 0), (69, 1)}
    # The data path and topic admin (#26): flexible versions up to Kafka
    # 3.9/4.0's, for topic ids (KIP-516) and KIP-951's leader hints.
    data = {(0, v) for v in range(9, 12)} | {(1, v) for v in range(12, 18)}
    data |= {(3, v) for v in range(9, 14)} | {(19, 5), (19, 6), (19, 7)}
    data |= {(20, 4), (20, 5), (20, 6), (22, 5)}
    expected = {(18, 3), (18, 4), (44, 1)} | operator | quotas | sasl | configs | txn
    expected |= groups | data
    assert flexible == expected


def test_kafka_python_infers_kafka_3_9_and_gets_what_it_then_uses():
    # kafka-python gates behaviour (idempotence, zstd, epoch bumps, the
    # KIP-735 session timeout) on the broker release it infers from
    # ApiVersions. Fetch v17 makes it Kafka 3.9 (#26): from 2.5 on it bumps
    # producer epochs with InitProducerId v3 (KIP-360), which must be served;
    # from 3.0 on its default session timeout is 45 s, which
    # group.max.session.timeout.ms must allow. The operator APIs must not move
    # the inference further (DescribeLogDirs v5 alone would make it Kafka 4.3).
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    from pluglog.config import BrokerConfig

    assert infer_broker_version_from_api_versions(dict(SUPPORTED)) == (3, 9)
    assert BrokerConfig().group_max_session_timeout_ms >= 45000
    # JoinGroup v9 alone would make it Kafka 3.2 (#26), ListOffsets v7+ (#25,
    # for EARLIEST_LOCAL and LATEST_TIERED) 3.0; ListOffsets v10 would make
    # it Kafka 4.0, so v9 is the top.
    assert SUPPORTED[11] == (0, 9)
    assert SUPPORTED[2] == (1, 9)
    assert SUPPORTED[22][1] >= 3 and APIS[22].defines(3)
    assert SUPPORTED[48] == (0, 1) and SUPPORTED[49] == (0, 1)

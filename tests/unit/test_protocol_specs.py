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


@pytest.mark.parametrize("key", sorted(APIS))
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
    assert SUPPORTED[0] == (0, 8) and SUPPORTED[1] == (4, 11) and SUPPORTED[18] == (0, 4)


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
    operator = {(35, 2), (35, 3), (35, 4), (43, 2), (45, 0), (45, 1), (46, 0)}
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
    # ListOffsets v6-v8 (#25): v8 carries EARLIEST_LOCAL (-4, tiered
    # storage); v5 stays for aiokafka.
    configs |= {(2, 6), (2, 7), (2, 8)}
    # Transactions (#22): v3 of the producer's APIs is what kafka-python
    # sends; WriteTxnMarkers v1 and the operators' APIs are flexible only.
    txn = {(24, 3), (25, 3), (26, 3), (27, 1), (28, 3), (61, 0), (65, 0), (66, 0), (66, 1)}
    expected = {(18, 3), (18, 4), (44, 1)} | operator | quotas | sasl | configs | txn
    assert flexible == expected


def test_kafka_python_infers_kafka_3_0_and_gets_the_epoch_bump_it_then_uses():
    # kafka-python gates behaviour (idempotence, zstd, epoch bumps) on the
    # broker release it infers from ApiVersions. ListOffsets v7+ (#25, for
    # EARLIEST_LOCAL) makes it Kafka 3.0, whose only effect over 2.6 is its
    # 45 s default session timeout; from 2.5 on it bumps producer epochs
    # with InitProducerId v3 (KIP-360): that version must be served. The
    # operator APIs must not move the inference further (DescribeLogDirs v5
    # alone would make it Kafka 4.3).
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    assert infer_broker_version_from_api_versions(dict(SUPPORTED)) == (3, 0)
    assert SUPPORTED[2] == (1, 8)
    assert SUPPORTED[22][1] >= 3 and APIS[22].defines(3)
    assert SUPPORTED[48] == (0, 1) and SUPPORTED[49] == (0, 1)

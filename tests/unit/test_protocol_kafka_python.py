"""Cross-check the codec against third-party implementations.

kafka-python 3's schema-driven classes (``kafka/protocol/...``) encode requests that
pluglog decodes, and decode responses that pluglog encodes, for every version
pluglog defines.  aiokafka's hand-written structs check a few more by a separate path.
"""

import pytest
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

import pluglog.protocol as proto
from pluglog.protocol.apis import APIS
from tests.unit.test_protocol_roundtrip import expected_struct, normalize, sample_struct

KP_CLASSES = {
    0: (ProduceRequest, ProduceResponse),
    1: (FetchRequest, FetchResponse),
    2: (ListOffsetsRequest, ListOffsetsResponse),
    3: (MetadataRequest, MetadataResponse),
    8: (OffsetCommitRequest, OffsetCommitResponse),
    9: (OffsetFetchRequest, OffsetFetchResponse),
    10: (FindCoordinatorRequest, FindCoordinatorResponse),
    11: (JoinGroupRequest, JoinGroupResponse),
    12: (HeartbeatRequest, HeartbeatResponse),
    13: (LeaveGroupRequest, LeaveGroupResponse),
    14: (SyncGroupRequest, SyncGroupResponse),
    15: (DescribeGroupsRequest, DescribeGroupsResponse),
    16: (ListGroupsRequest, ListGroupsResponse),
    18: (ApiVersionsRequest, ApiVersionsResponse),
    19: (CreateTopicsRequest, CreateTopicsResponse),
    20: (DeleteTopicsRequest, DeleteTopicsResponse),
    21: (DeleteRecordsRequest, DeleteRecordsResponse),
    22: (InitProducerIdRequest, InitProducerIdResponse),
    23: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    32: (DescribeConfigsRequest, DescribeConfigsResponse),
    33: (AlterConfigsRequest, AlterConfigsResponse),
    35: (DescribeLogDirsRequest, DescribeLogDirsResponse),
    37: (CreatePartitionsRequest, CreatePartitionsResponse),
    42: (DeleteGroupsRequest, DeleteGroupsResponse),
    43: (ElectLeadersRequest, ElectLeadersResponse),
    44: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    45: (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse),
    46: (ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse),
    47: (OffsetDeleteRequest, OffsetDeleteResponse),
    60: (DescribeClusterRequest, DescribeClusterResponse),
}

# kafka-python patches these int32 fields into "bitfield" sets named authorized_operations.
RENAMED = {"cluster_authorized_operations", "topic_authorized_operations"}


def _kp_name(name):
    return "authorized_operations" if name in RENAMED else name


def _is_bitfield(kp_field):
    return kp_field.type_str == "bitfield"


def _to_bits(value):
    return {bit for bit in range(32) if value >> bit & 1}


def to_kp_kwargs(holder, fields, body, version):
    """Our body dict -> kwargs for a kafka-python data class of ``holder``."""
    kwargs = {}
    for f in fields:
        if not f.present(version):
            continue
        name = _kp_name(f.name)
        kf = holder.fields[name]
        value = body[f.name]
        if f.is_struct_array and value is not None:
            value = [kf.data_class(**to_kp_kwargs(kf, f.type, item, version)) for item in value]
        elif _is_bitfield(kf):
            value = _to_bits(value)
        kwargs[name] = value
    return kwargs


def from_kp_dict(holder, fields, kp_dict, version):
    """kafka-python's ``to_dict(json=False)`` -> our dict shape for present fields."""
    out = {}
    for f in fields:
        if not f.present(version):
            continue
        kf = holder.fields[_kp_name(f.name)]
        value = kp_dict[_kp_name(f.name)]
        if f.is_struct_array and value is not None:
            value = [from_kp_dict(kf, f.type, item, version) for item in value]
        elif _is_bitfield(kf):
            value = sum(1 << bit for bit in value)
        out[f.name] = normalize(value)
    return out


def _present_only(fields, body, version):
    out = {}
    for f in fields:
        if f.present(version):
            value = body[f.name]
            if f.is_struct_array and value is not None:
                value = [_present_only(f.type, item, version) for item in value]
            out[f.name] = normalize(value)
    return out


def _versions():
    for key, api in sorted(APIS.items()):
        if key in KP_CLASSES:
            lo, hi = api.versions
            # kafka-python 3 dropped versions Kafka 4 removed (DescribeLogDirs v0).
            lo = max(lo, KP_CLASSES[key][0].min_version)
            for version in range(lo, hi + 1):
                yield pytest.param(key, version, id=f"{api.name}-v{version}")


@pytest.mark.parametrize("key,version", list(_versions()))
def test_kafka_python_request_decodes_with_ours(key, version):
    api = APIS[key]
    kp_cls = KP_CLASSES[key][0]
    body = sample_struct(api.request, version)
    request = kp_cls[version](**to_kp_kwargs(kp_cls._struct, api.request, body, version))
    request.with_header(correlation_id=1234, client_id="kp-client")
    frame = request.encode(header=True, framed=True)
    assert frame == proto.encode_request(key, version, 1234, "kp-client", body)
    payload = memoryview(frame)[4:]
    header = proto.parse_request_header(payload)
    assert header[:4] == (key, version, 1234, "kp-client")
    decoded = proto.decode_request(header, payload)
    assert normalize(decoded) == expected_struct(api.request, version, body)


@pytest.mark.parametrize("key,version", list(_versions()))
def test_our_response_decodes_with_kafka_python(key, version):
    api = APIS[key]
    kp_cls = KP_CLASSES[key][1]
    body = sample_struct(api.response, version)
    if key == 18:
        body["error_code"] = 0
    payload = b"".join(proto.encode_response(key, version, 99, body))
    decoded = kp_cls.decode(payload, version=version, header=True)
    assert decoded.header.correlation_id == 99
    got = from_kp_dict(kp_cls._struct, api.response, decoded.to_dict(json=False), version)
    assert got == _present_only(api.response, body, version)
    # And kafka-python's own encoding of the same body is byte-identical to ours.
    theirs = kp_cls[version](**to_kp_kwargs(kp_cls._struct, api.response, body, version))
    header_size = 5 if api.is_flexible(version) and key != 18 else 4
    assert theirs.encode(version=version) == payload[header_size:]


def test_api_versions_fallback_decodes_as_v0_with_kafka_python():
    payload = b"".join(proto.api_versions_fallback_response(31))
    # kafka-python asked with v4; the error makes it decode the body as v0.
    decoded = ApiVersionsResponse.decode(payload, version=4, header=True)
    assert decoded.header.correlation_id == 31
    assert decoded.error_code == 35
    keys = [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys]
    assert keys == [(18, 0, 4)]
    assert proto.decode_response(18, 4, payload) == (
        31,
        {
            "error_code": 35,
            "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
            "throttle_time_ms": 0,
            "supported_features": [],
            "finalized_features_epoch": -1,
            "finalized_features": [],
            "zk_migration_ready": False,
        },
    )


@pytest.mark.parametrize("version", [0, 3, 4])
def test_api_versions_response_from_supported_table(version):
    body = {"api_keys": proto.supported_api_keys(), "throttle_time_ms": 0}
    payload = b"".join(proto.encode_response(18, version, 3, body))
    decoded = ApiVersionsResponse.decode(payload, version=version, header=True)
    advertised = {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys}
    assert advertised == proto.SUPPORTED


def test_kafka_python_tagged_fields_in_api_versions_v3():
    # supported_features/finalized_* are tagged fields: written only when non-default.
    features = [{"name": "metadata.version", "min_version": 1, "max_version": 20}]
    body = {"api_keys": [], "supported_features": features, "finalized_features_epoch": 7}
    payload = b"".join(proto.encode_response(18, 3, 1, body))
    decoded = ApiVersionsResponse.decode(payload, version=3, header=True)
    assert decoded.finalized_features_epoch == 7
    assert decoded.supported_features[0].name == "metadata.version"
    assert decoded.supported_features[0].max_version == 20
    assert not decoded.finalized_features

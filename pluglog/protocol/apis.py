"""The API table: which APIs pluglog defines and advertises, and their codecs.

``SUPPORTED`` is what the broker advertises in ApiVersions.  It is deliberately
narrower than what is defined (decodable): the "Recommend" column of the shared
protocol notes keeps minima low for old librdkafka feature gates and maxima below
the flexible/topic-id versions (Produce 0-8, Fetch 4-11, Metadata 0-8...).
"""

from pluglog.protocol.compiler import compile_struct
from pluglog.protocol.errors import UnsupportedVersionError
from pluglog.protocol.schemas import ALL_APIS

APIS = {api.key: api for api in ALL_APIS}

API_NAMES = {key: api.name for key, api in sorted(APIS.items())}

API_VERSIONS_KEY = 18

SUPPORTED = {
    0: (0, 8),  # Produce; min 0 so librdkafka < 2.11.1 keeps gzip/snappy/lz4 on
    1: (4, 11),  # Fetch; v12+ is flexible and v13+ needs topic ids
    # ListOffsets: v6+ flexible, v7 MAX_TIMESTAMP (-3), v8 EARLIEST_LOCAL (-4,
    # tiered storage). v7+ makes kafka-python infer Kafka 3.0 (its only
    # effect: a 45 s default session timeout); v5 stays for aiokafka.
    2: (1, 8),
    3: (0, 8),  # Metadata; v9+ flexible, v10+ topic ids
    8: (2, 7),  # OffsetCommit
    9: (1, 5),  # OffsetFetch
    10: (0, 2),  # FindCoordinator
    11: (0, 5),  # JoinGroup
    12: (0, 3),  # Heartbeat
    13: (0, 3),  # LeaveGroup
    14: (0, 3),  # SyncGroup
    15: (0, 4),  # DescribeGroups
    16: (0, 2),  # ListGroups
    18: (0, 4),  # ApiVersions; kafka-python 3 opens with v4
    19: (0, 4),  # CreateTopics
    20: (0, 3),  # DeleteTopics
    21: (0, 1),  # DeleteRecords
    22: (0, 4),  # InitProducerId; v3+ carries KIP-360's epoch bump
    23: (2, 3),  # OffsetForLeaderEpoch
    # Transactions. AddPartitionsToTxn v4 (KIP-890) would make kafka-python
    # infer Kafka 3.6; v0 keeps aiokafka's structs; v3 is what kafka-python
    # and librdkafka send at most. Details in docs/protocol.rst.
    24: (0, 3),  # AddPartitionsToTxn
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 3),  # EndTxn; v4 adds no field, v5 is transaction version 2
    27: (0, 1),  # WriteTxnMarkers (inter-broker)
    28: (0, 3),  # TxnOffsetCommit
    61: (0, 0),  # DescribeProducers (flexible from v0)
    65: (0, 0),  # DescribeTransactions (flexible from v0)
    66: (0, 1),  # ListTransactions (flexible from v0); v2 adds a name pattern
    32: (0, 4),  # DescribeConfigs; v3+ types and docs (not in kafka-python's release probe)
    33: (0, 1),  # AlterConfigs
    35: (0, 4),  # DescribeLogDirs; v5 would make kafka-python infer Kafka 4.3
    37: (0, 1),  # CreatePartitions
    42: (0, 1),  # DeleteGroups
    43: (0, 2),  # ElectLeaders (librdkafka and kafka-python send 2)
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 1),  # AlterPartitionReassignments (flexible from v0)
    46: (0, 0),  # ListPartitionReassignments (flexible from v0)
    47: (0, 0),  # OffsetDelete
    48: (0, 1),  # DescribeClientQuotas; v1 is flexible
    49: (0, 1),  # AlterClientQuotas; v1 is flexible
    60: (0, 2),  # DescribeCluster (flexible from v0)
    17: (0, 1),  # SaslHandshake
    36: (0, 2),  # SaslAuthenticate
    29: (0, 1),  # DescribeAcls
    30: (0, 1),  # CreateAcls
    31: (0, 1),  # DeleteAcls
    50: (0, 0),  # DescribeUserScramCredentials (flexible from v0)
    51: (0, 0),  # AlterUserScramCredentials (flexible from v0)
}


def get_api(api_key, api_version):
    """The :class:`Api` for a key if it defines the version, else raise."""
    api = APIS.get(api_key)
    if api is None or not api.defines(api_version):
        raise UnsupportedVersionError(api_key, api_version)
    return api


def is_defined(api_key, api_version):
    api = APIS.get(api_key)
    return api is not None and api.defines(api_version)


def is_supported(api_key, api_version):
    """True if the broker advertises this version (the server's accept policy)."""
    rng = SUPPORTED.get(api_key)
    return rng is not None and rng[0] <= api_version <= rng[1]


def is_flexible(api_key, api_version):
    """True if this version uses compact types, tag buffers and header v2/v1."""
    return get_api(api_key, api_version).is_flexible(api_version)


def request_codec(api_key, api_version):
    """Cached ``(decode, encode)`` for a request body."""
    api = get_api(api_key, api_version)
    return compile_struct(api.request, api_version, api.is_flexible(api_version))


def response_codec(api_key, api_version):
    """Cached ``(decode, encode)`` for a response body."""
    api = get_api(api_key, api_version)
    return compile_struct(api.response, api_version, api.is_flexible(api_version))


def supported_api_keys():
    """``api_keys`` entries for an ApiVersions response built from :data:`SUPPORTED`."""
    return [
        {"api_key": key, "min_version": lo, "max_version": hi}
        for key, (lo, hi) in sorted(SUPPORTED.items())
    ]

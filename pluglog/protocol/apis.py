"""The API table: which APIs pluglog defines and advertises, and their codecs.

``SUPPORTED`` is what the broker advertises in ApiVersions.  It is deliberately
narrower than what is defined (decodable). Minima stay low for old librdkafka's
feature gates, every range keeps a non-flexible version aiokafka has, and maxima
are what Kafka 3.9/4.0 serve where pluglog implements the semantics (topic ids,
KIP-951 leader hints); docs/protocol.rst gives each cap and its reason.
"""

from pluglog.protocol.compiler import compile_struct
from pluglog.protocol.errors import UnsupportedVersionError
from pluglog.protocol.schemas import ALL_APIS

APIS = {api.key: api for api in ALL_APIS}

API_NAMES = {key: api.name for key, api in sorted(APIS.items())}

API_VERSIONS_KEY = 18

SUPPORTED = {
    0: (0, 11),  # Produce; min 0 so librdkafka < 2.11.1 keeps gzip/snappy/lz4 on;
    # v12 is KIP-890's transaction version 2, v13 names topics by id
    1: (4, 17),  # Fetch; v13+ by topic id; v18 (KIP-1166) is Kafka 4.1's
    # ListOffsets: v6+ flexible, v7 MAX_TIMESTAMP (-3), v8 EARLIEST_LOCAL (-4,
    # tiered storage), v9 LATEST_TIERED (-5, KIP-1005); v5 stays for aiokafka.
    # v10 (KIP-1075) would make kafka-python infer Kafka 4.0.
    2: (1, 9),
    3: (0, 13),  # Metadata; v9+ flexible, v10+ topic ids, v12+ asked by id
    # The group APIs up to Kafka 4.0's (#26), flexible from the version in
    # brackets; the low minima keep old librdkafka's feature gates and
    # aiokafka's structs. JoinGroup v9 makes kafka-python infer Kafka 3.2.
    8: (2, 9),  # OffsetCommit [8]; v9 carries KIP-848 member epochs
    9: (1, 9),  # OffsetFetch [6]; v8 several groups, v9 member epochs
    10: (0, 6),  # FindCoordinator [3]; v4 batched keys
    11: (0, 9),  # JoinGroup [6]
    12: (0, 4),  # Heartbeat [4]
    13: (0, 5),  # LeaveGroup [4]
    14: (0, 5),  # SyncGroup [4]
    15: (0, 6),  # DescribeGroups [5]
    16: (0, 5),  # ListGroups [3]; v4 state filter, v5 type filter
    18: (0, 4),  # ApiVersions; kafka-python 3 opens with v4
    19: (0, 7),  # CreateTopics; v7 answers the topic id
    20: (0, 6),  # DeleteTopics; v6 deletes by id
    21: (0, 1),  # DeleteRecords
    22: (0, 5),  # InitProducerId; v3+ KIP-360's epoch bump; v5 = v4 (KIP-890 error code)
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
    # KIP-848 consumer groups (flexible from v0).
    68: (0, 1),  # ConsumerGroupHeartbeat; v1 adds the subscription regex
    69: (0, 1),  # ConsumerGroupDescribe; v1 adds KIP-1099's member type
    32: (0, 4),  # DescribeConfigs; v3+ types and docs (not in kafka-python's release probe)
    33: (0, 1),  # AlterConfigs
    34: (1, 2),  # AlterReplicaLogDirs (Kafka 4 dropped v0)
    35: (0, 4),  # DescribeLogDirs; v5 would make kafka-python infer Kafka 4.3
    37: (0, 1),  # CreatePartitions
    42: (0, 2),  # DeleteGroups [2]
    43: (0, 2),  # ElectLeaders (librdkafka and kafka-python send 2)
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 1),  # AlterPartitionReassignments (flexible from v0)
    46: (0, 0),  # ListPartitionReassignments (flexible from v0)
    47: (0, 0),  # OffsetDelete (Kafka has no other version)
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

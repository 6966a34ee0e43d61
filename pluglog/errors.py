"""pluglog's exception tree; each broker error maps to a Kafka error code.

Handlers raise these and the request layer turns ``exc.error_code`` into the
response's ErrorCode field, so the mapping lives in one place.
"""


class PluglogError(Exception):
    """Base of every pluglog exception."""


class PluginError(PluglogError):
    """A plugin could not be found, built or verified."""

    def __init__(self, plugin, interface, reason):
        self.plugin = plugin
        self.interface = interface
        self.reason = reason
        iname = getattr(interface, "__name__", str(interface))
        super().__init__(f"plugin {plugin!r} for {iname}: {reason}")


class ConfigError(PluglogError, ValueError):
    """A configuration key has a bad value; the message names key and value."""


class RemoteStorageError(PluglogError):
    """The remote tier's object store failed (IRemoteLogStorage); one line."""


class KafkaError(PluglogError):
    """An error that has a Kafka error code."""

    error_code = -1
    name = "UNKNOWN_SERVER_ERROR"


def _kafka_error(name, code, doc):
    cls = type(
        "".join(part.capitalize() for part in name.split("_")) + "Error",
        (KafkaError,),
        {"error_code": code, "name": name, "__doc__": doc},
    )
    return cls


# Error codes from apache/kafka common/protocol/Errors.java.
NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_FETCH_SIZE = 4
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
REPLICA_NOT_AVAILABLE = 9
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
RECORD_LIST_TOO_LARGE = 18
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_TIMESTAMP = 32
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
NOT_CONTROLLER = 41
INVALID_REQUEST = 42
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
POLICY_VIOLATION = 44
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTION_COORDINATOR_FENCED = 52
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
SECURITY_DISABLED = 54
OPERATION_NOT_ATTEMPTED = 55
KAFKA_STORAGE_ERROR = 56
LOG_DIR_NOT_FOUND = 57
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
REASSIGNMENT_IN_PROGRESS = 60
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
LISTENER_NOT_FOUND = 72
TOPIC_DELETION_DISABLED = 73
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNSUPPORTED_COMPRESSION_TYPE = 76
STALE_BROKER_EPOCH = 77
OFFSET_NOT_AVAILABLE = 78
MEMBER_ID_REQUIRED = 79
PREFERRED_LEADER_NOT_AVAILABLE = 80
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
INVALID_RECORD = 87
UNSTABLE_OFFSET_COMMIT = 88
THROTTLING_QUOTA_EXCEEDED = 89
PRODUCER_FENCED = 90
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93
UNKNOWN_TOPIC_ID = 100
INCONSISTENT_TOPIC_ID = 103
TRANSACTIONAL_ID_NOT_FOUND = 105
FETCH_SESSION_TOPIC_ID_ERROR = 106
FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113
INVALID_REGULAR_EXPRESSION = 128

OffsetOutOfRangeError = _kafka_error(
    "OFFSET_OUT_OF_RANGE", OFFSET_OUT_OF_RANGE, "Offset outside the log's range."
)
CorruptRecordError = _kafka_error(
    "CORRUPT_MESSAGE", CORRUPT_MESSAGE, "A record batch failed its CRC check."
)
UnknownTopicOrPartitionError = _kafka_error(
    "UNKNOWN_TOPIC_OR_PARTITION", UNKNOWN_TOPIC_OR_PARTITION, "No such topic or partition."
)
LeaderNotAvailableError = _kafka_error(
    "LEADER_NOT_AVAILABLE", LEADER_NOT_AVAILABLE, "The partition has no leader yet."
)
NotLeaderOrFollowerError = _kafka_error(
    "NOT_LEADER_OR_FOLLOWER", NOT_LEADER_OR_FOLLOWER, "This broker does not lead it."
)
MessageTooLargeError = _kafka_error(
    "MESSAGE_TOO_LARGE", MESSAGE_TOO_LARGE, "Batch larger than max.message.bytes."
)
InvalidTopicError = _kafka_error(
    "INVALID_TOPIC_EXCEPTION", INVALID_TOPIC_EXCEPTION, "Illegal topic name."
)
NotEnoughReplicasError = _kafka_error(
    "NOT_ENOUGH_REPLICAS", NOT_ENOUGH_REPLICAS, "ISR smaller than min.insync.replicas."
)
InvalidRequiredAcksError = _kafka_error(
    "INVALID_REQUIRED_ACKS", INVALID_REQUIRED_ACKS, "acks must be -1, 0 or 1."
)
TopicExistsError = _kafka_error(
    "TOPIC_ALREADY_EXISTS", TOPIC_ALREADY_EXISTS, "The topic already exists."
)
InvalidPartitionsError = _kafka_error(
    "INVALID_PARTITIONS", INVALID_PARTITIONS, "Bad partition count."
)
InvalidReplicationFactorError = _kafka_error(
    "INVALID_REPLICATION_FACTOR", INVALID_REPLICATION_FACTOR, "Bad replication factor."
)
InvalidConfigError = _kafka_error("INVALID_CONFIG", INVALID_CONFIG, "Bad config value.")
InvalidRequestError = _kafka_error("INVALID_REQUEST", INVALID_REQUEST, "Malformed request.")
UnsupportedVersionError = _kafka_error(
    "UNSUPPORTED_VERSION", UNSUPPORTED_VERSION, "API version not served."
)
UnsupportedForMessageFormatError = _kafka_error(
    "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    "The request needs a newer record format.",
)
OutOfOrderSequenceError = _kafka_error(
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    "Producer sequence gap.",
)
InvalidProducerEpochError = _kafka_error(
    "INVALID_PRODUCER_EPOCH", INVALID_PRODUCER_EPOCH, "Producer epoch is stale."
)
InvalidTxnStateError = _kafka_error(
    "INVALID_TXN_STATE", INVALID_TXN_STATE, "The producer is not in a transaction here."
)
ProducerFencedError = _kafka_error(
    "PRODUCER_FENCED", PRODUCER_FENCED, "A newer producer with the same transactional.id exists."
)
InvalidRecordError = _kafka_error(
    "INVALID_RECORD", INVALID_RECORD, "A record batch is structurally invalid."
)


class InvalidRecordsError(InvalidRecordError):  # type: ignore[valid-type,misc]
    """INVALID_RECORD naming the refused records (KIP-467).

    ``record_errors`` is ``[(batch_index, message)]``, the 0-based index of
    each bad record in the batch, in order; Produce v8+ answers them as
    ``record_errors`` (librdkafka fails exactly those records with
    INVALID_RECORD and the others of the batch, which were not written
    either, with its local _INVALID_DIFFERENT_RECORD).
    """

    def __init__(self, message, record_errors):
        super().__init__(message)
        self.record_errors = list(record_errors)


def records_refused(what, record_errors):
    """An :class:`InvalidRecordsError` for ``record_errors`` (non-empty),
    its message naming how many records and the first three."""
    shown = "; ".join(f"record {index}: {message}" for index, message in record_errors[:3])
    return InvalidRecordsError(
        f"{what}: {len(record_errors)} record(s) of the batch refused ({shown}"
        f"{'; ...' if len(record_errors) > 3 else ''})",
        record_errors,
    )


KafkaStorageError = _kafka_error(
    "KAFKA_STORAGE_ERROR", KAFKA_STORAGE_ERROR, "Disk error while accessing the log."
)
PolicyViolationError = _kafka_error(
    "POLICY_VIOLATION", POLICY_VIOLATION, "Request refused by broker policy."
)

# Cluster coordination (issue 12, ZooKeeper controller).
ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
ELECTION_NOT_NEEDED = 84
NO_REASSIGNMENT_IN_PROGRESS = 85
InvalidReplicaAssignmentError = _kafka_error(
    "INVALID_REPLICA_ASSIGNMENT", INVALID_REPLICA_ASSIGNMENT, "Bad replica assignment."
)
PreferredLeaderNotAvailableError = _kafka_error(
    "PREFERRED_LEADER_NOT_AVAILABLE",
    PREFERRED_LEADER_NOT_AVAILABLE,
    "The preferred leader is not alive or not in sync.",
)
EligibleLeadersNotAvailableError = _kafka_error(
    "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    ELIGIBLE_LEADERS_NOT_AVAILABLE,
    "No replica is eligible to lead.",
)
ElectionNotNeededError = _kafka_error(
    "ELECTION_NOT_NEEDED", ELECTION_NOT_NEEDED, "The partition already has that leader."
)
NoReassignmentInProgressError = _kafka_error(
    "NO_REASSIGNMENT_IN_PROGRESS",
    NO_REASSIGNMENT_IN_PROGRESS,
    "No reassignment of that partition is in progress.",
)
RequestTimedOutError = _kafka_error(
    "REQUEST_TIMED_OUT", REQUEST_TIMED_OUT, "The request did not complete in time."
)

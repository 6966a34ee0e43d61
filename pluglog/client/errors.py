"""Client-side exceptions of :mod:`pluglog.client`.

Transport failures (a connection that dropped, a request that timed out, a
broker that answered out of order) are :class:`KafkaConnectionError`; errors
the broker reports with a Kafka error code are :class:`BrokerResponseError`
carrying that code and Kafka's name for it, plus whether Kafka calls it
retriable (the producer and consumer retry those on the reactor clock).
"""

from twisted.internet.error import ConnectionLost

from pluglog import errors as _codes
from pluglog.errors import PluglogError


class KafkaClientError(PluglogError):
    """Base of the client's exceptions."""


class KafkaConnectionError(KafkaClientError, ConnectionLost):
    """The connection to a broker is gone (or never came up); the request may
    or may not have reached the broker."""


class NotConnectedError(KafkaConnectionError):
    """A request was made on a connection that is already closed."""


class RequestTimedOutError(KafkaClientError):
    """No response within the request's timeout (Kafka's request.timeout.ms)."""


class CorrelationIdMismatchError(KafkaConnectionError):
    """The broker answered a request other than the oldest one in flight."""


class NoBrokersAvailableError(KafkaConnectionError):
    """None of the bootstrap servers (or known brokers) answered."""


class UnsupportedApiVersionError(KafkaClientError):
    """The broker serves no version of an API in the range the client speaks."""


# Kafka's retriable errors (Errors.java: RetriableException subclasses) that
# the client retries after refreshing metadata or backing off.
RETRIABLE = frozenset(
    {
        _codes.CORRUPT_MESSAGE,
        _codes.UNKNOWN_TOPIC_OR_PARTITION,
        _codes.LEADER_NOT_AVAILABLE,
        _codes.NOT_LEADER_OR_FOLLOWER,
        _codes.REQUEST_TIMED_OUT,
        _codes.COORDINATOR_LOAD_IN_PROGRESS,
        _codes.COORDINATOR_NOT_AVAILABLE,
        _codes.NOT_COORDINATOR,
        _codes.NOT_ENOUGH_REPLICAS,
        _codes.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        _codes.KAFKA_STORAGE_ERROR,
        _codes.FENCED_LEADER_EPOCH,
        _codes.UNKNOWN_LEADER_EPOCH,
        _codes.OFFSET_NOT_AVAILABLE,
        _codes.UNSTABLE_OFFSET_COMMIT,
        _codes.THROTTLING_QUOTA_EXCEEDED,
        13,  # NETWORK_EXCEPTION
        _codes.CONCURRENT_TRANSACTIONS,
        _codes.REBALANCE_IN_PROGRESS,
    }
)

# Codes whose answer means "your metadata is stale": refresh before retrying.
REFRESH_METADATA = frozenset(
    {
        _codes.UNKNOWN_TOPIC_OR_PARTITION,
        _codes.LEADER_NOT_AVAILABLE,
        _codes.NOT_LEADER_OR_FOLLOWER,
        _codes.FENCED_LEADER_EPOCH,
        _codes.UNKNOWN_LEADER_EPOCH,
        _codes.KAFKA_STORAGE_ERROR,
    }
)

_NAMES = {
    value: name
    for name, value in vars(_codes).items()
    if name.isupper() and isinstance(value, int) and name != "NONE"
}
_NAMES[13] = "NETWORK_EXCEPTION"


def error_name(code):
    """Kafka's name for an error code (``"NOT_LEADER_OR_FOLLOWER"``)."""
    return _NAMES.get(code, f"ERROR_{code}")


class BrokerResponseError(KafkaClientError):
    """The broker answered with a non-zero Kafka error code."""

    def __init__(self, error_code, message=None, where=None):
        self.error_code = error_code
        self.name = error_name(error_code)
        self.retriable = error_code in RETRIABLE
        self.where = where
        text = f"{self.name} ({error_code})"
        if where:
            text = f"{where}: {text}"
        if message:
            text = f"{text}: {message}"
        super().__init__(text)


def check(error_code, message=None, where=None):
    """Raise :class:`BrokerResponseError` unless ``error_code`` is 0."""
    if error_code:
        raise BrokerResponseError(error_code, message, where)


class ProducerFencedError(BrokerResponseError):
    """A newer producer with the same ``transactional.id`` took over
    (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH): this producer can do nothing
    more and should be stopped."""

    def __init__(self, error_code, transactional_id, where=None):
        super().__init__(
            error_code,
            f"producer fenced: another producer with transactional.id "
            f"{transactional_id!r} has started; stop this one",
            where,
        )
        self.retriable = False


class TransactionStateError(KafkaClientError):
    """A transactional call in the wrong state (Kafka's IllegalStateException):
    ``send()`` outside a transaction, ``commit_transaction()`` before
    ``begin_transaction()``, anything after a fatal error."""


class TransactionAbortedError(KafkaClientError):
    """A record that was still waiting to be sent when its transaction was
    aborted."""

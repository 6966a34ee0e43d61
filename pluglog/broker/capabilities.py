"""What a topic needs of the storage provider, checked by interface, never by duck typing.

Every log the storage opens is verified once per class against
:class:`~pluglog.interfaces.IPartitionLog` and each optional interface it
declares (names, attributes and method signatures, zope's
``verifyObject``). Optional capabilities are declared: a compacted topic
(``cleanup.policy`` lists ``compact``, as ``__consumer_offsets`` does) needs
a storage declaring
:class:`~pluglog.interfaces.ICompactingStorage` and logs providing
:class:`~pluglog.interfaces.ICompactableLog`; a replicated topic
(replication factor above 1) needs
:class:`~pluglog.interfaces.IReplicatingStorage` and
:class:`~pluglog.interfaces.IReplicatedLog`. A missing capability is refused
with one line: CreateTopics / AlterConfigs answer INVALID_CONFIG or
INVALID_REPLICATION_FACTOR, and an existing topic stops the broker at start
(:class:`pluglog.errors.PluginError`) instead of degrading silently.
"""

from zope.interface.exceptions import Invalid
from zope.interface.verify import verifyClass

from pluglog.errors import InvalidConfigError, InvalidReplicationFactorError, PluginError
from pluglog.interfaces import (
    ICompactableLog,
    ICompactingStorage,
    IDirectoryLog,
    IFlushableLog,
    IPartitionLog,
    IReplicatedLog,
    IReplicatingStorage,
    ITieredLog,
)
from pluglog.registry import describe_invalid, verify_provider

#: capabilities a log may declare; each declared one is verified like the base
OPTIONAL_LOG_INTERFACES = (
    IFlushableLog,
    IReplicatedLog,
    ICompactableLog,
    IDirectoryLog,
    ITieredLog,
)


def is_compacted(topic_config):
    return "compact" in topic_config.cleanup_policy.split(",")


class StorageChecks:
    """The checks for one broker's storage provider (named ``name``,
    offered by plugin ``plugin``)."""

    def __init__(self, storage, name, plugin):
        self.storage = storage
        self.name = name
        self.plugin = plugin
        self._verified = set()

    def verify_log_class(self):
        """Raise PluginError unless the storage's declared ``log_class``
        implements IPartitionLog and every optional log interface it claims,
        with the interfaces' method signatures (at start, before any log)."""
        cls = self.storage.log_class
        for interface in (IPartitionLog, *OPTIONAL_LOG_INTERFACES):
            if interface is not IPartitionLog and not interface.implementedBy(cls):
                continue
            try:
                verifyClass(interface, cls)
            except Invalid as exc:
                raise PluginError(
                    self.plugin,
                    interface,
                    f"the {self.name!r} storage's log_class {cls.__name__} "
                    f"{describe_invalid(exc)}",
                ) from exc

    def new_topic(self, name, topic_config, replication_factor):
        """Raise a KafkaError unless the storage can host the topic."""
        if is_compacted(topic_config) and not ICompactingStorage.providedBy(self.storage):
            raise InvalidConfigError(
                f"topic {name!r}: cleanup.policy={topic_config.cleanup_policy} needs a "
                f"storage that compacts, and storage {self.name!r} does not declare "
                "ICompactingStorage"
            )
        if topic_config.remote_storage_enable and not ITieredLog.implementedBy(
            self.storage.log_class
        ):
            raise InvalidConfigError(
                f"topic {name!r}: remote.storage.enable=true needs a storage whose logs are "
                f"segment files (ITieredLog), and storage {self.name!r} has none"
            )
        if replication_factor > 1 and not IReplicatingStorage.providedBy(self.storage):
            raise InvalidReplicationFactorError(
                f"topic {name!r}: replication factor {replication_factor} needs a storage "
                f"that replicates, and storage {self.name!r} does not declare "
                "IReplicatingStorage"
            )

    def opened(self, plog, name, topic_config, replication_factor):
        """Raise PluginError unless ``plog`` (just opened) provides what the
        topic needs; its class is verified against IPartitionLog once."""
        cls = type(plog)
        if cls not in self._verified:
            for interface in (IPartitionLog, *OPTIONAL_LOG_INTERFACES):
                if interface is IPartitionLog or interface.providedBy(plog):
                    verify_provider(self.plugin, interface, plog, f"{self.name} log")
            self._verified.add(cls)
        if is_compacted(topic_config) and not ICompactableLog.providedBy(plog):
            raise PluginError(
                self.plugin,
                ICompactableLog,
                f"topic {name!r} has cleanup.policy={topic_config.cleanup_policy} but the "
                f"{self.name!r} storage's log ({cls.__name__}) cannot compact",
            )
        if topic_config.remote_storage_enable and not ITieredLog.providedBy(plog):
            raise PluginError(
                self.plugin,
                ITieredLog,
                f"topic {name!r} has remote.storage.enable=true but the {self.name!r} "
                f"storage's log ({cls.__name__}) has no segment files to upload",
            )
        if replication_factor > 1 and not IReplicatedLog.providedBy(plog):
            raise PluginError(
                self.plugin,
                IReplicatedLog,
                f"topic {name!r} has {replication_factor} replicas but the {self.name!r} "
                f"storage's log ({cls.__name__}) cannot follow a leader",
            )

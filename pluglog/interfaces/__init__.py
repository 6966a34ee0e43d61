"""Every zope.interface contract a pluglog component implements.

Plugins provide these through the pluggy registration hooks in
:mod:`pluglog.hookspecs`; :mod:`pluglog.registry` builds the chosen provider by
name and checks it with ``zope.interface.verify.verifyObject``.

The contracts live in two modules, re-exported here so that
``from pluglog.interfaces import ILogStorage`` is the one spelling plugins
use: :mod:`pluglog.interfaces.storage` (logs, storage, the remote tier) and
:mod:`pluglog.interfaces.components` (every other plugin kind).
"""

from pluglog.interfaces.components import (
    IAuthenticator,
    IAuthorizer,
    ICoordinator,
    IPartitioner,
    IReplicaSelector,
    IRetentionPolicy,
    ISchemaRegistry,
    ISerializer,
    ISink,
)
from pluglog.interfaces.storage import (
    IBackgroundFlushStorage,
    ICompactableLog,
    ICompactingStorage,
    IDirectoryLog,
    IFileRange,
    IFlushableLog,
    ILogDirMoves,
    ILogDirStorage,
    ILogStorage,
    INewLogBatches,
    IOfflineLog,
    IPartitionLog,
    IRemoteLogStorage,
    IReplicatedLog,
    IReplicatingStorage,
    IScheduledFlushStorage,
    ISlicedFlushStorage,
    ITieredLog,
    ITransactionIndexLog,
)

__all__ = [
    "IAuthenticator",
    "IAuthorizer",
    "IBackgroundFlushStorage",
    "ICompactableLog",
    "ICompactingStorage",
    "ICoordinator",
    "IDirectoryLog",
    "IFileRange",
    "IFlushableLog",
    "ILogDirMoves",
    "INewLogBatches",
    "ILogDirStorage",
    "ILogStorage",
    "IScheduledFlushStorage",
    "ISlicedFlushStorage",
    "IOfflineLog",
    "IPartitionLog",
    "IPartitioner",
    "IRemoteLogStorage",
    "IReplicaSelector",
    "IReplicatedLog",
    "IReplicatingStorage",
    "IRetentionPolicy",
    "ISchemaRegistry",
    "ISerializer",
    "ISink",
    "ITieredLog",
    "ITransactionIndexLog",
]

"""Transactions: the transaction coordinator and ``__transaction_state``.

Layer: above group and replication (it reuses the group store's partition
hash and error translation, and is handed the replica fetcher's
inter-broker ``connect``), below broker, which builds it and calls
:meth:`~pluglog.txn.coordinator.TransactionCoordinator.leadership_changed`.
"""

from pluglog.txn.coordinator import TransactionCoordinator

__all__ = ["TransactionCoordinator"]

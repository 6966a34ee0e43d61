"""Per-API message layouts, grouped by API family.

Each module exports ``APIS``, a list of :class:`pluglog.protocol.schema.Api`.  Facts
come from Kafka's message JSON specs; fields first added after the highest version
pluglog defines are left out so decoded dicts carry nothing a handler can't use.
"""

from pluglog.protocol.schemas import (
    admin,
    cluster,
    consumer_groups,
    core,
    groups,
    produce_fetch,
    quotas,
    security,
    transactions,
)

ALL_APIS = (
    core.APIS
    + produce_fetch.APIS
    + admin.APIS
    + groups.APIS
    + consumer_groups.APIS
    + cluster.APIS
    + quotas.APIS
    + security.APIS
    + transactions.APIS
)

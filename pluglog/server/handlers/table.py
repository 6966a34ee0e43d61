"""The dispatch table: every API key the broker serves and its handler.

One module per API family contributes its ``HANDLERS``; the connection code
(:mod:`pluglog.server.protocol`) looks requests up here.
"""

from pluglog.server.handlers import (
    acls,
    admin,
    cluster,
    consumer_groups,
    core,
    fetch,
    groups,
    offsets,
    produce,
    quotas,
    sasl,
    scram,
    txn,
)


def _build_table():
    table = {}
    modules = (core, produce, fetch, offsets, admin, txn, cluster, quotas, sasl, acls, scram)
    for module in modules + (groups, consumer_groups):
        table.update(module.HANDLERS)
    return table


HANDLERS = _build_table()

"""The ``pluglog`` command line: topics, produce/consume, groups, users, cluster.

A Kafka-protocol client tool at the top of the layers: it may import any
library layer (client, coordination for dev-cluster's ZooKeeper, security's
credential formats, serialization, plugins). :mod:`pluglog.cli.common` is
the leaf every command imports (CliError and shared lookups).
"""

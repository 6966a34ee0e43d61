"""twistd plugin: ``twistd pluglog`` runs a pluglog broker (no heavy imports)."""

from twisted.application.service import ServiceMaker

pluglog = ServiceMaker(
    "pluglog",
    "pluglog.tap",
    "A Kafka-protocol commit log broker built from plugins.",
    "pluglog",
)

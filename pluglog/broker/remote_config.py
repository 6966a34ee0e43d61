"""Kafka's checks of a topic's tiered-storage settings (``LogConfig``'s
``validateRemoteStorageOnlyIfSystemEnabled`` and friends), with Kafka's
messages, run by the broker when a topic is created or its config altered."""

from pluglog.errors import InvalidConfigError


def check_remote_storage(topic_config, system_enabled):
    """Kafka's LogConfig checks of a topic with remote.storage.enable=true:
    raise InvalidConfigError with Kafka's message."""
    if not system_enabled:
        raise InvalidConfigError(
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage."
        )
    if "compact" in topic_config.cleanup_policy:
        raise InvalidConfigError("Remote log storage is unsupported for the compacted topics")
    for kind in ("bytes", "ms"):
        total = getattr(topic_config, f"retention_{kind}")
        local = getattr(topic_config, f"local_retention_{kind}")
        if total > -1 and local != -2:
            if local == -1:
                raise InvalidConfigError(
                    f"Invalid value -1 for configuration local.retention.{kind}: "
                    f"Value must not be -1 as retention.{kind} value is set as {total}."
                )
            if local > total:
                raise InvalidConfigError(
                    f"Invalid value {local} for configuration local.retention.{kind}: "
                    f"Value must not be more than retention.{kind} property value: {total}"
                )

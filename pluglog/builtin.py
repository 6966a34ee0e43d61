"""The built-in plugin: registers pluglog's own providers through the hooks.

Built-ins use exactly the hooks a third-party package would, so nothing is
special about them except that the plugin manager registers them first.
Factories are referenced by import inside each hook, keeping ``import
pluglog`` cheap.
"""

from pluglog import hookimpl


@hookimpl
def pluglog_register_storage():
    from pluglog.storage import make_memory_storage, make_segment_storage

    return {"segments": make_segment_storage, "memory": make_memory_storage}


@hookimpl
def pluglog_register_partitioners():
    from pluglog.partitioners import make_murmur2, make_round_robin

    return {"murmur2": make_murmur2, "round_robin": make_round_robin}


@hookimpl
def pluglog_register_replica_selectors():
    from pluglog.broker.replica_selection import make_leader_selector, make_rack_aware_selector

    return {"leader": make_leader_selector, "rack-aware": make_rack_aware_selector}


@hookimpl
def pluglog_register_retention_policies():
    from pluglog.retention import make_delete_policy

    return {"delete": make_delete_policy}


@hookimpl
def pluglog_register_serializers():
    from pluglog.serialization.plugin import make_avro, make_jsonschema
    from pluglog.serializers import make_bytes, make_json, make_string

    return {
        "bytes": make_bytes,
        "string": make_string,
        "json": make_json,
        "avro": make_avro,
        "jsonschema": make_jsonschema,
    }


@hookimpl
def pluglog_register_schema_registries():
    from pluglog.serialization.plugin import make_http_registry

    return {"http": make_http_registry}


@hookimpl
def pluglog_add_web_resources(broker, root):
    from pluglog.web.registry import add_registry

    return add_registry(broker, root)


@hookimpl
def pluglog_register_coordinators():
    from pluglog.coordination.local import make_local

    def make_zookeeper(config, reactor):
        # kazoo is imported only when the zookeeper coordinator is chosen.
        from pluglog.coordination.zookeeper import make_zookeeper

        return make_zookeeper(config, reactor)

    return {"local": make_local, "zookeeper": make_zookeeper}


@hookimpl
def pluglog_register_remote_storage():
    from pluglog.storage.remote import make_filesystem_storage, make_s3_storage

    return {"s3": make_s3_storage, "filesystem": make_filesystem_storage}


@hookimpl
def pluglog_add_services(broker):
    """The log cleaner (compaction), unless log.cleaner.enable is false, and
    the remote log manager (tiered storage) when
    remote.log.storage.system.enable is true."""
    services = []
    if broker.config.log_cleaner_enable:
        from pluglog.broker.log_cleaner import make_log_cleaner

        services.append(make_log_cleaner(broker))
    if broker.config.remote_log_storage_system_enable:
        from pluglog.tiered.manager import make_remote_log_manager

        services.append(make_remote_log_manager(broker))
    if len(services) <= 1:
        return services[0] if services else None
    from twisted.application.service import MultiService

    both = MultiService()
    for service in services:
        service.setServiceParent(both)
    return both


@hookimpl
def pluglog_register_authenticators():
    from pluglog.security.sasl import make_plain, make_scram

    return {"plain": make_plain, "scram": make_scram}


@hookimpl
def pluglog_register_authorizers():
    from pluglog.security.acls import make_acl_authorizer

    return {"acl": make_acl_authorizer}

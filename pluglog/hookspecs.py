"""pluggy hook specifications: how plugins (built-in and third-party) join pluglog.

Registration hooks each return ``{name: factory}``; ``factory(config, reactor)``
builds a provider of the matching interface (see :data:`COMPONENT_KINDS`).
Lifecycle hooks let a plugin add services or react to broker events. There
are deliberately no per-record hooks: sinks and auditors read the log by
offset like any consumer, so the produce path stays O(batches).
"""

import pluggy

from pluglog import PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def pluglog_register_storage():
    """Return ``{name: factory}`` of ILogStorage providers."""


@hookspec
def pluglog_register_partitioners():
    """Return ``{name: factory}`` of IPartitioner providers."""


@hookspec
def pluglog_register_replica_selectors():
    """Return ``{name: factory}`` of IReplicaSelector providers."""


@hookspec
def pluglog_register_retention_policies():
    """Return ``{name: factory}`` of IRetentionPolicy providers."""


@hookspec
def pluglog_register_serializers():
    """Return ``{name: factory}`` of ISerializer providers."""


@hookspec
def pluglog_register_schema_registries():
    """Return ``{name: factory}`` of ISchemaRegistry providers."""


@hookspec
def pluglog_register_coordinators():
    """Return ``{name: factory}`` of ICoordinator providers."""


@hookspec
def pluglog_register_sinks():
    """Return ``{name: factory}`` of ISink providers."""


@hookspec
def pluglog_register_authenticators():
    """Return ``{name: factory}`` of IAuthenticator providers."""


@hookspec
def pluglog_register_authorizers():
    """Return ``{name: factory}`` of IAuthorizer providers (``authorizer.class.name``)."""


@hookspec
def pluglog_register_remote_storage():
    """Return ``{name: factory}`` of IRemoteLogStorage providers
    (``remote.log.storage.manager.class.name``)."""


@hookspec
def pluglog_add_services(broker):
    """Return an IService to run inside the broker (or None)."""


@hookspec
def pluglog_add_web_resources(broker, root):
    """Add twisted.web resources under ``root`` (``root.putChild``) of the
    ``--http`` listener; may return a Deferred the listener waits for."""


@hookspec
def pluglog_add_cli_commands(subparsers):
    """Add ``pluglog`` subcommands: ``subparsers.add_parser(name)``, then
    ``set_defaults(run=function)`` where ``function(client, args)`` returns
    the exit status (None means 0)."""


@hookspec
def pluglog_broker_started(broker):
    """Called once the broker listens and its components are up."""


@hookspec
def pluglog_topic_created(topic, config):
    """Called after a topic is created, with its effective TopicConfig."""

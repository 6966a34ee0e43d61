"""Security: listeners' security protocols, SASL, SCRAM credentials, ACLs.

:class:`Security` is built by the broker service once the coordinator runs
and hangs off ``broker.security``: the configured listeners, the enabled
SASL mechanisms with their IAuthenticator providers, the SCRAM credential
store and (when ``authorizer.class.name`` is set) the IAuthorizer.

Mechanisms only: deciding whether one request is allowed is the server's job
(:mod:`pluglog.server.authorization`). It may import client, serialization,
storage, protocol and below; it opens no connections of its own.
"""

from pluglog.errors import ConfigError
from pluglog.security.credentials import credential_store
from pluglog.security.listeners import parse_listeners
from pluglog.security.principals import parse_mapping_rules

#: authenticator provider name -> mechanisms it offers (built-ins)
BUILTIN_AUTHENTICATORS = ("plain", "scram")


def parse_super_users(text):
    """``User:a;User:b`` -> {"User:a", "User:b"}."""
    return {p.strip() for p in text.split(";") if p.strip()}


class Security:
    """The broker's security setup (see the module docstring)."""

    def __init__(self, config, registry, coordinator, reactor):
        self.config = config
        self.listeners = parse_listeners(config)
        #: ssl.principal.mapping.rules, checked at start-up
        self.principal_rules = parse_mapping_rules(config.ssl_principal_mapping_rules)
        self.store = credential_store(coordinator, config.data_dir)
        self.super_users = parse_super_users(config.super_users)
        enabled = [m.strip() for m in config.sasl_enabled_mechanisms.split(",") if m.strip()]
        offered = {}
        for name in registry.names("authenticator"):
            provider = registry.build("authenticator", name, config, reactor)
            for mechanism in provider.mechanisms():
                offered.setdefault(mechanism, provider)
        unknown = [m for m in enabled if m not in offered]
        if unknown and any(item.sasl for item in self.listeners):
            raise ConfigError(
                f"sasl.enabled.mechanisms: {', '.join(unknown)} not offered "
                f"(available: {', '.join(sorted(offered))})"
            )
        self.mechanisms = [m for m in enabled if m in offered]
        self.authenticators = {m: offered[m] for m in self.mechanisms}
        #: IAuthorizer or None (no authorization: everything allowed)
        self.authorizer = make_authorizer(config, registry, reactor)
        #: listener name -> connections whose SASL authentication failed
        self.authentication_failures = {}


#: Kafka's authorizer classes: aliases of the built-in ``acl`` provider
KAFKA_AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)


def make_authorizer(config, registry, reactor):
    """The IAuthorizer ``authorizer.class.name`` names, or None when empty.

    The name of a registered provider (``pluglog_register_authorizers``)
    selects it; Kafka's class names and any other non-empty value select the
    built-in ``acl`` provider, so a Kafka operator's setting carries over.
    """
    name = config.authorizer_class_name.strip()
    if not name:
        return None
    if name not in registry.names("authorizer"):
        if name not in KAFKA_AUTHORIZERS:
            from twisted.logger import Logger

            Logger().info(
                "authorizer.class.name {name!r} is no registered authorizer "
                "({known}): using the built-in ACL authorizer",
                name=name,
                known=", ".join(registry.names("authorizer")),
            )
        name = "acl"
    return registry.build("authorizer", name, config, reactor)

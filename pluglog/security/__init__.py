"""Security: listeners' security protocols, SASL, SCRAM credentials, ACLs.

:class:`Security` is built by the broker service once the coordinator runs
and hangs off ``broker.security``: the configured listeners, the enabled
SASL mechanisms with their IAuthenticator providers, the SCRAM credential
store and (when ``authorizer.class.name`` is set) the IAuthorizer.
"""

from pluglog.errors import ConfigError
from pluglog.security.credentials import credential_store
from pluglog.security.listeners import parse_listeners

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
        self.authorizer = None
        if config.authorizer_class_name.strip():
            # Any non-empty value turns on the built-in ACL authorizer (Kafka's
            # AclAuthorizer / StandardAuthorizer class names carry over).
            from pluglog.security.acls import AclAuthorizer

            self.authorizer = AclAuthorizer(config)

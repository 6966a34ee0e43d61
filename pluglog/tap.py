"""``twistd pluglog``: command-line options and the service maker.

Options validate everything they can before the reactor starts, raising
``usage.UsageError`` naming the bad value: strports are parsed, the config
file is read and checked, and the chosen storage/coordinator names are
looked up in the plugin manager (built here, on demand, never at import).
Under twistd a usage error prints one line (not the help) and exits 2.
"""

import os
import re
import socket
import sys

from twisted.internet import endpoints
from twisted.internet import reactor as default_reactor
from twisted.python import usage

from pluglog import __version__, jsonlog
from pluglog.addresses import listen_address
from pluglog.config import (
    FSYNC_POLICIES,
    BrokerConfig,
    load_ini,
    parse_settings,
    split_host_port,
)
from pluglog.errors import ConfigError, PluginError

#: How each worker (and the tests' brokers) runs twistd from a Python argv.
TWISTD_RUN = "from twisted.scripts.twistd import run; run()"


def parse_host_port(value, option="--advertised-listener"):
    """Parse ``host:port`` (IPv6 as ``[::1]:9092``); raise UsageError if bad."""
    try:
        return split_host_port(value)
    except ValueError as exc:
        raise usage.UsageError(f"{option}: {exc}") from None


def check_zookeeper_connect(value):
    """``--coordinator zookeeper`` needs a well-formed zookeeper.connect."""
    from pluglog.coordination.zkdata import parse_connect

    if not value:
        raise usage.UsageError(
            "--coordinator zookeeper needs zookeeper.connect "
            "(--set zookeeper.connect=HOST:PORT[,HOST:PORT...][/chroot] or the INI file)"
        )
    try:
        parse_connect(value)
    except ValueError as exc:
        raise usage.UsageError(str(exc)) from None


class Options(usage.Options):
    """Options of ``twistd pluglog``."""

    synopsis = "[options]"
    longdesc = "Run a pluglog broker that speaks the Kafka wire protocol."

    optParameters = [  # noqa: N815 - Twisted usage.Options name
        [
            "listen",
            "l",
            "tcp:9092",
            "Kafka listener as a Twisted strport (tcp:PORT[:interface=IP]).",
        ],
        ["advertised-listener", "a", None, "host:port that clients are told to connect to."],
        ["data-dir", "d", "./data", "Directory holding the logs."],
        ["config", "c", None, "INI file with Kafka-named broker keys."],
        ["storage", None, None, "Storage provider name (default: segments)."],
        ["coordinator", None, None, "Coordinator provider name (default: local)."],
        [
            "retention",
            None,
            None,
            "Retention policy name (log.retention.policy; default: delete).",
        ],
        ["fsync", None, None, "fsync policy: never, interval or always (default: interval)."],
        ["broker-id", None, None, "Broker id (default 0)."],
        [
            "http",
            None,
            None,
            "HTTP listener (schema registry, plugin web resources) as a Twisted "
            "strport, e.g. tcp:8081:interface=127.0.0.1 (default: off).",
        ],
        [
            "log-format",
            None,
            "text",
            "text, or json: one JSON object per line (pluglog.jsonlog).",
        ],
        [
            "workers",
            None,
            "1",
            "Broker processes on this host, supervised as one unit (pluglog.supervisor); "
            "more than 1 needs --coordinator zookeeper.",
        ],
    ]

    def __init__(self):
        super().__init__()
        self["set"] = []

    def opt_set(self, value):
        """Set a Kafka-named config key, KEY=VALUE (repeatable)."""
        key, eq, val = value.partition("=")
        if not eq or not key:
            raise usage.UsageError(f"--set: expected KEY=VALUE, got {value!r}")
        self["set"].append((key.strip(), val.strip()))

    def parseOptions(self, options=None):
        """As ``twistd pluglog``, a usage error is one line on stderr and
        exit 2 (twistd's own runner prints the whole help first and buries
        the error under it); used directly, UsageError is raised."""
        # The arguments as given: --workers passes them on to each worker.
        self.raw_args = list(sys.argv[1:] if options is None else options)
        try:
            super().parseOptions(options)
        except usage.UsageError as exc:
            if self.parent is None:
                raise
            sys.stderr.write(f"twistd pluglog: {exc}\n(twistd pluglog --help lists the options)\n")
            raise SystemExit(2) from None

    def opt_version(self):
        """Print the pluglog version and exit."""
        print(f"pluglog {__version__}")
        raise SystemExit(0)

    def postOptions(self):
        config = BrokerConfig()
        try:
            if self["config"]:
                config = load_ini(self["config"], config)
            if self["set"]:
                config = parse_settings(dict(self["set"]), config)
        except ConfigError as exc:
            raise usage.UsageError(str(exc)) from None

        listen = self["listen"]
        try:
            endpoints.serverFromString(default_reactor, listen)
        except (ValueError, KeyError, TypeError) as exc:
            raise usage.UsageError(f"--listen: bad strport {listen!r}: {exc}") from None
        if not listen.startswith("tcp"):
            raise usage.UsageError(f"--listen: only tcp listeners are served, got {listen!r}")
        interface, port = listen_address(listen)

        if self["advertised-listener"]:
            host, adv_port = parse_host_port(self["advertised-listener"])
        else:
            if interface and interface not in ("0.0.0.0", "::"):
                host = interface
            else:
                host = socket.getfqdn()
            adv_port = port

        if self["http"] is not None:
            try:
                endpoints.serverFromString(default_reactor, self["http"])
            except (ValueError, KeyError, TypeError) as exc:
                raise usage.UsageError(f"--http: bad strport {self['http']!r}: {exc}") from None

        self._log_format()
        if self["fsync"] is not None and self["fsync"] not in FSYNC_POLICIES:
            raise usage.UsageError(
                f"--fsync: {self['fsync']!r} is not one of {', '.join(FSYNC_POLICIES)}"
            )
        changes = {
            "listen": listen,
            "advertised_host": host,
            "advertised_port": adv_port,
            # log.dirs (JBOD) wins over log.dir (Kafka's single dir), which
            # wins over --data-dir.
            "data_dir": config.log_dirs[0]
            if config.log_dirs
            else config.log_dir or os.path.abspath(self["data-dir"]),
        }
        if self["http"] is not None:
            changes["http"] = self["http"]
        if self["fsync"] is not None:
            changes["fsync"] = self["fsync"]
        if self["storage"] is not None:
            changes["storage"] = self["storage"]
        if self["coordinator"] is not None:
            changes["coordinator"] = self["coordinator"]
        if self["broker-id"] is not None:
            try:
                changes["broker_id"] = int(self["broker-id"])
            except ValueError:
                raise usage.UsageError(
                    f"--broker-id: expected an integer, got {self['broker-id']!r}"
                ) from None
            if changes["broker_id"] < 0:
                raise usage.UsageError(f"--broker-id: must be >= 0, got {self['broker-id']!r}")
        if self["retention"] is not None:
            try:
                changes["topic_defaults"] = config.topic_defaults.with_overrides(
                    {"retention.policy": self["retention"]}
                )
            except ConfigError as exc:
                raise usage.UsageError(f"--retention: {exc}") from None
        # The options standing for Kafka keys count as set at start-up
        # (DescribeConfigs' STATIC_BROKER_CONFIG) when given.
        given = {
            "listeners": listen != self.defaults["listen"],
            "advertised.listeners": bool(self["advertised-listener"]),
            "log.dirs": self["data-dir"] != self.defaults["data-dir"],
            "broker.id": self["broker-id"] is not None,
            "log.retention.policy": self["retention"] is not None,
        }
        changes["explicit_keys"] = config.explicit_keys | {k for k, on in given.items() if on}
        config = config.replace(**changes)
        if config.coordinator == "zookeeper":
            check_zookeeper_connect(config.zookeeper_connect)

        from pluglog.plugins import make_plugin_manager
        from pluglog.registry import Registry

        try:
            manager = make_plugin_manager()
            registry = Registry(manager)
            for kind, name, flag in (
                ("storage", config.storage, "--storage"),
                ("coordinator", config.coordinator, "--coordinator"),
                (
                    "retention",
                    config.topic_defaults.retention_policy,
                    "--retention/log.retention.policy",
                ),
            ):
                if name not in registry.names(kind):
                    raise usage.UsageError(
                        f"{flag}: no {kind} plugin named {name!r} "
                        f"(available: {', '.join(registry.names(kind))})"
                    )
            for section, settings in config.plugin_sections.items():
                if section.startswith("sink:"):
                    plugin = settings.get("plugin")
                    if plugin not in registry.names("sink"):
                        raise usage.UsageError(
                            f"[{section}] plugin = {plugin!r}: no such sink plugin "
                            f"(available: {', '.join(registry.names('sink')) or 'none'})"
                        )
        except PluginError as exc:
            raise usage.UsageError(str(exc)) from None
        self.broker_config = config
        self.plugin_manager = manager
        self.worker_commands = self._worker_commands(config)

    def _worker_commands(self, config):
        """One ``twistd pluglog`` argv per worker, or [] for one process."""
        try:
            count = int(self["workers"])
        except ValueError:
            raise usage.UsageError(
                f"--workers: expected an integer, got {self['workers']!r}"
            ) from None
        if count < 1:
            raise usage.UsageError(f"--workers: must be >= 1, got {self['workers']!r}")
        if count == 1:
            return []
        if config.coordinator != "zookeeper":
            raise usage.UsageError(
                f"--workers {count} needs --coordinator zookeeper: the workers are brokers "
                "of one cluster and share its metadata through ZooKeeper"
            )
        for key, given in (("log.dirs", config.log_dirs), ("log.dir", config.log_dir)):
            if given:
                raise usage.UsageError(
                    f"--workers {count} with {key} is not supported (the workers would share "
                    "the dirs); give --data-dir: each worker gets <data-dir>/worker-<i>"
                )
        if config.listeners:
            raise usage.UsageError(
                "--workers with named listeners (listeners=...) is not supported; "
                "use --listen tcp:PORT"
            )
        listen = _port_and_rest("--listen", self["listen"])
        http = _port_and_rest("--http", self["http"]) if self["http"] is not None else None
        advertised = None
        if self["advertised-listener"]:
            advertised = parse_host_port(self["advertised-listener"])
        commands = []
        for i in range(count):
            args = [*self.raw_args, "--workers", "1"]
            args += ["--listen", f"tcp:{listen[0] + i}{listen[1]}"]
            args += ["--data-dir", os.path.join(config.data_dir, f"worker-{i}")]
            args += ["--broker-id", str(config.broker_id + i)]
            if advertised is not None:
                args += ["--advertised-listener", f"{advertised[0]}:{advertised[1] + i}"]
            if http is not None:
                args += ["--http", f"tcp:{http[0] + i}{http[1]}"]
            commands.append(
                [
                    sys.executable,
                    "-c",
                    TWISTD_RUN,
                    "-n",
                    "--pidfile=",
                    "--logfile=-",
                    "pluglog",
                    *args,
                ]
            )
        return commands

    def _log_format(self):
        # twistd builds its log observer after parsing, from its --logger
        # option (a name it imports): --log-format json names pluglog's.
        if self["log-format"] not in ("text", "json"):
            raise usage.UsageError(
                f"--log-format: expected text or json, got {self['log-format']!r}"
            )
        if self["log-format"] == "json" and self.parent is not None:
            if self.parent.get("logger"):
                raise usage.UsageError(
                    "--log-format json and twistd's --logger exclude each other"
                )
            jsonlog.configure(self.parent.get("logfile"), self.parent.get("nodaemon"))
            self.parent["logger"] = jsonlog.OBSERVER


def _port_and_rest(flag, strport):
    """``(port, ":interface=...")`` of a ``tcp:PORT[:...]`` strport (--workers
    gives each worker the next port)."""
    found = re.fullmatch(r"tcp:(\d+)((?::.*)?)", strport or "")
    if found is None:
        raise usage.UsageError(f"{flag}: --workers needs tcp:PORT[:...], got {strport!r}")
    return int(found.group(1)), found.group(2)


def makeService(options):
    """Build the broker service from parsed Options (the supervisor of the
    workers with --workers N > 1)."""
    from pluglog.service import BrokerService

    if options.worker_commands:
        from pluglog.supervisor import WorkerSupervisor

        return WorkerSupervisor(options.worker_commands)

    broker_service = BrokerService(options.broker_config, options.plugin_manager)
    broker_service.exit_nonzero_on_failure = True
    return broker_service

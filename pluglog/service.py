"""BrokerService: the twistd service tree of one broker.

Start order: plugin registry -> storage and coordinator (Broker.start) ->
Kafka listener -> timers (flush, recovery checkpoint, retention) -> plugin
services from ``pluglog_add_services`` -> the ``--http`` listener (after the
plugins' ``pluglog_add_web_resources``) -> ``pluglog_broker_started``. Stop
runs the reverse: stop listening, stop timers and plugin services, then
flush every log and write the recovery-point checkpoint and the
clean-shutdown marker (``Broker.stop``). A failed start is logged and stops
the reactor instead of leaving a half-started broker; an operator's error
(:data:`OPERATOR_ERRORS`) is one line, in the log and, as the process exits
(with 1), on stderr, and no "stopped cleanly" follows it.
"""

import atexit
import gc
import os
import sys

from twisted.application import service
from twisted.internet import defer, endpoints, task
from twisted.internet.error import CannotListenError
from twisted.logger import Logger

from pluglog.broker.core import Broker
from pluglog.errors import ConfigError, PluglogError
from pluglog.metrics.recorder import RequestMetrics
from pluglog.metrics.registry import broker_registry
from pluglog.registry import Registry
from pluglog.server import dispatch
from pluglog.storage.openfiles import RESERVE_MIN, descriptor_budget, raise_descriptor_limit

log = Logger()


#: Young-generation threshold once the broker runs. CPython's default (700
#: container allocations) runs a collection every few dozen requests: each
#: request builds a dozen or more short-lived dicts, lists and tuples, which
#: are acyclic and freed by reference counting anyway.
GC_GEN0_THRESHOLD = 20_000


def tune_gc():
    """Move everything built at start-up (modules, Twisted, plugins, logs
    opened) out of the collector's view and collect the young generation
    less often. Measured with a stop-and-wait Produce client (bench/README):
    about 7 % less broker CPU per request."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


#: Start-up failures the operator causes and fixes (a bad or conflicting
#: setting, a port or data dir in use, an unreachable ZooKeeper, an unreadable
#: file): reported as one line. Anything else is a bug and keeps its traceback.
OPERATOR_ERRORS = (PluglogError, CannotListenError, OSError)


def _exit_failed(line):
    # Runs after twistd has stopped and cleaned up (pid file, logs): the
    # reason is the last thing on the terminal. twistd redirects sys.stderr
    # into the log, so this writes to the process's real stderr.
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        sys.__stderr__.write(line + "\n")
        sys.__stderr__.flush()
    except (AttributeError, OSError, ValueError):
        pass  # daemonized: no terminal, the log has the line
    os._exit(1)


class BrokerService(service.MultiService):
    """The broker process's root service."""

    def __init__(self, config, plugin_manager, reactor=None):
        super().__init__()
        if reactor is None:
            from twisted.internet import reactor
        self.config = config
        self.plugin_manager = plugin_manager
        self.reactor = reactor
        self.broker = None
        self.request_metrics = None
        self.port = None
        self.ports = []
        self._timers = []
        self._started = None
        #: Set by ``twistd pluglog`` (tap.makeService): exit 1 after a failed start.
        self.exit_nonzero_on_failure = False
        self.start_failed = False

    def startService(self):
        super().startService()
        self._started = self._start()
        self._started.addErrback(self._start_failed)

    @defer.inlineCallbacks
    def _start(self):
        from pluglog.server.protocol import KafkaServerFactory

        before, after = raise_descriptor_limit()
        if after > before:
            log.info("open-file limit raised from {before} to {after}", before=before, after=after)
        budget = descriptor_budget(
            self.config.log_max_open_files, self.config.log_max_open_segments
        )
        if budget > after - RESERVE_MIN:
            # Honoured (the operator may raise the limit under a running
            # broker), but sockets may then find no descriptor left; the
            # segment files give back half theirs if an open fails.
            log.warn(
                "log.max.open.files/log.max.open.segments allow segment files {budget} "
                "descriptors of the {limit} open-file limit",
                budget=budget,
                limit=after,
            )
        registry = Registry(self.plugin_manager)
        self.broker = broker = Broker(self.config, registry, self.reactor)
        yield broker.start()
        #: the hot-path request counters (pluglog.metrics), None when switched off
        self.request_metrics = RequestMetrics() if self.config.metrics_enabled else None
        from pluglog.security import Security

        broker.security = Security(self.config, registry, broker.coordinator, self.reactor)
        # A coordinator that keeps ACLs (ZooKeeper's /kafka-acl) shares them
        # between brokers; the authorizer then reads and writes them there.
        use_store = getattr(broker.security.authorizer, "use_store", None)
        if use_store is not None:
            use_store(broker.coordinator)
        if broker.security.listeners:
            yield self._listen_named(broker, broker.security.listeners)
        else:
            endpoint = endpoints.serverFromString(self.reactor, self.config.listen)
            self.port = yield endpoint.listen(
                KafkaServerFactory(broker, None, self.request_metrics)
            )
            self.ports = [self.port]
            bound = self.port.getHost().port
            broker.bound_port = bound  # DescribeConfigs' listeners when listening on tcp:0
            if not self.config.advertised_port:
                broker.advertised = (self.config.advertised_host, bound)
                broker.config = broker.config.replace(advertised_port=bound)
        log.info(
            "pluglog broker {id} listening on {listen}, advertised as "
            "{host}:{aport}, data in {data}",
            id=self.config.broker_id,
            listen=", ".join(str(p.getHost()) for p in self.ports),
            host=broker.advertised[0],
            aport=broker.advertised[1],
            data=self.config.data_dir,
        )
        self._every(self.config.flush_scheduler_interval_ms, broker.flush_due)
        if self.config.fsync != "never":
            self._every(self.config.checkpoint_interval_ms, broker.checkpoint)
        self._every(self.config.retention_check_interval_ms, broker.run_retention)
        if self.request_metrics is not None:
            # Latency samples are appended per request and bucketed in bulk:
            # once a second bounds what waits for a scrape.
            self._every(1000, self.request_metrics.fold)
        for service_ in self._sink_services(registry, broker):
            service_.setServiceParent(self)
        for extra in self.plugin_manager.hook.pluglog_add_services(broker=broker):
            if extra is not None:
                extra.setServiceParent(self)
        if self.config.http:
            from pluglog.web.site import WebService

            metrics_registry = None
            if self.config.metrics_enabled:
                metrics_registry = broker_registry(broker, self.request_metrics)
            web = WebService(
                broker, self.config.http, self.plugin_manager.hook, self.reactor, metrics_registry
            )
            web.setServiceParent(self)
            yield web.start()
        self.plugin_manager.hook.pluglog_broker_started(broker=broker)
        tune_gc()
        dispatch.install(self.reactor)

    @defer.inlineCallbacks
    def _listen_named(self, broker, listeners):
        """One endpoint per configured listener; ``broker.listener_endpoints``
        maps each name to what Metadata advertises on it."""
        from pluglog.security.listeners import server_endpoint, tls_options
        from pluglog.server.protocol import KafkaServerFactory

        tls = tls_options(self.config) if any(item.tls for item in listeners) else None
        advertised = {}
        for listener in listeners:
            endpoint = server_endpoint(self.reactor, listener, self.config, tls)
            factory = KafkaServerFactory(broker, listener, self.request_metrics)
            port = yield endpoint.listen(factory)
            self.ports.append(port)
            host = listener.advertised_host or listener.host
            if not host or host in ("0.0.0.0", "::"):
                host = self.config.advertised_host
            advertised[listener.name] = (host, listener.advertised_port or port.getHost().port)
        self.port = self.ports[0]
        broker.bound_port = self.port.getHost().port
        broker.listener_endpoints = advertised
        broker.advertised = advertised[listeners[0].name]
        broker.config = broker.config.replace(
            advertised_host=broker.advertised[0], advertised_port=broker.advertised[1]
        )

    def _sink_services(self, registry, broker):
        """One service per ``[sink:NAME]`` config section; ``plugin`` picks the ISink."""
        services = []
        for section, settings in sorted(self.config.plugin_sections.items()):
            kind, _, name = section.partition(":")
            if kind != "sink":
                continue
            settings = dict(settings)
            plugin = settings.pop("plugin", None)
            if not plugin or not name:
                raise ConfigError(f"[{section}]: a sink section needs a name and a 'plugin' key")
            sink = registry.build("sink", plugin, self.config, self.reactor)
            services.append(sink.make_service(broker, name, settings))
            log.info("sink {name} ({plugin}) configured", name=name, plugin=plugin)
        return services

    def _every(self, interval_ms, function):
        def guarded():
            try:
                function()
            except Exception:
                log.failure("periodic task {name} failed", name=function.__name__)

        call = task.LoopingCall(guarded)
        call.clock = self.reactor
        call.start(interval_ms / 1000.0, now=False)
        self._timers.append(call)

    def _start_failed(self, failure):
        self.start_failed = True
        if failure.check(*OPERATOR_ERRORS):
            reason = str(failure.value) or failure.type.__name__
            log.error("pluglog broker failed to start: {reason}", reason=reason)
        else:
            reason = f"{failure.type.__name__}: {failure.value} (the traceback is in the log)"
            log.failure("pluglog broker failed to start", failure)
        if self.exit_nonzero_on_failure:
            # twistd exits 0 after reactor.stop(); a broker that could not
            # start must not look like one that stopped cleanly.
            atexit.register(_exit_failed, f"pluglog broker failed to start: {reason}")
        # Start usually runs before reactor.run(); stop as soon as it runs.
        if self.reactor.running:
            self.reactor.stop()
        else:
            self.reactor.callWhenRunning(self.reactor.stop)

    @defer.inlineCallbacks
    def stopService(self):
        if self._started is not None and not self._started.called:
            yield self._started
        if self.broker is not None and self.broker.replicas is not None:
            # Kafka's controlled shutdown: leadership moves to other in-sync
            # replicas while this broker still serves, so clients fail over
            # without waiting for the session timeout.
            try:
                yield self.broker.controlled_shutdown()
            except Exception:
                log.failure("controlled shutdown failed; stopping anyway")
        for port in self.ports:
            yield port.stopListening()
        for call in self._timers:
            if call.running:
                call.stop()
        yield super().stopService()
        if self.broker is not None:
            # After a failed start too: this process holds the data dir's
            # lock, so closing its logs (and marking the stop clean) is right;
            # but it did not serve, so no "stopped cleanly".
            yield self.broker.stop()
            if not self.start_failed:
                log.info("pluglog broker stopped cleanly; logs flushed and checkpointed")

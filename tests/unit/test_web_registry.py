"""The registry's twisted.web resource and the HTTP listener, in memory."""

import io
import json

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.web.test.requesthelper import DummyRequest

from pluglog.group.model import Group, OffsetAndMetadata
from pluglog.plugins import make_plugin_manager
from pluglog.serialization.registry import SchemaRegistry
from pluglog.web.registry import RegistryResource
from pluglog.web.site import Root, WebService
from tests.unit.test_server_fastlane import make_broker

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})


def call(resource, top, rest, method="GET", body=None):
    request = DummyRequest([p.encode() for p in rest])
    request.prepath = [top.encode()]
    request.method = method.encode()
    raw = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    request.content = io.BytesIO(raw)
    data = resource.render(request)
    return request.responseCode or 200, json.loads(data)


def test_register_get_and_errors():
    log = []
    leaf = RegistryResource(SchemaRegistry(log.extend))
    assert call(leaf, "subjects", ["s", "versions"], "POST", {"schema": SCHEMA}) == (
        200,
        {"id": 1},
    )
    status, body = call(leaf, "subjects", ["s", "versions", "latest"])
    assert status == 200 and body["id"] == 1 and body["version"] == 1
    assert call(leaf, "schemas", ["ids", "1", "subjects"]) == (200, ["s"])
    assert call(leaf, "schemas", ["ids", "x"])[1]["error_code"] == 40403
    assert call(leaf, "subjects", ["s", "versions"], "POST", b"\xff")[1]["error_code"] == 400
    assert call(leaf, "subjects", ["s", "versions"], "PATCH")[0] == 405
    assert call(leaf, "mode", []) == (200, {"mode": "READWRITE"})
    assert call(leaf, "config", ["s"])[1]["error_code"] == 40408
    assert call(
        leaf, "compatibility", ["subjects", "s", "versions", "latest"], "POST", {"schema": '"int"'}
    ) == (
        200,
        {"is_compatible": False},
    )
    assert len(log) == 1


def test_unexpected_failure_is_a_json_500_not_a_traceback():
    registry = SchemaRegistry()
    registry.subject_names = None  # calling it raises TypeError
    status, body = call(RegistryResource(registry), "subjects", [])
    assert status == 500 and body["error_code"] == 50001
    assert "Traceback" not in body["message"]


def test_web_service_waits_for_plugin_resources_then_listens(tmp_path):
    loaded = defer.Deferred()

    class Plugin:
        from pluglog import hookimpl

        @hookimpl
        def pluglog_add_web_resources(self, broker, root):
            root.putChild(b"hello", Root())
            return loaded

    manager = make_plugin_manager(extra_plugins=[Plugin()], autoload=False)
    manager.unregister(name="pluglog.builtin")  # no broker here for the registry
    reactor = MemoryReactorClock()
    broker = make_broker(tmp_path, "memory")  # the console's, on its own Clock
    web = WebService(broker, "tcp:0:interface=127.0.0.1", manager.hook, reactor)
    started = web.start()
    assert not started.called and reactor.tcpServers == []
    loaded.callback(None)
    assert started.called
    assert reactor.tcpServers[0][0] == 0
    assert b"hello" in web.root.children and b"console" in web.root.children
    # The console's lag sampler runs on the web service's reactor, and stops with it.
    group = Group("sampled", 0)
    group.offsets[("t", 0)] = OffsetAndMetadata(0, -1, "", 0, -1)
    broker.group_coordinator.groups["sampled"] = group
    reactor.advance(broker.config.console_lag_sample_interval_ms / 1000)
    assert [lag for _t, lag in web.lag.of("sampled")] == [0]
    web.stopService()
    assert not reactor.getDelayedCalls()

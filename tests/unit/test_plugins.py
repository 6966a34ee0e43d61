"""Plugin manager and registry: built-ins, entry points, errors, verifyObject."""

import os
import subprocess
import sys
import textwrap
import types

import pluggy
import pytest
from twisted.internet.task import Clock
from zope.interface import implementer
from zope.interface.verify import verifyObject

from pluglog import hookimpl
from pluglog.config import BrokerConfig
from pluglog.errors import PluginError
from pluglog.interfaces import IPartitioner, IRetentionPolicy
from pluglog.plugins import make_plugin_manager
from pluglog.registry import KINDS, Registry

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "data", "example_plugin")
#: a second third-party package: a retention policy
EXAMPLE_RETENTION = os.path.join(HERE, "..", "data", "example_retention")


def _registry(*extra):
    return Registry(make_plugin_manager(extra_plugins=extra, autoload=False))


@pytest.mark.parametrize(
    "kind,name",
    [
        ("storage", "segments"),
        ("storage", "memory"),
        ("partitioner", "murmur2"),
        ("partitioner", "round_robin"),
        ("retention", "delete"),
        ("serializer", "bytes"),
        ("serializer", "string"),
        ("serializer", "json"),
        ("coordinator", "local"),
        ("authorizer", "acl"),
    ],
)
def test_every_builtin_provider_verifies(kind, name, tmp_path):
    registry = _registry()
    config = BrokerConfig(data_dir=str(tmp_path))
    provider = registry.build(kind, name, config, Clock())
    assert verifyObject(KINDS[kind][1], provider)
    assert registry.plugin_of(kind, name) == "pluglog.builtin"
    if hasattr(provider, "close"):
        provider.close()


def test_unknown_provider_names_available_ones():
    with pytest.raises(PluginError) as info:
        _registry().build("storage", "nope", BrokerConfig(), Clock())
    message = str(info.value)
    assert "'nope'" in message and "ILogStorage" in message and "segments" in message


def test_provider_missing_a_method_is_named():
    @implementer(IRetentionPolicy)
    class Broken:
        pass  # claims the interface, lacks segments_to_delete

    plugin = types.SimpleNamespace(
        pluglog_register_retention_policies=hookimpl(lambda: {"broken": lambda c, r: Broken()})
    )
    registry = _registry(plugin)
    with pytest.raises(PluginError) as info:
        registry.build("retention", "broken", BrokerConfig(), Clock())
    assert "'broken'" in str(info.value)
    assert "IRetentionPolicy" in str(info.value)
    assert "lacks 'segments_to_delete'" in str(info.value)
    # The plugin that offered it is named too (pluggy's name for it).
    assert info.value.plugin == registry.plugin_of("retention", "broken")
    assert repr(info.value.plugin) in str(info.value)


def test_provider_not_declaring_interface_is_refused():
    class Undeclared:
        def partition(self, topic, key, num_partitions):
            return 0

    plugin = types.SimpleNamespace(
        pluglog_register_partitioners=hookimpl(lambda: {"undeclared": lambda c, r: Undeclared()})
    )
    with pytest.raises(PluginError, match="IPartitioner"):
        _registry(plugin).build("partitioner", "undeclared", BrokerConfig(), Clock())


def test_two_plugins_claiming_one_name_conflict():
    plugin = types.SimpleNamespace(
        pluglog_register_serializers=hookimpl(lambda: {"json": lambda c, r: None})
    )
    with pytest.raises(PluginError, match="offered by both"):
        _registry(plugin).names("serializer")


def test_failing_factory_is_wrapped():
    def factory(config, reactor):
        raise RuntimeError("disk on fire")

    plugin = types.SimpleNamespace(
        pluglog_register_serializers=hookimpl(lambda: {"fiery": factory})
    )
    with pytest.raises(PluginError, match="disk on fire"):
        _registry(plugin).build("serializer", "fiery", BrokerConfig(), Clock())


def test_misspelled_hook_is_rejected_by_check_pending():
    plugin = types.SimpleNamespace(pluglog_register_partitionerz=hookimpl(lambda: {}))
    with pytest.raises(PluginError, match="pluglog_register_partitionerz"):
        make_plugin_manager(extra_plugins=[plugin], autoload=False)


def test_registered_module_is_selectable_by_name():
    sys.path.insert(0, EXAMPLE)
    try:
        import pluglog_example

        registry = _registry(pluglog_example)
        provider = registry.build("partitioner", "example-last", BrokerConfig(), Clock())
        assert verifyObject(IPartitioner, provider)
        assert provider.partition("t", b"k", 7) == 6
    finally:
        sys.path.remove(EXAMPLE)
        sys.modules.pop("pluglog_example", None)


def test_builtins_register_first():
    manager = make_plugin_manager(autoload=False)
    assert isinstance(manager, pluggy.PluginManager)
    assert manager.get_plugin("pluglog.builtin") is not None


@pytest.fixture(scope="module")
def installed_example(tmp_path_factory):
    """The example plugins (a partitioner package and a retention policy
    package) pip-installed (for real) into a private target dir."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            EXAMPLE,
            EXAMPLE_RETENTION,
        ],
        check=True,
    )
    return target


def _run_with(target, code, **env):
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.getcwd()]), **env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )


CHECK = """
    from twisted.internet.task import Clock
    from pluglog.config import BrokerConfig
    from pluglog.plugins import make_plugin_manager
    from pluglog.registry import Registry
    registry = Registry(make_plugin_manager())
    print(sorted(registry.names("partitioner")))
    if "example-last" in registry.names("partitioner"):
        p = registry.build("partitioner", "example-last", BrokerConfig(), Clock())
        print(p.partition("t", None, 4), registry.plugin_of("partitioner", "example-last"))
    print(sorted(registry.names("retention")))
    if "example-keep-two" in registry.names("retention"):
        print(registry.plugin_of("retention", "example-keep-two"))
"""


def test_entry_point_plugin_is_loaded_and_selected(installed_example):
    result = _run_with(installed_example, CHECK)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "'example-last'" in lines[0]
    assert lines[1] == "3 example"
    assert lines[2] == "['delete', 'example-keep-two']"
    assert lines[3] == "example-retention"  # its own package and entry point


def test_autoload_can_be_disabled(installed_example):
    result = _run_with(installed_example, CHECK, PLUGLOG_DISABLE_PLUGIN_AUTOLOAD="1")
    assert result.returncode == 0, result.stderr
    assert "example-last" not in result.stdout


def test_a_broken_installed_plugin_package_is_named(tmp_path, monkeypatch):
    dist = tmp_path / "pluglog_broken_demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pluglog-broken-demo\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text("[pluglog]\nbroken_demo = no_such_module_xyz.plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError) as info:
        make_plugin_manager(autoload=True)
    message = str(info.value)
    assert info.value.plugin == "broken_demo"
    assert "'pluglog-broken-demo'" in message
    assert "no_such_module_xyz" in message
    assert "PLUGLOG_DISABLE_PLUGIN_AUTOLOAD=1" in message


def test_wrong_signature_is_refused_in_one_line():
    @implementer(IPartitioner)
    class TwoArgs:
        def partition(self, topic, key):  # lacks num_partitions
            return 0

    plugin = types.SimpleNamespace(
        pluglog_register_partitioners=hookimpl(lambda: {"two-args": lambda c, r: TwoArgs()})
    )
    registry = _registry(plugin)
    with pytest.raises(PluginError) as info:
        registry.build("partitioner", "two-args", BrokerConfig(), Clock())
    message = str(info.value)
    assert "\n" not in message
    assert repr(registry.plugin_of("partitioner", "two-args")) in message
    assert "IPartitioner" in message and "'partition'" in message
    assert "partition(topic, key, num_partitions)" in message

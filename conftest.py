"""Suite-wide test set-up: cost markers and per-worker ports.

Every test gets exactly one cost marker (registered in pyproject.toml), so
``pytest -m unit`` is the quick loop and ``-m "not spark"`` skips the JVM:

* ``unit``: in-process, no broker (tests/unit, plugins' tests that start nothing);
* ``integration``: one real broker process (tests/integration, and plugins'
  tests that use a ``broker`` fixture or whose module imports BrokerProcess);
* ``cluster``: a real ZooKeeper and usually several brokers (tests/replication,
  and any test that uses the ``zookeeper_process`` fixture);
* ``spark``: a local Spark session (plugins/pluglog-spark's ``spark`` fixture);
* ``browser``: drives a real web browser (a ``browser`` fixture: the console's
  headless Chromium test).

A test module may set one of them itself (``pytestmark = pytest.mark.cluster``,
for a test that starts ZooKeeper without the fixture); that one wins.

Under pytest-xdist each worker is its own session (its own ZooKeeper,
module-scoped brokers and tmp dirs) and gets its own slice of ports for
:func:`pluglog.childprocess.free_port`.
"""

import os

import pytest

from pluglog.childprocess import PORT_RANGE_ENV

COSTS = ("browser", "spark", "cluster", "integration", "unit")  # dearest first

#: The suite's ports, split between the workers: below Linux's ephemeral
#: ports (32768-60999), which the kernel hands to outgoing connections and to
#: other programs' bind(0). ``PLUGLOG_TEST_PORTS=low-high`` moves them.
_PORTS = os.environ.get("PLUGLOG_TEST_PORTS", "20000-32767")


def pytest_configure(config):
    # The xdist controller runs this too, and its workers inherit its
    # environment: each worker overwrites the range with its own slice.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker.removeprefix("gw"))
    first, last = (int(part) for part in _PORTS.split("-"))
    size = (last - first + 1) // max(count, 1)
    low = first + index * size
    os.environ[PORT_RANGE_ENV] = f"{low}-{low + size - 1}"


def _cost(item):
    fixtures = set(item.fixturenames)
    try:
        parts = item.path.relative_to(item.config.rootpath).parts
    except ValueError:  # a test file outside the checkout: by fixtures alone
        parts = ()
    if "browser" in fixtures:
        return "browser"
    if "spark" in fixtures:
        return "spark"
    if "zookeeper_process" in fixtures or parts[:2] == ("tests", "replication"):
        return "cluster"
    if parts[:2] == ("tests", "integration"):
        return "integration"
    if parts[:1] == ("plugins",) and (
        {"broker", "shared_broker"} & fixtures or hasattr(item.module, "BrokerProcess")
    ):
        return "integration"  # a plugin's test module that starts brokers itself
    return "unit"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not any(item.get_closest_marker(name) for name in COSTS):
            item.add_marker(getattr(pytest.mark, _cost(item)))

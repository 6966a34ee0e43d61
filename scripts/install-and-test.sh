#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian 12 machine
# (Debian packages, the project and its test extras) and runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO=sudo; fi

# Real parts the integration tests use: kcat (librdkafka 2.0) and, for the
# cluster tests, ZooKeeper and Java.
need=()
command -v kcat >/dev/null || need+=(kcat)
command -v gcc >/dev/null || need+=(gcc)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
# The metrics tests' real Prometheus server (only the binary is run).
[ -x /usr/bin/prometheus ] || need+=(prometheus)
command -v chromedriver >/dev/null || need+=(chromium chromium-driver)  # the console's browser test
if [ ${#need[@]} -gt 0 ]; then
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi

# compat mode puts the checkout itself on sys.path, so twistd finds
# twisted/plugins/pluglog_tap.py and code edits need no reinstall.
$PY -m pip install -q -e '.[test]' --config-settings editable_mode=compat
# The produce-time record walk (pluglog/_recordwalk.c), the Twisted
# client's record codec (pluglog/_clientcodec.c) and its producer's
# send/ack path (pluglog/_producerbuffer.c) in C, next to their sources, for
# runs from the checkout; needs gcc and the Python headers.
$PY setup.py -q build_ext --inplace
# The Spark plugin is its own distribution; pyspark 4 needs pyarrow and Java 17.
$PY -m pip install -q pyspark pyarrow
$PY -m pip install -q -e plugins/pluglog-spark
# The audit plugin: a third-party package found through its entry point.
$PY -m pip install -q -e plugins/pluglog-audit
# The SQLite storage plugin: a second storage provider, selected by name.
$PY -m pip install -q -e plugins/pluglog-sqlite

LINTED="conftest.py pluglog tests bench twisted plugins/pluglog-spark plugins/pluglog-audit plugins/pluglog-sqlite"
$PY -m ruff check $LINTED
$PY -m ruff format --check $LINTED
# The layers of docs/architecture.rst (the contract is in pyproject.toml).
lint-imports
# Runtime requirements (requirements.txt) = what the broker imports
# ([tool.deptry] in pyproject.toml).
deptry pluglog twisted
# Types of the layers other code builds on (the files are in pyproject.toml).
$PY -m mypy
# Every core: each pytest-xdist worker has its own ZooKeeper, brokers, tmp
# dirs and slice of ports (conftest.py). --dist loadfile keeps a module's
# tests, and so its module-scoped broker, on one worker.
# --durations: the slowest tests in every run's output, to keep the suite
# inside its time budget.
$PY -m pytest -q -n auto --dist loadfile --durations=25 "$@"

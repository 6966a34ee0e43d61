"""A real Prometheus server (Debian's ``prometheus`` package) for the metrics tests.

:class:`PrometheusProcess` writes a scrape config for the given
``host:port`` targets (``/metrics``, every second), runs
``/usr/bin/prometheus`` on a free loopback port with its TSDB under the
test's tmp dir, and answers PromQL through the HTTP API (``/api/v1/query``),
as Grafana or an alert rule would read the broker.
"""

import json
import os
import time
import urllib.parse
import urllib.request

from pluglog.childprocess import ChildProcess, free_port

BINARY = "/usr/bin/prometheus"

CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pluglog
    static_configs:
      - targets: [{targets}]
"""


class PrometheusProcess(ChildProcess):
    """Prometheus scraping ``targets`` (``["127.0.0.1:8081", ...]``)."""

    name = "prometheus"

    def __init__(self, root, targets):
        os.makedirs(root, exist_ok=True)
        super().__init__(os.path.join(root, "prometheus.log"))
        self.root = str(root)
        self.port = free_port()
        self.config_path = os.path.join(self.root, "prometheus.yml")
        with open(self.config_path, "w", encoding="utf-8") as handle:
            handle.write(CONFIG.format(targets=", ".join(f"'{t}'" for t in targets)))

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=60):
        command = [
            BINARY,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={os.path.join(self.root, 'tsdb')}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        return self._spawn(command, self._ready, "become ready", timeout)

    def _ready(self):
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def stop(self):
        self.terminate(30)

    def query(self, expr, at=None):
        """The result list of an instant query (``at``: evaluation time, s)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = repr(at)
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr, at=None):
        """The single sample of ``expr`` as a float, or None if it has none."""
        result = self.query(expr, at)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait_value(self, expr, predicate, timeout=30):
        """Poll ``expr`` until ``predicate(value)`` holds; returns the value."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.value(expr)
            if value is not None and predicate(value):
                return value
            time.sleep(0.25)
        raise AssertionError(f"{expr} = {value} after {timeout}s:\n{self.log()[-3000:]}")

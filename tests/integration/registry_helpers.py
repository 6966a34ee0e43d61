"""A broker process with its ``--http`` listener, for the schema registry tests."""

import json
import socket
import time
import urllib.error
import urllib.request

from tests.broker_process import BrokerProcess, free_port

USER_V1 = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "example.avro",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "favorite_number", "type": ["null", "int"], "default": None},
        ],
    }
)
#: Adds a field with a default: BACKWARD compatible with USER_V1.
USER_V2 = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "example.avro",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "favorite_number", "type": ["null", "int"], "default": None},
            {"name": "favorite_color", "type": "string", "default": "blue"},
        ],
    }
)
#: Adds a field without a default: not BACKWARD compatible.
USER_BAD = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "example.avro",
        "fields": [
            {"name": "name", "type": "string"},
            {"name": "age", "type": "int"},
        ],
    }
)


class HttpBroker(BrokerProcess):
    """BrokerProcess plus ``--http`` on a free loopback port."""

    def __init__(self, data_dir, http_port=None, **kwargs):
        self.http_port = http_port or free_port()
        extra = ["--http", f"tcp:{self.http_port}:interface=127.0.0.1"]
        super().__init__(data_dir, extra_args=extra + list(kwargs.pop("extra_args", ())), **kwargs)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout=30):
        super().start(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.http_port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"HTTP listener did not start:\n{self.log()}")


def http(url, method="GET", body=None, raw=None):
    """``(status, content-type, decoded JSON body)`` of one request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.headers["content-type"], json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        text = exc.read()
        assert b"Traceback" not in text and b"<html" not in text.lower(), text[:500]
        return exc.code, exc.headers["content-type"], json.loads(text)

"""Brokers and an HTTP session for the console's action tests.

:func:`acting_broker` starts a broker whose console acts
(``console.read.only=false``) and samples lag every 200 ms;
:func:`secured_broker` does the same with Kafka's ACL authorizer on a
SASL_PLAINTEXT and a PLAINTEXT listener (``User:admin`` is a super user),
so the console asks for a login. :class:`Browser` is a urllib opener with a
cookie jar, as a browser keeps the session cookie.
"""

import html
import http.cookiejar
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request

from tests.broker_process import BrokerProcess, free_port
from tests.integration.secure_broker import add_user

ACTING = {"console.read.only": "false", "console.lag.sample.interval.ms": "200"}


def _wait_http(broker, port):
    """The HTTP listener starts after the Kafka one the process helper waits for."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.05)
    broker.http = f"http://127.0.0.1:{port}"
    return broker


def acting_broker(base_dir):
    """A started broker with ``--http`` whose console acts; ``.http`` is its base URL."""
    http = free_port()
    broker = BrokerProcess(
        base_dir / "data",
        settings=ACTING,
        extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"],
    ).start()
    return _wait_http(broker, http)


def secured_broker(base_dir, *users):
    """Like :func:`acting_broker` with SASL and the ACL authorizer; ``users``
    (``(name, password)``) are written first; ``.sasl`` is the SASL listener."""
    data = base_dir / "data"
    for user, password in users:
        done = add_user(data, user, password)
        assert done.returncode == 0, done.stderr
    sasl, plain, http = free_port(), free_port(), free_port()
    broker = BrokerProcess(
        data,
        port=plain,
        settings={
            **ACTING,
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl},PLAINTEXT://127.0.0.1:{plain}",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
        },
        extra_args=["--http", f"tcp:{http}:interface=127.0.0.1"],
    ).start()
    broker.sasl = f"127.0.0.1:{sasl}"
    return _wait_http(broker, http)


def message(text, css_id="error-message"):
    found = re.search(rf'id="{css_id}"[^>]*>(.*?)</p>', text, re.S)
    return found.group(1) if found else None


class Browser:
    """GETs and form POSTs with cookies kept; answers ``(status, url, text)``."""

    def __init__(self, base):
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def _open(self, request):
        try:
            with self.opener.open(request, timeout=30) as response:
                return response.status, response.url, response.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.url, exc.read().decode("utf-8")

    def get(self, path):
        return self._open(urllib.request.Request(self.base + path))

    def post(self, path, fields):
        body = urllib.parse.urlencode(fields).encode("ascii")
        return self._open(urllib.request.Request(self.base + path, data=body, method="POST"))

    @staticmethod
    def form_fields(text, form_id):
        """The hidden fields of the form ``form_id`` on a page."""
        form = re.search(rf'<form [^>]*id="{form_id}".*?</form>', text, re.S)
        assert form, text
        return dict(
            re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(0))
        )

    def confirm(self, path):
        """Open an action's confirmation page and POST its form: ``(confirm page, answer)``."""
        status, _url, page = self.get(path)
        assert status == 200, page
        fields = {k: html.unescape(v) for k, v in self.form_fields(page, "confirm-form").items()}
        action = re.search(r'<form method="post" action="([^"]+)" id="confirm-form"', page)
        return page, self.post(action.group(1), fields)

    def login(self, user, password, then="/console/"):
        _status, _url, page = self.get("/console/login?next=" + then)
        fields = self.form_fields(page, "login-form")
        return self.post("/console/login", {**fields, "user": user, "password": password})

"""A real S3-compatible server for tests: moto's standalone ``moto_server``.

:class:`MotoServer` runs the ``moto_server`` process (from PyPI's moto) on
a port of this worker's slice; tests talk to it with the real boto3 client,
as the broker's ``s3`` provider does. Credentials are moto's dummies, put
in the environment so the broker processes the tests start inherit them.
"""

import os
import shutil
import socket

from pluglog.childprocess import ChildProcess, free_port

DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class MotoServer(ChildProcess):
    """A ``moto_server`` subprocess on 127.0.0.1."""

    name = "moto_server"

    def __init__(self, directory, port=None):
        self.port = port or free_port()
        os.makedirs(directory, exist_ok=True)
        super().__init__(os.path.join(directory, f"moto-{self.port}.log"))

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=30):
        command = [shutil.which("moto_server") or "moto_server", "-H", "127.0.0.1"]
        command += ["-p", str(self.port)]
        return self._spawn(command, self._ready, "listen", timeout)

    def _ready(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def client(self):
        """A real boto3 S3 client of this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def stop(self):
        self.terminate(10)

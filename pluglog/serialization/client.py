"""A blocking HTTP client of the Confluent Schema Registry REST API.

Used by processes outside the broker's reactor (the CLI, Spark executors,
tests) against pluglog's registry or Confluent's own; it provides
ISchemaRegistry, so an :class:`~pluglog.serialization.avro.AvroSerializer`
works over it. Errors come back as
:class:`~pluglog.serialization.registry.RegistryError` with the server's
status and Confluent error code.
"""

import json
import urllib.error
import urllib.parse
import urllib.request

from zope.interface import implementer

from pluglog.interfaces import ISchemaRegistry
from pluglog.serialization.registry import RegistryError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@implementer(ISchemaRegistry)
class RegistryClient:
    """Talks to the registry at ``url`` (e.g. ``http://127.0.0.1:8081``)."""

    def __init__(self, url, timeout=30.0):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"schema registry URL must be http(s)://host:port, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._by_id = {}

    def request(self, method, path, body=None):
        """Return the decoded JSON answer; RegistryError on an error status."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(
            f"{self.url}/{path}",
            data=data,
            method=method,
            headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                err = json.loads(raw)
                code, message = int(err["error_code"]), str(err["message"])
            except (ValueError, KeyError, TypeError):
                code, message = exc.code, raw.decode("utf-8", "replace")[:200]
            raise RegistryError(exc.code, code, message) from None

    @staticmethod
    def _subject(subject):
        return urllib.parse.quote(subject, safe="")

    @staticmethod
    def _schema_body(schema, schema_type):
        body = {"schema": schema}
        if schema_type != "AVRO":
            body["schemaType"] = schema_type
        return body

    def register(self, subject, schema, schema_type="AVRO"):
        body = self.request(
            "POST",
            f"subjects/{self._subject(subject)}/versions",
            self._schema_body(schema, schema_type),
        )
        self._by_id.setdefault(body["id"], schema)
        return body["id"]

    def lookup(self, subject, schema, schema_type="AVRO"):
        body = self._schema_body(schema, schema_type)
        return self.request("POST", f"subjects/{self._subject(subject)}", body)["id"]

    def get_schema(self, schema_id):
        schema = self._by_id.get(schema_id)
        if schema is None:
            schema = self.request("GET", f"schemas/ids/{int(schema_id)}")["schema"]
            self._by_id[schema_id] = schema
        return schema

    def get_latest(self, subject):
        body = self.request("GET", f"subjects/{self._subject(subject)}/versions/latest")
        return body["id"], body["version"], body["schema"]

    def subjects(self):
        return self.request("GET", "subjects")

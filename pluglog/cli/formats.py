"""Value formats of ``pluglog produce`` / ``consume``: raw lines or Avro as JSON.

``--value-format avro`` turns each stdin line (a JSON document) into framed
Avro through the schema registry (``--schema-registry URL``, default
``http://<bootstrap host>:8081``, the broker's usual ``--http`` port), with
the writer schema from ``--value-schema`` (JSON text or ``@file``; registered
under the subject its ``--subject-name-strategy`` names) or else the
subject's latest version. consume prints each Avro value as one JSON line.
"""

import base64
import datetime
import decimal
import json
import uuid

from pluglog.cli.common import CliError
from pluglog.config import split_host_port

FORMATS = ("string", "avro")


def add_arguments(parser, produce):
    parser.add_argument(
        "--value-format",
        choices=FORMATS,
        default="string",
        help="string: raw lines; avro: JSON lines <-> Avro via the schema registry",
    )
    parser.add_argument(
        "--schema-registry",
        default=None,
        metavar="URL",
        help="schema registry URL (default http://<bootstrap host>:8081)",
    )
    if produce:
        parser.add_argument(
            "--value-schema",
            default=None,
            help="Avro writer schema as JSON text or @FILE (default: the subject's latest)",
        )
        parser.add_argument(
            "--subject-name-strategy",
            default="TopicNameStrategy",
            help="TopicNameStrategy (default), RecordNameStrategy or TopicRecordNameStrategy",
        )


def _json_default(value):
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    raise TypeError(f"cannot print {type(value).__name__} as JSON")


class ValueFormat:
    """Encodes stdin lines and decodes record values for one topic."""

    def __init__(self, args):
        self.avro = None
        if args.value_format != "avro":
            return
        from pluglog.serialization.avro import AvroSerializer
        from pluglog.serialization.client import RegistryClient
        from pluglog.serialization.framing import SerializationError
        from pluglog.serialization.strategies import strategy

        url = args.schema_registry
        if url is None:
            host, _port = split_host_port(args.bootstrap_server)
            url = f"http://{'[' + host + ']' if ':' in host else host}:8081"
        try:
            client = RegistryClient(url)
            schema = getattr(args, "value_schema", None)
            if schema is not None and schema.startswith("@"):
                with open(schema[1:], encoding="utf-8") as handle:
                    schema = handle.read()
            naming = strategy(getattr(args, "subject_name_strategy", "TopicNameStrategy"))
            self.avro = AvroSerializer(client, schema=schema, subject_name_strategy=naming)
        except (ValueError, OSError, SerializationError) as exc:
            raise CliError(f"--value-format avro: {exc}") from None

    def encode(self, topic, line, number):
        """bytes of one stdin line (without its newline)."""
        if self.avro is None:
            return line
        from pluglog.serialization.framing import SerializationError
        from pluglog.serialization.registry import RegistryError

        try:
            value = json.loads(line)
        except ValueError as exc:
            raise CliError(f"line {number}: not JSON: {exc}") from None
        try:
            return self.avro.serialize(topic, value)
        except SerializationError as exc:
            raise CliError(f"line {number}: {exc}") from None
        except RegistryError as exc:
            raise CliError(f"schema registry: {exc.message} (error {exc.code})") from None
        except OSError as exc:
            raise CliError(f"schema registry {self.avro.registry.url}: {exc}") from None

    def decode(self, topic, value):
        """bytes to print for one record value."""
        if self.avro is None or value is None:
            return value or b""
        from pluglog.serialization.framing import SerializationError
        from pluglog.serialization.registry import RegistryError

        try:
            decoded = self.avro.deserialize(topic, value)
        except SerializationError as exc:
            raise CliError(str(exc)) from None
        except RegistryError as exc:
            raise CliError(f"schema registry: {exc.message} (error {exc.code})") from None
        except OSError as exc:
            raise CliError(f"schema registry {self.avro.registry.url}: {exc}") from None
        return json.dumps(decoded, default=_json_default, sort_keys=True).encode("utf-8")

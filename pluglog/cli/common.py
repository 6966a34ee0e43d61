"""Helpers shared by the CLI commands: metadata lookups, error reporting and
the ``--json`` output for scripts."""

import json
import sys

from pluglog import errors
from pluglog import protocol as codec

_ERROR_NAMES = {
    value: name
    for name, value in vars(errors).items()
    if name.isupper() and isinstance(value, int)
}


class CliError(Exception):
    """A failure worth one line on stderr and exit status 1."""


def error_name(code):
    return _ERROR_NAMES.get(code, f"error {code}")


def check(code, what, message=None):
    """Raise CliError unless ``code`` is 0."""
    if code:
        detail = f": {message}" if message else ""
        raise CliError(f"{what}: {error_name(code)} ({code}){detail}")


def metadata(client, topics, allow_create=False):
    body = {
        "topics": None if topics is None else [{"name": t} for t in topics],
        "allow_auto_topic_creation": allow_create,
    }
    return client.request(codec.METADATA, 8, body)


def partitions_of(client, topic, allow_create=False):
    meta = metadata(client, [topic], allow_create)["topics"][0]
    check(meta["error_code"], topic)
    return sorted(p["partition_index"] for p in meta["partitions"])


def add_json_flag(parser):
    """``--json``: one JSON document on stdout instead of the tab-separated text."""
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document (for scripts)"
    )


def print_json(document):
    json.dump(document, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")

"""Topic ids (KIP-516): how they are made, spelled and kept in a partition dir.

A topic id is 16 random bytes, given once when a topic is created (or, for a
topic from before ids, once at upgrade) and never reused: a topic deleted
and created again under the same name has a new id, which is how clients
tell the two apart. pluglog keeps ids as 32-character hex strings
(``TopicMetadata.topic_id``, "" for none); Kafka spells them in URL-safe
base64 without padding (``Uuid.toString``), which is what ZooKeeper's
``/brokers/topics/<t>`` and the ``partition.metadata`` file hold.

``partition.metadata`` is Kafka's file in each partition directory:
``version: 0`` and ``topic_id: <base64>`` lines (``PartitionMetadataFile``).
A log dir whose file names another id belongs to an older topic of the same
name (the broker was down while it was deleted and re-created).
"""

import base64
import os
import uuid

from pluglog.fileutil import atomic_write

FILE_NAME = "partition.metadata"
#: Kafka's reserved ids: the zero id means "none", 1 is the metadata topic's.
_RESERVED = (0, 1)


def new_topic_id():
    """A fresh random id as hex; Kafka's ``Uuid.randomUuid`` rules: never a
    reserved id, never one whose base64 form starts with ``-`` (it would read
    as a command-line option)."""
    while True:
        value = uuid.uuid4()
        if value.int not in _RESERVED and not to_base64(value.hex).startswith("-"):
            return value.hex


def to_base64(hex_id):
    """Kafka's spelling of the hex id ``hex_id``."""
    return base64.urlsafe_b64encode(bytes.fromhex(hex_id)).decode().rstrip("=")


def from_base64(text):
    """The hex id spelled ``text`` in Kafka's base64; raises ValueError
    naming the value when it is not 16 bytes of URL-safe base64."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"bad topic id {text!r}: {exc}") from None
    if len(raw) != 16:
        raise ValueError(f"bad topic id {text!r}: {len(raw)} bytes, not 16")
    return raw.hex()


def to_uuid(hex_id):
    """The wire value (a :class:`uuid.UUID`; the zero id for none)."""
    return uuid.UUID(hex_id) if hex_id else uuid.UUID(int=0)


def read_partition_metadata(directory):
    """The hex topic id in ``directory``'s ``partition.metadata``; None when
    there is no file; raises ValueError naming the file when it is damaged."""
    path = os.path.join(directory, FILE_NAME)
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise ValueError(f"{path}: not a version 0 partition.metadata file")
    try:
        return from_base64(fields["topic_id"])
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def write_partition_metadata(directory, hex_id, sync=True):
    """Write Kafka's ``partition.metadata`` (atomically) into ``directory``;
    ``sync=False`` leaves the fsyncs to the caller (a new partition's, batched
    with the others of its CreateTopics: a damaged file is rewritten at open)."""
    atomic_write(os.path.join(directory, FILE_NAME), partition_metadata(hex_id), sync)


def partition_metadata(hex_id):
    """The bytes of a ``partition.metadata`` file naming topic ``hex_id``."""
    return f"version: 0\ntopic_id: {to_base64(hex_id)}".encode()

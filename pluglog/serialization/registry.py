"""The schema registry's state: subjects, versions, ids and compatibility configs.

State changes only by applying ``_schemas`` records (:meth:`SchemaRegistry.apply`),
both while loading the topic at start and after each write, so what a broker
serves is exactly what the log holds. Keys and values are Confluent's JSON
(``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}`` -> the schema's
subject, version, id, schema text and ``deleted`` flag, or null once hard
deleted; ``{"keytype":"CONFIG","subject":S|null,"magic":0}`` ->
``{"compatibilityLevel":L}``). Identical schemas share one id across subjects.

Operations raise :class:`RegistryError` carrying Confluent's HTTP status and
error code; the REST resource in :mod:`pluglog.web.registry` turns them into
Confluent's error bodies. Writes go through ``write(records)``, which appends
``[(key bytes, value bytes | None)]`` to the log (raising on failure) before
they are applied here.
"""

import json

from zope.interface import implementer

from pluglog.interfaces import ISchemaRegistry
from pluglog.serialization import avro, json_schema
from pluglog.serialization.compatibility import LEVELS, incompatibilities
from pluglog.serialization.framing import SerializationError

DEFAULT_LEVEL = "BACKWARD"
#: JSON needs the optional jsonschema package (json_schema.available()).
SCHEMA_TYPES = ("AVRO", json_schema.SCHEMA_TYPE)
#: Largest schema text accepted; the record must fit the ``_schemas``
#: topic's max.message.bytes (1 MiB by default) with its key and framing.
MAX_SCHEMA_BYTES = 1_000_000
_MAX_VERSION = 2**31 - 1


class RegistryError(Exception):
    """A request the registry refuses, with Confluent's status and code."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self):
        return {"error_code": self.code, "message": self.message}


def subject_not_found(subject):
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(subject, version):
    return RegistryError(404, 40402, f"Version {version} not found for subject '{subject}'.")


def schema_not_found(detail="Schema not found"):
    return RegistryError(404, 40403, detail)


def invalid_schema(detail):
    return RegistryError(422, 42201, f"Invalid schema: {detail}")


class Version:
    """One version of a subject."""

    __slots__ = ("deleted", "schema", "schema_id", "schema_type", "subject", "version")

    def __init__(self, subject, version, schema_id, schema, schema_type, deleted):
        self.subject = subject
        self.version = version
        self.schema_id = schema_id
        self.schema = schema
        self.schema_type = schema_type
        self.deleted = deleted

    def to_json(self):
        out = {
            "subject": self.subject,
            "version": self.version,
            "id": self.schema_id,
            "schema": self.schema,
        }
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        return out


def schema_key(subject, version):
    return json.dumps(
        {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1},
        separators=(",", ":"),
    ).encode()


def config_key(subject):
    return json.dumps(
        {"keytype": "CONFIG", "subject": subject, "magic": 0}, separators=(",", ":")
    ).encode()


def _identity(schema_type, decoded):
    # Whitespace and key order do not make a new schema; every other
    # difference (defaults, docs, aliases) does, as in Confluent's registry.
    return schema_type, json.dumps(decoded, sort_keys=True, separators=(",", ":"))


@implementer(ISchemaRegistry)
class SchemaRegistry:
    """Subjects, versions and ids of one registry; see the module docstring."""

    def __init__(self, write=None):
        self.write = write
        #: False in a cluster (pluglog.serialization.replicated): records are
        #: applied when the tail of ``_schemas`` reaches them below the HW,
        #: so no read anywhere sees a write before it is committed.
        self.apply_on_write = True
        self.reset()

    def reset(self):
        """Forget everything (before loading ``_schemas`` again)."""
        self.subjects_ = {}  # subject -> {version: Version}
        self.ids = {}  # id -> (schema text, schema type)
        self.identities = {}  # (schema type, sorted JSON) -> id
        self.configs = {}  # subject or None -> level
        self.skipped = 0

    # -- applying records --------------------------------------------------------

    def apply(self, key, value):
        """Apply one ``_schemas`` record; unreadable ones are counted and skipped."""
        try:
            parsed = json.loads(bytes(key))
            keytype = parsed["keytype"]
            if keytype == "SCHEMA":
                self._apply_schema(parsed["subject"], int(parsed["version"]), value)
            elif keytype == "CONFIG":
                subject = parsed.get("subject")
                if value is None:
                    self.configs.pop(subject, None)
                else:
                    self.configs[subject] = json.loads(bytes(value))["compatibilityLevel"]
        except (ValueError, KeyError, TypeError):
            self.skipped += 1

    def _apply_schema(self, subject, version, value):
        versions = self.subjects_.setdefault(subject, {})
        if value is None:
            versions.pop(version, None)
            if not versions:
                del self.subjects_[subject]
            return
        doc = json.loads(bytes(value))
        schema_type = doc.get("schemaType", "AVRO")
        entry = Version(
            subject, version, int(doc["id"]), doc["schema"], schema_type, bool(doc.get("deleted"))
        )
        versions[version] = entry
        if entry.schema_id not in self.ids:
            self.ids[entry.schema_id] = (entry.schema, schema_type)
            try:
                decoded = json.loads(entry.schema)
            except ValueError:
                return
            self.identities.setdefault(_identity(schema_type, decoded), entry.schema_id)

    def _commit(self, records):
        self.write(records)
        if self.apply_on_write:
            for key, value in records:
                self.apply(key, value)

    # -- lookups -------------------------------------------------------------------

    def subject_names(self, deleted=False):
        return sorted(
            s
            for s, vs in self.subjects_.items()
            if deleted or any(not v.deleted for v in vs.values())
        )

    def versions(self, subject, deleted=False):
        """The subject's versions (oldest first); 40401 when it has none."""
        found = [v for _n, v in sorted(self.subjects_.get(subject, {}).items())]
        live = [v for v in found if deleted or not v.deleted]
        if not live:
            raise subject_not_found(subject)
        return live

    @staticmethod
    def parse_version(text):
        """``latest``/``-1`` -> None, else a version number; 42202 when bad."""
        if text in ("latest", "-1"):
            return None
        try:
            number = int(text)
        except (TypeError, ValueError):
            number = 0
        if not 1 <= number <= _MAX_VERSION:
            raise RegistryError(
                422,
                42202,
                f"The specified version '{text}' is not a valid version id. Allowed values "
                'are between [1, 2^31-1] and the string "latest"',
            )
        return number

    def version(self, subject, text, deleted=False):
        number = self.parse_version(str(text))
        versions = self.versions(subject, deleted=True)
        if number is None:
            live = [v for v in versions if deleted or not v.deleted]
            if not live:
                raise subject_not_found(subject)
            return live[-1]
        for entry in versions:
            if entry.version == number and (deleted or not entry.deleted):
                return entry
        raise version_not_found(subject, number)

    def schema_by_id(self, schema_id):
        try:
            return self.ids[int(schema_id)]
        except (KeyError, ValueError):
            raise schema_not_found(f"Schema {schema_id} not found") from None

    def subjects_of(self, schema_id, deleted=False):
        self.schema_by_id(schema_id)
        return [
            v
            for versions in self.subjects_.values()
            for v in versions.values()
            if v.schema_id == int(schema_id) and (deleted or not v.deleted)
        ]

    def level(self, subject=None):
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, DEFAULT_LEVEL)

    # -- validation ----------------------------------------------------------------

    @staticmethod
    def check_schema(schema, schema_type="AVRO", references=None):
        """Return ``(compact text, decoded)``; 42201 when it is no valid schema."""
        if schema_type not in SCHEMA_TYPES or (
            schema_type == json_schema.SCHEMA_TYPE and not json_schema.available()
        ):
            raise RegistryError(
                422, 42201, f"Invalid schema: unsupported schemaType {schema_type!r}"
            )
        if references:
            raise invalid_schema("schema references are not supported by this registry")
        if not isinstance(schema, str):
            raise invalid_schema("'schema' must be a string holding the schema JSON")
        if len(schema.encode("utf-8")) > MAX_SCHEMA_BYTES:
            raise invalid_schema(
                f"schema of {len(schema.encode('utf-8'))} bytes is larger than "
                f"the registry's limit of {MAX_SCHEMA_BYTES} bytes"
            )
        try:
            if schema_type == "AVRO":
                _parsed, decoded = avro.parse(schema)
            else:
                try:
                    decoded = json.loads(schema)
                except ValueError as exc:
                    raise SerializationError(f"schema is not JSON: {exc}") from None
                json_schema.check(decoded)
        except SerializationError as exc:
            raise invalid_schema(str(exc)) from None
        return json.dumps(decoded, separators=(",", ":")), decoded

    def find(self, subject, decoded, schema_type="AVRO", deleted=False):
        """The subject's version holding this schema, or None."""
        identity = _identity(schema_type, decoded)
        schema_id = self.identities.get(identity)
        if schema_id is None:
            return None
        for entry in sorted(self.subjects_.get(subject, {}).values(), key=lambda v: v.version):
            if entry.schema_id == schema_id and (deleted or not entry.deleted):
                return entry
        return None

    def compatibility_problems(self, subject, decoded, against=None, schema_type="AVRO"):
        """Reasons ``decoded`` may not join ``subject`` (its live versions, or
        ``against`` only); [] when it may."""
        if against is None:
            try:
                against = self.versions(subject)
            except RegistryError:
                return []
        level = self.level(subject)
        if level != "NONE":
            other = sorted({v.schema_type for v in against} - {schema_type})
            if other:
                return [f"schemaType {schema_type} differs from the subject's {other}"]
        existing = [json.loads(v.schema) for v in against]
        if schema_type == json_schema.SCHEMA_TYPE:
            return json_schema.incompatibilities(level, decoded, existing)
        return incompatibilities(level, decoded, existing)

    # -- writes ----------------------------------------------------------------------

    def register_version(self, subject, schema, schema_type="AVRO", references=None):
        """Register ``schema`` (text) under ``subject``; return its Version."""
        text, decoded = self.check_schema(schema, schema_type, references)
        existing = self.find(subject, decoded, schema_type)
        if existing is not None:
            return existing
        problems = self.compatibility_problems(subject, decoded, schema_type=schema_type)
        if problems:
            raise RegistryError(
                409,
                409,
                f"Schema being registered is incompatible with an earlier schema for subject "
                f"'{subject}', details: {problems}",
            )
        all_versions = self.subjects_.get(subject, {})
        number = max(all_versions, default=0) + 1
        schema_id = self.identities.get(_identity(schema_type, decoded))
        if schema_id is None:
            schema_id = max(self.ids, default=0) + 1
        value = {
            "subject": subject,
            "version": number,
            "id": schema_id,
            "schema": text,
            "deleted": False,
        }
        if schema_type != "AVRO":
            value["schemaType"] = schema_type
        self._commit([(schema_key(subject, number), json.dumps(value).encode())])
        return Version(subject, number, schema_id, text, schema_type, False)

    def _soft_delete_record(self, entry):
        value = entry.to_json()
        value["deleted"] = True
        return schema_key(entry.subject, entry.version), json.dumps(value).encode()

    def delete_subject(self, subject, permanent=False):
        """Soft (or, after that, permanent) delete; returns the version numbers."""
        versions = self.versions(subject, deleted=True)
        if permanent:
            if any(not v.deleted for v in versions):
                raise RegistryError(
                    404,
                    40405,
                    f"Subject '{subject}' was not deleted first before being permanently deleted",
                )
            records = [(schema_key(subject, v.version), None) for v in versions]
            if subject in self.configs:
                # A record, not a local pop: every broker must forget it.
                records.append((config_key(subject), None))
            self._commit(records)
            return [v.version for v in versions]
        live = [v for v in versions if not v.deleted]
        if not live:
            raise RegistryError(
                404,
                40404,
                f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently",
            )
        self._commit([self._soft_delete_record(v) for v in live])
        return [v.version for v in live]

    def delete_version(self, subject, text, permanent=False):
        entry = self.version(subject, text, deleted=True)
        if permanent:
            if not entry.deleted:
                raise RegistryError(
                    404,
                    40407,
                    f"Subject '{subject}' Version {entry.version} was not deleted first "
                    "before being permanently deleted",
                )
            self._commit([(schema_key(subject, entry.version), None)])
        else:
            if entry.deleted:
                raise RegistryError(
                    404,
                    40406,
                    f"Subject '{subject}' Version {entry.version} was soft deleted.Set "
                    "permanent=true to delete permanently",
                )
            self._commit([self._soft_delete_record(entry)])
        return entry.version

    def set_level(self, subject, level):
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise RegistryError(
                422, 42203, f"Invalid compatibility level. Valid values are {', '.join(LEVELS)}"
            )
        level = level.upper()
        value = json.dumps({"compatibilityLevel": level}).encode()
        self._commit([(config_key(subject), value)])
        return level

    def delete_level(self, subject):
        previous = self.level(subject)
        if subject is not None and subject not in self.configs:
            raise RegistryError(
                404,
                40408,
                f"Subject '{subject}' does not have subject-level compatibility configured",
            )
        self._commit([(config_key(subject), None)])
        return previous

    # -- ISchemaRegistry ---------------------------------------------------------------

    def register(self, subject, schema, schema_type="AVRO"):
        return self.register_version(subject, schema, schema_type).schema_id

    def get_schema(self, schema_id):
        return self.schema_by_id(schema_id)[0]

    def lookup(self, subject, schema, schema_type="AVRO"):
        _text, decoded = self.check_schema(schema, schema_type)
        entry = self.find(subject, decoded, schema_type)
        if entry is None:
            self.versions(subject)  # 40401 for an unknown subject
            raise schema_not_found()
        return entry.schema_id

    def get_latest(self, subject):
        entry = self.version(subject, "latest")
        return entry.schema_id, entry.version, entry.schema

    def subjects(self):
        return self.subject_names()

"""Avro schema compatibility, as the schema registry's levels define it.

A reader schema can read data written with a writer schema when Avro's schema
resolution rules allow it. Primitive matches and promotions (int -> long,
float, double; string <-> bytes...) and named-type checks are fastavro's own
(``match_types``); this module adds the recursive part fastavro only does
while decoding: record fields (a reader field missing from the writer needs a
default), enum symbols, union branches, array items and map values.

Levels (Confluent's): BACKWARD = the new schema reads data of the latest
version, FORWARD = the latest reads data of the new, FULL = both; the
``_TRANSITIVE`` forms check every earlier version instead of the latest.
"""

import fastavro
from fastavro._read_py import match_types

LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _parse(decoded):
    named = {}
    parsed = fastavro.parse_schema(decoded, named_schemas=named)
    return parsed, named


class _Checker:
    def __init__(self, reader_named, writer_named):
        self.named = {"reader": reader_named, "writer": writer_named}
        self.seen = set()
        self.errors = []

    def resolve(self, schema, side):
        # Named types after their first definition are referenced by name.
        while isinstance(schema, str) and schema not in _PRIMITIVES:
            schema = self.named[side].get(schema, schema)
            if isinstance(schema, str):
                break
        return schema

    def check(self, reader, writer, path):
        reader = self.resolve(reader, "reader")
        writer = self.resolve(writer, "writer")
        if isinstance(writer, list):
            for branch in writer:
                self.check(reader, branch, path)
            return
        if isinstance(reader, list):
            for branch in reader:
                probe = _Checker(self.named["reader"], self.named["writer"])
                probe.seen = set(self.seen)
                probe.check(branch, writer, path)
                if not probe.errors:
                    return
            self.errors.append(
                f"{path}: reader union {_name(reader)} has no branch for {_name(writer)}"
            )
            return
        r_type = reader["type"] if isinstance(reader, dict) else reader
        w_type = writer["type"] if isinstance(writer, dict) else writer
        if r_type != w_type or r_type not in ("record", "enum", "fixed", "array", "map"):
            if not match_types(writer, reader, self.named):
                self.errors.append(
                    f"{path}: reader type {_name(reader)} cannot read {_name(writer)}"
                )
            return
        if r_type in ("record", "enum", "fixed"):
            if not _same_name(reader, writer):
                self.errors.append(
                    f"{path}: reader {reader['name']} is not writer {writer['name']}"
                )
                return
            key = (id(reader), id(writer))
            if key in self.seen:  # a recursive type already being checked
                return
            self.seen.add(key)
        if r_type == "record":
            self._record(reader, writer, path)
        elif r_type == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                self.errors.append(f"{path}: reader enum {reader['name']} lacks symbols {missing}")
        elif r_type == "fixed":
            if reader["size"] != writer["size"]:
                self.errors.append(
                    f"{path}: fixed {reader['name']} size {reader['size']} != {writer['size']}"
                )
        elif r_type == "array":
            self.check(reader["items"], writer["items"], f"{path}[]")
        else:
            self.check(reader["values"], writer["values"], f"{path}{{}}")

    def _record(self, reader, writer, path):
        writer_fields = {f["name"]: f for f in writer["fields"]}
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", ())]
            found = next((writer_fields[n] for n in names if n in writer_fields), None)
            where = f"{path}.{field['name']}" if path else field["name"]
            if found is None:
                if "default" not in field:
                    self.errors.append(
                        f"{where}: reader field has no default and the writer does not write it"
                    )
            else:
                self.check(field["type"], found["type"], where)


def _short(name):
    return name.rsplit(".", 1)[-1]


def _same_name(reader, writer):
    names = {reader["name"], *(reader.get("aliases") or ())}
    return writer["name"] in names or _short(writer["name"]) in {_short(n) for n in names}


def _name(schema):
    if isinstance(schema, list):
        return "[" + ", ".join(_name(s) for s in schema) + "]"
    if isinstance(schema, dict):
        return schema.get("name") or schema["type"]
    return str(schema)


def reader_errors(reader, writer):
    """Why ``reader`` cannot read what ``writer`` wrote ([] when it can).

    Both are decoded Avro schema JSON (dict, list or str)."""
    r_parsed, r_named = _parse(reader)
    w_parsed, w_named = _parse(writer)
    checker = _Checker(r_named, w_named)
    checker.check(r_parsed, w_parsed, "")
    return checker.errors


def incompatibilities(level, new, existing):
    """Why ``new`` may not follow ``existing`` (earlier versions, oldest
    first) under compatibility ``level``; [] when it may."""
    return by_level(level, new, existing, reader_errors)


def by_level(level, new, existing, reader_errors):
    """:func:`incompatibilities` for any schema type: ``reader_errors(reader,
    writer)`` says why one schema of that type cannot read the other's data."""
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    base = level.removesuffix("_TRANSITIVE")
    problems = []
    for old in reversed(against):
        if base in ("BACKWARD", "FULL"):
            problems += [f"backward: {e}" for e in reader_errors(new, old)]
        if base in ("FORWARD", "FULL"):
            problems += [f"forward: {e}" for e in reader_errors(old, new)]
    return problems

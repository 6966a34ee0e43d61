"""The schema DSL: how pluglog writes down Kafka message layouts.

One :class:`Api` holds a request and a response, each a list of :class:`F` fields
defined once for every version, mirroring the facts of Kafka's message JSON specs
(``versions``, ``nullableVersions``, ``taggedVersions``/``tag``, ``default``) with
snake_case names.  A field's type is a primitive name (``"int32"``, ``"string"``,
``"records"``...), ``"[]<primitive>"`` for an array of primitives, a list of
fields for an array of structs, or :class:`Struct` for a single nested struct.

Version strings use Kafka's notation: ``"3+"``, ``"0-12"``, ``"5"``.
:mod:`pluglog.protocol.compiler` turns these into per-version codecs.
"""

import uuid

PRIMITIVES = frozenset(
    (
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "float64",
        "bool",
        "string",
        "bytes",
        "records",
        "uuid",
    )
)

_ZERO = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "uint32": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": None,
    "uuid": uuid.UUID(int=0),
}

MISSING = object()
_NO_VERSIONS = (1, 0)  # an empty range: nothing satisfies 1 <= v <= 0


def parse_versions(spec):
    """``"3+"`` -> (3, big), ``"0-12"`` -> (0, 12), ``"5"`` -> (5, 5), None -> empty."""
    if spec is None or spec == "none":
        return _NO_VERSIONS
    spec = str(spec)
    if spec.endswith("+"):
        return int(spec[:-1]), 0x7FFF
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


class Struct:
    """A single (non-array) nested struct."""

    __slots__ = ("fields",)

    def __init__(self, fields):
        self.fields = list(fields)


class F:
    """One field of a message or nested struct."""

    __slots__ = ("name", "type", "versions", "nullable", "tagged", "tag", "explicit_default")

    def __init__(
        self, name, type_, versions="0+", *, nullable=None, default=MISSING, tag=None, tagged=None
    ):
        self.name = name
        self.type = type_
        self.versions = parse_versions(versions)
        self.nullable = parse_versions(nullable)
        self.tag = tag
        # taggedVersions defaults to the field's versions when a tag is given.
        if tagged is not None:
            self.tagged = parse_versions(tagged)
        elif tag is not None:
            self.tagged = self.versions
        else:
            self.tagged = _NO_VERSIONS
        self.explicit_default = default
        if isinstance(type_, str):
            base = type_[2:] if type_.startswith("[]") else type_
            if base not in PRIMITIVES:
                raise ValueError(f"unknown type {type_!r} for field {name}")

    # -- version predicates ---------------------------------------------------------

    def present(self, version):
        lo, hi = self.versions
        return lo <= version <= hi

    def nullable_in(self, version):
        lo, hi = self.nullable
        return lo <= version <= hi

    def tagged_in(self, version):
        lo, hi = self.tagged
        return lo <= version <= hi

    @property
    def is_struct_array(self):
        return isinstance(self.type, list)

    @property
    def is_struct(self):
        return isinstance(self.type, Struct)

    @property
    def is_primitive_array(self):
        return isinstance(self.type, str) and self.type.startswith("[]")

    # -- defaults ------------------------------------------------------------------

    def default_factory(self, version):
        """Return ``(value, factory)``: a shared immutable default, or a factory."""
        if self.explicit_default is not MISSING:
            return self.explicit_default, None
        if self.present(version):
            nullable = self.nullable_in(version)
        else:
            # Absent in this version: a field that is ever nullable reads as None.
            nullable = self.nullable[0] <= self.nullable[1]
        if nullable:
            return None, None
        if self.is_struct_array or self.is_primitive_array:
            return None, list
        if self.is_struct:
            fields = self.type.fields
            return None, lambda: struct_defaults(fields, version)
        return _ZERO[self.type], None

    def default(self, version):
        value, factory = self.default_factory(version)
        return factory() if factory is not None else value


def struct_defaults(fields, version):
    """A dict of every field's default, as decoding a version would present it."""
    return {f.name: f.default(version) for f in fields}


class Api:
    """One Kafka API: key, name, defined versions, first flexible version, bodies."""

    __slots__ = ("key", "name", "versions", "flexible", "request", "response")

    def __init__(self, key, name, versions, flexible, request, response):
        self.key = key
        self.name = name
        self.versions = parse_versions(versions)
        self.flexible = parse_versions(flexible)
        self.request = list(request)
        self.response = list(response)

    def defines(self, version):
        lo, hi = self.versions
        return lo <= version <= hi

    def is_flexible(self, version):
        lo, hi = self.flexible
        return lo <= version <= hi

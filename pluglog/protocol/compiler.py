"""Compile DSL field lists into per-version decode/encode closures.

``compile_struct(fields, version, flexible)`` returns ``(decode, encode)``:

* ``decode(buf, pos) -> (dict, pos)`` fills every field of the DSL, present in the
  version or not (absent ones get their defaults), so handlers see uniform dicts;
* ``encode(obj, out)`` appends ``bytes`` chunks (and RECORDS objects) to ``out``,
  taking the version's default for any missing key.

Runs of consecutive fixed-width fields are read and written with one precompiled
``struct.Struct`` each, which is where most of the per-field overhead goes on the
Produce/Fetch hot paths.  Results are cached by the caller (:mod:`.apis`).
"""

import struct

from pluglog.protocol import primitives as p
from pluglog.protocol.errors import DecodeError, EncodeError

_FIXED_FORMATS = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint16": "H",
    "uint32": "I",
    "float64": "d",
    "bool": "?",
}

_READERS = {
    "int8": p.read_int8,
    "int16": p.read_int16,
    "int32": p.read_int32,
    "int64": p.read_int64,
    "uint16": p.read_uint16,
    "uint32": p.read_uint32,
    "float64": p.read_float64,
    "bool": p.read_bool,
    "uuid": p.read_uuid,
    # (type, nullable, compact) for the length-prefixed ones
    ("string", False, False): p.read_string,
    ("string", True, False): p.read_nullable_string,
    ("string", False, True): p.read_compact_string,
    ("string", True, True): p.read_compact_nullable_string,
    ("bytes", False, False): p.read_bytes,
    ("bytes", True, False): p.read_nullable_bytes,
    ("bytes", False, True): p.read_compact_bytes,
    ("bytes", True, True): p.read_compact_nullable_bytes,
    ("records", True, False): p.read_records,
    ("records", True, True): p.read_compact_records,
}

_WRITERS = {
    "int8": p.write_int8,
    "int16": p.write_int16,
    "int32": p.write_int32,
    "int64": p.write_int64,
    "uint16": p.write_uint16,
    "uint32": p.write_uint32,
    "float64": p.write_float64,
    "bool": p.write_bool,
    "uuid": p.write_uuid,
    ("string", False, False): p.write_string,
    ("string", True, False): p.write_nullable_string,
    ("string", False, True): p.write_compact_string,
    ("string", True, True): p.write_compact_nullable_string,
    ("bytes", False, False): p.write_bytes,
    ("bytes", True, False): p.write_nullable_bytes,
    ("bytes", False, True): p.write_compact_bytes,
    ("bytes", True, True): p.write_compact_nullable_bytes,
    ("records", True, False): p.write_records,
    ("records", True, True): p.write_compact_records,
}


def _lookup(table, type_, nullable, compact):
    if type_ in ("string", "bytes"):
        return table[(type_, nullable, compact)]
    if type_ == "records":
        # RECORDS are nullable in every version of every schema we serve.
        return table[(type_, True, compact)]
    return table[type_]


# -- decoding -----------------------------------------------------------------------


def _array_reader(elem_read, nullable, compact, name, min_size=1):
    def read(buf, pos):
        n, pos = p.read_array_length(buf, pos, compact, min_size)
        if n < 0:
            if nullable:
                return None, pos
            raise DecodeError(f"null array in non-nullable field {name}")
        items = []
        append = items.append
        for _ in range(n):
            item, pos = elem_read(buf, pos)
            append(item)
        return items, pos

    return read


def _field_reader(field, version, flexible):
    nullable = field.nullable_in(version)
    if field.is_struct_array:
        elem, _ = compile_struct(field.type, version, flexible)
        size = _min_struct_size(field.type, version, flexible)
        return _array_reader(elem, nullable, flexible, field.name, size)
    if field.is_struct:
        elem, _ = compile_struct(field.type.fields, version, flexible)
        return _nullable_struct_reader(elem) if nullable else elem
    if field.is_primitive_array:
        elem = _lookup(_READERS, field.type[2:], False, flexible)
        size = _min_type_size(field.type[2:], flexible)
        return _array_reader(elem, nullable, flexible, field.name, size)
    return _lookup(_READERS, field.type, nullable, flexible)


def _nullable_struct_reader(elem):
    # Kafka's nullable struct: an int8 marker, -1 for null, 1 before the struct.
    def read(buf, pos):
        (marker,) = p.INT8.unpack_from(buf, pos)
        if marker < 0:
            return None, pos + 1
        return elem(buf, pos + 1)

    return read


# The fewest wire bytes of a value, so array counts can be checked against the
# bytes actually received (a 6 MB frame cannot hold 10 million 4-byte ints).
_LENGTH_PREFIX = {"string": 2, "bytes": 4, "records": 4}


def _min_type_size(type_, compact):
    if type_ in _FIXED_FORMATS:
        return struct.calcsize(">" + _FIXED_FORMATS[type_])
    if type_ == "uuid":
        return 16
    return 1 if compact else _LENGTH_PREFIX.get(type_, 1)


def _min_struct_size(fields, version, flexible):
    size = 1 if flexible else 0  # the tag buffer's count
    for f in fields:
        if not f.present(version) or (flexible and f.tagged_in(version)):
            continue
        if f.is_struct_array or f.is_primitive_array:
            size += 1 if flexible else 4
        elif f.is_struct:
            size += _min_struct_size(f.type.fields, version, flexible)
        else:
            size += _min_type_size(f.type, flexible)
    return max(size, 1)


def _fixed_step(names, fmt):
    st = struct.Struct(">" + fmt)
    unpack_from, size = st.unpack_from, st.size
    if len(names) == 1:
        (name,) = names

        def step(buf, pos, d):
            try:
                d[name] = unpack_from(buf, pos)[0]
            except struct.error:
                raise DecodeError(f"truncated {name} at offset {pos}") from None
            return pos + size

    else:

        def step(buf, pos, d):
            try:
                vals = unpack_from(buf, pos)
            except struct.error:
                raise DecodeError(f"truncated {names[0]}.. at offset {pos}") from None
            d.update(zip(names, vals))
            return pos + size

    return step


def _var_step(name, read):
    def step(buf, pos, d):
        d[name], pos = read(buf, pos)
        return pos

    return step


def _group_runs(fields):
    """Yield ("fixed", [fields]) runs and ("var", field) items in wire order."""
    run = []
    for f in fields:
        if isinstance(f.type, str) and f.type in _FIXED_FORMATS:
            run.append(f)
            continue
        if run:
            yield "fixed", run
            run = []
        yield "var", f
    if run:
        yield "fixed", run


def _make_decoder(fields, version, flexible):
    wire = [f for f in fields if f.present(version) and not (flexible and f.tagged_in(version))]
    tagged = {f.tag: f for f in fields if flexible and f.present(version) and f.tagged_in(version)}
    steps = []
    for kind, item in _group_runs(wire):
        if kind == "fixed":
            fmt = "".join(_FIXED_FORMATS[f.type] for f in item)
            steps.append(_fixed_step(tuple(f.name for f in item), fmt))
        else:
            steps.append(_var_step(item.name, _field_reader(item, version, flexible)))
    # Fields not on the wire in this version (absent, or tagged and not sent) still
    # appear in the dict with their defaults; mutable ones are built per decode.
    static, factories = {}, []
    for f in fields:
        if f in wire:
            continue
        value, factory = f.default_factory(version)
        if factory is None:
            static[f.name] = value
        else:
            factories.append((f.name, factory))
    tag_readers = {tag: (f.name, _field_reader(f, version, flexible)) for tag, f in tagged.items()}
    steps = tuple(steps)
    factories = tuple(factories)

    def decode(buf, pos):
        d = {}
        for step in steps:
            pos = step(buf, pos, d)
        if static:
            d.update(static)
        for name, factory in factories:
            d[name] = factory()
        if flexible:
            tags, pos = p.read_tagged_fields(buf, pos)
            for tag, raw in tags.items():
                known = tag_readers.get(tag)
                if known is None:
                    continue  # unknown tags are skipped, per the flexible-versions rules
                name, read = known
                d[name], end = read(raw, 0)
                if end != len(raw):
                    raise DecodeError(f"tagged field {name} has {len(raw) - end} extra bytes")
        return d, pos

    return decode


# -- encoding -----------------------------------------------------------------------


def _array_writer(elem_write, nullable, compact, name):
    def write(out, items):
        if items is None:
            if not nullable:
                raise EncodeError(f"None for non-nullable array {name}")
            p.write_array_length(out, -1, compact)
            return
        try:
            n = len(items)
        except TypeError:
            raise EncodeError(f"expected a list for {name}, got {type(items).__name__}") from None
        p.write_array_length(out, n, compact)
        for item in items:
            elem_write(out, item)

    return write


def _struct_writer(encode, name):
    def write(out, obj):
        if not isinstance(obj, dict):
            raise EncodeError(f"expected a dict for {name}, got {type(obj).__name__}")
        encode(obj, out)

    return write


def _nullable_struct_writer(write):
    def write_nullable(out, obj):
        if obj is None:
            out.append(_NULL_MARKER)
            return
        out.append(_PRESENT_MARKER)
        write(out, obj)

    return write_nullable


_NULL_MARKER = p.INT8.pack(-1)
_PRESENT_MARKER = p.INT8.pack(1)


def _field_writer(field, version, flexible):
    nullable = field.nullable_in(version)
    if field.is_struct_array:
        _, elem = compile_struct(field.type, version, flexible)
        return _array_writer(_struct_writer(elem, field.name), nullable, flexible, field.name)
    if field.is_struct:
        _, elem = compile_struct(field.type.fields, version, flexible)
        write = _struct_writer(elem, field.name)
        return _nullable_struct_writer(write) if nullable else write
    if field.is_primitive_array:
        elem = _lookup(_WRITERS, field.type[2:], False, flexible)
        return _array_writer(elem, nullable, flexible, field.name)
    return _lookup(_WRITERS, field.type, nullable, flexible)


def _fixed_write_step(fields, version):
    st = struct.Struct(">" + "".join(_FIXED_FORMATS[f.type] for f in fields))
    pack = st.pack
    pairs = tuple((f.name, f.default(version)) for f in fields)

    def step(obj, out):
        try:
            out.append(pack(*[obj.get(name, dflt) for name, dflt in pairs]))
        except struct.error as exc:
            bad = {name: obj.get(name, dflt) for name, dflt in pairs}
            raise EncodeError(f"cannot encode {bad}: {exc}") from None

    return step


def _var_write_step(field, version, flexible):
    name = field.name
    default = field.default(version)
    write = _field_writer(field, version, flexible)

    def step(obj, out):
        write(out, obj.get(name, default))

    return step


def _make_encoder(fields, version, flexible):
    wire = [f for f in fields if f.present(version) and not (flexible and f.tagged_in(version))]
    tagged = sorted(
        (f for f in fields if flexible and f.present(version) and f.tagged_in(version)),
        key=lambda f: f.tag,
    )
    steps = []
    for kind, item in _group_runs(wire):
        if kind == "fixed":
            steps.append(_fixed_write_step(item, version))
        else:
            steps.append(_var_write_step(item, version, flexible))
    steps = tuple(steps)
    tag_writers = tuple(
        (f.tag, f.name, f.default(version), _field_writer(f, version, flexible)) for f in tagged
    )

    def encode(obj, out):
        for step in steps:
            step(obj, out)
        if flexible:
            tags = None
            for tag, name, default, write in tag_writers:
                value = obj.get(name, default)
                # Tagged fields are only sent when they differ from the default.
                if value != default:
                    chunk = []
                    write(chunk, value)
                    if tags is None:
                        tags = {}
                    tags[tag] = b"".join(chunk)
            p.write_tagged_fields(out, tags)

    return encode


_CACHE: dict = {}


def compile_struct(fields, version, flexible):
    """Return cached ``(decode, encode)`` for a field list at a version."""
    key = (id(fields), version, flexible)
    hit = _CACHE.get(key)
    if hit is None:
        hit = (_make_decoder(fields, version, flexible), _make_encoder(fields, version, flexible))
        # Keep ``fields`` alive alongside its id so the id cannot be reused.
        _CACHE[key] = hit + (fields,)
        return hit
    return hit[0], hit[1]

"""``.option("valueFormat", "avro")``: registry-framed Avro values as typed columns.

Spark's own ``from_avro`` needs a JVM jar; this decodes on the Python
executors with fastavro instead. On the driver the reader looks up the
latest schema of the value subject (``<topic>-value``, or the
``valueSubject`` option) in the registry at ``schemaRegistryUrl`` and turns
it into the ``value`` column's struct type. Executors decode each record
with the schema its id names (fetched once per id) resolved to that reader
schema, so records written with older compatible versions read into the
same columns. Writes take a struct ``value`` column and encode it with the
subject's latest schema, framed with its id.

Type mapping: boolean, int, long, float, double, string, bytes and fixed map
to Spark's; enums to strings; records to structs; arrays and maps (string
keys) to arrays and maps; ``[null, T]`` unions to nullable ``T``; logical
types date, timestamp-millis/micros and decimal to date, timestamp and
decimal. Other unions are refused naming the field.
"""

import io

import pyarrow as pa

from pluglog_spark.options import OptionError

_PRIMITIVES = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


def arrow_type(schema, named, path="value"):
    """The Arrow type of an Avro (fastavro-parsed) ``schema``."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in named:
            return arrow_type(named[schema], named, path)
        raise OptionError(f"{path}: Avro type {schema!r} has no Spark column type")
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise OptionError(f"{path}: only [null, T] unions map to a Spark column ({schema})")
        return arrow_type(branches[0], named, path)
    logical = schema.get("logicalType")
    kind = schema["type"]
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return pa.timestamp("us", tz="UTC")
    if logical == "decimal":
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if kind == "record":
        return pa.struct(
            [
                pa.field(f["name"], arrow_type(f["type"], named, f"{path}.{f['name']}"))
                for f in schema["fields"]
            ]
        )
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(arrow_type(schema["items"], named, f"{path}[]"))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(schema["values"], named, f"{path}{{}}"))
    return arrow_type(kind, named, path)


def parse_schema(text):
    """``(parsed, named)`` of an Avro schema JSON text."""
    import json

    import fastavro

    named = {}
    parsed = fastavro.parse_schema(json.loads(text), named_schemas=named)
    return parsed, named


class AvroColumns:
    """The reader (or writer) schema of one subject, picklable to executors."""

    def __init__(self, url, subject):
        from pluglog.serialization.client import RegistryClient
        from pluglog.serialization.registry import RegistryError

        self.url = url
        self.subject = subject
        try:
            self.schema_id, _version, self.schema_text = RegistryClient(url).get_latest(subject)
        except RegistryError as exc:
            raise OptionError(
                f"valueFormat avro: subject {subject!r} at {url}: {exc.message} ({exc.code})"
            ) from None
        except OSError as exc:
            raise OptionError(f"option schemaRegistryUrl: cannot reach {url}: {exc}") from None
        parsed, named = parse_schema(self.schema_text)
        self.value_type = arrow_type(parsed, named)
        self._state = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_state"] = None
        return state

    def _runtime(self):
        if self._state is None:
            from pluglog.serialization.client import RegistryClient

            self._state = (RegistryClient(self.url), parse_schema(self.schema_text)[0], {})
        return self._state

    def decode_values(self, values):
        """Arrow array of the ``value`` structs for a list of framed values."""
        import fastavro

        from pluglog.serialization.framing import unframe

        client, reader, writers = self._runtime()
        out = []
        for data in values:
            if data is None:
                out.append(None)
                continue
            schema_id, payload = unframe(data)
            writer = writers.get(schema_id)
            if writer is None:
                writer = writers[schema_id] = parse_schema(client.get_schema(schema_id))[0]
            out.append(fastavro.schemaless_reader(io.BytesIO(payload), writer, reader))
        return pa.array(out, type=self.value_type)

    def encode_values(self, values):
        """Framed Avro bytes for a list of value dicts (None stays None)."""
        import fastavro

        from pluglog.serialization.framing import frame

        _client, writer, _writers = self._runtime()
        out = []
        for value in values:
            if value is None:
                out.append(None)
                continue
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, writer, value)
            out.append(frame(self.schema_id, buf.getvalue()))
        return out


def spark_schema(value_type):
    """The source's DDL schema with ``value`` as the Avro struct."""
    from pyspark.sql.pandas.types import from_arrow_type

    value = from_arrow_type(value_type).simpleString()
    return (
        f"key binary, value {value}, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
    )


def decode_batch(batch, columns):
    """Replace the binary ``value`` column of an Arrow batch by typed structs."""
    index = batch.schema.get_field_index("value")
    values = columns.decode_values(batch.column(index).to_pylist())
    arrays = list(batch.columns)
    arrays[index] = values
    fields = list(batch.schema)
    fields[index] = pa.field("value", columns.value_type)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))

"""valueFormat avro: registry-framed values as typed columns, both ways.

confluent-kafka's AvroSerializer writes through pluglog's registry; the
Spark source decodes the values into a struct column (older compatible
versions resolved to the latest schema), a streaming read does the same,
and a struct column written with valueFormat avro reads back with
confluent-kafka's AvroDeserializer.
"""

import datetime
import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pluglog_spark.options import OptionError
from spark_helpers import consume_all, create_topic

V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": ["null", "int"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
V2 = {**V1, "fields": V1["fields"] + [{"name": "channel", "type": "string", "default": "web"}]}
AT = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
ORDERS = [
    {
        "id": i,
        "item": f"item-{i}",
        "qty": None if i % 3 == 0 else i,
        "tags": ["a"] * (i % 3),
        "at": AT + datetime.timedelta(seconds=i),
    }
    for i in range(20)
]


@pytest.fixture(scope="module")
def web_broker(tmp_path_factory):
    from tests.integration.registry_helpers import HttpBroker

    proc = HttpBroker(tmp_path_factory.mktemp("spark-avro") / "data").start()
    yield proc
    proc.stop()


def produce_orders(broker, topic, schema, orders):
    sr = SchemaRegistryClient({"url": broker.url})
    serializer = AvroSerializer(sr, json.dumps(schema))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for order in orders:
        producer.produce(topic, serializer(order, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0


def avro_reader(spark, broker, topic):
    return (
        spark.read.format("pluglog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("valueFormat", "avro")
        .option("schemaRegistryUrl", broker.url)
        .load()
    )


def as_orders(rows):
    out = []
    for row in rows:
        value = row.value.asDict()
        value["at"] = value["at"].astimezone(datetime.UTC)
        value["tags"] = list(value["tags"])
        out.append(value)
    return sorted(out, key=lambda v: v["id"])


def test_batch_read_decodes_typed_columns_across_versions(spark, web_broker, topic_name):
    create_topic(web_broker.bootstrap, topic_name, 2)
    produce_orders(web_broker, topic_name, V1, ORDERS[:10])
    produce_orders(web_broker, topic_name, V2, [{**o, "channel": "app"} for o in ORDERS[10:]])
    frame = avro_reader(spark, web_broker, topic_name)
    value_type = dict(frame.dtypes)["value"]
    assert value_type.startswith("struct<id:bigint,item:string,qty:int,tags:array<string>")
    assert "at:timestamp" in value_type and value_type.endswith("channel:string>")
    got = as_orders(frame.collect())
    # v1 records read with the latest (v2) schema get the new field's default.
    assert got == [{**o, "channel": "web" if o["id"] < 10 else "app"} for o in ORDERS]
    # Typed columns work in Spark SQL.
    total = frame.selectExpr("sum(value.qty) AS s").collect()[0].s
    assert total == sum(o["qty"] or 0 for o in ORDERS)


def test_stream_read_decodes_values(spark, web_broker, topic_name, tmp_path):
    create_topic(web_broker.bootstrap, topic_name, 1)
    produce_orders(web_broker, topic_name, V1, ORDERS[:5])
    query = (
        spark.readStream.format("pluglog")
        .option("kafka.bootstrap.servers", web_broker.bootstrap)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "avro")
        .option("schemaRegistryUrl", web_broker.url)
        .load()
        .selectExpr("value.id AS id", "value.item AS item")
        .writeStream.format("json")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    rows = spark.read.json(str(tmp_path / "out")).collect()
    assert sorted((r.id, r.item) for r in rows) == [(o["id"], o["item"]) for o in ORDERS[:5]]


def test_write_encodes_struct_values(spark, web_broker, topic_name):
    create_topic(web_broker.bootstrap, topic_name, 1)
    sr = SchemaRegistryClient({"url": web_broker.url})
    sr.register_schema(f"{topic_name}-value", Schema(json.dumps(V1), "AVRO"))
    frame = spark.range(30).selectExpr(
        "named_struct('id', id, 'item', concat('w', cast(id as string)), "
        "'qty', CASE WHEN id % 2 = 0 THEN NULL ELSE cast(id as int) END, "
        "'tags', array('x'), 'at', timestamp_millis(1767268800000 + id)) AS value"
    )
    (
        frame.write.format("pluglog")
        .option("kafka.bootstrap.servers", web_broker.bootstrap)
        .option("topic", topic_name)
        .option("valueFormat", "avro")
        .option("schemaRegistryUrl", web_broker.url)
        .mode("append")
        .save()
    )
    raw = consume_all(web_broker.bootstrap, topic_name, 1)
    theirs = AvroDeserializer(SchemaRegistryClient({"url": web_broker.url}))
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    got = sorted((theirs(v, ctx) for _p, _o, _k, v, _h in raw), key=lambda d: d["id"])
    assert [d["id"] for d in got] == list(range(30))
    assert got[3]["item"] == "w3" and got[3]["qty"] == 3 and got[2]["qty"] is None
    assert got[5]["at"] == datetime.datetime.fromtimestamp(1767268800.005, datetime.UTC)


def test_bad_avro_options_are_named(spark, web_broker):
    with pytest.raises(Exception, match="schemaRegistryUrl"):
        spark.read.format("pluglog").option("bootstrap.servers", web_broker.bootstrap).option(
            "subscribe", "x"
        ).option("valueFormat", "avro").load()
    with pytest.raises(Exception, match="40401"):
        avro_reader(spark, web_broker, "no-such-topic").collect()
    from pluglog_spark.options import value_format_options

    with pytest.raises(OptionError, match="valueFormat"):
        value_format_options({"valueformat": "protobuf"}, ("t",))
    with pytest.raises(OptionError, match="one topic"):
        value_format_options({"valueformat": "avro", "schemaregistryurl": "http://h"}, ("a", "b"))

"""Topics, configs and groups with the AdminClient.

python docs/examples/admin.py 127.0.0.1:9092
"""

import sys

from twisted.internet import defer, task

from pluglog.client import AdminClient, ConfigResource, NewTopic, TopicPartition


@defer.inlineCallbacks
def main(reactor, bootstrap="127.0.0.1:9092"):
    admin = AdminClient(reactor, bootstrap_servers=bootstrap)
    yield admin.start()
    if "example-audit" not in (yield admin.list_topics()):
        yield admin.create_topics([NewTopic("example-audit", 1, 1, {"retention.ms": "3600000"})])
    yield admin.create_partitions({"example-audit": 2})
    yield admin.alter_configs(
        [ConfigResource("topic", "example-audit", {"retention.ms": 7200000})]
    )
    configs = yield admin.describe_configs([ConfigResource("topic", "example-audit")])
    print("retention.ms =", configs[("topic", "example-audit")]["retention.ms"])
    (topic,) = yield admin.describe_topics(["example-audit"])
    print("partitions:", [p["partition"] for p in topic["partitions"]])
    ends = yield admin.list_offsets({TopicPartition("example-audit", 0): -1})
    print("end offsets:", {f"{tp.topic}[{tp.partition}]": o for tp, o in ends.items()})
    print("groups:", (yield admin.list_consumer_groups()))
    yield admin.delete_topics(["example-audit"])
    yield admin.close()


if __name__ == "__main__":
    task.react(main, sys.argv[1:])

"""The console's actions over HTTP on real brokers (issue 23).

An acting console (``console.read.only=false``) creates a topic, adds
partitions, resets a group's offsets and deletes the topic, each through
its confirmation page and a POST carrying the session's CSRF token; a real
Kafka client checks each result. A POST without the token, or from a
browser without the session cookie, changes nothing. Bad action input gets
a readable 400/404/409 page. On a broker with SASL and Kafka's ACL
authorizer the console asks for a login checked against the SCRAM
credential store, an action the ACLs deny shows the denial (403) and does
nothing, and the same action works once an ACL allows it.
"""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.integration.console_actions import Browser, acting_broker, message, secured_broker
from tests.integration.secure_broker import sasl_props

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def acting(tmp_path_factory):
    broker = acting_broker(tmp_path_factory.mktemp("console-acting"))
    try:
        # A first commit creates __consumer_offsets (the internal topic the
        # bad-input cases name), whichever test runs first.
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "seed"})
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic("seed", 1, 1)]).values():
            future.result(30)
        consumer.commit(offsets=[TopicPartition("seed", 0, 0)], asynchronous=False)
        consumer.close()
        yield broker
    finally:
        broker.stop()


def partitions_of(admin, name):
    # All topics: a Metadata request naming one would auto-create it.
    topic = admin.list_topics(timeout=10).topics.get(name)
    return None if topic is None or topic.error is not None else len(topic.partitions)


def committed(bootstrap, group, topic, partitions):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def test_topic_actions_with_confirmation(acting):
    admin = AdminClient({"bootstrap.servers": acting.bootstrap})
    browser = Browser(acting.http)
    status, _url, page = browser.get("/console/topics")
    assert 'id="create-topic-form"' in page and "actions on" in page

    page, (status, _url, done) = browser.confirm(
        "/console/actions/create-topic?name=made-here&partitions=3&replication=1"
    )
    assert "Create topic &#39;made-here&#39; with 3 partition(s)" in page
    assert (status, message(done, "outcome")) == (
        200,
        "Done: created topic &#39;made-here&#39; (3 partition(s))",
    ), done
    assert partitions_of(admin, "made-here") == 3

    _page, (status, _url, done) = browser.confirm(
        "/console/actions/add-partitions?topic=made-here&count=5"
    )
    assert status == 200 and "has 5 partitions" in done, done
    assert partitions_of(admin, "made-here") == 5

    # Confirmation pages change nothing: opened and left, the topic stays.
    status, _url, page = browser.get("/console/actions/delete-topic?topic=made-here")
    assert status == 200 and "This cannot be undone." in page
    assert partitions_of(admin, "made-here") == 5
    _page, (status, _url, done) = browser.confirm("/console/actions/delete-topic?topic=made-here")
    assert status == 200 and "deleted topic" in done, done
    deadline = time.monotonic() + 10
    while partitions_of(admin, "made-here") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert partitions_of(admin, "made-here") is None


def test_reset_offsets(acting):
    admin = AdminClient({"bootstrap.servers": acting.bootstrap})
    for future in admin.create_topics([NewTopic("resettable", 2, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": acting.bootstrap})
    for i in range(10):
        producer.produce("resettable", value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": acting.bootstrap, "group.id": "resetting"})
    consumer.commit(
        offsets=[TopicPartition("resettable", 0, 3), TopicPartition("resettable", 1, 4)],
        asynchronous=False,
    )
    consumer.close()
    browser = Browser(acting.http)
    _status, _url, page = browser.get("/console/groups/resetting")
    assert 'id="reset-form"' in page

    page, (status, _url, done) = browser.confirm(
        "/console/actions/reset-offsets?group=resetting&topic=&to=earliest&value="
    )
    # The confirmation shows each partition's committed and new offset.
    assert '<td class="current">3</td><td class="new">0</td>' in page
    assert '<td class="current">4</td><td class="new">0</td>' in page
    assert status == 200 and "2 partition offset(s) reset" in done, done
    assert committed(acting.bootstrap, "resetting", "resettable", [0, 1]) == [0, 0]

    _page, (status, _url, done) = browser.confirm(
        "/console/actions/reset-offsets?group=resetting&topic=resettable&to=latest&value="
    )
    assert status == 200, done
    assert committed(acting.bootstrap, "resetting", "resettable", [0, 1]) == [5, 5]

    _page, (status, _url, done) = browser.confirm(
        "/console/actions/reset-offsets?group=resetting&topic=resettable&to=offset&value=2"
    )
    assert status == 200, done
    assert committed(acting.bootstrap, "resetting", "resettable", [0, 1]) == [2, 2]

    # By time: the first offset at or after it (the end when there is none).
    for when, want in (("2999-01-01T00:00:00Z", [5, 5]), ("0", [0, 0])):
        _page, (status, _url, done) = browser.confirm(
            f"/console/actions/reset-offsets?group=resetting&topic=&to=time&value={when}"
        )
        assert status == 200, done
        assert committed(acting.bootstrap, "resetting", "resettable", [0, 1]) == want, when
    status, _url, page = browser.get("/console/actions/reset-offsets?group=resetting&to=time")
    assert (status, message(page)) == (400, "the time is missing")
    status, _url, page = browser.get(
        "/console/actions/reset-offsets?group=resetting&to=time&value=yesterday"
    )
    assert status == 400 and message(page).startswith("the time must be ISO 8601")

    # A group with a live member is refused: its consumers must stop first.
    member = Consumer(
        {
            "bootstrap.servers": acting.bootstrap,
            "group.id": "resetting",
            "session.timeout.ms": 6000,
        }
    )
    try:
        member.subscribe(["resettable"])
        deadline = time.monotonic() + 20
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment()
        status, _url, page = browser.get(
            "/console/actions/reset-offsets?group=resetting&to=earliest"
        )
        assert status == 409
        assert "stop its consumers before resetting its offsets" in message(page)
    finally:
        member.close()


def test_forms_need_the_session_token(acting):
    admin = AdminClient({"bootstrap.servers": acting.bootstrap})
    browser = Browser(acting.http)
    fields = {"name": "forged", "partitions": "1", "replication": "1"}
    # No session at all (another site's form): refused.
    status, _url, page = browser.post("/console/actions/create-topic", fields)
    assert status == 403 and "token is missing or stale" in message(page)
    # A session, but a wrong token.
    browser.get("/console/actions/create-topic?name=forged")
    status, _url, page = browser.post(
        "/console/actions/create-topic", {**fields, "csrf": "not-the-token"}
    )
    assert status == 403
    assert partitions_of(admin, "forged") is None


BAD = [
    ("/console/actions/create-topic?name=x&partitions=abc", 400, "partition count must be"),
    ("/console/actions/create-topic?name=x&partitions=0", 400, "partition count must be between"),
    ("/console/actions/create-topic?partitions=1", 400, "the topic name is missing"),
    ("/console/actions/create-topic?name=__consumer_offsets", 409, "already exists"),
    ("/console/actions/delete-topic?topic=__consumer_offsets", 400, "internal topic"),
    ("/console/actions/delete-topic?topic=nope", 404, "no topic &#39;nope&#39;"),
    ("/console/actions/add-partitions?topic=__consumer_offsets&count=1", 400, "between"),
    ("/console/actions/reset-offsets?group=nope&to=earliest", 404, "no group &#39;nope&#39;"),
    ("/console/actions/explode", 404, "no such action"),
]


@pytest.mark.parametrize(("path", "status", "fragment"), BAD, ids=[b[0] for b in BAD])
def test_bad_action_input(acting, path, status, fragment):
    got, _url, page = Browser(acting.http).get(path)
    assert got == status, page
    assert fragment in (message(page) or ""), page
    assert "Traceback" not in page


def test_create_topic_with_html_name_is_refused_escaped(acting):
    browser = Browser(acting.http)
    _page, (status, _url, done) = browser.confirm(
        "/console/actions/create-topic?name=%3Cb%3Ex%3C%2Fb%3E"
    )
    assert status == 400, done  # Kafka's topic name rule: INVALID_TOPIC_EXCEPTION
    assert "INVALID_TOPIC_EXCEPTION" in done and "&lt;b&gt;x&lt;/b&gt;" in done
    assert "<b>x</b>" not in done
    assert "Traceback" not in acting.log()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    broker = secured_broker(
        tmp_path_factory.mktemp("console-secured"), ("admin", "admin-pw"), ("bob", "bob-pw")
    )
    yield broker
    broker.stop()


def test_login_and_acl_denial(secured):
    browser = Browser(secured.http)
    status, url, page = browser.get("/console/topics")
    assert url.endswith("/console/login?next=/console/topics") and 'id="login-form"' in page
    status, _url, page = browser.login("bob", "wrong")
    assert (status, message(page)) == (403, "wrong user name or password")
    status, url, page = browser.login("bob", "bob-pw", "/console/topics")
    assert status == 200 and url.endswith("/console/topics"), (status, url)
    assert '<span id="viewer">bob</span>' in page

    # bob may not CREATE: the page says so and nothing is created.
    _page, (status, _url, done) = browser.confirm("/console/actions/create-topic?name=bobs")
    assert status == 403, done
    assert message(done, "outcome").startswith(
        "Denied: User:bob is not authorized to create topic: bobs TOPIC_AUTHORIZATION_FAILED"
    ), done
    admin = AdminClient({"bootstrap.servers": secured.sasl, **sasl_props("admin", "admin-pw")})
    assert partitions_of(admin, "bobs") is None

    # An ACL allowing it (written through Kafka's CreateAcls) lets the same action through.
    allow = AclBinding(
        ResourceType.TOPIC,
        "bobs",
        ResourcePatternType.LITERAL,
        "User:bob",
        "*",
        AclOperation.CREATE,
        AclPermissionType.ALLOW,
    )
    for future in admin.create_acls([allow]).values():
        future.result(30)
    _page, (status, _url, done) = browser.confirm("/console/actions/create-topic?name=bobs")
    assert status == 200, done
    assert partitions_of(admin, "bobs") == 1

    # Logged out, the pages ask for a login again.
    _s, _u, page = browser.get("/console/")
    status, url, _page = browser.post("/console/logout", browser.form_fields(page, "logout"))
    assert url.endswith("/console/login")
    status, url, _page = browser.get("/console/")
    assert "/console/login" in url

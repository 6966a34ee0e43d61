"""The console over plain HTTP on a real broker: content, bad input, 1,000 topics.

A ``twistd pluglog --http`` broker holds the known data of
:mod:`tests.integration.console_data`. Each page is fetched with urllib
and checked for what it must show; every bad URL gets a readable HTML page
with status 400 or 404 (never a traceback, never a 500), HTML from topic
names, group ids, keys, values and headers comes back escaped, and the
broker still serves Kafka clients and the console afterwards. The last test
creates 1,000 topics and times the topics page.
"""

import datetime
import html
import io
import json
import re
import threading
import time
import urllib.error
import urllib.request

import fastavro
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pluglog.serialization.framing import frame
from tests.integration import console_data as data

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    yield from data.serve(tmp_path_factory.mktemp("console-http"))


def get(base, path, method="GET"):
    """``(status, headers, text)`` of ``path``, whatever the status."""
    request = urllib.request.Request(base + path, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers, exc.read().decode("utf-8")


def message(text):
    found = re.search(r'<p class="error" id="error-message">(.*?)</p>', text, re.S)
    return found.group(1) if found else None


def test_pages_show_the_data(console):
    _broker, base = console
    status, headers, text = get(base, "/console/")
    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'none'" in headers["content-security-policy"]
    assert '<dd id="controller">0</dd>' in text
    assert '<dd id="under-replicated" class="good">0</dd>' in text

    status, _h, text = get(base, "/console/topics")
    assert status == 200
    assert f'<a href="/console/topics/{data.TOPIC}">{data.TOPIC}</a>' in text

    status, _h, text = get(base, f"/console/topics/{data.TOPIC}")
    assert status == 200
    assert text.count('class="partition-link"') == 2
    assert "<td>retention.ms</td><td>604800000</td><td>default</td>" in text

    status, _h, text = get(base, f"/console/topics/{data.TOPIC}/0")
    assert status == 200
    assert text.count('class="record-link"') == len(data.RECORDS)
    assert '<span class="text key" title="7 bytes">order-1</span>' in text
    assert '<span class="hex value" title="3 bytes, hex">ff 00 fe</span>' in text
    assert '<span class="null key">null</span>' in text

    # A page of two from offset 1, then the next page from 3.
    status, _h, text = get(base, f"/console/topics/{data.TOPIC}/0?offset=1&limit=2")
    assert re.findall(r'class="record-link">(\d+)<', text) == ["1", "2"]
    assert f"/console/topics/{data.TOPIC}/0?offset=3&amp;limit=2" in text

    status, _h, text = get(base, f"/console/topics/{data.TOPIC}/0/0")
    assert status == 200
    assert "first value" in text and "source" in text and "test" in text


def test_browse_from_a_time(console):
    _broker, base = console
    at = data.BASE_MS + 2000
    iso = datetime.datetime.fromtimestamp(at / 1000, tz=datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    for query in (f"time={at}", f"time={iso}", f"time={iso[:-1]}"):  # no zone: UTC
        status, _h, text = get(base, f"/console/topics/{data.TOPIC}/0?{query}&limit=2")
        assert status == 200, text
        assert re.findall(r'class="record-link">(\d+)<', text) == ["2", "3"], query
    status, _h, text = get(base, f"/console/topics/{data.TOPIC}/0?time={at + 10**6}")
    assert status == 200
    assert "No records at or after offset 5." in text


def test_html_in_records_and_ids_is_escaped(console):
    _broker, base = console
    for path in (f"/console/topics/{data.TOPIC}/0", f"/console/topics/{data.TOPIC}/0/2"):
        status, _h, text = get(base, path)
        assert status == 200
        assert "&lt;b&gt;x&lt;/b&gt;" in text
        assert "&lt;script&gt;document.title=&#39;owned&#39;&lt;/script&gt;" in text
        assert "&lt;u&gt;" in text
        assert "<b>x</b>" not in text and "<script>document" not in text and "<u>" not in text
    status, _h, text = get(base, "/console/groups")
    assert status == 200
    assert "&lt;i&gt;grp&lt;/i&gt;" in text and "<i>grp</i>" not in text
    assert 'href="/console/groups/%3Ci%3Egrp%3C%2Fi%3E"' in text
    status, _h, text = get(base, "/console/groups/%3Ci%3Egrp%3C%2Fi%3E")
    assert status == 200
    assert '<span id="group-id">&lt;i&gt;grp&lt;/i&gt;</span>' in text
    # An unknown topic named with HTML: a 404 that quotes it escaped.
    status, _h, text = get(base, "/console/topics/%3Cscript%3Ealert(1)%3C%2Fscript%3E")
    assert status == 404
    assert message(text) == "no topic &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39;"
    assert "<script>alert" not in text


def test_group_lag(console):
    _broker, base = console
    status, _h, text = get(base, f"/console/groups/{data.GROUP}")
    assert status == 200
    assert '<dd id="group-state">Empty</dd>' in text
    assert f'<dd id="total-lag">{sum(data.LAG.values())}</dd>' in text
    rows = re.findall(
        r'<td>(\d+)</td><td class="committed">(\d+)</td>\s*<td>(\d+)</td>\s*<td class="lag">(\d+)',
        text,
    )
    assert rows == [
        (str(p), str(data.COMMITTED[p]), str(data.COMMITTED[p] + data.LAG[p]), str(data.LAG[p]))
        for p in (0, 1)
    ]


def test_schema_registry_subjects(console):
    _broker, base = console
    status, _h, text = get(base, "/console/schemas")
    assert status == 200
    assert "No subjects registered." in text
    schema = {"type": "record", "name": "R", "doc": "<b>doc</b>", "fields": []}
    request = urllib.request.Request(
        base + "/subjects/%3Cb%3Es%3C%2Fb%3E-value/versions",
        data=json.dumps({"schema": json.dumps(schema)}).encode(),
        headers={"content-type": "application/vnd.schemaregistry.v1+json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        schema_id = json.loads(response.read())["id"]
    status, _h, text = get(base, "/console/schemas")
    assert 'href="/console/schemas/%3Cb%3Es%3C%2Fb%3E-value"' in text
    assert f"&lt;b&gt;s&lt;/b&gt;-value</a></td><td>1</td>\n<td>{schema_id}</td>" in text
    status, _h, text = get(base, "/console/schemas/%3Cb%3Es%3C%2Fb%3E-value")
    assert status == 200
    assert "Version 1" in text and "&lt;b&gt;doc&lt;/b&gt;" in text
    assert "<b>doc</b>" not in text and "<b>s</b>" not in text


def test_avro_values_are_decoded_through_the_registry(console):
    broker, base = console
    schema = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": "string"}],
    }
    request = urllib.request.Request(
        base + "/subjects/console-avro-value/versions",
        data=json.dumps({"schema": json.dumps(schema)}).encode(),
        headers={"content-type": "application/vnd.schemaregistry.v1+json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        schema_id = json.loads(response.read())["id"]
    payload = io.BytesIO()
    fastavro.schemaless_writer(
        payload, fastavro.parse_schema(schema), {"id": 7, "note": "<i>n</i>"}
    )
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("console-avro", value=frame(schema_id, payload.getvalue()), key=b"o7")
    assert producer.flush(30) == 0
    status, _h, text = get(base, "/console/topics/console-avro/0/0")
    assert status == 200, text
    decoded = re.search(r'<pre class="value-decoded">(.*?)</pre>', text, re.S).group(1)
    assert json.loads(html.unescape(decoded)) == {"id": 7, "note": "<i>n</i>"}
    assert f"schema {schema_id} (AVRO)" in text
    assert "<i>n</i>" not in text


BAD = [
    # (path, status, a fragment of the page's message)
    (f"/console/topics/{data.TOPIC}/abc", 400, "the partition must be a whole number"),
    (f"/console/topics/{data.TOPIC}/-1", 400, "the partition must be between 0 and"),
    (f"/console/topics/{data.TOPIC}/7", 404, "has no partition 7"),
    (f"/console/topics/{data.TOPIC}/0?offset=abc", 400, "the offset must be a whole number"),
    (f"/console/topics/{data.TOPIC}/0?offset=-5", 400, "the offset must be between 0 and"),
    (f"/console/topics/{data.TOPIC}/0?offset=1e3", 400, "the offset must be a whole number"),
    (f"/console/topics/{data.TOPIC}/0?offset=" + "9" * 30, 400, "the offset must be"),
    (f"/console/topics/{data.TOPIC}/0?offset=" + "9" * 5000, 400, "longer than 256"),
    (f"/console/topics/{data.TOPIC}/0?offset=%FF", 400, "not UTF-8"),
    (f"/console/topics/{data.TOPIC}/0?offset=%C2%B2", 400, "the offset must be a whole number"),
    (f"/console/topics/{data.TOPIC}/0?time=yesterday", 400, "the time must be ISO 8601"),
    (f"/console/topics/{data.TOPIC}/0?time=2024-13-45T99:00Z", 400, "the time must be ISO 8601"),
    (f"/console/topics/{data.TOPIC}/0?time=1&offset=2", 400, "an offset or a time, not both"),
    (f"/console/topics/{data.TOPIC}/0/x1", 400, "the offset must be a whole number"),
    (f"/console/topics/{data.TOPIC}/0/99", 404, "no record at offset 99"),
    (f"/console/topics/{data.TOPIC}/0?limit=0", 400, "the page size (limit) must be between 1"),
    ("/console/topics?size=-3", 400, "the page size (size) must be between 1"),
    ("/console/topics?size=lots", 400, "the page size (size) must be a whole number"),
    ("/console/topics?page=0", 400, "the page number must be between 1"),
    ("/console/topics/nope", 404, "no topic &#39;nope&#39;"),
    ("/console/topics/nope/0", 404, "no topic &#39;nope&#39;"),
    ("/console/topics/%FF%FE", 400, "the path is not UTF-8"),
    ("/console/groups/nope", 404, "no group &#39;nope&#39;"),
    ("/console/schemas/nope", 404, "no subject &#39;nope&#39;"),
    ("/console/nothing-here", 404, "the console has no such page"),
    ("/console/static/../../../etc/passwd", 404, "the console has no such page"),
    ("/console/static/secret.py", 404, "no static file"),
]


@pytest.mark.parametrize(("path", "status", "fragment"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_a_readable_page(console, path, status, fragment):
    _broker, base = console
    got, headers, text = get(base, path)
    assert got == status, text
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert fragment in (message(text) or ""), text
    assert "Traceback" not in text


def test_huge_page_sizes_are_capped(console):
    _broker, base = console
    status, _h, text = get(base, "/console/topics?size=1000000000")
    assert status == 200
    assert "page size capped at 500 (asked for 1000000000)" in text
    status, _h, text = get(base, f"/console/topics/{data.TOPIC}/0?limit=99999999999")
    assert status == 200
    assert "page size capped at 500" in text
    assert text.count('class="record-link"') == len(data.RECORDS)


def test_read_only_and_still_serving(console):
    broker, base = console
    for method in ("PUT", "DELETE"):
        status, headers, text = get(base, f"/console/topics/{data.TOPIC}", method=method)
        assert status == 405
        assert headers["allow"] == "GET, HEAD"
        assert message(text) == "the console answers GET and HEAD, and POST for its forms only"
    # A read-only console (the default) refuses every action, confirmation
    # page or POST, with a 403 that says why; the topic stays.
    refusal = (
        "the console is read-only (console.read.only=true): creating and deleting topics, "
        "adding partitions and resetting offsets are turned off"
    )
    for path, method in (
        (f"/console/topics/{data.TOPIC}", "POST"),
        (f"/console/actions/delete-topic?topic={data.TOPIC}", "GET"),
        (f"/console/actions/delete-topic?topic={data.TOPIC}", "POST"),
        ("/console/actions/create-topic?name=x", "POST"),
    ):
        status, headers, text = get(base, path, method=method)
        assert (status, message(text)) == (403, refusal), (path, method, text)
    status, _h, text = get(base, f"/console/topics/{data.TOPIC}")
    assert 'id="delete-topic"' not in text and '<span class="mode" id="mode">read-only' in text
    status, headers, text = get(base, "/console/", method="HEAD")
    assert (status, headers["content-type"], text) == (200, "text/html; charset=utf-8", "")
    status, _h, _text = get(base, "/console")  # redirected to /console/
    assert status == 200
    # After every bad request above the broker still answers both listeners.
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert data.TOPIC in admin.list_topics(timeout=10).topics
    assert get(base, "/console/")[0] == 200
    assert "Traceback" not in broker.log()


FLOOD_PATHS = [
    "/console/",
    "/console/topics?size=500",
    f"/console/topics/{data.TOPIC}",
    f"/console/topics/{data.TOPIC}/0?limit=500",
    f"/console/topics/{data.TOPIC}/0/2",
    f"/console/groups/{data.GROUP}",
    *[b[0] for b in BAD],
]


def test_a_flood_of_console_requests_beside_producers(console):
    """Four threads request every page and every bad URL while a producer
    writes rounds of records with acks=all: each record is acknowledged, each
    answer is a page (200, 400, 404) or the console's "busy" (503), and
    nothing reaches the log as a traceback."""
    broker, base = console
    stop = threading.Event()
    answers, failures = [], []

    def flood():
        i = 0
        while not stop.is_set():
            path = FLOOD_PATHS[i % len(FLOOD_PATHS)]
            i += 1
            try:
                answers.append(get(base, path)[0])
            except Exception as exc:  # a refused or dropped connection
                failures.append((path, repr(exc)))

    threads = [threading.Thread(target=flood) for _ in range(4)]
    for thread in threads:
        thread.start()
    rounds = []
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        delivered = []
        # Rounds of 100 records, each flushed, until the console has served
        # 300 requests meanwhile (at most 300 rounds).
        for round_no in range(300):
            started = time.perf_counter()
            for i in range(100):
                producer.produce(
                    "console-flood",
                    value=b"v%d" % (round_no * 100 + i),
                    on_delivery=lambda e, m: delivered.append(e),
                )
            assert producer.flush(60) == 0
            rounds.append(time.perf_counter() - started)
            if len(answers) >= 300 and round_no >= 9:
                break
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert len(delivered) == 100 * len(rounds) and not any(delivered), delivered[:3]
    assert not failures, failures[:3]
    # 503: over the console's share of the reactor (pluglog.console.budget).
    assert answers and set(answers) <= {200, 400, 404, 503}, set(answers)
    assert "Traceback" not in broker.log()
    print(
        f"{len(delivered)} records in {len(rounds)} flushed rounds (slowest "
        f"{max(rounds) * 1000:.0f} ms) beside {len(answers)} console requests"
    )


def test_topics_page_with_1000_topics(console):
    """Answers in under 1 s, 50 rows a page; the broker's own measure
    (Server-Timing) is checked beside the wall clock of the round trip."""
    broker, base = console
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    names = [f"load-{i:04d}" for i in range(1000)]
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(120)
    total = len(admin.list_topics(timeout=30).topics)  # console-demo, __consumer_offsets too
    assert total >= len(names) + 2
    pages = -(-total // 50)
    timings = []
    for page in (1, 10, 20):
        started = time.perf_counter()
        status, headers, text = get(base, f"/console/topics?page={page}")
        wall = time.perf_counter() - started
        server = float(re.match(r"render;dur=([\d.]+)", headers["server-timing"]).group(1))
        timings.append((wall, server))
        assert status == 200
        assert f"{total} topic(s); page {page} of {pages}." in text
        assert text.count('<tr><td><a href="/console/topics/') == 50
        assert wall < 1.0, timings
        assert server < 1000, timings
    status, _h, text = get(base, f"/console/topics?page={pages}")
    assert text.count('<tr><td><a href="/console/topics/') == total - 50 * (pages - 1)
    print(f"topics page with {total} topics (wall s, broker ms):", timings)
    status, _h, text = get(base, "/console/topics?q=LOAD-099&size=500")
    assert "10 topic(s) matching “LOAD-099”; page 1 of 1." in text
    assert text.count('<tr><td><a href="/console/topics/load-099') == 10
    status, _h, text = get(base, "/console/")
    assert status == 200
    assert f'<a href="/console/topics" id="topics-link">{total}</a>' in text

"""The console's record browser reads both tiers, in a real browser.

A real broker process with its console (``--http``), a real
``moto_server`` S3 and the real boto3 client (as in
test_tiered_storage.py, whose helpers this test shares), and headless
Chromium driven by Selenium (as in test_console_browser.py). A tiered
topic's early segments are uploaded and deleted locally; the partition
page then shows the records from offset 0, which only the remote tier
holds (read through the fetch path's remote reads, with a cold cache:
the page waits for the bytes), and pages across the boundary between the
tiers; the record page shows a remote record.
"""

import confluent_kafka
import pytest
from selenium.webdriver.common.by import By

from tests.broker_process import free_port
from tests.integration.chromium import Pages, chromium
from tests.integration.clients import create_topic
from tests.integration.console_actions import _wait_http
from tests.integration.test_tiered_ops import earliest_local, new_bucket
from tests.integration.test_tiered_storage import (
    TOPIC_CONFIG,
    settled_segments,
    tiered_broker,
    wait_for,
)

# A broker, moto and headless Chromium (the cost marker, conftest.py).
pytestmark = pytest.mark.browser

COUNT = 3000


def key(i):
    return f"key-{i:05d}"


def value(i):
    return f"value {i:05d} " + "x" * 60


def rows(browser):
    """``[(offset, key, value)]`` of the records table."""
    out = []
    for row in browser.find_elements(By.CSS_SELECTOR, "#records tbody tr"):
        cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
        out.append((int(cells[0]), cells[2], cells[3]))
    return out


def test_the_browser_shows_records_only_the_remote_tier_holds(moto, tmp_path):
    bucket = new_bucket(moto)
    http = free_port()
    broker = tiered_broker(tmp_path, moto.url, bucket)
    broker.extra_args += ["--http", f"tcp:{http}:interface=127.0.0.1"]
    broker.start()
    driver = None
    try:
        _wait_http(broker, http)
        topic = "history"
        create_topic(broker.bootstrap, topic, partitions=1, config=TOPIC_CONFIG)
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.num.messages": 50}
        )
        for i in range(COUNT):
            producer.produce(topic, key=key(i), value=value(i), partition=0)
            producer.poll(0)
        assert producer.flush(30) == 0
        # The early segments are uploaded, then deleted locally.
        wait_for(lambda: earliest_local(broker.bootstrap, topic) > 100, what="local retention")
        settled_segments(broker, topic)
        local_start = earliest_local(broker.bootstrap, topic)
        assert 100 < local_start < COUNT

        driver = chromium(tmp_path / "chromium-profile")
        pages = Pages(driver, str(tmp_path))
        driver.get(f"{broker.http}/console/topics/{topic}/0?limit=5")
        pages.wait_for("#records")
        assert pages.text("#start-offset") == "0"
        assert pages.text("#local-start-offset") == str(local_start)
        assert rows(driver) == [(i, key(i), value(i)) for i in range(5)]
        pages.shot("remote-records")

        # The next page continues in the remote tier.
        pages.click(By.ID, "next-page")
        pages.wait_for("#records")
        assert rows(driver) == [(i, key(i), value(i)) for i in range(5, 10)]

        # A page across the boundary: remote records, then local ones.
        first = local_start - 2
        driver.get(f"{broker.http}/console/topics/{topic}/0?offset={first}&limit=4")
        pages.wait_for("#records")
        assert rows(driver) == [(i, key(i), value(i)) for i in range(first, first + 4)]
        pages.shot("across-tiers")

        # One remote record's own page.
        driver.get(f"{broker.http}/console/topics/{topic}/0?offset=0&limit=2")
        pages.wait_for("#records")
        pages.click(By.LINK_TEXT, "1")
        assert pages.wait_text("#record-offset") == "1"
        assert pages.text("#record-key") == key(1)
        assert pages.text("#record-value") == value(1)
        pages.shot("remote-record")
    finally:
        if driver is not None:
            driver.quit()
        broker.stop()

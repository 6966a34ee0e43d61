"""The console in a real browser: headless Chromium driven by Selenium.

One broker (with :mod:`tests.integration.console_data`'s records and
groups) and one browser session for the module. The test clicks through
the pages as an operator would: overview → topics → topic → partition →
message, then consumer groups → group; it asserts on the text the page
shows (a known key and value, a known lag), that HTML held in keys and
values is shown as text rather than rendered, and that the group page's
script refreshes the lag when a new offset is committed. Each page is
saved as a PNG screenshot in the test's tmp dir.

A read-only console (this broker's) refuses an action with a page that
says so. Chromium is started by :mod:`tests.integration.chromium`.
"""

import pytest
from confluent_kafka import Consumer, TopicPartition
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration import console_data as data
from tests.integration.chromium import Pages, chromium

# A broker and headless Chromium (the cost marker, conftest.py).
pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    yield from data.serve(tmp_path_factory.mktemp("console-browser"))


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


def test_click_through_topics_and_groups(console, browser, tmp_path):
    broker, base = console
    pages = Pages(browser, str(tmp_path))

    browser.get(base + "/console/")
    pages.wait_for("#brokers")
    assert pages.text("#controller") == "0"
    assert pages.text("#under-replicated") == "0"
    assert pages.text("#offline") == "0"
    assert "127.0.0.1" in pages.text("#brokers")
    pages.shot("overview")

    pages.click(By.ID, "topics-link")
    pages.wait_for("#topics")
    pages.shot("topics")
    pages.click(By.LINK_TEXT, data.TOPIC)
    assert pages.wait_text("#topic-name") == data.TOPIC
    leaders = [
        row.find_elements(By.TAG_NAME, "td")[1].text
        for row in browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")
    ]
    assert leaders == ["0", "0"]
    pages.shot("topic")

    pages.click(By.CSS_SELECTOR, "a.partition-link")  # partition 0
    pages.wait_for("#records")
    rows = browser.find_elements(By.CSS_SELECTOR, "#records tbody tr")
    assert len(rows) == len(data.RECORDS)
    cells = [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    assert cells[0][2:4] == ["order-1", "first value"]
    assert cells[2][2] == data.HTML  # the key's markup is text on the page
    assert cells[3][3] == "ff 00 fe"  # not UTF-8: hex
    assert cells[4][2] == "null"
    for tag in ("b", "u", "script"):  # the data's markup made no element
        assert not browser.find_elements(By.CSS_SELECTOR, f"#records {tag}"), tag
    pages.shot("partition")

    pages.click(By.LINK_TEXT, "2")  # the record whose key and value are HTML
    assert pages.wait_text("#record-offset") == "2"
    assert pages.text("#record-key") == data.HTML
    value = data.RECORDS[2][1].decode()
    assert pages.text("#record-value") == value
    assert pages.text("#headers") == "h <u>"
    # Shown, not rendered: no <b>, <u> or <script> element came from the data,
    # and the script in the value did not run.
    for tag in ("b", "u", "script"):
        assert not browser.find_elements(By.CSS_SELECTOR, f"#main {tag}"), tag
    assert browser.title != "owned"
    pages.shot("message")

    browser.get(base + f"/console/topics/{data.TOPIC}/0/1")
    assert pages.wait_text("#record-value") == "second value"
    assert pages.text("#record-key") == "order-2"

    pages.click(By.LINK_TEXT, "Consumer groups")
    pages.wait_for("#groups")
    assert data.HTML_GROUP in pages.text("#groups")  # its id shown as text
    pages.shot("groups")
    pages.click(By.LINK_TEXT, data.GROUP)
    assert pages.wait_text("#group-id") == data.GROUP
    assert pages.text("#group-state") == "Empty"
    assert pages.text("#total-lag") == str(sum(data.LAG.values()))
    lags = pages.texts("#offsets td.lag")
    assert lags == [str(data.LAG[0]), str(data.LAG[1])]
    pages.shot("group")

    # The page refreshes itself (static/console.js): commit one more record
    # on partition 0 and the lag shown drops by one without a reload (the
    # marker set on this document survives).
    browser.execute_script("window.consoleTestMarker = 'same document'")
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": data.GROUP,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(data.TOPIC, 0, data.COMMITTED[0] + 1)], asynchronous=False
        )
    finally:
        consumer.close()
    want = str(sum(data.LAG.values()) - 1)
    want_lags = [str(data.LAG[0] - 1), str(data.LAG[1])]

    def refreshed(driver):
        lags = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#offsets td.lag")]
        return driver.find_element(By.ID, "total-lag").text == want and lags == want_lags

    # The page replaces these elements on each refresh, so one found may be
    # gone by the time its text is read (stale): that is a retry, not a failure.
    WebDriverWait(browser, 15, ignored_exceptions=(StaleElementReferenceException,)).until(
        refreshed
    )
    assert browser.execute_script("return window.consoleTestMarker") == "same document"
    pages.shot("group-live")

    browser.get(base + "/console/topics/nope")
    assert pages.wait_text("#error-message") == "no topic 'nope'"
    pages.shot("not-found")

    # Read-only (the default): no action forms, and an action's URL is refused.
    browser.get(base + f"/console/topics/{data.TOPIC}")
    pages.wait_for("#partitions")
    assert pages.text("#mode") == "read-only"
    assert not browser.find_elements(By.ID, "delete-topic-form")
    browser.get(base + f"/console/actions/delete-topic?topic={data.TOPIC}")
    assert pages.wait_text("#error-message").startswith(
        "the console is read-only (console.read.only=true)"
    )
    assert browser.find_element(By.TAG_NAME, "h1").text == "Forbidden"
    pages.shot("read-only-refusal")
    print("screenshots:", *pages.saved, sep="\n  ")
    assert len(pages.saved) == 10

"""The console in a real browser: headless Chromium driven by Selenium.

One broker (with :mod:`tests.integration.console_data`'s records and
groups) and one browser session for the module. The test clicks through
the pages as an operator would: overview → topics → topic → partition →
message, then consumer groups → group; it asserts on the text the page
shows (a known key and value, a known lag), that HTML held in keys and
values is shown as text rather than rendered, and that the group page's
script refreshes the lag when a new offset is committed. Each page is
saved as a PNG screenshot in the test's tmp dir.

Chromium runs with the flags that keep it off the network (the machine has
none) and a fresh profile; Selenium is given the driver's path, so it never
tries to download one.
"""

import os
import shutil

import pytest
from confluent_kafka import Consumer, TopicPartition
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration import console_data as data

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

# A broker and headless Chromium (the cost marker, conftest.py). Debian's
# chromium and chromium-driver are installed by scripts/install-and-test.sh:
# without them the test fails rather than skips.
pytestmark = pytest.mark.browser

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
]


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    yield from data.serve(tmp_path_factory.mktemp("console-browser"))


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    service = webdriver.ChromeService(executable_path=DRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


class Pages:
    """Clicks, waits and one screenshot per page."""

    def __init__(self, driver, shots):
        self.driver = driver
        self.shots = shots
        self.saved = []

    def shot(self, name):
        path = os.path.join(self.shots, f"{len(self.saved) + 1:02d}-{name}.png")
        assert self.driver.save_screenshot(path), path
        assert os.path.getsize(path) > 1000
        self.saved.append(path)

    def click(self, by, value):
        self.driver.find_element(by, value).click()

    def text(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css).text

    def wait_for(self, css):
        return WebDriverWait(self.driver, 10).until(lambda d: d.find_element(By.CSS_SELECTOR, css))


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
    assert pages.wait_for("#topic-name").text == data.TOPIC
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
    assert pages.wait_for("#record-offset").text == "2"
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
    assert pages.wait_for("#record-value").text == "second value"
    assert pages.text("#record-key") == "order-2"

    pages.click(By.LINK_TEXT, "Consumer groups")
    pages.wait_for("#groups")
    assert data.HTML_GROUP in pages.text("#groups")  # its id shown as text
    pages.shot("groups")
    pages.click(By.LINK_TEXT, data.GROUP)
    assert pages.wait_for("#group-id").text == data.GROUP
    assert pages.text("#group-state") == "Empty"
    assert pages.text("#total-lag") == str(sum(data.LAG.values()))
    lags = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#offsets td.lag")]
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
    WebDriverWait(browser, 15).until(lambda d: d.find_element(By.ID, "total-lag").text == want)
    assert browser.execute_script("return window.consoleTestMarker") == "same document"
    lags = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#offsets td.lag")]
    assert lags == [str(data.LAG[0] - 1), str(data.LAG[1])]
    pages.shot("group-live")

    browser.get(base + "/console/topics/nope")
    assert pages.wait_for("#error-message").text == "no topic 'nope'"
    pages.shot("not-found")
    print("screenshots:", *pages.saved, sep="\n  ")
    assert len(pages.saved) == 9

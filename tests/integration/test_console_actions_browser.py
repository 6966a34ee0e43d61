"""The console's actions and lag chart in a real browser (headless Chromium).

Two brokers with an acting console (``console.read.only=false``): one
without security, one with SASL and Kafka's ACL authorizer. In Chromium an
operator creates a topic through the topics page's form and its
confirmation page, and a real Kafka client then finds it; the group page
draws the lag chart from the broker's own samples; on the secured broker
the operator logs in through the login form and an action the ACLs deny
shows the denial. Each step's page is saved as a PNG screenshot.
"""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.integration.chromium import Pages, chromium
from tests.integration.console_actions import acting_broker, secured_broker
from tests.integration.secure_broker import sasl_props

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def acting(tmp_path_factory):
    broker = acting_broker(tmp_path_factory.mktemp("console-acting-browser"))
    yield broker
    broker.stop()


def fill(browser, element_id, value):
    field = browser.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value)


def test_create_a_topic_with_confirmation(acting, browser, tmp_path):
    pages = Pages(browser, str(tmp_path))
    admin = AdminClient({"bootstrap.servers": acting.bootstrap})
    browser.get(acting.http + "/console/topics")
    pages.wait_for("#create-topic-form")
    assert pages.text("#mode") == "actions on"
    fill(browser, "new-topic-name", "from-the-browser")
    fill(browser, "new-topic-partitions", "2")
    pages.click(By.ID, "create-topic")
    assert pages.wait_text("#summary") == (
        "Create topic 'from-the-browser' with 2 partition(s) and replication factor 1."
    )
    pages.shot("create-confirm")
    assert "from-the-browser" not in admin.list_topics(timeout=10).topics  # not before confirming

    pages.click(By.ID, "confirm")
    outcome = pages.wait_text("#outcome")
    assert outcome == "Done: created topic 'from-the-browser' (2 partition(s))", outcome
    pages.shot("create-done")
    topic = admin.list_topics(timeout=10).topics["from-the-browser"]
    assert len(topic.partitions) == 2
    pages.click(By.ID, "continue")
    assert pages.wait_text("#topic-name") == "from-the-browser"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 2


def test_lag_chart_from_the_brokers_samples(acting, browser, tmp_path):
    pages = Pages(browser, str(tmp_path))
    producer = Producer({"bootstrap.servers": acting.bootstrap})
    consumer = Consumer({"bootstrap.servers": acting.bootstrap, "group.id": "charting"})

    def produce(count):
        for i in range(count):
            producer.produce("charted", value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0

    def commit(offset):
        consumer.commit(offsets=[TopicPartition("charted", 0, offset)], asynchronous=False)

    # Lag 8, then 14, then 6, each held for a few of the broker's 200 ms samples.
    produce(12)
    commit(4)
    time.sleep(0.7)
    produce(6)
    time.sleep(0.7)
    commit(12)
    consumer.close()
    time.sleep(0.7)
    browser.get(acting.http + "/console/groups/charting")
    chart = pages.wait_for("#lag-chart")
    assert int(chart.get_attribute("data-samples")) >= 4
    assert pages.text("#total-lag") == "6"
    assert (pages.text("#chart-latest"), pages.text("#chart-max")) == ("6", "14")
    points = browser.find_element(By.CSS_SELECTOR, "#lag-chart polyline").get_attribute("points")
    heights = {float(p.split(",")[1]) for p in points.split()}
    assert len(heights) >= 3  # the line shows 8, 14 and 6 at different heights
    pages.shot("lag-chart")


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    users = (("admin", "admin-pw"), ("bob", "bob-pw"))
    broker = secured_broker(tmp_path_factory.mktemp("console-secured-browser"), *users)
    yield broker
    broker.stop()


def test_an_action_denied_by_an_acl_shows_the_denial(secured, browser, tmp_path):
    pages = Pages(browser, str(tmp_path))
    browser.delete_all_cookies()
    browser.get(secured.http + "/console/topics")
    pages.wait_for("#login-form")  # security on: the login form first
    fill(browser, "login-user", "bob")
    fill(browser, "login-password", "bob-pw")
    pages.shot("login")
    pages.click(By.ID, "login-submit")
    pages.wait_for("#create-topic-form")  # back on the page asked for
    assert pages.text("#viewer") == "bob"
    fill(browser, "new-topic-name", "not-for-bob")
    pages.click(By.ID, "create-topic")
    pages.wait_for("#confirm")
    pages.click(By.ID, "confirm")
    outcome = pages.wait_for("#outcome")
    assert outcome.text.startswith(
        "Denied: User:bob is not authorized to create topic: "
        "not-for-bob TOPIC_AUTHORIZATION_FAILED"
    ), outcome.text
    assert "denied" in outcome.get_attribute("class")
    pages.shot("acl-denied")
    admin = AdminClient({"bootstrap.servers": secured.sasl, **sasl_props("admin", "admin-pw")})
    assert "not-for-bob" not in admin.list_topics(timeout=10).topics
    pages.click(By.ID, "logout")
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "login-form"))

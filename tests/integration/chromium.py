"""Headless Chromium for the console's browser tests, driven by Selenium.

Chromium runs with the flags that keep it off the network (the machine has
none) and a fresh profile; Selenium is given the driver's path, so it never
tries to download one. Debian's chromium and chromium-driver are installed
by scripts/install-and-test.sh: without them the tests fail rather than skip.
"""

import os
import shutil

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

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


def chromium(profile_dir):
    """A started headless Chromium session with its profile in ``profile_dir``."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    service = webdriver.ChromeService(executable_path=DRIVER)
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    return driver


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

    # Live pages (console.js, data-live) replace their <main> every few
    # seconds, so an element found may be gone when its text is read: these
    # read the text in the same wait and find the element again if so.

    def text(self, css):
        return self.wait_text(css)

    def texts(self, css):
        """The texts of every element matching ``css``, read together."""
        return self._wait(lambda d: [e.text for e in d.find_elements(By.CSS_SELECTOR, css)])

    def wait_text(self, css):
        """Wait for an element matching ``css``; its text."""
        return self._wait(lambda d: d.find_element(By.CSS_SELECTOR, css).text)

    def wait_for(self, css):
        return WebDriverWait(self.driver, 10).until(lambda d: d.find_element(By.CSS_SELECTOR, css))

    def _wait(self, read):
        return (
            WebDriverWait(self.driver, 10, ignored_exceptions=(StaleElementReferenceException,))
            .until(lambda d: _Found(read(d)))
            ._value
        )


class _Found:
    """A read's result, true even when the result is empty or ''."""

    def __init__(self, value):
        self._value = value

    def __bool__(self):
        return True

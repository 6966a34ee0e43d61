"""Headless Chromium for the console's browser tests, driven by Selenium.

Chromium runs with the flags that keep it off the network (the machine has
none) and a fresh profile; Selenium is given the driver's path, so it never
tries to download one. Debian's chromium and chromium-driver are installed
by scripts/install-and-test.sh: without them the tests fail rather than skip.
"""

import os
import shutil

from selenium import webdriver
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

    def text(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css).text

    def wait_for(self, css):
        return WebDriverWait(self.driver, 10).until(lambda d: d.find_element(By.CSS_SELECTOR, css))

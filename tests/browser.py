"""A real browser for the tests of HTML pages (tests/test_report_browser.py): headless Chromium
driven through Selenium and chromedriver, as Debian packages them (``chromium``,
``chromium-driver``: .ci/run installs them; ``selenium`` is in the ``test`` extra).

:func:`start` opens one session (a second or two: a test module keeps one); :meth:`Browser.open`
loads a ``file://`` page and waits, polling, until the page says it is drawn
(``window.fatbinkitReady``); :meth:`Browser.log` is the browser's console as Chromium reports it
(``goog:loggingPrefs``), every entry since the session began. Every HTTP(S) request goes to a
proxy that does not exist, so a page that needs the network fails to load something, and says
so in the log. ``FATBINKIT_CHROMIUM`` and ``FATBINKIT_CHROMEDRIVER`` name other binaries.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

CHROMIUM = Path(os.environ.get("FATBINKIT_CHROMIUM", "/usr/bin/chromium"))
CHROMEDRIVER = Path(os.environ.get("FATBINKIT_CHROMEDRIVER", "/usr/bin/chromedriver"))
WIDTH, HEIGHT = 1400, 1000

T = TypeVar("T")


def missing() -> str | None:
    """Why no browser session can start here (None: it can): what is not installed."""
    lacking = [f"{what} ({how})" for what, ok, how in (
        (str(CHROMIUM), CHROMIUM.is_file(), "Debian package chromium"),
        (str(CHROMEDRIVER), CHROMEDRIVER.is_file(), "Debian package chromium-driver"),
        ("selenium", importlib.util.find_spec("selenium") is not None,
         "pip install 'fatbinkit[test]'"),
    ) if not ok]
    return f"no {', no '.join(lacking)}: .ci/run installs them" if lacking else None


class Browser:
    """One headless Chromium session."""

    def __init__(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-gpu", "--no-first-run", "--disable-extensions",
                    "--disable-background-networking", f"--window-size={WIDTH},{HEIGHT}",
                    # offline: any http(s) request goes to a closed port and fails
                    "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
        self._log: list[dict[str, Any]] = []
        self.clicked = False  # since the page was loaded

    def close(self) -> None:
        self.driver.quit()

    def open(self, page: Path, ready: str = "window.fatbinkitReady === true",
             timeout: float = 60.0) -> None:
        """Load ``page`` (a file) and wait until the JavaScript expression ``ready`` is true."""
        self.driver.get(page.resolve().as_uri())
        self.clicked = False
        self.wait(lambda: self.js(f"return {ready};") is True, timeout,
                  f"{page.name}: {ready} (console: {self.log()[-5:]})")

    def js(self, script: str, *args: Any) -> Any:
        """Run ``script`` (a function body: ``return`` gives its value) in the page."""
        return self.driver.execute_script(script, *args)

    def log(self) -> list[dict[str, Any]]:
        """Every console entry since the session began (``level``, ``message``, ...)."""
        self._log += self.driver.get_log("browser")  # type: ignore[no-untyped-call]
        return list(self._log)

    def severe(self, since: int = 0) -> list[str]:
        """The messages of the SEVERE entries of :meth:`log` from entry ``since`` on (errors,
        uncaught exceptions, failed loads)."""
        return [e["message"] for e in self.log()[since:] if e["level"] == "SEVERE"]

    def find(self, selector: str) -> Any:
        """The first element ``selector`` (CSS) matches (a Selenium WebElement)."""
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def attrs(self, selector: str, names: Sequence[str]) -> list[dict[str, str | None]]:
        """Of each element ``selector`` matches, in document order, the attributes ``names``."""
        found: list[dict[str, str | None]] = self.js(
            "return [...document.querySelectorAll(arguments[0])].map((e) => "
            "Object.fromEntries(arguments[1].map((n) => [n, e.getAttribute(n)])));",
            selector, list(names))
        return found

    def click(self, element: Any) -> None:
        """A real click (mouse moved onto the middle of ``element``, pressed, released), the
        element scrolled to the middle of the window first."""
        from selenium.webdriver.common.action_chains import ActionChains

        self.js("arguments[0].scrollIntoView({block: 'center', inline: 'center'});", element)
        self.clicked = True
        ActionChains(self.driver).move_to_element(element).click().perform()

    def wait(self, condition: Callable[[], T], timeout: float, what: str) -> T:
        """Poll ``condition`` until it returns something true; AssertionError after
        ``timeout`` seconds, naming ``what`` was awaited."""
        end = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > end:
                raise AssertionError(f"not true after {timeout:g} s: {what}")
            time.sleep(0.05)


def start() -> Browser:
    """A new session; the caller closes it (:meth:`Browser.close`). Check :func:`missing`
    first."""
    return Browser()

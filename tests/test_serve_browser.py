"""The pages of `gpuledger serve` in Debian's headless Chromium, driven by Selenium through
Debian's chromedriver (nothing downloads a browser or a driver)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve_helpers import Served, make_store, make_tokens, serving

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium or chromedriver is not on PATH (Debian packages `chromium` and "
    "`chromium-driver`; .ci/run installs them)",
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("browse")
    store = make_store(f"sqlite:///{tmp / 'ledger.db'}", tmp, late=True)
    tokens = make_tokens(store)
    with serving(store) as base:
        yield Served(base, store, tokens)
    store.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=420,900",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(DRIVER)))
    driver.implicitly_wait(10)  # an element the next page brings is waited for, not missed
    try:
        yield driver
    finally:
        driver.quit()


def _follow(driver: Any, by: str, selector: str) -> None:
    """Click a link (or button) that navigates, and wait until the new page has replaced the
    old one: without the wait the next read may still see the old page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(by, selector).click()
    WebDriverWait(driver, 30).until(expected_conditions.staleness_of(page))


def _sign_in(driver: Any, base: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/login")
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    driver.find_element(By.NAME, "token").send_keys(token)
    page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, "form[action='/login'] button").click()
    # the click only submits: wait until the answer has replaced the sign-in page, or the next
    # read may still see the form (CI once read the old page before the POST's answer arrived)
    WebDriverWait(driver, 30).until(expected_conditions.staleness_of(page))


def test_finance_clicks_from_an_invoice_down_to_an_entrys_proof(
    served: Served, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    _sign_in(driver, served.base, served.tokens["operator"])
    assert "Operator" in driver.find_element(By.TAG_NAME, "h1").text
    _follow(driver, By.LINK_TEXT, "Invoices")
    _follow(driver, By.LINK_TEXT, "INV-2026-01")
    assert "Invoice INV-2026-01" in driver.find_element(By.TAG_NAME, "h1").text
    _follow(driver, By.CSS_SELECTOR, "a.entry")
    heading = driver.find_element(By.TAG_NAME, "h1").text
    assert heading.startswith("Entry #")
    root = driver.find_element(By.ID, "root").text
    seq = int(heading.removeprefix("Entry #"))
    from base64 import b64encode

    from ledger import read

    proof = read.entry_proof(served.store, seq)
    assert proof is not None and root == b64encode(proof.root).decode()
    # at phone width nothing runs off the page: the document is no wider than the window
    for window in (420, 1366):
        driver.set_window_size(window, 900)
        width = driver.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert width[0] <= width[1], window
        assert driver.find_element(By.ID, "root").text == root


def test_a_customer_sees_its_own_invoices_only(served: Served, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    _sign_in(driver, served.base, served.tokens["bravo"])
    _follow(driver, By.LINK_TEXT, "Invoices")
    links = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "table a")]
    assert links == ["bravo-INV-2026-01"]
    driver.get(f"{served.base}/invoices/acme/INV-2026-01")
    assert "403" in driver.find_element(By.TAG_NAME, "h1").text
    assert "acme" not in driver.page_source.replace("/invoices/acme", "")


def test_a_wrong_token_is_told_so_and_signs_in_nobody(served: Served, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    _sign_in(driver, served.base, "gpl_000000000000_wrong")
    assert "not valid" in driver.find_element(By.TAG_NAME, "main").text
    driver.get(f"{served.base}/invoices")
    assert "401" in driver.find_element(By.TAG_NAME, "h1").text


def test_finance_drills_from_an_invoice_to_a_finding_and_the_proof_of_an_entry_it_cites(
    served: Served, browser: Any
) -> None:
    """invoice → line → finding → a cited entry → its inclusion proof, each by a click."""
    from base64 import b64encode

    from selenium.webdriver.common.by import By

    from ledger import read

    driver = browser
    _sign_in(driver, served.base, served.tokens["acme"])
    _follow(driver, By.LINK_TEXT, "Invoices")
    _follow(driver, By.LINK_TEXT, "INV-2026-01")
    assert "Invoice INV-2026-01" in driver.find_element(By.TAG_NAME, "h1").text
    _follow(driver, By.CSS_SELECTOR, "a.line")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Line INV-2026-01:A-100"
    _follow(driver, By.LINK_TEXT, "restart_lost")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Finding: restart_lost"
    cited = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "a.entry")]
    (failed,) = [
        e.seq for e in read.entries(served.store, tenant="acme") if e.id == "j-100:failed:1"
    ]
    assert f"#{failed}" in cited
    _follow(driver, By.LINK_TEXT, f"#{failed}")
    assert driver.find_element(By.TAG_NAME, "h1").text == f"Entry #{failed}"
    assert "job.failed" in driver.find_element(By.CSS_SELECTOR, "p.sub").text
    proof = read.entry_proof(served.store, failed)
    assert proof is not None
    assert driver.find_element(By.ID, "root").text == b64encode(proof.root).decode()
    assert driver.find_element(By.ID, "leaf").text == b64encode(proof.leaf_hash).decode()


def test_finance_filters_findings_and_shares_the_link(served: Served, browser: Any) -> None:
    """The filter form's answer is a link: opened again, it shows the same findings."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.select import Select

    driver = browser
    _sign_in(driver, served.base, served.tokens["operator"])
    _follow(driver, By.LINK_TEXT, "Findings")
    Select(driver.find_element(By.NAME, "bearer")).select_by_value("disputed")
    _follow(driver, By.CSS_SELECTOR, "form.filters button")
    shared = driver.current_url
    assert "bearer=disputed" in shared
    shown = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "a.finding")]
    assert shown == ["idle_unexplained", "idle_unexplained"]  # acme's and bravo's
    driver.get(served.base + "/")
    driver.get(shared)
    assert [a.text for a in driver.find_elements(By.CSS_SELECTOR, "a.finding")] == shown


def test_an_operator_goes_from_the_misses_by_cause_to_the_devices_around_one(
    served: Served, browser: Any
) -> None:
    """Promises → a cause → the device timeline around one of its misses → its story."""
    from selenium.webdriver.common.by import By

    driver = browser
    _sign_in(driver, served.base, served.tokens["operator"])
    _follow(driver, By.LINK_TEXT, "Promises")
    causes = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "a.cause")]
    assert causes == ["fault", "capacity"]  # RULES.md's order
    _follow(driver, By.LINK_TEXT, "capacity")
    assert "cause=capacity" in driver.current_url
    misses = driver.find_elements(By.CSS_SELECTOR, "table.misses a.story")
    assert [a.text for a in misses] == ["promise-j-200", "bravo-promise-j-200"]
    _follow(driver, By.CSS_SELECTOR, "table.misses a.devices")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Devices around promise-j-200"
    assert driver.find_element(By.TAG_NAME, "h2").text.startswith("Why: capacity")
    states = [
        td.text for td in driver.find_elements(By.CSS_SELECTOR, "table.device td:nth-child(4)")
    ]
    assert set(states) == {"faulted"}
    _follow(driver, By.CSS_SELECTOR, "p.sub a.story")
    assert "promise-j-200" in driver.find_element(By.TAG_NAME, "h1").text
    driver.get(served.base + "/capacity")
    assert driver.find_element(By.TAG_NAME, "h1").text == "Capacity in time"

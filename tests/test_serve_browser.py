"""The pages of `gpuledger serve` in Debian's headless Chromium, driven by Selenium through
Debian's chromedriver (nothing downloads a browser or a driver)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

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
    store = make_store(f"sqlite:///{tmp / 'ledger.db'}", tmp)
    tokens = make_tokens(store)
    with serving(store) as base:
        yield Served(base, store, tokens)
    store.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
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


def _sign_in(driver: object, base: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/login")  # type: ignore[attr-defined]
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    driver.find_element(By.NAME, "token").send_keys(token)  # type: ignore[attr-defined]
    page = driver.find_element(By.TAG_NAME, "html")  # type: ignore[attr-defined]
    driver.find_element(  # type: ignore[attr-defined]
        By.CSS_SELECTOR, "form[action='/login'] button"
    ).click()
    # the click only submits: wait until the answer has replaced the sign-in page, or the next
    # read may still see the form (CI once read the old page before the POST's answer arrived)
    WebDriverWait(driver, 30).until(  # type: ignore[type-var]
        expected_conditions.staleness_of(page)
    )


def test_finance_clicks_from_an_invoice_down_to_an_entrys_proof(
    served: Served, browser: object
) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    _sign_in(driver, served.base, served.tokens["operator"])
    assert "Operator" in driver.find_element(By.TAG_NAME, "h1").text  # type: ignore[attr-defined]
    driver.find_element(By.LINK_TEXT, "Invoices").click()  # type: ignore[attr-defined]
    driver.find_element(By.LINK_TEXT, "INV-2026-01").click()  # type: ignore[attr-defined]
    assert "Invoice INV-2026-01" in (
        driver.find_element(By.TAG_NAME, "h1").text  # type: ignore[attr-defined]
    )
    driver.find_element(By.CSS_SELECTOR, "a.entry").click()  # type: ignore[attr-defined]
    heading = driver.find_element(By.TAG_NAME, "h1").text  # type: ignore[attr-defined]
    assert heading.startswith("Entry #")
    root = driver.find_element(By.ID, "root").text  # type: ignore[attr-defined]
    seq = int(heading.removeprefix("Entry #"))
    from base64 import b64encode

    from ledger import read

    proof = read.entry_proof(served.store, seq)
    assert proof is not None and root == b64encode(proof.root).decode()
    # at phone width nothing runs off the page: the document is no wider than the window
    for window in (420, 1366):
        driver.set_window_size(window, 900)  # type: ignore[attr-defined]
        width = driver.execute_script(  # type: ignore[attr-defined]
            "return [document.documentElement.scrollWidth, window.innerWidth]"
        )
        assert width[0] <= width[1], window
        assert driver.find_element(By.ID, "root").text == root  # type: ignore[attr-defined]


def test_a_customer_sees_its_own_invoices_only(served: Served, browser: object) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    _sign_in(driver, served.base, served.tokens["bravo"])
    driver.find_element(By.LINK_TEXT, "Invoices").click()  # type: ignore[attr-defined]
    links = [
        a.text
        for a in driver.find_elements(By.CSS_SELECTOR, "table a")  # type: ignore[attr-defined]
    ]
    assert links == ["bravo-INV-2026-01"]
    driver.get(f"{served.base}/invoices/acme/INV-2026-01")  # type: ignore[attr-defined]
    assert "403" in driver.find_element(By.TAG_NAME, "h1").text  # type: ignore[attr-defined]
    assert "acme" not in (
        driver.page_source.replace("/invoices/acme", "")  # type: ignore[attr-defined]
    )


def test_a_wrong_token_is_told_so_and_signs_in_nobody(served: Served, browser: object) -> None:
    from selenium.webdriver.common.by import By

    driver = browser
    _sign_in(driver, served.base, "gpl_000000000000_wrong")
    assert "not valid" in (
        driver.find_element(By.TAG_NAME, "main").text  # type: ignore[attr-defined]
    )
    driver.get(f"{served.base}/invoices")  # type: ignore[attr-defined]
    assert "401" in driver.find_element(By.TAG_NAME, "h1").text  # type: ignore[attr-defined]

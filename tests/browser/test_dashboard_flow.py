"""From sign-up to a working key, in a real headless Chromium.

One journey per test, the way a new user goes: sign up, create a key,
copy it, call the RPC endpoint with it, watch usage rise, rotate, revoke.
Each page visited is screenshotted; with ``UPDATE_SCREENSHOTS=1`` the PNGs
replace those in docs/screenshots/ (for the README), otherwise they go to
a temporary folder so a test run leaves the work tree clean.

The server under test is the real app (RPC + dashboard) on a real loopback
port; Playwright's async API runs inside the test's own event loop, the
same loop that serves the app, so there is no thread and no second loop.
The system Chromium is used (``apt-get install chromium``); Playwright
never downloads a browser here. Without Chromium the tests are skipped
with the reason, except on CI (``CI=true``), where a missing browser is a
failure.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.config import Config

pytestmark = pytest.mark.browser

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]
_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"browser tests cannot run on CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    explicit = os.environ.get("GATEWAY_CHROMIUM")
    if explicit:
        if not Path(explicit).is_file():
            _missing(f"GATEWAY_CHROMIUM={explicit} does not exist")
        return explicit
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    _missing("no Chromium found (apt-get install -y chromium, or set GATEWAY_CHROMIUM)")
    raise AssertionError("unreachable")  # pragma: no cover


@pytest.fixture
async def browser(chromium_path: str) -> AsyncIterator[Any]:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _missing("the playwright package is not installed (pip install '.[test]')")
    async with async_playwright() as pw:
        instance = await pw.chromium.launch(executable_path=chromium_path, args=LAUNCH_ARGS)
        try:
            yield instance
        finally:
            await instance.close()


@pytest.fixture
async def live_url(config: Config, aiohttp_server: Callable[..., Any]) -> str:
    """Base URL of the whole gateway (RPC + dashboard) on a real loopback port."""
    server: TestServer = await aiohttp_server(create_app(config))
    return str(server.make_url("")).rstrip("/")


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        return SCREENSHOTS
    return tmp_path


PASSWORD = "correct horse battery"


async def usage_total_reaches(page: Any, expected: str, within_s: float = 5.0) -> None:
    """Reload the usage page until its total shows ``expected``.

    Each worker sums usage in memory and writes it once a second (leased
    admission), so a page read right after the calls may show less.
    """
    deadline = time.monotonic() + within_s
    while True:
        if await page.get_by_test_id("usage-total").inner_text() == expected:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"usage total never reached {expected}")
        await asyncio.sleep(0.2)
        await page.reload()


CALL = {"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber", "params": []}


async def rpc(base: str, key: str) -> int:
    async with aiohttp.ClientSession() as http, http.post(f"{base}/bsc/{key}", json=CALL) as resp:
        await resp.read()
        return resp.status


async def shot(page: Any, screenshots: Path, name: str, **kwargs: Any) -> None:
    await page.screenshot(path=str(screenshots / f"{name}.png"), full_page=True, **kwargs)


async def test_signup_to_working_key(browser: Any, live_url: str, screenshots: Path) -> None:
    context = await browser.new_context(viewport={"width": 1200, "height": 800})
    await context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_url)
    page = await context.new_page()
    email = f"dev-{secrets.token_hex(3)}@example.com"

    # Sign up (lands on the keys page, logged in).
    await page.goto(f"{live_url}/dashboard/signup")
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await shot(page, screenshots, "signup")
    await page.get_by_role("button", name="Sign up").click()
    await page.wait_for_url(re.compile(r"/dashboard/keys"))
    nav = page.get_by_role("navigation", name="Dashboard")
    for link in ("API Keys", "Usage", "Plan"):
        await nav.get_by_role("link", name=link).wait_for()

    # Log out and back in.
    await page.get_by_role("button", name="Log out").click()
    await page.wait_for_url(re.compile(r"/dashboard/login"))
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill("wrong password")
    await page.get_by_role("button", name="Log in").click()
    assert "Wrong email or password" in await page.get_by_test_id("error").inner_text()
    await page.get_by_label("Password").fill(PASSWORD)
    await shot(page, screenshots, "login")
    await page.get_by_role("button", name="Log in").click()
    await page.wait_for_url(re.compile(r"/dashboard/keys"))

    # Create a key; it is shown once, and the Copy button copies it.
    await page.get_by_label("Name").fill("my-dapp")
    await page.get_by_label("Environment").fill("staging")
    await page.get_by_label("Expires").select_option(label="90 days")
    await page.get_by_role("button", name="Create key").click()
    new_key = page.get_by_test_id("new-key")
    key = (await new_key.inner_text()).strip()
    assert re.fullmatch(r"[A-Za-z0-9]{32}", key)
    await page.get_by_role("button", name="Copy").click()
    await page.get_by_role("button", name="Copied").wait_for()
    assert await page.evaluate("navigator.clipboard.readText()") == key
    await shot(page, screenshots, "keys-new", mask=[new_key])
    row = page.get_by_test_id("key-row")
    key_id = await row.get_attribute("data-key-id")
    assert await row.get_by_test_id("key-status").inner_text() == "Active"

    # The key works on the RPC path of the same server.
    for _ in range(3):
        assert await rpc(live_url, key) == 200

    # Reloading the list never shows the key again.
    await page.goto(f"{live_url}/dashboard/keys")
    assert key not in await page.content()
    await shot(page, screenshots, "keys")

    # Usage shows the three calls.
    await page.get_by_role("navigation", name="Dashboard").get_by_role("link", name="Usage").click()
    await usage_total_reaches(page, "3")  # usage is written within a second
    assert await page.locator("svg#usage-chart rect.bar").count() >= 1
    await page.get_by_role("link", name="Last hour").click()
    assert await page.get_by_test_id("usage-total").inner_text() == "3"
    await shot(page, screenshots, "usage")
    assert await rpc(live_url, key) == 200
    await usage_total_reaches(page, "4")

    # Plan and endpoints pages.
    await page.goto(f"{live_url}/dashboard/plan")
    await page.get_by_role("button", name="Switch to Pay as you go").click()
    await page.get_by_test_id("current-plan").wait_for()
    assert "Pay as you go" in await page.locator("[data-plan=payg] h2").inner_text()
    await shot(page, screenshots, "plan")
    await page.goto(f"{live_url}/dashboard/endpoints")
    assert await page.get_by_test_id("endpoint-url-bsc").inner_text() == f"{live_url}/bsc"
    await shot(page, screenshots, "endpoints")

    # Rotate with the default grace: both keys work for now.
    await page.goto(f"{live_url}/dashboard/keys")
    await page.locator(f"[data-key-id='{key_id}']").get_by_role("button", name="Rotate").click()
    await shot(page, screenshots, "confirm-rotate")
    await page.get_by_role("button", name="Rotate key").click()
    rotated = (await page.get_by_test_id("new-key").inner_text()).strip()
    assert rotated != key
    assert await rpc(live_url, rotated) == 200
    assert await rpc(live_url, key) == 200

    # Revoke the new key: refused at once.
    new_id = await page.locator("[data-testid=key-row]").first.get_attribute("data-key-id")
    assert new_id != key_id
    await page.locator(f"[data-key-id='{new_id}']").get_by_role("button", name="Revoke").click()
    await shot(page, screenshots, "confirm-revoke")
    await page.get_by_role("button", name="Revoke key").click()
    await page.wait_for_url(re.compile(r"msg=revoked"))
    status = page.locator(f"[data-key-id='{new_id}']").get_by_test_id("key-status")
    assert await status.inner_text() == "Revoked"
    assert await rpc(live_url, rotated) == 401
    await context.close()


async def sign_up(page: Any, live_url: str) -> None:
    await page.goto(f"{live_url}/dashboard/signup")
    await page.get_by_label("Email").fill(f"user-{secrets.token_hex(3)}@example.com")
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign up").click()
    await page.wait_for_url(re.compile(r"/dashboard/keys"))


async def test_dashboard_works_without_javascript(browser: Any, live_url: str) -> None:
    """Every form posts and every confirmation renders server-side; other users see 404."""
    context = await browser.new_context(java_script_enabled=False)
    page = await context.new_page()
    await sign_up(page, live_url)
    await page.get_by_label("Name").fill("server")
    await page.get_by_role("button", name="Create key").click()
    key = (await page.get_by_test_id("new-key").inner_text()).strip()
    assert not await page.get_by_role("button", name="Copy").is_visible()  # needs JS
    assert await rpc(live_url, key) == 200
    key_id = await page.get_by_test_id("key-row").get_attribute("data-key-id")

    # Another account replays the confirm URLs and the form post: 404, nothing changes.
    other = await browser.new_context()
    intruder = await other.new_page()
    await sign_up(intruder, live_url)
    csrf = await intruder.locator("input[name=csrf_token]").first.get_attribute("value")
    for action in ("revoke", "rotate"):
        url = f"{live_url}/dashboard/keys/{key_id}/{action}"
        assert (await intruder.goto(url)).status == 404
        resp = await intruder.request.post(url, form={"csrf_token": csrf, "grace": "0"})
        assert resp.status == 404
    await other.close()
    assert await rpc(live_url, key) == 200

    await page.get_by_role("button", name="Revoke").click()
    await page.get_by_role("button", name="Revoke key").click()
    assert await page.get_by_test_id("key-status").inner_text() == "Revoked"
    assert await rpc(live_url, key) == 401
    await context.close()

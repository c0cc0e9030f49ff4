"""A key's Limits and Requests pages in a real headless Chromium, with JavaScript on and
off, a forged CSRF token and another account's key id.

Fixtures (Chromium launch, live server, screenshot folder) are those of
test_dashboard_flow.py. With ``UPDATE_SCREENSHOTS=1`` the pages land in
docs/screenshots/ as key-limits.png and key-requests.png.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config import Config
from tests.browser import test_dashboard_flow as flow
from tests.browser.test_dashboard_flow import PASSWORD, shot
from tests.helpers.config import MakeConfig

pytestmark = pytest.mark.browser

chromium_path = flow.chromium_path
browser = flow.browser
live_url = flow.live_url
screenshots = flow.screenshots


@pytest.fixture
def config(make_config: MakeConfig) -> Config:
    """The default plans (free: 25/s, burst 50); insight flushed every 0.1 s."""
    return make_config({"insight": {"interval_s": 0.1}})


async def sign_up(page: Any, base: str) -> None:
    await page.goto(f"{base}/dashboard/signup")
    await page.get_by_label("Email").fill(f"caps-{secrets.token_hex(3)}@example.com")
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign up").click()
    await page.wait_for_url(re.compile(r"/dashboard/keys"))


async def create_key(page: Any, base: str, name: str) -> tuple[str, str]:
    await page.goto(f"{base}/dashboard/keys")
    await page.get_by_label("Name").fill(name)
    await page.get_by_role("button", name="Create key").click()
    key = str(await page.get_by_test_id("new-key").inner_text()).strip()
    row = page.locator("[data-testid=key-row]").first
    return key, str(await row.get_attribute("data-key-id"))


async def calls(base: str, key: str, method: str, n: int) -> list[int]:
    """``n`` concurrent calls: more than the plan's burst gets some refused."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": []}
    async with aiohttp.ClientSession() as http:

        async def one() -> int:
            async with http.post(f"{base}/bsc/{key}", json=body) as resp:
                await resp.read()
                return resp.status

        return list(await asyncio.gather(*(one() for _ in range(n))))


async def logged(page: Any) -> int:
    """Calls the failed-calls list holds, over all its pages (25 rows a page)."""
    pager = page.get_by_test_id("request-log-pages")
    if await pager.count():
        found = re.search(r"\(([\d,]+) calls\)", await pager.inner_text())
        assert found, await pager.inner_text()
        return int(found.group(1).replace(",", ""))
    return int(await page.get_by_test_id("request-log").get_by_test_id("request-log-row").count())


async def wait_for_rows(page: Any, at_least: int) -> None:
    for _ in range(50):
        if await logged(page) >= at_least:
            return
        await asyncio.sleep(0.1)
        await page.reload()
    raise AssertionError(f"fewer than {at_least} logged calls")


async def test_limits_and_requests_pages(browser: Any, live_url: str, screenshots: Path) -> None:
    context = await browser.new_context(viewport={"width": 1200, "height": 800})
    page = await context.new_page()
    await sign_up(page, live_url)
    key, key_id = await create_key(page, live_url, "indexer")
    await create_key(page, live_url, "frontend")
    row = page.locator(f"[data-key-id='{key_id}']")
    assert await row.get_by_test_id("key-limits").inner_text() == "Plan's"

    # Limits: over the plan is explained, then saved caps show on the row.
    await row.get_by_role("link", name="Limits").click()
    await page.wait_for_url(re.compile(rf"/dashboard/keys/{key_id}/limits"))
    await page.get_by_label("Requests per second").fill("30")
    await page.get_by_role("button", name="Save limits").click()
    assert "at most the Free plan's 25" in await page.get_by_test_id("error").inner_text()
    assert await page.get_by_label("Requests per second").input_value() == "30"
    await page.get_by_label("Requests per second").fill("10")
    await page.get_by_label("Daily compute units").fill("50000")
    await page.get_by_role("button", name="Save limits").click()
    await page.get_by_test_id("saved").wait_for()
    await shot(page, screenshots, "key-limits")
    await page.get_by_role("link", name="API Keys", exact=True).first.click()
    row = page.locator(f"[data-key-id='{key_id}']")
    assert await row.get_by_test_id("key-limits").inner_text() == "10/s · 50,000 CU/day"

    # Real traffic: a burst over the plan, and a method that does not exist.
    statuses = await calls(live_url, key, "eth_blockNumber", 70)
    limited = statuses.count(429)
    assert limited >= 10
    # unknown methods cost a unit too: wait for the bucket to admit one (-32601)
    for _ in range(40):
        if (await calls(live_url, key, "eth_noSuchMethod", 1)) == [200]:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("eth_noSuchMethod was never admitted")

    await row.get_by_role("link", name="Requests").click()
    await page.wait_for_url(re.compile(rf"/dashboard/keys/{key_id}/requests"))
    await wait_for_rows(page, limited + 1)
    hour = page.locator("[data-testid=method-insight][data-window=hour]")
    method_row = hour.locator("[data-method=eth_blockNumber]")
    assert await method_row.get_by_test_id("calls").inner_text() == "70"
    assert await method_row.get_by_test_id("errors").inner_text() == str(limited)
    log = page.get_by_test_id("request-log")
    blocked = log.locator("[data-code='-32005'][data-method='eth_blockNumber']")
    assert await blocked.count() > 0  # the newest page; all of them: the filter below
    assert key not in await page.content()

    # Filters: by method and error code.
    await page.get_by_label("Method").fill("eth_blockNumber")
    await page.get_by_label("Error code").fill("-32005")
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url(re.compile(r"method=eth_blockNumber"))
    rows = log.get_by_test_id("request-log-row")
    assert await logged(page) == limited
    assert await rows.count() == min(limited, 25)
    assert "127.0.0.0/24" in await rows.first.inner_text()
    await page.get_by_role("link", name="Show all").click()
    await page.get_by_label("Error code").fill("-32601")
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url(re.compile(r"code=-32601"))
    assert await rows.count() == 1
    await page.get_by_role("link", name="Show all").click()
    await shot(page, screenshots, "key-requests")
    await context.close()


async def test_limits_and_requests_without_javascript(browser: Any, live_url: str) -> None:
    context = await browser.new_context(java_script_enabled=False)
    page = await context.new_page()
    await sign_up(page, live_url)
    key, key_id = await create_key(page, live_url, "server")
    await page.locator(f"[data-key-id='{key_id}']").get_by_role("link", name="Limits").click()
    await page.get_by_label("Requests per second").fill("2.5")
    await page.get_by_role("button", name="Save limits").click()
    await page.get_by_test_id("saved").wait_for()
    await page.goto(f"{live_url}/dashboard/keys")
    limits = page.locator(f"[data-key-id='{key_id}']").get_by_test_id("key-limits")
    assert await limits.inner_text() == "2.5/s"

    # A forged token changes nothing.
    url = f"{live_url}/dashboard/keys/{key_id}/limits"
    resp = await page.request.post(url, form={"csrf_token": "forged", "rate": "1"})
    assert resp.status == 403
    await page.reload()
    assert await limits.inner_text() == "2.5/s"

    # Another account: the same ids answer 404, its own valid token included.
    other = await browser.new_context(java_script_enabled=False)
    intruder = await other.new_page()
    await sign_up(intruder, live_url)
    csrf = await intruder.locator("input[name=csrf_token]").first.get_attribute("value")
    for page_name in ("limits", "requests"):
        assert (
            await intruder.goto(f"{live_url}/dashboard/keys/{key_id}/{page_name}")
        ).status == 404
    resp = await intruder.request.post(url, form={"csrf_token": csrf, "rate": "1"})
    assert resp.status == 404
    await other.close()
    await page.reload()
    assert await limits.inner_text() == "2.5/s"

    # The Requests page and its filter form work as plain HTML.
    await calls(live_url, key, "eth_noSuchMethod", 2)
    await page.locator(f"[data-key-id='{key_id}']").get_by_role("link", name="Requests").click()
    await wait_for_rows(page, 2)
    await page.get_by_label("Error code").fill("-32005")
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url(re.compile(r"code=-32005"))
    assert await page.get_by_test_id("request-log-empty").is_visible()
    await context.close()


PHONE = {"width": 390, "height": 844}  # an iPhone 12-15's CSS pixels


async def test_key_pages_fit_a_phone(browser: Any, live_url: str, screenshots: Path) -> None:
    """No page of a key scrolls sideways at 390 px: wide tables scroll inside their box."""
    context = await browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True)
    page = await context.new_page()
    await sign_up(page, live_url)
    key, key_id = await create_key(page, live_url, "a-rather-long-key-name-for-a-phone")
    await calls(live_url, key, "eth_blockNumber", 60)  # some refused: the log has rows
    await calls(live_url, key, "eth_noSuchMethod", 3)
    paths = {
        "keys": "/dashboard/keys",
        "limits": f"/dashboard/keys/{key_id}/limits",
        "requests": f"/dashboard/keys/{key_id}/requests",
        "usage": f"/dashboard/usage?key={key_id}",
    }
    await page.goto(live_url + paths["requests"])
    await wait_for_rows(page, 3)
    too_wide = {}
    for name, path in paths.items():
        await page.goto(live_url + path)
        width = await page.evaluate("document.documentElement.scrollWidth")
        if width > PHONE["width"]:
            culprits = await page.evaluate(
                """() => [...document.querySelectorAll('body *')]
                .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
                .filter(e => !e.closest('.table-wrap') || e.classList.contains('table-wrap'))
                .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ' +
                    Math.round(e.getBoundingClientRect().right))"""
            )
            too_wide[name] = (width, culprits)
        await shot(page, screenshots, f"phone-{name}")
    assert not too_wide, f"pages wider than {PHONE['width']} px: {too_wide}"
    await context.close()

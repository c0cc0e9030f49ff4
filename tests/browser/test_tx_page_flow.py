"""A key's Transactions page in a real headless Chromium: it fits a phone (390 px) and a
laptop (1280 px) without scrolling sideways, each radio button sits beside its label,
and each transaction shows its outcome and, when nobody took it, the reason.

Before: the log was a seven-column table 1,874 px wide at 1280 px, each radio a full
line away from its words, and a refused transaction said "not accepted" and no more.
With ``UPDATE_SCREENSHOTS=1`` the pages land in docs/screenshots/ as tx-*.png.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.config import Config
from gateway.demo.mockbuilder import MockBuilder, start_mock_builder
from tests.browser import test_dashboard_flow as flow
from tests.browser.test_dashboard_flow import shot
from tests.browser.test_keycaps_flow import create_key, sign_up
from tests.helpers.config import MakeConfig
from tests.helpers.txs import sender_account, signed, tx_hash

pytestmark = pytest.mark.browser

chromium_path = flow.chromium_path
browser = flow.browser
live_url = flow.live_url
screenshots = flow.screenshots

WIDTHS = (390, 1280)  # an iPhone 12-15's CSS pixels; a laptop


@pytest.fixture
async def builder() -> AsyncIterator[MockBuilder]:
    started = await start_mock_builder(56)
    yield started
    await started.close()


@pytest.fixture
def config(make_config: MakeConfig, builder: MockBuilder) -> Config:
    """The bsc network's private route is the mock builder; the log flushed every 0.1 s."""
    return make_config(
        {"insight": {"interval_s": 0.1}, "networks": {"bsc": {"private_tx": [builder.url]}}}
    )


async def _send(base: str, key: str, raw: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": [raw]}
    async with aiohttp.ClientSession() as http, http.post(f"{base}/bsc/{key}", json=body) as resp:
        answer: dict[str, Any] = await resp.json()
        return answer


async def test_transactions_page_fits_and_says_why(
    browser: Any, live_url: str, screenshots: Path, builder: MockBuilder
) -> None:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    await sign_up(page, live_url)
    key, key_id = await create_key(page, live_url, "a-rather-long-key-name-for-the-log")
    path = f"{live_url}/dashboard/keys/{key_id}/transactions"
    await page.goto(path)
    await page.get_by_test_id("private-tx-on").check()
    await page.get_by_role("button", name="Save").click()
    await page.get_by_test_id("saved").wait_for()

    taken = signed(sender_account(41))
    assert (await _send(live_url, key, taken))["result"] == tx_hash(taken)
    builder.reject = "nonce too low: next nonce 7, tx nonce 0"
    refused = signed(sender_account(42))
    answer = await _send(live_url, key, refused)
    assert "nonce too low" in answer["error"]["message"], answer

    for _ in range(100):  # the log is written in the background, every 0.1 s
        await page.goto(path)
        if await page.get_by_test_id("tx-entry").count() == 2:
            break
        await asyncio.sleep(0.1)
    entries = page.get_by_test_id("tx-entry")
    assert await entries.count() == 2
    newest, oldest = entries.nth(0), entries.nth(1)
    assert tx_hash(refused) in await newest.inner_text()
    assert await newest.get_attribute("data-outcome") == "not accepted"
    reason = await newest.locator("[data-field=reason]").inner_text()
    assert "nonce too low" in reason, reason
    assert await oldest.get_attribute("data-outcome") == "accepted"
    assert await oldest.locator("[data-field=reason]").count() == 0
    assert await oldest.locator("[data-field=route]").inner_text() == "private"

    too_wide = {}
    for width in WIDTHS:
        await page.set_viewport_size({"width": width, "height": 900})
        await page.goto(path)
        scroll = await page.evaluate("document.documentElement.scrollWidth")
        if scroll > width:
            too_wide[width] = scroll
        # each radio on its label's first line, just left of the words
        for value in ("off", "on", "fallback"):
            radio = await page.get_by_test_id(f"private-tx-{value}").bounding_box()
            words = page.locator(f"label:has([data-testid=private-tx-{value}]) span")
            box = await words.bounding_box()
            assert radio is not None and box is not None
            gap = box["x"] - (radio["x"] + radio["width"])
            assert 0 <= gap <= 16, (width, value, radio, box)
            assert abs(radio["y"] - box["y"]) <= 12, (width, value, radio, box)
        await shot(page, screenshots, f"tx-{width}")
    assert not too_wide, f"the Transactions page is wider than the window: {too_wide}"
    await context.close()

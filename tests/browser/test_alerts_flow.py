"""The Alerts page in a real headless Chromium at a phone's width, JavaScript off: add a
webhook (its secret shown once), add a rule, press "Send test" and see the delivery
logged; the page never scrolls sideways at 390 px.

Fixtures (Chromium launch, live server, screenshot folder) are those of
test_dashboard_flow.py. With ``UPDATE_SCREENSHOTS=1`` the page lands in
docs/screenshots/ as alerts.png.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.config import Config
from tests.browser import test_dashboard_flow as flow
from tests.browser.test_dashboard_flow import PASSWORD, shot
from tests.helpers.config import MakeConfig
from tests.helpers.webhooks import receiver

pytestmark = pytest.mark.browser

chromium_path = flow.chromium_path
browser = flow.browser
live_url = flow.live_url
screenshots = flow.screenshots

PHONE = {"width": 390, "height": 844}


@pytest.fixture
def config(make_config: MakeConfig) -> Config:
    # the receiver listens on loopback, which the shipped default refuses
    # (test_alerts_targets.py); allowed here as for the demo
    return make_config({"alerts": {"allow_private_targets": True}})


async def _delivered(page: Any, within_s: float = 10.0) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        row = page.get_by_test_id("delivery-row").first
        if await row.count() and await row.get_attribute("data-status") == "delivered":
            return row
        if time.monotonic() > deadline:
            raise AssertionError("the test delivery never showed as delivered")
        await asyncio.sleep(0.2)
        await page.reload()


async def test_add_a_webhook_and_a_rule_and_see_a_test_delivery(
    browser: Any, live_url: str, screenshots: Path
) -> None:
    context = await browser.new_context(
        viewport=PHONE, device_scale_factor=2, is_mobile=True, java_script_enabled=False
    )
    page = await context.new_page()
    await page.goto(f"{live_url}/dashboard/signup")
    await page.get_by_label("Email").fill(f"alerts-{secrets.token_hex(3)}@example.com")
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign up").click()
    await page.wait_for_url(re.compile(r"/dashboard/keys"))
    nav = page.get_by_role("navigation", name="Dashboard")
    await nav.get_by_role("link", name="Alerts").click()
    await page.wait_for_url(re.compile(r"/dashboard/alerts"))
    async with receiver() as rec:
        await page.get_by_label("Webhook URL").fill(rec.url)
        await page.get_by_role("button", name="Add webhook").click()
        secret = str(await page.get_by_test_id("new-secret").inner_text()).strip()
        assert secret.startswith("whsec_")
        rec.secret = secret
        await page.get_by_label("Alert when").select_option("rate_limited")
        await page.get_by_label("Threshold").fill("50")
        await page.get_by_label("Window").select_option("300")
        await page.get_by_role("button", name="Add rule").click()
        await page.wait_for_url(re.compile(r"msg=rule-added"))
        words = await page.get_by_test_id("rule-words").inner_text()
        assert words == "More than 50 rate-limited calls in 5 min"
        assert await page.get_by_test_id("new-secret").count() == 0  # shown once only
        await page.get_by_role("button", name="Send test").click()
        await page.wait_for_url(re.compile(r"msg=test-queued"))
        row = await _delivered(page)
        assert await row.get_by_test_id("delivery-attempts").inner_text() == "1"
        assert "HTTP 200" in await row.get_by_test_id("delivery-status").inner_text()
        assert [e["rule"] for e in rec.got] == ["test"] and rec.refused == []
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], width
        await shot(page, screenshots, "alerts")
    await context.close()

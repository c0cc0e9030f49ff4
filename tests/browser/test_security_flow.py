"""The Security page in a real headless Chromium: password, sessions, two-step
log-in, deletion and reset links, with JavaScript on and off, plus forged
CSRF tokens and another account's ids.

Fixtures (Chromium launch, live server, screenshot folder) are the ones of
test_dashboard_flow.py, imported so both files drive the browser one way.
With ``UPDATE_SCREENSHOTS=1`` the pages land in docs/screenshots/.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from pathlib import Path
from typing import Any

import orjson
import pyotp
import pytest

from tests.browser import test_dashboard_flow as flow
from tests.browser.test_dashboard_flow import PASSWORD, rpc, shot
from tests.helpers.config import Cli

pytestmark = pytest.mark.browser

# The Chromium launch recipe, live server and screenshot folder of the journey tests.
chromium_path = flow.chromium_path
browser = flow.browser
live_url = flow.live_url
screenshots = flow.screenshots

NEW_PASSWORD = "a brand new passphrase"
SECURITY = "/dashboard/security"


def code_after(secret: str, steps: int) -> str:
    return pyotp.TOTP(secret).at(time.time() + 30 * steps)


async def sign_up(page: Any, base: str) -> str:
    email = f"sec-{secrets.token_hex(3)}@example.com"
    await page.goto(f"{base}/dashboard/signup")
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign up").click()
    await page.wait_for_url(re.compile(r"/dashboard/keys"))
    return email


async def log_in(page: Any, base: str, email: str, password: str) -> None:
    await page.goto(f"{base}/dashboard/login")
    await page.get_by_label("Email").fill(email)
    await page.get_by_label("Password").fill(password)
    await page.get_by_role("button", name="Log in").click()


async def create_key(page: Any, base: str) -> str:
    await page.goto(f"{base}/dashboard/keys")
    await page.get_by_label("Name").fill("app")
    await page.get_by_role("button", name="Create key").click()
    return str(await page.get_by_test_id("new-key").inner_text()).strip()


def form(page: Any, action: str) -> Any:
    """One of the Security page's forms: several of them ask for "Current password"."""
    return page.locator(f"form[action='{SECURITY}{action}']")


async def turn_on(page: Any, password: str) -> None:
    start = form(page, "/two-step/start")
    await start.get_by_label("Current password").fill(password)
    await start.get_by_role("button", name="Turn on two-step log-in").click()


async def confirm(page: Any, code: str, password: str) -> None:
    box = form(page, "/two-step/confirm")
    await box.get_by_label("Code", exact=True).fill(code)
    await box.get_by_label("Current password").fill(password)
    await box.get_by_role("button", name="Confirm").click()


async def test_security_page_flows(browser: Any, live_url: str, screenshots: Path) -> None:
    context = await browser.new_context(viewport={"width": 1200, "height": 800})
    page = await context.new_page()
    email = await sign_up(page, live_url)
    key = await create_key(page, live_url)
    assert await rpc(live_url, key) == 200

    # A second browser logged in to the same account.
    elsewhere_ctx = await browser.new_context()
    elsewhere = await elsewhere_ctx.new_page()
    await log_in(elsewhere, live_url, email, PASSWORD)
    await elsewhere.wait_for_url(re.compile(r"/dashboard/keys"))

    nav = page.get_by_role("navigation", name="Dashboard")
    await nav.get_by_role("link", name="Security").click()
    await page.wait_for_url(re.compile(SECURITY))
    rows = page.get_by_test_id("session-row")
    assert await rows.count() == 2
    current = page.locator("[data-testid=session-row][data-current=true]")
    assert "This session" in await current.inner_text()
    assert await current.get_by_test_id("session-ip").inner_text() == "127.0.0.0/24"

    # Two-step log-in: the password first (a session cookie alone is not enough),
    # then the QR code and secret, then a code and the password confirm it.
    await turn_on(page, "not my password")
    assert "password is wrong" in await page.get_by_test_id("error").inner_text()
    assert await page.get_by_test_id("totp-secret").count() == 0
    await turn_on(page, PASSWORD)
    await page.get_by_test_id("totp-qr").locator("svg").wait_for()
    secret = (await page.get_by_test_id("totp-secret").inner_text()).strip()
    await shot(
        page,
        screenshots,
        "security",
        mask=[page.get_by_test_id("totp-qr").locator("svg"), page.get_by_test_id("totp-secret")],
    )
    await confirm(page, "000000", PASSWORD)
    assert "did not match" in await page.get_by_test_id("error").inner_text()
    await confirm(page, pyotp.TOTP(secret).now(), "not my password")
    assert "password is wrong" in await page.get_by_test_id("error").inner_text()
    await confirm(page, pyotp.TOTP(secret).now(), PASSWORD)
    codes = await page.get_by_test_id("recovery-codes").locator("li").all_inner_texts()
    assert len(codes) == 10
    await page.reload()  # a reload re-sends nothing and shows the codes no more
    assert await page.get_by_test_id("recovery-codes").count() == 0
    assert "on" in await page.get_by_test_id("two-step-status").inner_text()

    # Change password: the other browser is logged out, this one stays.
    change = form(page, "/password")
    await change.get_by_label("Current password").fill("not my password")
    await change.get_by_label("New password").fill(NEW_PASSWORD)
    await change.get_by_role("button", name="Change password").click()
    assert "wrong" in await page.get_by_test_id("error").inner_text()
    await change.get_by_label("Current password").fill(PASSWORD)
    await change.get_by_label("New password").fill(NEW_PASSWORD)
    await change.get_by_role("button", name="Change password").click()
    await page.wait_for_url(re.compile(r"done=password"))
    assert await page.get_by_test_id("session-row").count() == 1
    await elsewhere.reload()
    assert "/dashboard/login" in elsewhere.url

    # The other browser logs in again: password, then the Code page.
    await log_in(elsewhere, live_url, email, NEW_PASSWORD)
    await elsewhere.wait_for_url(re.compile(r"/dashboard/login/code"))
    await shot(elsewhere, screenshots, "login-code")
    await elsewhere.get_by_label("Code").fill(code_after(secret, 1))
    await elsewhere.get_by_role("button", name="Log in").click()
    await elsewhere.wait_for_url(re.compile(r"/dashboard/keys"))
    await page.reload()
    assert await page.get_by_test_id("session-row").count() == 2
    await page.get_by_role("button", name="Log out other sessions").click()
    await page.wait_for_url(re.compile(r"done=sessions"))
    assert await page.get_by_test_id("session-row").count() == 1
    await elsewhere.reload()
    assert "/dashboard/login" in elsewhere.url
    await elsewhere_ctx.close()

    # New recovery codes need the password too, and replace the old ones.
    fresh = form(page, "/two-step/recovery-codes")
    await fresh.get_by_label("Current password").fill(NEW_PASSWORD)
    await fresh.get_by_role("button", name="New recovery codes").click()
    new_codes = await page.get_by_test_id("recovery-codes").locator("li").all_inner_texts()
    assert len(new_codes) == 10 and not set(new_codes) & set(codes)

    # Delete the account: password, DELETE, and a recovery code as the second step.
    delete = form(page, "/delete")
    await delete.get_by_label("Current password").fill(NEW_PASSWORD)
    await delete.get_by_label("Code", exact=True).fill(new_codes[0])
    await delete.get_by_label("Type DELETE to confirm").fill("DELETE")
    await delete.get_by_role("button", name="Delete account").click()
    assert "1 key revoked" in await page.get_by_test_id("message").inner_text()
    assert await rpc(live_url, key) == 401
    await log_in(page, live_url, email, NEW_PASSWORD)
    assert "Wrong email or password" in await page.get_by_test_id("error").inner_text()
    await context.close()


async def test_security_page_without_javascript(browser: Any, live_url: str) -> None:
    context = await browser.new_context(java_script_enabled=False)
    page = await context.new_page()
    email = await sign_up(page, live_url)
    key = await create_key(page, live_url)
    await page.goto(f"{live_url}{SECURITY}")

    change = form(page, "/password")
    await change.get_by_label("Current password").fill(PASSWORD)
    await change.get_by_label("New password").fill(NEW_PASSWORD)
    await change.get_by_role("button", name="Change password").click()
    assert "password was changed" in await page.get_by_test_id("message").inner_text()

    await turn_on(page, NEW_PASSWORD)
    secret = (await page.get_by_test_id("totp-secret").inner_text()).strip()
    assert await page.get_by_test_id("totp-qr").locator("svg path").count() >= 1
    await confirm(page, pyotp.TOTP(secret).now(), NEW_PASSWORD)
    assert await page.get_by_test_id("recovery-codes").locator("li").count() == 10

    await page.get_by_role("button", name="Log out", exact=True).first.click()
    await log_in(page, live_url, email, NEW_PASSWORD)
    await page.wait_for_url(re.compile(r"/dashboard/login/code"))
    await page.get_by_label("Code").fill(code_after(secret, 1))
    await page.get_by_role("button", name="Log in").click()
    await page.wait_for_url(re.compile(r"/dashboard/keys"))

    await page.goto(f"{live_url}{SECURITY}")
    delete = form(page, "/delete")
    await delete.get_by_label("Current password").fill(NEW_PASSWORD)
    await delete.get_by_label("Code", exact=True).fill("000000")
    await delete.get_by_label("Type DELETE to confirm").fill("DELETE")
    await delete.get_by_role("button", name="Delete account").click()
    assert "code is wrong" in await page.get_by_test_id("error").inner_text()
    assert await rpc(live_url, key) == 200
    off = form(page, "/two-step/off")
    await off.get_by_role("button", name="Turn off two-step log-in").wait_for()
    await off.get_by_label("Current password").fill(NEW_PASSWORD)
    await off.get_by_role("button", name="Turn off two-step log-in").click()
    await delete.get_by_label("Current password").fill(NEW_PASSWORD)
    await delete.get_by_label("Type DELETE to confirm").fill("DELETE")
    await delete.get_by_role("button", name="Delete account").click()
    assert "Account deleted" in await page.locator("h1").inner_text()
    assert await rpc(live_url, key) == 401
    await context.close()


async def test_forged_tokens_and_foreign_ids(browser: Any, live_url: str) -> None:
    """Every Security form with a tampered CSRF token: 403, nothing changed.
    Another account naming this account's session: 404."""
    context = await browser.new_context()
    page = await context.new_page()
    email = await sign_up(page, live_url)
    key = await create_key(page, live_url)
    other_ctx = await browser.new_context()
    other = await other_ctx.new_page()
    await log_in(other, live_url, email, PASSWORD)
    await other.wait_for_url(re.compile(r"/dashboard/keys"))

    await page.goto(f"{live_url}{SECURITY}")
    actions = await page.locator("main form[method=post]").evaluate_all(
        "forms => forms.map(f => f.getAttribute('action'))"
    )
    assert len(actions) == 5  # password, one session, other sessions, two-step, delete
    for index, action in enumerate(actions):
        await page.goto(f"{live_url}{SECURITY}")
        form = page.locator("main form[method=post]").nth(index)
        assert await form.get_attribute("action") == action
        await form.locator("input[name=csrf_token]").evaluate("e => { e.value = 'x'.repeat(43) }")
        for field in await form.locator("input:not([type=hidden])").all():
            name = await field.get_attribute("name")
            await field.fill("DELETE" if name == "confirm" else PASSWORD)
        await form.locator("button").click()
        await page.get_by_role("heading", name="Forbidden").wait_for()
    await page.goto(f"{live_url}{SECURITY}")
    assert await page.get_by_test_id("session-row").count() == 2
    assert await page.get_by_test_id("totp-secret").count() == 0
    assert await rpc(live_url, key) == 200
    other_ref = await page.locator("[data-testid=session-row]:not([data-current])").get_attribute(
        "data-session"
    )

    intruder_ctx = await browser.new_context()
    intruder = await intruder_ctx.new_page()
    await sign_up(intruder, live_url)
    await intruder.goto(f"{live_url}{SECURITY}")
    csrf = await intruder.locator("input[name=csrf_token]").first.get_attribute("value")
    resp = await intruder.request.post(
        f"{live_url}{SECURITY}/sessions/{other_ref}/end", form={"csrf_token": csrf}
    )
    assert resp.status == 404
    await other.reload()
    assert "/dashboard/keys" in other.url  # still logged in
    for ctx in (context, other_ctx, intruder_ctx):
        await ctx.close()


async def test_reset_link_page(browser: Any, live_url: str, cli: Cli) -> None:
    code, _, _ = await asyncio.to_thread(
        cli, "accounts", "create", "reset@example.com", stdin=PASSWORD + "\n"
    )
    assert code == 0
    code, out, _ = await asyncio.to_thread(
        cli, "accounts", "reset-password", "reset@example.com", "--json"
    )
    assert code == 0
    query = orjson.loads(out)["url"].split("?", 1)[1]
    context = await browser.new_context(java_script_enabled=False)
    page = await context.new_page()
    await page.goto(f"{live_url}/dashboard/reset?{query}")
    assert await page.get_by_test_id("reset-email").inner_text() == "reset@example.com"
    await page.get_by_label("New password").fill(NEW_PASSWORD)
    await page.get_by_role("button", name="Set new password").click()
    assert "was changed" in await page.get_by_test_id("message").inner_text()
    resp = await page.goto(f"{live_url}/dashboard/reset?{query}")
    assert resp.status == 404
    await log_in(page, live_url, "reset@example.com", NEW_PASSWORD)
    await page.wait_for_url(re.compile(r"/dashboard/keys"))
    await context.close()

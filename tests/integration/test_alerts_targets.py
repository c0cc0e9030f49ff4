"""Where webhooks may point, at the shipped defaults: https only, public addresses only,
checked when the URL is added and again at every delivery (so a name whose DNS
answer changes later still reaches no private address), and no redirect followed."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from gateway.alerts import api
from gateway.alerts.targets import PublicResolver, TargetRefused, is_public
from gateway.app import create_app
from gateway.config import Config
from gateway.store.accounts import Store, StoreError
from tests.helpers.config import MakeConfig
from tests.helpers.waiting import eventually
from tests.helpers.webhooks import receiver

AiohttpServer = Callable[..., Any]

REFUSED = [
    "http://example.com/hook",  # plain http
    "ftp://example.com/hook",
    "https://127.0.0.1/hook",
    "https://127.8.9.10:8443/hook",
    "https://localhost/hook",
    "https://api.localhost/hook",
    "https://10.1.2.3/hook",
    "https://192.168.0.10/hook",
    "https://172.16.5.4/hook",
    "https://169.254.169.254/latest/meta-data",  # the cloud metadata address
    "https://100.64.0.1/hook",  # carrier-grade NAT
    "https://0.0.0.0/hook",
    "https://[::1]/hook",
    "https://[fe80::1]/hook",
    "https://[fd00::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",  # IPv4-mapped loopback
    "https://user:pw@93.184.216.34/hook",  # credentials in the URL
    "https:///hook",
    "not a url",
    "",
]


async def test_non_public_or_plain_http_targets_are_refused_by_default(
    config: Config, store: Store, account: str
) -> None:
    assert config.alerts.allow_private_targets is False  # the shipped default
    for url in REFUSED:
        with pytest.raises(StoreError) as caught:
            await api.create_webhook(store, config.alerts, account, url)
        assert "webhook URL" in str(caught.value), (url, caught.value)
    assert await api.list_webhooks(store, config.alerts, account) == []
    made = await api.create_webhook(store, config.alerts, account, "https://93.184.216.34/h")
    assert made["url"] == "https://93.184.216.34/h"  # a public address is fine


async def _private_name() -> str:
    """This host's own name, which /etc/hosts maps to a loopback or private address."""
    name = socket.gethostname()
    found = await asyncio.get_running_loop().getaddrinfo(name, 443)
    if any(is_public(str(info[4][0])) for info in found):
        pytest.skip(f"{name} resolves to a public address on this machine")
    return name


async def test_a_name_that_resolves_to_a_private_address_is_refused() -> None:
    """The resolver every delivery connects through."""
    name = await _private_name()
    resolver = PublicResolver()
    try:
        with pytest.raises(TargetRefused, match="non-public address"):
            await resolver.resolve(name, 443, socket.AF_UNSPEC)
    finally:
        await resolver.close()


async def test_a_queued_delivery_is_checked_again_when_it_is_sent(
    make_config: MakeConfig, store: Store, account: str, aiohttp_server: AiohttpServer
) -> None:
    """A webhook accepted while private targets were allowed is refused once they are not."""
    allowing = make_config({"alerts": {"allow_private_targets": True}})
    async with receiver() as rec:
        made = await api.create_webhook(store, allowing.alerts, account, rec.url)
        rec.secret = made["secret"]
        by_name = rec.url.replace("127.0.0.1", await _private_name())
        named = await api.create_webhook(store, allowing.alerts, account, by_name)
        strict = make_config({"alerts": {"interval_s": 1}})  # the default: no private targets
        await aiohttp_server(create_app(strict))
        for webhook_id in (made["id"], named["id"]):
            await api.send_test(store, strict.alerts, account, webhook_id)

        async def both_refused() -> bool:
            logs = [
                await api.delivery_log(store, strict.alerts, account, w)
                for w in (made["id"], named["id"])
            ]
            return all(log and log[0]["attempts"] >= 1 for log in logs)

        await eventually(both_refused, 10, "both deliveries to be attempted")
        (literal,) = await api.delivery_log(store, strict.alerts, account, made["id"])
        assert "non-public address (127.0.0.1)" in literal["last_error"], literal
        assert literal["status"] == "pending" and literal["next_at"] is not None  # retried later
        (resolved,) = await api.delivery_log(store, strict.alerts, account, named["id"])
        assert "resolves to a non-public address" in resolved["last_error"], resolved
        assert rec.tries == 0  # nothing reached the receiver


async def test_a_redirect_is_not_followed(
    make_config: MakeConfig, store: Store, account: str, aiohttp_server: AiohttpServer
) -> None:
    cfg = make_config({"alerts": {"allow_private_targets": True}})
    await aiohttp_server(create_app(cfg))
    async with receiver() as rec:
        hits: list[str] = []

        async def bounce(request: web.Request) -> web.Response:
            hits.append(request.path)
            raise web.HTTPTemporaryRedirect(rec.url)

        side = web.Application()
        side.router.add_post("/moved", bounce)
        server = await aiohttp_server(side)
        made = await api.create_webhook(store, cfg.alerts, account, str(server.make_url("/moved")))
        rec.secret = made["secret"]
        await api.send_test(store, cfg.alerts, account, made["id"])

        async def attempted() -> bool:
            log = await api.delivery_log(store, cfg.alerts, account, made["id"])
            return bool(log) and log[0]["attempts"] >= 1

        await eventually(attempted, 10, "the delivery to be attempted")
        (row,) = await api.delivery_log(store, cfg.alerts, account, made["id"])
        assert row["http_status"] == 307 and "not followed" in row["last_error"]
        assert hits == ["/moved"] and rec.tries == 0

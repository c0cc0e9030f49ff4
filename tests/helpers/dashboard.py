"""Helpers for the dashboard's HTTP-level tests (no browser): a tiny HTML
reader and a logged-in user driving the real app through its forms.

Kept beside the tests (file name under ``test_dashboard*``) so the
integration tests need no shared conftest changes; it holds no tests.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient

_VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}
PASSWORD = "correct horse battery"


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[Element] = field(default_factory=list)

    def find_all(self, **attrs: str) -> list[Element]:
        out = []
        for child in self.children:
            if all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()):
                out.append(child)
            out.extend(child.find_all(**attrs))
        return out

    def find(self, **attrs: str) -> Element:
        found = self.find_all(**attrs)
        assert found, f"no element with {attrs}"
        return found[0]

    def tags(self, tag: str) -> list[Element]:
        out = []
        for child in self.children:
            if child.tag == tag:
                out.append(child)
            out.extend(child.tags(tag))
        return out

    def testid(self, name: str) -> str:
        return self.find(data_testid=name).text.strip()


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in _VOID:
            self.stack.append(element)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                break

    def handle_data(self, data: str) -> None:
        for element in self.stack:
            element.text += data


def parse(html: str) -> Element:
    builder = _Builder()
    builder.feed(html)
    builder.close()
    return builder.root


def csrf_of(doc: Element) -> str:
    return doc.find(name="csrf_token").attrs["value"]


@dataclass
class User:
    """One browser-less user: its own client (cookie jar) on the shared server."""

    client: TestClient[Any, Any]
    email: str
    csrf: str = ""

    async def get(self, path: str, status: int = 200) -> Element:
        resp = await self.client.get(path, allow_redirects=True)
        text = await resp.text()
        assert resp.status == status, (resp.status, text[:500])
        doc = parse(text)
        if doc.find_all(name="csrf_token"):
            self.csrf = csrf_of(doc)
        return doc

    async def post(
        self,
        path: str,
        data: dict[str, str] | None = None,
        *,
        csrf: str | None = None,
        follow: bool = False,
    ) -> ClientResponse:
        form = dict(data or {})
        token = self.csrf if csrf is None else csrf
        if token:
            form["csrf_token"] = token
        return await self.client.post(path, data=form, allow_redirects=follow)

    async def signup(self, password: str = PASSWORD) -> ClientResponse:
        await self.get("/dashboard/signup")
        resp = await self.post("/dashboard/signup", {"email": self.email, "password": password})
        assert resp.status == 303, await resp.text()
        await self.get("/dashboard/keys")  # the session's own CSRF token from now on
        return resp

    async def login(self, password: str = PASSWORD) -> ClientResponse:
        await self.get("/dashboard/login")
        resp = await self.post("/dashboard/login", {"email": self.email, "password": password})
        if resp.status == 303:
            await self.get("/dashboard/keys")
        return resp

    async def create_key(self, **fields: str) -> tuple[str, str]:
        """(key, key id) of a new key made through the form."""
        await self.get("/dashboard/keys")
        form = {"name": "app", "env": "production", "expires": "never", **fields}
        resp = await self.post("/dashboard/keys", form)
        text = await resp.text()
        assert resp.status == 200, text[:800]
        doc = parse(text)
        key = doc.testid("new-key")
        rows = doc.find_all(data_testid="key-row")
        return key, rows[0].attrs["data-key-id"]

    async def key_rows(self) -> dict[str, str]:
        """key id -> status word, from the keys page."""
        doc = await self.get("/dashboard/keys")
        return {
            row.attrs["data-key-id"]: row.testid("key-status")
            for row in doc.find_all(data_testid="key-row")
        }


def new_email() -> str:
    return f"user-{secrets.token_hex(4)}@example.com"


async def wait_for_request_log(user: User, path: str, rows: int) -> Element:
    """The key's Requests page once it lists at least ``rows`` calls (insight flushes late)."""
    for _ in range(100):
        doc = await user.get(path)
        if len(doc.find_all(data_testid="request-log-row")) >= rows:
            return doc
        await asyncio.sleep(0.05)
    raise AssertionError(f"fewer than {rows} logged calls on {path}")

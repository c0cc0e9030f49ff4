"""A key's settings form (its Limits, its Transactions choice): shown, posted, saved.

Both pages follow one path, written once here: the key is looked up with
the logged-in account's id (another account's key answers 404); a post
keeps only the form's own fields, each cut to a length, and hands them to
the store; the store's refusal shows the page again with its words and
400; a saved form redirects to the page with ``?saved=1`` (post, redirect,
get), so a reload does not post again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from aiohttp import web

from gateway.dashboard.views import own_key, redirect, sentence
from gateway.store.accounts import Account, KeyRecord, NotFound, StoreError


class KeyPage(Protocol):
    """Renders a key's settings page: ``form`` is what was posted when it is shown again."""

    def __call__(
        self,
        request: web.Request,
        account: Account,
        record: KeyRecord,
        *,
        form: dict[str, str] | None = None,
        error: str | None = None,
        saved: bool = False,
        status: int = 200,
    ) -> Awaitable[web.Response]: ...


Write = Callable[[Account, KeyRecord, dict[str, str]], Awaitable[None]]


async def show(request: web.Request, account: Account, page: KeyPage) -> web.Response:
    """The page of the key in the path, saying "saved" after a redirect from ``save``."""
    record = await own_key(request, account)
    return await page(request, account, record, saved=request.query.get("saved") == "1")


async def save(
    request: web.Request,
    account: Account,
    page: KeyPage,
    fields: Mapping[str, int],
    write: Write,
    after: str,
) -> web.StreamResponse:
    """The posted ``fields`` (name -> longest value kept) written by ``write``.

    ``write`` raises the store's ``StoreError`` with words for the owner,
    or ``NotFound`` when the key went away meanwhile; ``after`` is the
    page's path under ``/dashboard/keys/<id>/``.
    """
    record = await own_key(request, account)
    posted = await request.post()
    values = {name: str(posted.get(name, ""))[:size] for name, size in fields.items()}
    try:
        await write(account, record, values)
    except NotFound:
        raise web.HTTPNotFound() from None
    except StoreError as exc:
        return await page(
            request, account, record, form=values, error=sentence(str(exc)), status=400
        )
    return redirect(f"/dashboard/keys/{record.id}/{after}?saved=1")

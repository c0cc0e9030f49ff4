"""A key's settings form (its Limits, its Transactions choice): shown, posted, saved.

Both pages follow one path, written once here: the key is looked up with
the logged-in account's id (another account's key answers 404); a post
keeps only the form's own fields, each cut to a length, and hands them to
the store; the store's refusal shows the page again with its words, what
was posted and 400; a saved form redirects to the page with ``?saved=1``
(post, redirect, get), so a reload does not post again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from gateway.dashboard.views import View, login_required, own_key, redirect, render, sentence
from gateway.store.accounts import Account, KeyRecord, NotFound, StoreError

# What a page shows of a key besides the form's outcome; ``posted`` is the
# form as sent when it comes back refused, else None.
Context = Callable[
    [web.Request, Account, KeyRecord, dict[str, str] | None], Awaitable[dict[str, Any]]
]
Write = Callable[[web.Request, Account, KeyRecord, dict[str, str]], Awaitable[None]]


def views(
    template: str, context: Context, fields: Mapping[str, int], write: Write, path: str
) -> tuple[View, View]:
    """The form's GET view (the page) and POST view (save), both behind the login.

    ``fields`` names the posted fields kept and the longest value kept of
    each; ``write`` stores them, raising the store's ``StoreError`` with
    words for the owner, or ``NotFound`` when the key went away meanwhile;
    ``path`` is the page's path under ``/dashboard/keys/<id>/``.
    """

    async def page(
        request: web.Request,
        account: Account,
        record: KeyRecord,
        posted: dict[str, str] | None = None,
        error: str | None = None,
    ) -> web.Response:
        ctx = await context(request, account, record, posted)
        saved = error is None and request.query.get("saved") == "1"
        ctx.update(key=record, error=error, saved=saved)
        status = 200 if error is None else 400
        return render(request, template, ctx, account=account, status=status)

    async def show(request: web.Request, account: Account) -> web.StreamResponse:
        return await page(request, account, await own_key(request, account))

    async def save(request: web.Request, account: Account) -> web.StreamResponse:
        record = await own_key(request, account)
        form = await request.post()
        posted = {name: str(form.get(name, ""))[:size] for name, size in fields.items()}
        try:
            await write(request, account, record, posted)
        except NotFound:
            raise web.HTTPNotFound() from None
        except StoreError as exc:
            return await page(request, account, record, posted, sentence(str(exc)))
        return redirect(f"/dashboard/keys/{record.id}/{path}?saved=1")

    return login_required(show), login_required(save)

"""``POST /admin/reload``: read the config again, check it whole, say what changed.

The check is the one ``gateway config check`` runs (every mistake with its
config path); on any mistake nothing is applied and the answer is a 400
listing them all. A config that loads is compared with the running one
(``config.diff``: the paths that differ, never their values).

Where it is applied: under ``serve --workers N`` the supervisor answers
this call itself and reloads as SIGHUP does (new workers start with the new
config; the old ones drain once they listen: no call dropped). A single
``gateway serve`` process swaps apps inside itself the same way
(``server.inplace``: ``T.CONFIG_APPLY``). An app served by someone else
(gunicorn, one built in code) answers the check and the changes with
``"applied": false``; one without a config source answers 409.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway import typedefs as T
from gateway.admin.calls import admin_source, answer, audit, json_error
from gateway.config.diff import config_changes

NOT_HERE = (
    "this process was not started by gateway serve: restart it to apply the new config "
    "(gateway serve applies it in place, and serve --workers with new workers)"
)


def add_reload_routes(admin: web.Application) -> None:
    admin.router.add_post("/reload", reload)


async def reload(request: web.Request) -> web.Response:
    source = admin_source(request)
    check = source.get(T.CONFIG_CHECK)
    if check is None:
        audit(request, "reload", "config", ok=False)
        return json_error(409, "this process has no config file to read again")
    cfg, problems = await asyncio.to_thread(check)
    if cfg is None or problems:
        audit(request, "reload", "config", ok=False, errors=len(problems))
        return answer({"ok": False, "applied": False, "errors": problems}, 400)
    changed = config_changes(source[T.CONFIG], cfg)
    apply = source.get(T.CONFIG_APPLY)
    if apply is not None:
        apply(cfg)  # a new app with it listens, then this one drains (server.inplace)
    applied = apply is not None
    audit(request, "reload", "config", ok=True, changed=changed, applied=applied)
    if applied:
        return answer({"ok": True, "applied": True, "changed": changed})
    return answer({"ok": True, "applied": False, "changed": changed, "note": NOT_HERE})

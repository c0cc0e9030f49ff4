"""``gateway keys update KEY_ID --private-tx on|fallback|off``: a key's transaction route.

Thin: parsing and wording only; the check and the write (with the
key-change message every gateway process listens for) live in
gateway/store/keytx.py, shared with the dashboard's key page.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.store.accounts import Store
from gateway.store.keytx import MODES, set_private_tx

Command = Callable[[Store], Awaitable[tuple[Any, str]]]

_SHOWN = {
    "on": "on: raw transactions go only to the network's private endpoints",
    "fallback": "fallback: private endpoints, then the public nodes if every one fails",
    "": "off: the plan's route",
}


def add_update_parser(keys: Any) -> None:
    """The ``keys update`` sub-command on the ``keys`` sub-parsers."""
    ku = keys.add_parser(
        "update",
        help="change a key's settings: its private-transaction route",
        description="Private transactions: 'on' sends the key's raw transactions only to "
        "the network's private endpoints (builders, relays), never to a public node; "
        "'fallback' also goes public when every private endpoint fails; 'off' leaves "
        "the plan's route. The stricter of the key's and the plan's applies.",
    )
    ku.add_argument("key_id")
    ku.add_argument("--private-tx", required=True, choices=MODES, dest="private_tx")
    ku.add_argument("--json", action="store_true", help="print JSON")


def update_command(args: argparse.Namespace) -> Command:
    async def update(store: Store) -> tuple[Any, str]:
        rec = await set_private_tx(store, None, args.key_id, args.private_tx)
        value = {"id": rec.id, "private_tx": rec.private_tx or "off"}
        return value, f"key {rec.id} private transactions {_SHOWN[rec.private_tx]}"

    return update

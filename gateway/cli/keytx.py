"""``gateway keys update KEY_ID --private-tx on|fallback|off``: a key's transaction route,
and its bundle options (``--no-merge``, ``--position-first``, ``--mev-builders``).

Thin: parsing and wording only; the check and the write (with the
key-change message every gateway process listens for) live in
gateway/store/keytx.py, shared with the dashboard's key page.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.store.accounts import Store
from gateway.store.core import StoreError
from gateway.store.keytx import MODES, bundle_options, set_bundle_options, set_private_tx

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
    ku.add_argument("--private-tx", choices=MODES, dest="private_tx")
    ku.add_argument(
        "--no-merge",
        choices=("on", "off"),
        dest="no_merge",
        help="BlockRazor's noMerge on the key's bundles",
    )
    ku.add_argument(
        "--position-first",
        choices=("on", "off"),
        dest="position_first",
        help="BlockRazor's positionFirst on the key's bundles",
    )
    ku.add_argument(
        "--mev-builders",
        dest="mev_builders",
        metavar="NAME,NAME",
        help="bloXroute's mev_builders for the key ('' = all)",
    )
    ku.add_argument("--json", action="store_true", help="print JSON")


def update_command(args: argparse.Namespace) -> Command:
    async def update(store: Store) -> tuple[Any, str]:
        bundle = (args.no_merge, args.position_first, args.mev_builders)
        if args.private_tx is None and bundle == (None, None, None):
            raise StoreError(
                "nothing to change: give --private-tx, --no-merge, --position-first "
                "or --mev-builders"
            )
        value: dict[str, Any] = {"id": args.key_id}
        lines = []
        if args.private_tx is not None:
            rec = await set_private_tx(store, None, args.key_id, args.private_tx)
            value["private_tx"] = rec.private_tx or "off"
            lines.append(f"key {rec.id} private transactions {_SHOWN[rec.private_tx]}")
        if bundle != (None, None, None):
            old = await bundle_options(store, None, args.key_id)
            builders = old.get("mev_builders", [])
            if args.mev_builders is not None:
                builders = args.mev_builders.split(",")
            value["bundle"] = await set_bundle_options(
                store,
                None,
                args.key_id,
                no_merge=_flag(args.no_merge, old.get("noMerge")),
                position_first=_flag(args.position_first, old.get("positionFirst")),
                mev_builders=builders,
            )
            lines.append(f"key {args.key_id} bundle options {value['bundle']}")
        return value, "\n".join(lines)

    return update


def _flag(given: str | None, old: Any) -> bool:
    return bool(old) if given is None else given == "on"

"""``gateway accounts list|create|plan|reset-password``: the operator's account commands.

Thin: wording only; the checks live in gateway/store. ``create`` reads the
password from stdin when it is not a terminal (one line, for scripts), else
prompts for it without echo.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from gateway.cli.storecall import Command
from gateway.config import Config
from gateway.store.accountlist import list_accounts
from gateway.store.accounts import Store


def account_command(args: argparse.Namespace, cfg: Config) -> Command:
    """The store call for ``gateway accounts ACTION``."""
    if args.action == "list":
        return list_accounts
    if args.action == "create":
        password = _read_password()

        async def create_account(store: Store) -> tuple[Any, str]:
            acct = await store.create_account(args.email, password, args.plan)
            value = {
                "id": acct.id,
                "email": acct.email,
                "plan": acct.plan,
                "created_at": acct.created_at,
            }
            return value, f"account {acct.id} created for {acct.email} (plan {acct.plan})"

        return create_account
    if args.action == "plan":

        async def set_plan(store: Store) -> tuple[Any, str]:
            acct = await store.account_by_email(args.email)
            acct = await store.set_plan(acct.id, args.plan)
            return {
                "id": acct.id,
                "email": acct.email,
                "plan": acct.plan,
            }, f"{acct.email} is now on plan {acct.plan}"

        return set_plan
    from gateway.cli.security import reset_password_command

    return reset_password_command(args.email, cfg)


def _read_password() -> str:
    if sys.stdin is not None and not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    return getpass.getpass("Password: ")

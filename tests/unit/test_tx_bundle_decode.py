"""A bundle's transactions are decoded one at a time, the event loop free between two."""

from __future__ import annotations

import asyncio

import pytest

from gateway.rpc.localmethods import CallError
from gateway.tx.checks import decode_all
from tests.helpers.txs import sender_account, signed, tx_hash


async def test_other_tasks_run_between_two_transactions_of_a_bundle() -> None:
    raws = [signed(sender_account(400 + i)) for i in range(5)]
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    start = ticks
    hexes, txs = await decode_all(raws, 56, 128 * 1024)
    stop = True
    await task
    assert [t.hash for t in txs] == [tx_hash(r) for r in raws] and hexes == raws
    assert ticks - start >= len(raws) - 1  # the loop ran once between each two


async def test_a_bad_transaction_names_its_place() -> None:
    raws = [signed(sender_account(410)), "0x12"]
    with pytest.raises(CallError) as err:
        await decode_all(raws, 56, 128 * 1024)
    assert err.value.code == -32000 and err.value.message.startswith("typed transaction")
    with pytest.raises(CallError) as err:
        await decode_all([raws[0], "12"], 56, 128 * 1024)
    assert err.value.message.startswith("invalid argument 0: txs[1]: "), err.value.message

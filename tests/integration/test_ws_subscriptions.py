"""eth_subscribe / eth_unsubscribe: shared upstream subscriptions and ids, exact shape."""

from __future__ import annotations

import aiohttp
import orjson

from gateway.demo.mockws import TRANSFER_TOPIC, header_of
from gateway.ws.service import WS
from tests.helpers.wsstack import WsStack, eventually, notes, rpc


def _sub(kind: str, *extra: object, id_: int | str = 1) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": id_, "method": "eth_subscribe", "params": [kind, *extra]}


def _upstream(stack: WsStack, kind: str) -> int:
    return sum(n.subscriptions(kind) for n in stack.nodes["bsc"])


async def test_many_clients_share_one_upstream_subscription_and_its_id(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    chain = stack.chains["bsc"]
    sockets = [await http.ws_connect(f"{stack.ws}/bsc/{api_key}") for _ in range(5)]
    ids = []
    for ws in sockets:
        answer = await rpc(ws, _sub("newHeads", id_=42))
        assert answer["id"] == 42
        assert isinstance(answer["result"], str) and answer["result"].startswith("0x")
        ids.append(answer["result"])
    assert len(set(ids)) == 1  # one feed, one id: each notification framed once
    assert _upstream(stack, "newHeads") == 1
    chain.mine()
    block = chain.block(chain.head)
    assert block is not None
    for ws, sid in zip(sockets, ids, strict=True):
        (note,) = await notes(ws, 1)
        assert note == {
            "jsonrpc": "2.0",
            "method": "eth_subscription",
            "params": {"subscription": sid, "result": header_of(block)},
        }
    # Unsubscribe: true, and nothing more arrives for it; the others still get heads.
    assert (
        await rpc(
            sockets[0], {"jsonrpc": "2.0", "id": 3, "method": "eth_unsubscribe", "params": [ids[0]]}
        )
    )["result"] is True
    assert (
        await rpc(
            sockets[0], {"jsonrpc": "2.0", "id": 4, "method": "eth_unsubscribe", "params": [ids[0]]}
        )
    )["result"] is False
    chain.mine()
    for ws in sockets[1:]:
        (note,) = await notes(ws, 1)
        assert note["params"]["result"]["number"] == hex(chain.head)
    answer = await rpc(sockets[0], {"jsonrpc": "2.0", "id": 5, "method": "eth_chainId"})
    assert answer["id"] == 5  # no notification came before this answer
    # The last client out drops the upstream subscription.
    for ws in sockets[1:]:
        await ws.close()
    await eventually(lambda: _upstream(stack, "newHeads") == 0)
    await sockets[0].close()


async def test_a_socket_gets_the_answer_before_the_first_notification(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    chain = stack.chains["bsc"]
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as first:
        await rpc(first, _sub("newHeads"))
        async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
            known: set[str] = set()
            for _ in range(5):
                await ws.send_bytes(orjson.dumps(_sub("newHeads", id_=8)))
                chain.mine()
                while True:
                    frame = orjson.loads((await ws.receive(timeout=5)).data)
                    if frame.get("id") == 8:
                        known.add(frame["result"])
                        break
                    # a notification may only name a subscription already answered
                    assert frame["params"]["subscription"] in known, frame


async def test_logs_filters_are_canonical_and_shared(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    chain = stack.chains["bsc"]
    addr = "0x" + "02" * 20
    async with (
        http.ws_connect(f"{stack.ws}/bsc/{api_key}") as a,
        http.ws_connect(f"{stack.ws}/bsc/{api_key}") as b,
    ):
        sa = (await rpc(a, _sub("logs", {"address": addr, "topics": [TRANSFER_TOPIC]})))["result"]
        flt_b = {
            "topics": [TRANSFER_TOPIC.upper().replace("0X", "0x"), None],
            "address": addr.upper().replace("0X", "0x"),
        }
        sb = (await rpc(b, _sub("logs", flt_b)))["result"]
        assert _upstream(stack, "logs") == 1
        sc = (await rpc(b, _sub("logs", {"topics": [None, None, "0x" + "00" * 32]}, id_=2)))[
            "result"
        ]
        assert _upstream(stack, "logs") == 2
        chain.mine(3)
        mined = [log for n in range(chain.head - 2, chain.head + 1) for log in chain.logs(n)]
        want_a = [log for log in mined if log["address"] == addr]
        got_a = await notes(a, len(want_a))
        assert [n["params"]["result"] for n in got_a] == want_a
        assert {n["params"]["subscription"] for n in got_a} == {sa}
        want_c = [log for log in mined if log["topics"][2] == "0x" + "00" * 32]
        got_b = await notes(b, len(want_a) + len(want_c))
        by_sub: dict[str, list[object]] = {}
        for n in got_b:
            by_sub.setdefault(n["params"]["subscription"], []).append(n["params"]["result"])
        assert by_sub == {sb: want_a, sc: want_c}


async def test_new_pending_transactions(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        sid = (await rpc(ws, _sub("newPendingTransactions")))["result"]
        stack.chains["bsc"].mine()
        (note,) = await notes(ws, 1)
        assert note["params"]["subscription"] == sid
        assert isinstance(note["params"]["result"], str) and len(note["params"]["result"]) == 66


async def test_bad_subscribe_params_are_answered_on_the_call(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        for params in (
            ["syncing"],
            [],
            [1],
            ["logs", {"fromBlock": "0x1"}],
            ["logs", {"address": "x"}],
            ["newHeads", {"a": 1}],
        ):
            answer = await rpc(
                ws, {"jsonrpc": "2.0", "id": "s", "method": "eth_subscribe", "params": params}
            )
            assert answer["id"] == "s"
            assert answer["error"]["code"] == -32602, params
        bad = await rpc(
            ws, {"jsonrpc": "2.0", "id": 2, "method": "eth_subscribe", "params": "newHeads"}
        )
        assert bad["error"]["code"] == -32600  # params must be an array or object
        bad = await rpc(
            ws, {"jsonrpc": "2.0", "id": 1, "method": "eth_unsubscribe", "params": [1, 2]}
        )
        assert bad["error"]["code"] == -32602
    assert _upstream(stack, "logs") == 0 and _upstream(stack, "newHeads") == 0


async def test_subscriptions_in_a_batch(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        answer = await rpc(
            ws,
            [
                _sub("newHeads", id_=1),
                {"jsonrpc": "2.0", "id": 2, "method": "eth_chainId"},
                _sub("newPendingTransactions", id_=3),
            ],
        )
        assert [a["id"] for a in answer] == [1, 2, 3]
        assert answer[1]["result"] == "0x38"
        stack.chains["bsc"].mine()
        got = await notes(ws, 2)
        assert {n["params"]["subscription"] for n in got} == {
            answer[0]["result"],
            answer[2]["result"],
        }


async def test_closing_the_socket_releases_everything(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        await rpc(ws, _sub("newHeads"))
        await rpc(ws, _sub("logs", {"address": "0x" + "01" * 20}, id_=2))
        assert _upstream(stack, "newHeads") == 1 and _upstream(stack, "logs") == 1
    await eventually(lambda: _upstream(stack, "newHeads") == 0 and _upstream(stack, "logs") == 0)


async def test_a_kind_the_node_does_not_offer_is_answered_with_its_error(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    for node in stack.nodes["bsc"]:
        node.offered = {"newHeads", "logs"}
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        answer = await rpc(ws, _sub("newPendingTransactions", id_="p"))
        assert answer["id"] == "p" and answer["error"]["code"] == -32602
        assert "newPendingTransactions" in answer["error"]["message"]
        assert (await rpc(ws, _sub("newHeads", id_=2)))["result"]  # the socket is fine
    assert stack.app[WS].feeds["bsc"].subs == {} or all(
        up.kind == "newHeads" for up in stack.app[WS].feeds["bsc"].subs.values()
    )


async def test_a_socket_closed_while_its_subscription_is_pending_leaks_nothing(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    feed = stack.app[WS].feeds["bsc"]
    for node in stack.nodes["bsc"]:
        node.down = True  # no node will accept the subscription for now
        await node.drop()
    ws = await http.ws_connect(f"{stack.ws}/bsc/{api_key}")
    await ws.send_bytes(orjson.dumps(_sub("logs", {"address": "0x" + "0a" * 20})))
    await eventually(lambda: any(up.reserved for up in feed.subs.values()))
    await ws.close()
    await eventually(lambda: not feed.subs)
    for node in stack.nodes["bsc"]:
        node.down = False


async def test_a_subscribe_notification_creates_nothing(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    async with http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws:
        await ws.send_bytes(b'{"jsonrpc":"2.0","method":"eth_subscribe","params":["newHeads"]}')
        assert (await rpc(ws, {"jsonrpc": "2.0", "id": 2, "method": "eth_chainId"}))["id"] == 2
        assert not stack.app[WS].feeds["bsc"].subs


async def test_a_socket_subscribing_twice_to_one_feed_gets_two_ids(
    stack: WsStack, http: aiohttp.ClientSession, api_key: str
) -> None:
    """The shared id goes to the first; the second gets its own, so each ends alone."""
    chain = stack.chains["bsc"]
    async with (
        http.ws_connect(f"{stack.ws}/bsc/{api_key}") as ws,
        http.ws_connect(f"{stack.ws}/bsc/{api_key}") as other,
    ):
        shared = (await rpc(other, _sub("newHeads", id_=1)))["result"]
        first = (await rpc(ws, _sub("newHeads", id_=1)))["result"]
        second = (await rpc(ws, _sub("newHeads", id_=2)))["result"]
        assert first == shared and second != first
        chain.mine()
        got = await notes(ws, 2)
        assert sorted(n["params"]["subscription"] for n in got) == sorted([first, second])
        assert got[0]["params"]["result"] == got[1]["params"]["result"]
        unsub = {"jsonrpc": "2.0", "id": 3, "method": "eth_unsubscribe", "params": [first]}
        assert (await rpc(ws, unsub))["result"] is True
        chain.mine()
        (note,) = await notes(ws, 1)
        assert note["params"]["subscription"] == second
        for note in await notes(other, 2):  # both blocks, on the shared id
            assert note["params"]["subscription"] == shared
        assert _upstream(stack, "newHeads") == 1

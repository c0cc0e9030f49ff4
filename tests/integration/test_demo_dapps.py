"""``gateway serve --demo`` answers a dapp's first minute, checked by the real libraries.

Before: web3.py's ``is_connected()`` was False (``web3_clientVersion`` -> -32601)
and ethers' ``getTransactionCount`` failed. Here the real ``gateway serve
--demo`` runs as a user starts it (its own embedded Redis and mock nodes, free
ports), and web3.py, ethers v6 and viem each do what a wallet or dapp does
first: client version, chain id, balance, nonce, code, gas price, fee history,
priority fee, estimate, then sign and send a transfer and wait for its receipt.
The sender in the receipt is the one that signed, and its nonce moves on.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.redis.embedded import free_port
from tests.helpers.procs import stop

# py_ecc (under eth_account and web3) raises the recursion limit to 100,000 when
# imported; put it back, or a later test's deeply nested JSON overflows the C stack.
_RECURSION_LIMIT = sys.getrecursionlimit()
from eth_account import Account  # noqa: E402
from web3 import Web3  # noqa: E402
from web3.types import Wei  # noqa: E402

sys.setrecursionlimit(_RECURSION_LIMIT)

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "tests" / "js"
HOST = "127.0.0.1"
TO = "0x2222222222222222222222222222222222222222"
# One key per client, so each one's nonce starts at 0 (well-known test keys, no value).
KEYS = {
    "private": "0x" + "0d" * 32,
    "web3": "0x" + "0a" * 32,
    "ethers": "0x" + "0b" * 32,
    "viem": "0x" + "0c" * 32,
}

pytestmark = pytest.mark.slow


def _node_ready() -> bool:
    return shutil.which("node") is not None and (JS / "node_modules" / "viem").is_dir()


def _start_demo(port: int, log: Path) -> subprocess.Popen[bytes]:
    """``gateway serve --demo`` as a user starts it (no GATEWAY_* from this shell)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "gateway", "serve", "--demo"),
                *("--host", HOST, "--port", str(port), "--metrics-listen", ""),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The demo as a user runs it: (rpc base URL for bsc, its key)."""
    port = free_port()
    log = tmp_path_factory.mktemp("demo") / "demo.log"
    proc = _start_demo(port, log)
    try:
        deadline = time.monotonic() + 60
        key = None
        while key is None:
            text = log.read_text(errors="replace")
            found = re.search(r"Demo API key: (\S+)", text)
            private = re.search(r"private transactions on \(mock builder\): (\S+)", text)
            key = found.group(1) if found and private else None
            if key is None:
                assert proc.poll() is None, text
                assert time.monotonic() < deadline, text
                time.sleep(0.1)
        assert private is not None
        yield {
            "url": f"http://{HOST}:{port}/bsc/{key}",
            "private_url": f"http://{HOST}:{port}/bsc/{private.group(1)}",
            "base": f"http://{HOST}:{port}",
            "log": str(log),
        }
    finally:
        stop(proc)


def _check(seen: dict[str, Any], address: str) -> None:
    """What every client must have seen."""
    assert seen["chainId"] == 56
    assert seen["clientVersion"].startswith("rpc-gateway-demo-node/")
    assert int(seen["balance"]) > 0
    assert seen["nonce"] == 0 and seen["nonceAfter"] == 1
    assert seen["code"] == "0x"
    assert int(seen["gasPrice"]) > 0 and int(seen["maxPriorityFeePerGas"]) > 0
    assert seen["feeHistoryBlocks"] == 4
    assert int(seen["gas"]) == 21_000
    receipt = seen["receipt"]
    assert receipt["status"] in (1, "success")
    assert receipt["from"].lower() == address.lower() == seen["fetchedFrom"].lower()
    assert receipt["hash"] == seen["txHash"] and receipt["block"] > seen["blockNumber"] - 1


def _rested(url: str) -> None:
    """Wait until the demo key's bucket is full again (its RateLimit header says so).

    Each client does a dapp's first minute in about a second, on the one demo
    key of the free plan: an estimate costs 4 units and a transaction 8 (the
    shipped weights), so three clients back to back would spend the burst a
    user running one dapp never reaches. Each starts from a rested bucket.
    """
    body = b'{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}'
    deadline = time.monotonic() + 30
    while True:
        req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                fields = dict(p.strip().split("=") for p in resp.headers["RateLimit"].split(","))
        except urllib.error.HTTPError as exc:  # a 429 while the bucket refills
            fields = {"limit": "1", "remaining": "0"}
            exc.close()
        if int(fields["remaining"]) >= int(fields["limit"]) - 2:
            return
        assert time.monotonic() < deadline, fields
        time.sleep(0.25)


def test_web3py(demo: dict[str, str]) -> None:
    _rested(demo["url"])
    w3 = Web3(Web3.HTTPProvider(demo["url"], request_kwargs={"timeout": 20}))
    assert w3.is_connected()
    account = Account.from_key(KEYS["web3"])
    before = w3.eth.get_transaction_count(account.address, "pending")
    tx = {
        "to": TO,
        "value": w3.to_wei(0.001, "ether"),
        "nonce": before,
        "chainId": w3.eth.chain_id,
        "gas": w3.eth.estimate_gas({"from": account.address, "to": TO, "value": Wei(1)}),
        "maxPriorityFeePerGas": w3.eth.max_priority_fee,
        "maxFeePerGas": w3.eth.gas_price * 2,
    }
    signed = account.sign_transaction(tx)
    sent = w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(sent, timeout=30, poll_latency=0.25)
    history = w3.eth.fee_history(4, "latest", [25, 75])
    _check(
        {
            "chainId": w3.eth.chain_id,
            "blockNumber": w3.eth.block_number,
            "clientVersion": w3.client_version,
            "balance": w3.eth.get_balance(account.address),
            "nonce": before,
            "code": "0x" + w3.eth.get_code(account.address).hex(),
            "gasPrice": w3.eth.gas_price,
            "maxPriorityFeePerGas": w3.eth.max_priority_fee,
            "feeHistoryBlocks": len(history["gasUsedRatio"]),
            "gas": tx["gas"],
            "txHash": "0x" + sent.hex().removeprefix("0x"),
            "receipt": {
                "status": receipt["status"],
                "from": receipt["from"],
                "hash": "0x" + receipt["transactionHash"].hex().removeprefix("0x"),
                "block": receipt["blockNumber"],
            },
            "fetchedFrom": w3.eth.get_transaction(sent)["from"],
            "nonceAfter": w3.eth.get_transaction_count(account.address),
        },
        account.address,
    )
    assert sent == signed.hash  # the hash web3.py computed itself


@pytest.mark.skipif(not _node_ready(), reason="npm ci --prefix tests/js has not run")
@pytest.mark.parametrize("library", ["ethers", "viem"])
def test_javascript_clients(demo: dict[str, str], library: str) -> None:
    _rested(demo["url"])
    result = subprocess.run(
        ["node", str(JS / f"dapp_{library}.mjs"), demo["url"], KEYS[library]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:] + Path(demo["log"]).read_text()[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    _check(seen, Account.from_key(KEYS[library]).address)
    assert seen["address"] == Account.from_key(KEYS[library]).address


def test_the_cli_works_against_the_running_demo(demo: dict[str, str], tmp_path: Path) -> None:
    """The banner says how; the CLI then reads the demo's own Redis and creates nothing."""
    text = Path(demo["log"]).read_text(errors="replace")
    found = re.search(r"export GATEWAY_REDIS_URL=(\S+)", text)
    assert found, text
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["GATEWAY_REDIS_URL"] = found.group(1)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "gateway"),
            "keys",
            "list",
            "--account",
            "demo@example.com",
            "--json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    listed = {k["name"]: k for k in json.loads(result.stdout)}
    assert listed["demo"]["status"] == "active", listed  # the banner's key, in its Redis
    assert list(tmp_path.iterdir()) == [], "the CLI created files where it ran"


def test_the_demo_logs_no_request_line(demo: dict[str, str]) -> None:
    """An access line per request would scroll the banner (key, CLI line) away."""
    w3 = Web3(Web3.HTTPProvider(demo["url"]))
    assert w3.eth.chain_id == 56
    time.sleep(0.5)  # a line would be written as the answer goes out; give the log a moment
    assert "access remote=" not in Path(demo["log"]).read_text(errors="replace")


def test_ctrl_c_stops_the_demo_quietly(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) ends the demo with status 0 and no warning on the way out: the
    gateway's pools stop before the mock nodes they probe (they used to go first)."""
    log = tmp_path / "demo.log"
    proc = _start_demo(free_port(), log)
    try:
        deadline = time.monotonic() + 60
        while "Running on http://" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        time.sleep(1.5)  # a probe round and a mined block while it runs
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, log.read_text()[-2000:]
    finally:
        stop(proc)
    text = log.read_text(errors="replace")
    assert "draining" in text
    assert [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line] == []


def test_private_route_end_to_end(demo: dict[str, str]) -> None:
    """The demo's second key has private transactions on: web3.py's transfer goes to the
    mock builder, which includes it; the key's Transactions page says so."""
    w3 = Web3(Web3.HTTPProvider(demo["private_url"], request_kwargs={"timeout": 20}))
    account = Account.from_key(KEYS["private"])
    tx = {
        "to": TO,
        "value": w3.to_wei(0.001, "ether"),
        "nonce": w3.eth.get_transaction_count(account.address, "pending"),
        "chainId": 56,
        "gas": 21_000,
        "maxPriorityFeePerGas": w3.eth.max_priority_fee,
        "maxFeePerGas": w3.eth.gas_price * 2,
    }
    sent = w3.eth.send_raw_transaction(account.sign_transaction(tx).raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(sent, timeout=30, poll_latency=0.25)
    assert receipt["status"] == 1
    page = _private_key_page(demo["base"])
    deadline = time.monotonic() + 30
    while "0x" + bytes(sent).hex().removeprefix("0x") not in page:
        assert time.monotonic() < deadline, page[-3000:]
        time.sleep(0.5)
        page = _private_key_page(demo["base"])
    row = page.split("0x" + bytes(sent).hex().removeprefix("0x"), 1)[1].split("</li>", 1)[0]
    # the newest entry: "accepted", or once followed to its receipt "included in block N"
    assert ">private<" in row and ("accepted" in row or "included in block" in row), row


def _private_key_page(base: str) -> str:
    """The demo account's "demo-private" key's Transactions page, logged in as a user is."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
    login = opener.open(f"{base}/dashboard/login", timeout=20).read().decode()
    token = re.search(r'name="csrf_token" value="([^"]+)"', login)
    assert token is not None, login[:2000]
    form = urllib.parse.urlencode(
        {"email": "demo@example.com", "password": "demo-password", "csrf_token": token.group(1)}
    ).encode()
    keys = opener.open(f"{base}/dashboard/login", data=form, timeout=20).read().decode()
    rows = re.findall(
        r'data-key-id="([^"]+)"[^>]*>\s*<th scope="row"><span data-testid="key-name">([^<]*)<',
        keys,
    )
    key_id = next((k for k, name in rows if name.strip() == "demo-private"), None)
    assert key_id is not None, keys[:3000]
    return str(
        opener.open(f"{base}/dashboard/keys/{key_id}/transactions", timeout=20).read().decode()
    )


def _rpc(url: str, method: str, params: list[Any]) -> dict[str, Any]:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=20) as resp:
        assert resp.status == 200
        answer: dict[str, Any] = json.loads(resp.read())
    return answer


def _opbnb(url: str) -> str:
    return url.replace("/bsc/", "/opbnb/")


def test_blocks_come_at_the_networks_pace(demo: dict[str, str]) -> None:
    """BSC makes a block every 0.45 s and opBNB every 0.25 s, on their own clocks:
    the demo's nodes do too (they made a block a second, and one per transaction),
    and their blocks' timestamps follow the clock."""
    _rested(demo["url"])
    urls = {"bsc": demo["url"], "opbnb": _opbnb(demo["url"])}
    first = {
        name: int(_rpc(url, "eth_blockNumber", [])["result"], 16) for name, url in urls.items()
    }
    started = time.monotonic()
    time.sleep(4.5)
    last = {name: int(_rpc(url, "eth_blockNumber", [])["result"], 16) for name, url in urls.items()}
    took = time.monotonic() - started
    # allow a block of head-following lag at either end, and a loaded box
    bsc, opbnb = last["bsc"] - first["bsc"], last["opbnb"] - first["opbnb"]
    assert took / 0.45 - 3 <= bsc <= took / 0.45 + 2, (bsc, took)
    assert took / 0.25 - 4 <= opbnb <= took / 0.25 + 2, (opbnb, took)
    # and their timestamps say so: now, 20 BSC blocks 9 s apart (they were 3 s a block)
    head = last["bsc"]
    stamps = [
        int(_rpc(demo["url"], "eth_getBlockByNumber", [hex(n), False])["result"]["timestamp"], 16)
        for n in (head - 20, head)
    ]
    assert 7 <= stamps[1] - stamps[0] <= 11, stamps
    assert abs(stamps[1] - time.time()) < 5, stamps


def test_logs_and_hashes_are_keccak(demo: dict[str, str]) -> None:
    """An ERC-20 Transfer's topic is the Keccak hash of its signature (a dapp filters on
    it); block hashes are 32-byte Keccak digests, not SHA-256 ones."""
    _rested(demo["url"])
    w3 = Web3(Web3.HTTPProvider(demo["url"], request_kwargs={"timeout": 20}))
    head = w3.eth.block_number
    logs = w3.eth.get_logs({"fromBlock": head - 2, "toBlock": head})
    transfer = Web3.keccak(text="Transfer(address,address,uint256)")
    assert logs and all(log["topics"][0] == transfer for log in logs), logs[:2]
    # the same filter by topic, as ethers' contract.on does, finds them all
    assert w3.eth.get_logs({"fromBlock": head - 2, "toBlock": head, "topics": [transfer]}) == logs
    block = w3.eth.get_block(head)
    assert len(block["hash"]) == 32 and block["parentHash"] == w3.eth.get_block(head - 1)["hash"]


def test_bsc_finality_methods(demo: dict[str, str]) -> None:
    """``eth_getFinalizedHeader`` / ``eth_getFinalizedBlock`` (BSC's fast finality) answer
    on BSC, a few blocks under the head; opBNB's nodes do not offer them, as op-geth."""
    _rested(demo["url"])
    head = int(_rpc(demo["url"], "eth_blockNumber", [])["result"], 16)
    header = _rpc(demo["url"], "eth_getFinalizedHeader", [-2])["result"]
    block = _rpc(demo["url"], "eth_getFinalizedBlock", [-2, False])["result"]
    assert head - 10 <= int(header["number"], 16) < head + 2, (head, header)
    assert "transactions" not in header and isinstance(block["transactions"], list)
    finalized = _rpc(demo["url"], "eth_getBlockByNumber", ["finalized", False])["result"]
    assert int(finalized["number"], 16) <= int(
        _rpc(demo["url"], "eth_blockNumber", [])["result"], 16
    )
    refused = _rpc(demo["url"], "eth_getFinalizedHeader", [0])["error"]
    assert refused["code"] == -32602 and "out of range" in refused["message"], refused
    missing = _rpc(_opbnb(demo["url"]), "eth_getFinalizedHeader", [-2])["error"]
    assert missing["code"] == -32601 and "does not exist" in missing["message"], missing


def test_private_route_nonce_mistake_in_words(demo: dict[str, str]) -> None:
    """A nonce already used, sent on the private route, is answered as the public route
    answers it (``nonce too low``), not HTTP 502 "every private endpoint failed": the
    demo's builder answers in words (it answered HTTP 500 with a traceback)."""
    _rested(demo["private_url"])
    account = Account.from_key("0x" + "0e" * 32)
    fields = {"to": TO, "nonce": 0, "chainId": 56, "gas": 21_000}
    fees = {"maxFeePerGas": 2 * 10**9, "maxPriorityFeePerGas": 10**9}
    signed = [account.sign_transaction(fields | fees | {"value": v}) for v in (1, 2)]
    raws = ["0x" + s.raw_transaction.hex().removeprefix("0x") for s in signed]
    first = _rpc(demo["private_url"], "eth_sendRawTransaction", [raws[0]])
    assert first["result"] == "0x" + signed[0].hash.hex().removeprefix("0x"), first
    again = _rpc(demo["private_url"], "eth_sendRawTransaction", [raws[1]])
    assert "nonce too low" in again["error"]["message"], again


@pytest.mark.skipif(not _node_ready(), reason="npm ci --prefix tests/js has not run")
def test_ethers_defaults_approve_swap_and_transfer_events(demo: dict[str, str]) -> None:
    """ethers v6 with every default (its 250 ms request cache, 4 s polling): two
    approve-then-swap pairs each take the nonce after the last (the demo mined a block
    per transaction at once, so the cached nonce came back: NONCE_EXPIRED), and
    ``contract.on("Transfer")`` sees the token's transfers (its topic was SHA-256)."""
    _rested(demo["url"])
    token = "0x" + "01" * 20  # the demo chain's first token: transfers in every block
    key = "0x" + "0b" * 31 + "0e"
    result = subprocess.run(
        ["node", str(JS / "demo_defaults.mjs"), demo["url"], key, token, "2"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:] + Path(demo["log"]).read_text()[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["pairs"] == 2 and seen["receipts"] == 4, seen
    assert seen["nonces"] == [0, 1, 2, 3] and seen["nonce"] == 4, seen
    assert seen["transfers"], seen
    assert all(int(t["block"]) > 0 for t in seen["transfers"])


def test_the_banners_websocket_line_runs(demo: dict[str, str]) -> None:
    """The banner's WebSocket line, pasted as printed (it named websocat, which nothing
    installs), subscribes to new blocks with the package's own client."""
    text = Path(demo["log"]).read_text(errors="replace")
    assert "websocat" not in text
    line = next(ln.strip() for ln in text.splitlines() if "-m gateway.demo.wscat" in ln)
    key = demo["url"].rsplit("/", 1)[1]
    result = subprocess.run(
        ["bash", "-c", line + " --count 2"],
        env=os.environ | {"RPC_KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    answers = [json.loads(ln) for ln in result.stdout.splitlines()]
    assert answers[0]["result"].startswith("0x"), answers
    assert answers[1]["method"] == "eth_subscription", answers
    assert int(answers[1]["params"]["result"]["number"], 16) > 0


def test_a_receipt_comes_a_block_later_never_at_once(demo: dict[str, str]) -> None:
    """A sent transaction goes in a block the node makes on its clock, reached a
    quarter second or more after the send (the node made a block for it at once, so
    ethers' 250 ms request cache handed the next transaction the same nonce)."""
    _rested(demo["url"])
    account = Account.from_key("0x" + "0c" * 31 + "0e")
    fields = {"to": TO, "value": 1, "chainId": 56, "gas": 21_000, "gasPrice": 10**9}
    waited = []
    for nonce in range(3):
        raw = account.sign_transaction(fields | {"nonce": nonce}).raw_transaction
        sent = time.monotonic()
        tx_hash = _rpc(demo["url"], "eth_sendRawTransaction", ["0x" + raw.hex()])["result"]
        while _rpc(demo["url"], "eth_getTransactionReceipt", [tx_hash])["result"] is None:
            assert time.monotonic() - sent < 10, tx_hash
            time.sleep(0.05)  # 20 polls a second: within the free plan's rate
        waited.append(time.monotonic() - sent)
    assert min(waited) >= 0.24 and max(waited) < 3, waited


def test_a_sends_node_header_names_who_took_it(demo: dict[str, str]) -> None:
    """``X-Gateway-Node`` on a send names the node (public route) or the builder (private
    route, its configured name) that accepted it; it said ``gateway`` for every send."""
    account = Account.from_key("0x" + "0a" * 31 + "0e")
    fields = {"to": TO, "value": 1, "chainId": 56, "gas": 21_000, "gasPrice": 10**9}
    for nonce, (url, expected) in enumerate(
        [(demo["url"], "bsc-0"), (demo["private_url"], "demo-builder")]
    ):
        _rested(url)
        raw = account.sign_transaction(fields | {"nonce": nonce}).raw_transaction
        call = {"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction"}
        body = json.dumps(call | {"params": ["0x" + raw.hex()]}).encode()
        req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=20) as resp:
            answer = json.loads(resp.read())
            assert answer["result"].startswith("0x"), answer
            assert resp.headers["X-Gateway-Node"] == expected, dict(resp.headers)
            assert resp.headers["X-Gateway-Cache"] == "miss"

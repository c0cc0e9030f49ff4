"""A mock node with a chain the test drives: its head advances, re-organises, lags, hangs.

Built on ``gateway.demo.mocknode`` by subclassing (its HTTP server, fault options
and call counters stay as they are): ``ChainNode`` answers from a ``Chain``
that several nodes can share, each seeing it ``lag`` blocks behind. Nothing
moves on its own: ``chain.advance()`` mines, ``chain.reorg(depth)`` replaces
the top blocks (same numbers, new hashes, new balances and call results),
so tests are exact and need no clock.

Hashes encode what they name (``number``, fork generation, then a digest),
so a block, transaction or receipt is found by hash without an index, and a
hash from a re-organised-away fork answers ``null`` as real nodes do.

Uses mocknode's private ``_Conn``, ``_call`` and ``_delay``; both modules
live in this repository and change together.

It stays whole because ``Chain`` and ``ChainNode`` are one mock (a node is a
view of the chain ``lag`` blocks behind), and only tests import it.
"""

from __future__ import annotations

from typing import Any, Final

from eth_hash.auto import keccak

from gateway.demo import wallet
from gateway.demo.mocknode import MockNode, MockNodeOptions, listen
from gateway.demo.nodewire import BLOCK_INTERVAL_S, GENESIS_TS, error_obj

_MAX_LOG_BLOCKS: Final = 10_000  # real nodes refuse wider eth_getLogs the same way
_FAR: Final = 86_400.0  # "hang": an answer due in a day


class Chain:
    """The canonical chain: ``head``, and a fork generation per reorg."""

    def __init__(
        self, chain_id: int = 56, start: int = 1_000, finality_depth: int = 2, safe_depth: int = 1
    ) -> None:
        self.chain_id = chain_id
        self.head = start
        self.finality_depth = finality_depth
        self.safe_depth = safe_depth
        self.ledger = wallet.Ledger(chain_id)  # transactions sent, shared by every node
        self._reorgs: list[tuple[int, int]] = []  # (first replaced block, generation)

    @property
    def finalized(self) -> int:
        return max(0, self.head - self.finality_depth)

    @property
    def safe(self) -> int:
        return max(0, self.head - self.safe_depth)

    def advance(self, blocks: int = 1) -> int:
        self.head += blocks
        return self.head

    def reorg(self, depth: int = 1) -> None:
        """Replace the top ``depth`` blocks; finalized blocks never change."""
        first = self.head - depth + 1
        if depth < 1 or first <= self.finalized:
            raise ValueError("a reorg may only replace blocks above the finalized one")
        self._reorgs.append((first, len(self._reorgs) + 1))

    def generation(self, number: int) -> int:
        gen = 0
        for first, g in self._reorgs:
            if first <= number:
                gen = g
        return gen

    def _digest(self, kind: str, number: int, gen: int) -> str:
        raw = f"{kind}:{self.chain_id}:{number}:{gen}".encode()
        return keccak(raw).hex()[:40]

    def block_hash(self, number: int) -> str:
        gen = self.generation(number)
        return f"0x{number:016x}{gen:08x}{self._digest('block', number, gen)}"

    def tx_hash(self, number: int) -> str:
        gen = self.generation(number)
        return f"0x{number:016x}{gen:08x}{self._digest('tx', number, gen)}"

    def locate(self, digest: Any, kind: str) -> int | None:
        """The block number a block/tx hash names, if it is on the canonical chain."""
        if type(digest) is not str or len(digest) != 66 or not digest.startswith("0x"):
            raise ValueError("not a 32-byte hash")
        try:
            number, gen = int(digest[2:18], 16), int(digest[18:26], 16)
        except ValueError:
            raise ValueError("not a hash") from None
        if number > self.head or gen != self.generation(number):
            return None
        if digest[26:].lower() != self._digest(kind, number, gen):
            return None
        return number


class ChainNode(MockNode):
    """A node on ``chain``, ``lag`` blocks behind; ``hold_s``/``hang`` delay every answer."""

    def __init__(self, chain: Chain, *, lag: int = 0, options: MockNodeOptions | None = None):
        super().__init__(options or MockNodeOptions(chain_id=chain.chain_id, block_time_s=0))
        self.chain = chain
        self.lag = lag
        self.hold_s: float | None = None  # every answer waits this long (None: options)
        self.finality_lie = 0  # a hostile node: its safe/finalized marks this far ahead

    @property
    def head(self) -> int:
        return max(0, self.chain.head - self.lag)

    @property
    def finalized(self) -> int:
        return max(0, self.head - self.chain.finality_depth) + self.finality_lie

    @property
    def safe(self) -> int:
        return max(0, self.head - self.chain.safe_depth) + self.finality_lie

    @property
    def hang(self) -> bool:
        return self.hold_s == _FAR

    @hang.setter
    def hang(self, value: bool) -> None:
        self.hold_s = _FAR if value else None

    def _delay(self) -> float:
        return self.hold_s if self.hold_s is not None else super()._delay()

    def _valid_call(self, cid: Any, method: str, params: Any) -> dict[str, Any]:
        """Answer from the chain (``_m_<method>``), else as the demo wallet would."""
        handler = getattr(self, "_m_" + method, None)
        params = params if isinstance(params, list) else []
        if handler is None and not wallet.offers(method):
            return error_obj(cid, -32601, wallet.not_offered(method))
        try:
            result = self._wallet(method, params) if handler is None else handler(params)
        except (TypeError, ValueError, IndexError, KeyError):
            return error_obj(cid, -32602, "Invalid params")
        except (_NodeError, wallet.NodeError) as exc:
            return error_obj(cid, exc.code, str(exc))
        return {"jsonrpc": "2.0", "id": cid, "result": result}

    # -- block references ----------------------------------------------------
    def _number(self, tag: Any) -> int | None:
        """A block param as this node sees it; None for a block it does not have."""
        if isinstance(tag, dict):
            if "blockHash" in tag:
                return self.chain.locate(tag["blockHash"], "block")
            tag = tag.get("blockNumber")
        if tag in ("latest", "pending"):
            return self.head
        if tag == "safe":
            return self.safe
        if tag == "finalized":
            return self.finalized
        if tag == "earliest":
            return 0
        if isinstance(tag, str) and tag.startswith("0x"):
            if len(tag) == 66:
                return self.chain.locate(tag, "block")
            number = int(tag, 16)
            return number if number <= self.head else None
        raise ValueError("bad block tag")

    def _block(self, number: int, full: bool) -> dict[str, Any]:
        chain = self.chain
        tx = self._tx(number) if full else chain.tx_hash(number)
        return {
            "number": hex(number),
            "hash": chain.block_hash(number),
            "parentHash": chain.block_hash(number - 1) if number else "0x" + "00" * 32,
            "timestamp": hex(GENESIS_TS + number * BLOCK_INTERVAL_S),
            "miner": "0x" + "00" * 20,
            "gasLimit": hex(140_000_000),
            "gasUsed": hex(21_000),
            "transactions": [tx],
            "uncles": [],
        }

    def _tx(self, number: int) -> dict[str, Any]:
        chain = self.chain
        return {
            "hash": chain.tx_hash(number),
            "blockHash": chain.block_hash(number),
            "blockNumber": hex(number),
            "transactionIndex": "0x0",
            "from": "0x" + "11" * 20,
            "to": "0x" + "22" * 20,
            "value": hex(number),
            "input": "0x",
        }

    def _log(self, number: int) -> dict[str, Any]:
        chain = self.chain
        return {
            "address": "0x" + "22" * 20,
            "topics": ["0x" + "ab" * 32],
            "data": hex(number),
            "blockNumber": hex(number),
            "blockHash": chain.block_hash(number),
            "transactionHash": chain.tx_hash(number),
            "transactionIndex": "0x0",
            "logIndex": "0x0",
            "removed": False,
        }

    def _receipt(self, number: int) -> dict[str, Any]:
        chain = self.chain
        return {
            "transactionHash": chain.tx_hash(number),
            "blockHash": chain.block_hash(number),
            "blockNumber": hex(number),
            "transactionIndex": "0x0",
            "status": "0x1",
            "gasUsed": hex(21_000),
            "logs": [self._log(number)],
        }

    def _wallet(self, method: str, params: list[Any]) -> Any:
        """A wallet's method (gateway.demo.wallet), on this node's view of the chain."""
        return wallet.answer(
            method,
            params,
            ledger=self.chain.ledger,
            head=self.head,
            block_hash=self.chain.block_hash,
        )

    # -- methods (``_m_`` + JSON-RPC name) ----------------------------------
    def _m_eth_chainId(self, params: list[Any]) -> Any:
        return hex(self.chain.chain_id)

    def _m_net_version(self, params: list[Any]) -> Any:
        return str(self.chain.chain_id)

    def _m_eth_blockNumber(self, params: list[Any]) -> Any:
        return hex(self.head)

    def _m_eth_getBlockByNumber(self, params: list[Any]) -> Any:
        number = self._number(params[0])
        return None if number is None else self._block(number, bool(params[1:2] and params[1]))

    def _m_eth_getBlockByHash(self, params: list[Any]) -> Any:
        number = self.chain.locate(params[0], "block")
        if number is None or number > self.head:
            return None
        return self._block(number, bool(params[1:2] and params[1]))

    def _m_eth_getTransactionByHash(self, params: list[Any]) -> Any:
        if self.chain.ledger.find(params[0]):
            return self._wallet("eth_getTransactionByHash", params)
        number = self.chain.locate(params[0], "tx")
        return None if number is None or number > self.head else self._tx(number)

    def _m_eth_getTransactionReceipt(self, params: list[Any]) -> Any:
        if self.chain.ledger.find(params[0]):
            return self._wallet("eth_getTransactionReceipt", params)
        number = self.chain.locate(params[0], "tx")
        return None if number is None or number > self.head else self._receipt(number)

    def _m_eth_gasPrice(self, params: list[Any]) -> Any:
        return hex(1_000_000_000 + self.head)  # follows the chain: never cached

    def _m_eth_getBlockReceipts(self, params: list[Any]) -> Any:
        number = self._number(params[0])
        return None if number is None else [self._receipt(number)]

    def _m_eth_getBalance(self, params: list[Any]) -> Any:
        number = self._state_block(params, 1)
        return hex(int(self.chain.block_hash(number)[-8:], 16))

    def _m_eth_call(self, params: list[Any]) -> Any:
        number = self._state_block(params, 1)
        return "0x" + self.chain.block_hash(number)[26:].rjust(64, "0")

    def _state_block(self, params: list[Any], index: int) -> int:
        number = self._number(params[index] if len(params) > index else "latest")
        if number is None:
            raise _NodeError(-32000, "header not found")
        return number

    def _m_eth_getLogs(self, params: list[Any]) -> Any:
        spec = params[0]
        if not isinstance(spec, dict):
            raise ValueError("filter must be an object")
        if "blockHash" in spec:
            number = self.chain.locate(spec["blockHash"], "block")
            return [] if number is None else [self._log(number)]
        low = self._number(spec.get("fromBlock", "latest"))
        high = self._number(spec.get("toBlock", "latest"))
        low = self.head + 1 if low is None else low
        high = self.head if high is None else high  # real nodes clamp to their head
        if high - low + 1 > _MAX_LOG_BLOCKS:
            raise _NodeError(-32005, "query exceeds max block range 10000")
        return [self._log(n) for n in range(low, high + 1)]


class _NodeError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def start_chain_node(
    chain: Chain, *, lag: int = 0, host: str = "127.0.0.1", port: int = 0
) -> ChainNode:
    """Start a ``ChainNode`` on ``host:port`` (0 picks a free port)."""
    return await listen(ChainNode(chain, lag=lag), host, port)

"""Filters and block objects read as a Go node reads them, and forwarded as the rebuild.

The property test holds the guard to what a node stand-in decodes from the
bytes the gateway actually forwards. The stand-in is written here, apart
from ``gateway.rpc.params``: it reads raw JSON's member sequence (every
duplicate kept, in byte order, via ``object_pairs_hook``) and fills geth's
``FilterCriteria`` the way ``encoding/json`` does: exact name first, then
Go's fold (``ToUpper(ToLower(r))`` with simple case mappings), the last
member wins, unknown members ignored, ``null`` into a pointer = absent.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.intel.head import HeadReport, HeadTracker
from gateway.intel.logsguard import check_logs_range, logs_range
from gateway.intel.methods import STATE_AT
from gateway.rpc import protocol as rpc
from gateway.rpc.params import (
    BLOCK_PARAM,
    MAX_ADDRESSES,
    LogFilter,
    canonical_filter,
    canonical_params,
    go_fold,
    read_filter,
)

HEAD, SAFE, FINAL = 50_000, 49_990, 49_980
ADDR = "0x" + "ab" * 20
H32 = "0x" + "cd" * 32
METHODS = frozenset({"eth_getLogs", "eth_getBalance", "eth_call", "eth_getStorageAt"})


@pytest.fixture
def heads() -> HeadTracker:
    return _heads()


def _heads() -> HeadTracker:
    t = HeadTracker(["n"])
    t.observe("n", HeadReport(HEAD, "0xh", safe=SAFE, finalized=FINAL))
    return t


# -- the Go-style node stand-in ---------------------------------------------------------
class _Pairs(list[tuple[str, Any]]):
    """A JSON object as its raw member sequence (duplicates kept, in order)."""


def _go_rune_fold(ch: str) -> str:
    if ch.isascii():
        return ch.upper()
    lower = ch.lower()
    lower = lower if len(lower) == 1 else lower[0]  # simple mapping: U+0130 -> "i"
    upper = lower.upper()
    return upper if len(upper) == 1 else lower


def _go_field(key: str, fields: tuple[str, ...]) -> str | None:
    if key in fields:
        return key
    folded = "".join(map(_go_rune_fold, key))
    for field in fields:
        if "".join(map(_go_rune_fold, field)) == folded:
            return field
    return None


class GoRefused(Exception):
    pass


def _go_block_number(value: Any) -> int:
    """geth's rpc.BlockNumber: tags as geth's negative constants, numbers as ints."""
    tags = {"earliest": -5, "safe": -4, "finalized": -3, "latest": -2, "pending": -1}
    if not isinstance(value, str):
        raise GoRefused("not a string")
    if value in tags:
        return tags[value]
    if value[:2] not in ("0x", "0X") or len(value) == 2:
        raise GoRefused("no prefix")
    digits = value[2:]
    if len(digits) > 1 and digits.startswith("0"):
        raise GoRefused("leading zero")
    if not re.fullmatch("[0-9a-fA-F]+", digits):  # Python's int() also takes "_", "+", " "
        raise GoRefused("syntax")
    number = int(digits, 16)
    if number >= 1 << 63:
        raise GoRefused("range")
    return number


def go_node_range(body: bytes) -> int | str:
    """Blocks a geth-like node scans for the eth_getLogs request ``body``; "hash" if by hash.

    Raises ``GoRefused`` where the node would refuse the filter.
    """
    msg = json.loads(body, object_pairs_hook=_Pairs)
    params = [v for k, v in msg if _go_field(k, ("params",)) == "params"][-1]
    if not isinstance(params, list) or len(params) != 1:
        raise GoRefused("arguments")
    spec = params[0]
    if spec is None:
        spec = _Pairs()
    if not isinstance(spec, _Pairs):
        raise GoRefused("not an object")
    fields = ("blockHash", "fromBlock", "toBlock", "address", "topics")
    got: dict[str, Any] = {}
    for key, value in spec:
        field = _go_field(key, fields)
        if field is not None:
            got[field] = value
    if got.get("blockHash") is not None:
        if got.get("fromBlock") is not None or got.get("toBlock") is not None:
            raise GoRefused("both")
        if not (isinstance(got["blockHash"], str) and len(got["blockHash"]) == 66):
            raise GoRefused("hash")
        return "hash"
    ends = []
    for name in ("fromBlock", "toBlock"):
        raw = got.get(name)
        number = -2 if raw is None else _go_block_number(raw)
        resolve = {-5: 0, -4: SAFE, -3: FINAL, -2: HEAD, -1: HEAD}
        ends.append(resolve.get(number, number))
    return ends[1] - ends[0] + 1


# -- what clients may send ----------------------------------------------------------------
def _spellings(name: str) -> st.SearchStrategy[str]:
    """Any case of ``name``, with the non-ASCII runes that Go folds onto its letters."""
    swaps = {"k": "k\u212a", "s": "s\u017f", "i": "i\u0130\u0131"}

    def letter(ch: str) -> st.SearchStrategy[str]:
        options = {ch.lower(), ch.upper(), *swaps.get(ch.lower(), "")}
        return st.sampled_from(sorted(options))

    return st.tuples(*(letter(c) for c in name)).map("".join)


BLOCK_VALUES = st.one_of(
    st.sampled_from(["earliest", "latest", "pending", "safe", "finalized", "Latest"]),
    st.integers(0, HEAD + 20_000).map(hex),
    st.integers(0, HEAD).map(lambda n: "0X" + format(n, "X")),
    st.integers(0, HEAD).map(lambda n: "0x0" + format(n, "x")),  # leading zero: refused
    st.sampled_from([None, 16, "0x", "", "0xzz", "0x" + "f" * 17, "0x8000000000000000"]),
)
NAMES = st.one_of(
    _spellings("fromBlock"),
    _spellings("toBlock"),
    st.sampled_from(["from_block", "fromBlocks", "to", "FROM", "blockNumber"]),
)


@st.composite
def client_filters(draw: st.DrawFn) -> list[tuple[str, Any]]:
    members: list[tuple[str, Any]] = draw(st.lists(st.tuples(NAMES, BLOCK_VALUES), max_size=6))
    if draw(st.integers(0, 9)) == 0:
        members.append((draw(_spellings("blockHash")), draw(st.sampled_from([H32, None, "0x1"]))))
    if draw(st.booleans()):
        members.append((draw(_spellings("address")), draw(st.sampled_from([ADDR, [ADDR], None]))))
    if draw(st.booleans()):
        members.append((draw(_spellings("topics")), draw(st.sampled_from([None, [], [H32, None]]))))
    order = draw(st.permutations(range(len(members))))
    return [members[i] for i in order]


def _body(members: list[tuple[str, Any]]) -> bytes:
    """The request as raw bytes, each member written as given (duplicates too)."""
    obj = b",".join(orjson.dumps(k) + b":" + orjson.dumps(v) for k, v in members)
    return b'{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{' + obj + b"}]}"


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(client_filters())
def test_the_guard_measures_what_the_node_decodes_from_the_forwarded_bytes(
    members: list[tuple[str, Any]],
) -> None:
    heads = _heads()
    body = _body(members)
    call = rpc.validate_call(rpc.parse_body(body), METHODS)
    exact_duplicates = len({k for k, _ in members}) < len(members)
    if call.error is not None:
        assert call.error is rpc.INVALID_PARAMS
        if not exact_duplicates:  # the dict saw every member in byte order: Go refuses too
            with pytest.raises(GoRefused):
                go_node_range(body)
        return
    forwarded = rpc.encode_call(call, 7)
    node = go_node_range(forwarded)
    measured = logs_range(call.params, heads)
    assert measured == (None if node == "hash" else node), (body, forwarded)
    refused = check_logs_range(call.params, heads, 10_000) is not None
    assert refused == (node != "hash" and isinstance(node, int) and node > 10_000)
    if not exact_duplicates:  # and it is what the client's own bytes mean to Go
        assert go_node_range(body) == node


# -- the reader, case by case -------------------------------------------------------------
def test_go_fold_folds_the_runes_go_folds() -> None:
    assert go_fold("fromBlock") == go_fold("FROMBLOCK") == go_fold("fromBloc\u212a")
    assert go_fold("addre\u017f\u017f") == go_fold("ADDRESS")
    assert go_fold("topIcs") == go_fold("top\u0130cs") == go_fold("top\u0131cs")
    assert go_fold("fr\u00f6mBlock") != go_fold("fromBlock")


@pytest.mark.parametrize(
    ("obj", "rebuilt"),
    [
        ({"FromBlock": "0x0"}, {"fromBlock": "0x0"}),
        ({"fromBlock": "latest", "FROMBLOCK": "0x0"}, {"fromBlock": "0x0"}),
        ({"FROMBLOCK": "0x0", "fromBlock": "latest"}, {"fromBlock": "latest"}),
        ({"fromBlock": "0x0", "FromBlock": None}, {}),  # null = absent: latest
        ({"toBlock": "0XFF", "extra": 1}, {"toBlock": "0xff"}),
        (
            {"TOPICS": [H32, [H32, None, "junk"]], "Address": ADDR},
            {"address": ADDR, "topics": [H32, None]},
        ),
        ({"blockhash": H32, "fromBlock": None}, {"blockHash": H32}),
        (None, {}),
    ],
)
def test_filters_are_rebuilt_canonically(obj: Any, rebuilt: dict[str, Any]) -> None:
    flt = read_filter(obj)
    assert isinstance(flt, LogFilter)
    assert canonical_filter(flt) == rebuilt
    assert canonical_params("eth_getLogs", [obj]) == ([rebuilt], None)
    assert canonical_params("eth_newFilter", [obj]) == ([rebuilt], None)


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ([{"fromBlock": "0x00"}], "invalid argument 0: hex number with leading zero digits"),
        ([{"FromBlock": 16}], "invalid argument 0: hex string without 0x prefix"),
        ([{"toBlock": "0x"}], 'invalid argument 0: hex string "0x"'),
        ([{"toBlock": "0x" + "f" * 17}], "invalid argument 0: hex number > 64 bits"),
        ([{"toBlock": "0x8000000000000000"}], "invalid argument 0: block number larger than int64"),
        ([{"BlockHash": H32, "FROMBLOCK": "0x1"}], "invalid argument 0: cannot specify both"),
        ([{"blockHash": "0x12"}], "invalid argument 0: json: cannot unmarshal hex string has"),
        ([{"address": "0x12"}], "invalid argument 0: invalid address: hex has invalid length 1"),
        ([{"address": [ADDR, 5]}], "invalid argument 0: non-string address at index 1"),
        ([{"address": 5}], "invalid argument 0: invalid addresses in query"),
        ([{"topics": H32}], "invalid argument 0: json: cannot unmarshal string"),
        ([{"topics": [5]}], "invalid argument 0: invalid topic(s)"),
        ([{"topics": ["0x12"]}], "invalid argument 0: hex has invalid length 1"),
        ([{"Topics": [None] * 5}], "exceed max topics"),
        ([{"address": [ADDR] * 1001}], "invalid argument 0: exceed max addresses: 1001 given"),
        ([{"Address": [5] * 1001}], "invalid argument 0: exceed max addresses: 1001 given"),
        ([], "missing value for required argument 0"),
        (None, "missing value for required argument 0"),
        ({"filter": {}}, "non-array args"),
        ([{}, 1], "too many arguments, want at most 1"),
        (["0x1"], "invalid argument 0: json: cannot unmarshal string"),
    ],
)
def test_bad_filters_are_refused_in_geths_words(params: Any, reason: str) -> None:
    forwarded, why = canonical_params("eth_getLogs", params)
    assert why is not None and why.startswith(reason), why
    assert forwarded is params


def test_a_filter_may_name_up_to_max_addresses() -> None:
    obj = {"address": [ADDR] * MAX_ADDRESSES}
    assert canonical_params("eth_newFilter", [obj]) == ([obj], None)


@pytest.mark.parametrize(
    ("block", "rebuilt"),
    [
        ({"BlockNumber": "0x5"}, {"blockNumber": "0x5"}),
        ({"blockNumber": "0x5", "BLOCKNUMBER": "latest"}, {"blockNumber": "latest"}),
        (
            {"blockHash": H32, "RequireCanonical": True},
            {"blockHash": H32, "requireCanonical": True},
        ),
        # null leaves a bool as it was (Go), so the earlier true stands
        (
            {"blockHash": H32, "requireCanonical": True, "REQUIRECANONICAL": None},
            {"blockHash": H32, "requireCanonical": True},
        ),
        ({"blockHash": H32, "requireCanonical": False}, {"blockHash": H32}),
        ({"blockNumber": "0x5", "requireCanonical": True}, {"blockNumber": "0x5"}),
        ({"blockNumber": "0x5", "blockHash": None, "x": 1}, {"blockNumber": "0x5"}),
    ],
)
def test_block_objects_are_rebuilt_canonically(
    block: dict[str, Any], rebuilt: dict[str, Any]
) -> None:
    assert canonical_params("eth_getBalance", [ADDR, block]) == ([ADDR, rebuilt], None)
    assert canonical_params("eth_getStorageAt", [ADDR, "0x0", block]) == (
        [ADDR, "0x0", rebuilt],
        None,
    )


@pytest.mark.parametrize(
    ("block", "reason"),
    [
        ({"blockHash": H32, "BlockNumber": "0x1"}, "cannot specify both BlockHash and BlockNumber"),
        ({"BLOCKNUMBER": "0x01"}, "hex number with leading zero digits"),
        ({"blockHash": H32, "requireCanonical": "yes"}, "json: cannot unmarshal non-bool"),
        ({"hash": H32}, "neither block nor hash specified"),
        ({"blockHash": 7}, "json: cannot unmarshal non-string"),
    ],
)
def test_bad_block_objects_are_refused(block: dict[str, Any], reason: str) -> None:
    _, why = canonical_params("eth_call", [{"to": ADDR}, block])
    assert why is not None and why.startswith(f"invalid argument 1: {reason}"), why


def test_other_params_pass_untouched() -> None:
    for method, params in [
        ("eth_getBalance", [ADDR, "0X10"]),  # a string: the node reads it as we pass it
        ("eth_getBalance", [ADDR]),
        ("eth_call", [{"To": ADDR, "DATA": "0x"}, "latest"]),  # the call object is not judged
        ("eth_chainId", None),
        ("eth_blockNumber", {"weird": 1}),
    ]:
        assert canonical_params(method, params) == (params, None)
        assert canonical_params(method, params)[0] is params


def test_every_cached_state_read_has_its_block_object_read() -> None:
    # policy.classify reads the block of STATE_AT methods: it must be the rebuilt one
    for method, index in STATE_AT.items():
        assert BLOCK_PARAM.get(method) == index, method


def test_validate_call_forwards_the_rebuild_and_refuses_with_a_reason() -> None:
    call = rpc.validate_call(
        {"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs", "params": [{"FromBlock": "0x0"}]},
        METHODS,
    )
    assert call.error is None and call.params == [{"fromBlock": "0x0"}]
    assert rpc.encode_call(call, 3) == (
        b'{"jsonrpc":"2.0","id":3,"method":"eth_getLogs","params":[{"fromBlock":"0x0"}]}'
    )
    bad = rpc.validate_call(
        {"jsonrpc": "2.0", "id": 2, "method": "eth_getLogs", "params": [{"toBlock": 1}]}, METHODS
    )
    assert bad.error is rpc.INVALID_PARAMS and bad.reason == {
        "reason": "invalid argument 0: hex string without 0x prefix"
    }
    # a method not offered is refused as such, whatever its params
    other = rpc.validate_call(
        {"jsonrpc": "2.0", "id": 3, "method": "eth_newFilter", "params": [5]}, METHODS
    )
    assert other.error is rpc.METHOD_NOT_FOUND


def test_the_guard_reads_the_rebuild_of_a_case_variant(heads: HeadTracker) -> None:
    call = rpc.validate_call(
        rpc.parse_body(
            b'{"jsonrpc":"2.0","id":1,"method":"eth_getLogs",'
            b'"params":[{"fromBlock":"latest","FROMBLOCK":"0x0"}]}'
        ),
        METHODS,
    )
    assert call.params == [{"fromBlock": "0x0"}]
    assert logs_range(call.params, heads) == HEAD + 1
    assert check_logs_range(call.params, heads, 10_000) is not None

"""``eth_subscribe`` / ``eth_unsubscribe``: the WebSocket-only local methods.

Every other call on a socket goes through the one pipeline
(``gateway.rpc.pipeline``) exactly as over HTTP; these two are registered
there as local methods of the ``ws`` transport (``SubscriptionMethods``),
so they are validated, admitted and metered like any call.

Caps: a subscribe call takes its slot on the
socket (``Session.reserved``) and its place among the key's and the
network's distinct upstream subscriptions *before* it awaits the node, so
concurrent frames cannot pass a cap together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import orjson

from gateway.rpc import protocol as rpc
from gateway.rpc.localmethods import WS, CallError, LocalContext, LocalMethods
from gateway.rpc.params import read_filter
from gateway.ws.fanout import NodeRefused, UpSub, new_client_id
from gateway.ws.feed import NoSocket
from gateway.ws.session import Session

if TYPE_CHECKING:
    from gateway.ws.service import WsService

INVALID_PARAMS: Final = rpc.INVALID_PARAMS
SUBSCRIBE = "eth_subscribe"
UNSUBSCRIBE = "eth_unsubscribe"
KINDS: Final = frozenset({"newHeads", "logs", "newPendingTransactions"})
# The data of a subscribe that no node can take (every WebSocket URL refused).
NO_WS_NODE: Final = (
    "no WebSocket upstream: no node of this network accepts a WebSocket, "
    "so subscriptions are unavailable (plain calls still work)"
)


def subscribe_params(params: Any) -> tuple[str, list[Any], bytes] | str:
    """(kind, params for the node, canonical filter) or the reason it is refused.

    A logs filter is read as the node reads it (``rpc.params.read_filter``:
    member names folded as Go folds them, the last one wins, unknown ones
    ignored, geth's words for a bad value), then made canonical (addresses and
    topics lowercased, sorted, once each) so identical filters share one
    upstream subscription. Subscriptions are shared live feeds, so a block
    range or hash is refused rather than ignored.
    """
    if type(params) is not list or not params or type(params[0]) is not str:
        return 'params must be ["newHeads" | "logs" | "newPendingTransactions", filter?]'
    kind = params[0]
    if kind not in KINDS:
        return f"subscription {kind!r} is not offered"
    rest = params[1:]
    if kind != "logs":
        if rest and rest != [False]:
            return f"{kind} takes no options"
        return kind, [kind], b""
    if len(rest) > 1:
        return "logs takes one filter object"
    flt = read_filter(rest[0] if rest else {})
    if isinstance(flt, str):
        return flt
    if flt.block_hash is not None or {flt.from_block, flt.to_block} - {None, "latest"}:
        # geth's own "new logs" case is from and to both latest (or absent)
        return "a logs subscription follows new blocks: no fromBlock, toBlock or blockHash"
    out: dict[str, Any] = {}
    if flt.address is not None:
        addrs = [flt.address] if type(flt.address) is str else flt.address
        norm = sorted({a.lower() for a in addrs})
        if norm:
            out["address"] = norm[0] if type(flt.address) is str else norm
    if flt.topics is not None:
        tnorm = [_topic_position(pos) for pos in flt.topics]
        while tnorm and tnorm[-1] is None:
            tnorm.pop()
        if tnorm:
            out["topics"] = tnorm
    canon = orjson.dumps(out, option=orjson.OPT_SORT_KEYS)
    return kind, [kind, out], canon


def _topic_position(pos: str | list[str] | None) -> str | list[str] | None:
    """One topic position, canonical: lowercased, alternatives sorted once each; [] = any."""
    if pos is None or type(pos) is str:
        return pos if pos is None else pos.lower()
    return sorted({t.lower() for t in pos}) or None


def _cap_error(reason: str) -> CallError:
    return CallError.of(rpc.RATE_LIMITED, {"reason": reason})


def _node_error(error: Any) -> CallError:
    """The node's own refusal of a subscription, in its words."""
    if type(error) is dict and type(error.get("code")) is int:
        return CallError(error["code"], str(error.get("message", "")), error.get("data"))
    return CallError.of(rpc.UPSTREAM_UNAVAILABLE)


class SubscriptionMethods:
    """One network's subscribe / unsubscribe handlers, over the process's feeds."""

    def __init__(self, svc: WsService, network: str) -> None:
        self.svc = svc
        self.network = network

    def register(self, local: LocalMethods) -> None:
        local.add(SUBSCRIBE, self.subscribe, (WS,))
        local.add(UNSUBSCRIBE, self.unsubscribe, (WS,))

    async def subscribe(self, call: rpc.Call, ctx: LocalContext) -> Any:
        sess: Session = ctx.caller.session
        if not call.has_id:
            return None  # a subscription nobody can name would only leak
        parsed = subscribe_params(call.params)
        if isinstance(parsed, str):
            raise CallError.of(INVALID_PARAMS, parsed)
        kind, params, canon = parsed
        svc, wcfg = self.svc, self.svc.wcfg
        cap = svc.subscription_cap(sess.key.plan)
        if len(sess.subs) + sess.reserved >= cap:
            raise _cap_error(f"at most {cap} subscriptions per socket")
        feed = svc.feeds[self.network]
        ukey = (self.network, kind, canon)
        key = sess.key
        per_key = wcfg.max_upstream_subscriptions_per_key
        if key.upstream_count(ukey) > per_key:
            raise _cap_error(f"at most {per_key} distinct subscriptions per key")
        per_net = wcfg.max_upstream_subscriptions_per_network
        if (kind, canon) not in feed.subs and len(feed.subs) >= per_net:
            raise _cap_error(f"at most {per_net} distinct subscriptions on this network")
        # Taken before the first await: concurrent frames see each other.
        sess.reserved += 1
        key.reserving[ukey] = key.reserving.get(ukey, 0) + 1
        try:
            up = await feed.reserve(kind, params, canon)
        except NodeRefused as exc:
            self._unreserve(sess, ukey)
            raise _node_error(exc.error) from None
        except NoSocket:
            # Every node refused a socket: say so, not "timeout" (HTTP-only
            # provider URLs, a ws_upstreams list that points nowhere).
            self._unreserve(sess, ukey)
            raise CallError.of(rpc.UPSTREAM_UNAVAILABLE, NO_WS_NODE) from None
        except (TimeoutError, ConnectionError):
            self._unreserve(sess, ukey)
            raise CallError.of(rpc.UPSTREAM_TIMEOUT, "no node accepted the subscription") from None
        except BaseException:
            self._unreserve(sess, ukey)
            raise
        # The feed's shared id, unless this socket has it already (then its own).
        cid = up.cid
        if cid in sess.pending_cids or cid.decode()[1:-1] in sess.subs:
            cid = new_client_id()
        sess.pending_cids.add(cid)
        ctx.after(lambda sent: self._attach(sess, up, cid, ukey, sent))
        return cid.decode()[1:-1]

    def _attach(
        self, sess: Session, up: UpSub, cid: bytes, ukey: tuple[str, str, bytes], sent: bool
    ) -> None:
        """The answer naming ``sid`` is out (or not): the listener joins (or gives up).

        Listeners join only now, so no notification can precede the answer
        that names its subscription.
        """
        self._unreserve(sess, ukey)
        sess.pending_cids.discard(cid)
        up.reserved -= 1
        if not sent or up.dead or sess.closing is not None:
            up.feed.release(up, cid, sess)
            return
        up.listeners.setdefault(sess, []).append(cid)
        sess.subs[cid.decode()[1:-1]] = up
        self.svc.metrics.subscriptions.labels(up.kind).inc()

    @staticmethod
    def _unreserve(sess: Session, ukey: tuple[str, str, bytes]) -> None:
        sess.reserved -= 1
        key = sess.key
        left = key.reserving.get(ukey, 0) - 1
        if left > 0:
            key.reserving[ukey] = left
        else:
            key.reserving.pop(ukey, None)

    async def unsubscribe(self, call: rpc.Call, ctx: LocalContext) -> Any:
        sess: Session = ctx.caller.session
        params = call.params
        sid = params[0] if type(params) is list and len(params) == 1 else None
        if type(sid) is not str:
            raise CallError.of(INVALID_PARAMS, "params must be [subscription id]")
        up = sess.subs.pop(sid, None)
        if up is not None:
            self.svc.metrics.subscriptions.labels(up.kind).dec()
            up.feed.release(up, b'"' + sid.encode() + b'"', sess)
        return up is not None

"""Every Redis key name the gateway writes, in one place (``p`` is ``redis.prefix``).

Per API key (``H`` = SHA-256 of the key; one ``{H}`` hash tag, so the hot
path stays on one Cluster slot):

    p:{H}:k              key record hash (what admit.lua reads), with the token
                         bucket's fields t (tokens) and ts (ms) in it
    p:{H}:h:<hour>       requests per minute of that hour (field = minute 0..59), 49 h
    p:{H}:d:<day>        per-day totals: req, cu, lim, den, err, m:<method>, 91 days
    p:{H}:q:f:<slot>     request insight: one flush slot's per-method sums
    p:{H}:q:h:<hour>     request insight: latency histogram of an hour
    p:{H}:q:log          request insight: the key's recent call log
    p:{H}:f:<id>         a filter kept by the gateway (hash, TTL filters.ttl_s)
    p:{H}:fs             the key's live filters (sorted set id -> expiry ms)
    p:{H}:q:tx           the key's transaction log (stream: hash, route, who accepted)
    p:{H}:bu             the key's eth_sendBundle token bucket (fields t, ts)
    p:x:{<net>:<sender>} one sender's raw-transaction token bucket on a network
    p:{H}:q:pend         the key's private transactions not yet included (hash -> JSON)
    p:tt:{<net>:<hash>}  who follows a private transaction until it lands (a claim)

Per account, email, key id (``{<acct>}`` tags an account's keys together):

    p:a:{<acct>}         account hash: id, email, pw (argon2), plan, created, totp...
    p:a:{<acct>}:keys    set of key ids of that account
    p:a:{<acct>}:kw      sorted set of its working key ids -> ms they stop (+inf: no end)
    p:a:{<acct>}:lock    held while a key of the account is created or rotated
    p:a:{<acct>}:sess    sorted set of the account's session refs -> created ms
    p:a:{<acct>}:rc      set of SHA-256 of the unused recovery codes
    p:e:<email>          email -> account id
    p:i:<key_id>         key id -> H (the id is what users and the CLI name)

Dashboard state (``S`` = SHA-256 of a secret: a Redis dump hands out nothing usable):

    p:s:S                session hash (S of the session id)
    p:l:S                a log-in waiting for its second step
    p:r:S                password-reset token -> account id
    p:t:<name>           fixed-window failure counter
    p:t:{login}:<name>   log-in attempt counters (one tag: one script touches several)
    p:keys               pub/sub channel: a key record changed (payload H)

Operator state (the admin API):

    p:cordons            hash "<network>/<node>" -> JSON {by, at}: nodes given no calls
    p:cordon             pub/sub channel: the cordons changed (every process re-reads)
    p:audit              list of JSON entries, newest first, capped (admin.audit_cap)
Usage alerts (gateway/alerts; ``{<acct>}`` tags an account's alert state):

    p:al:accts           set of the account ids that have alert rules
    p:al:{<acct>}:wh     webhooks: id -> JSON (url, signing secret, created)
    p:al:{<acct>}:ru     rules: id -> JSON (rule, threshold, window_s, created)
    p:al:{<acct>}:lg:<w> a webhook's delivery log (sorted set delivery id -> ms)
    p:al:{<acct>}:d:<id> one delivery: its body and state (JSON), kept 2 days
    p:al:q               deliveries due (sorted set "<acct> <id>" -> due ms)
    p:al:w:{<rule>:<key id>}          a rule's counter readings for one key
    p:al:f:{<rule>:<key id>}:<start>  the rule fired for the key in that window
    p:al:t:<bucket>:<period>          a process evaluates that bucket of accounts then

(``p:cache:<network>:...``, the shared response cache, is named by
gateway/intel/sharedcache.py, which may import config only.)

Pure string functions, no I/O: the limiter, the store and the security store
take their names from here, so a layout change is one edit and one review.
"""

from __future__ import annotations


# -- per API key (hash tag {H}) ----------------------------------------------
def key_tag(prefix: str, khash: str) -> str:
    """``p:{H}:``: the start of every name of one API key (usage rows append to it)."""
    return f"{prefix}:{{{khash}}}:"


def record_key(prefix: str, khash: str) -> str:
    """The key record hash admit.lua reads."""
    return f"{prefix}:{{{khash}}}:k"


def bucket_key(prefix: str, khash: str) -> str:
    """The hash holding a key's token bucket (fields t, ts): its record itself."""
    return record_key(prefix, khash)


def usage_hour(prefix: str, khash: str, hour: int) -> str:
    return f"{prefix}:{{{khash}}}:h:{hour}"


def usage_day(prefix: str, khash: str, day: int) -> str:
    return f"{prefix}:{{{khash}}}:d:{day}"


def insight_slot(prefix: str, khash: str, slot: int) -> str:
    return f"{prefix}:{{{khash}}}:q:f:{slot}"


def insight_hour(prefix: str, khash: str, hour: int) -> str:
    return f"{prefix}:{{{khash}}}:q:h:{hour}"


def insight_log(prefix: str, khash: str) -> str:
    return f"{prefix}:{{{khash}}}:q:log"


# -- accounts, emails, key ids -------------------------------------------------
def account(prefix: str, account_id: str) -> str:
    return f"{prefix}:a:{{{account_id}}}"


def account_keys(prefix: str, account_id: str) -> str:
    return f"{prefix}:a:{{{account_id}}}:keys"


def account_working(prefix: str, account_id: str) -> str:
    """Sorted set: the account's working keys by id, scored by when each stops (ms)."""
    return f"{prefix}:a:{{{account_id}}}:kw"


def account_lock(prefix: str, account_id: str) -> str:
    return f"{prefix}:a:{{{account_id}}}:lock"


def account_sessions(prefix: str, account_id: str) -> str:
    return f"{prefix}:a:{{{account_id}}}:sess"


def account_recovery(prefix: str, account_id: str) -> str:
    return f"{prefix}:a:{{{account_id}}}:rc"


def email(prefix: str, address: str) -> str:
    return f"{prefix}:e:{address}"


def key_index(prefix: str, key_id: str) -> str:
    return f"{prefix}:i:{key_id}"


# -- dashboard state -----------------------------------------------------------
def session(prefix: str, ref: str) -> str:
    """A session hash; ``ref`` is the SHA-256 of the session id, never the id."""
    return f"{prefix}:s:{ref}"


def pending_login(prefix: str, ref: str) -> str:
    return f"{prefix}:l:{ref}"


def reset_token(prefix: str, ref: str) -> str:
    return f"{prefix}:r:{ref}"


def counter(prefix: str, name: str) -> str:
    return f"{prefix}:t:{name}"


def login_counter(prefix: str, name: str) -> str:
    # One hash tag for every log-in counter: the attempt script touches
    # several of them at once, which a Cluster allows only in one slot.
    return f"{prefix}:t:{{login}}:{name}"


def keys_channel(prefix: str) -> str:
    """The pub/sub channel announcing that a key record changed (payload: key hash)."""
    return f"{prefix}:keys"


def ws_sockets(prefix: str, khash: str) -> str:
    """A key's open WebSocket leases (sorted set, all processes); the key's hash tag."""
    return f"{prefix}:{{{khash}}}:ws"


# -- filters kept by the gateway (gateway/filters) -------------------------------
def filter_state(prefix: str, khash: str, filter_id: str) -> str:
    """One filter's state hash; under its owner's tag, so another key never finds it."""
    return f"{prefix}:{{{khash}}}:f:{filter_id}"


def filter_index(prefix: str, khash: str) -> str:
    """A key's live filters (sorted set id -> expiry ms), for the per-key cap."""
    return f"{prefix}:{{{khash}}}:fs"


# -- transactions (gateway/tx) -------------------------------------------------------
def tx_log(prefix: str, khash: str) -> str:
    """A key's transaction log: each raw transaction's hash and where it went."""
    return f"{prefix}:{{{khash}}}:q:tx"


def bundle_bucket(prefix: str, khash: str) -> str:
    """A key's ``eth_sendBundle`` token bucket (the plan's ``bundle_rate``)."""
    return f"{prefix}:{{{khash}}}:bu"


def pending_txs(prefix: str, khash: str) -> str:
    """A key's private transactions not yet included: hash -> the transaction as JSON."""
    return f"{prefix}:{{{khash}}}:q:pend"


def tx_claim(prefix: str, network: str, tx_hash: str) -> str:
    """The claim of the one process that follows a private transaction until it lands."""
    return f"{prefix}:tt:{{{network}:{tx_hash}}}"


def sender_bucket(prefix: str, network: str, sender: str) -> str:
    """One sender's raw-transaction bucket on one network, shared by every key it uses."""
    return f"{prefix}:x:{{{network}:{sender}}}"


# -- operator state (gateway/admin) -------------------------------------------------
def cordons(prefix: str) -> str:
    """Hash: ``<network>/<node>`` -> JSON {by, at} for each cordoned node."""
    return f"{prefix}:cordons"


def cordon_channel(prefix: str) -> str:
    """The pub/sub channel announcing that the cordons changed (every process re-reads)."""
    return f"{prefix}:cordon"


def audit_log(prefix: str) -> str:
    """The admin API's audit log: JSON entries, newest first, capped."""
    return f"{prefix}:audit"


# -- usage alerts (gateway/alerts) ---------------------------------------------------
def alert_accounts(prefix: str) -> str:
    """The set of account ids with at least one alert rule (what the evaluator reads)."""
    return f"{prefix}:al:accts"


def alert_webhooks(prefix: str, account_id: str) -> str:
    return f"{prefix}:al:{{{account_id}}}:wh"


def alert_rules(prefix: str, account_id: str) -> str:
    return f"{prefix}:al:{{{account_id}}}:ru"


def alert_log(prefix: str, account_id: str, webhook_id: str) -> str:
    """A webhook's recent deliveries: delivery id -> ms it was queued (capped)."""
    return f"{prefix}:al:{{{account_id}}}:lg:{webhook_id}"


def alert_delivery(prefix: str, account_id: str, delivery_id: str) -> str:
    return f"{prefix}:al:{{{account_id}}}:d:{delivery_id}"


def alert_queue(prefix: str) -> str:
    """Deliveries by due time (ms); a process claims one by pushing its time forward."""
    return f"{prefix}:al:q"


def alert_readings(prefix: str, rule_id: str, key_id: str) -> str:
    """One rule's counter readings of one key: its window's baseline and the last one."""
    return f"{prefix}:al:w:{{{rule_id}:{key_id}}}"


def alert_fired(prefix: str, rule_id: str, key_id: str, window_start_ms: int) -> str:
    """Set once (NX) by the process that fires the rule for the key in that window."""
    return f"{prefix}:al:f:{{{rule_id}:{key_id}}}:{window_start_ms}"


def alert_tick(prefix: str, bucket: int, period: int) -> str:
    """Claimed (NX) by the one process that evaluates a bucket of accounts in a period."""
    return f"{prefix}:al:t:{bucket}:{period}"

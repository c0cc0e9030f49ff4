"""``gateway serve --workers N``: a supervisor keeps N worker processes on one port.

Workers bind the port with ``SO_REUSEPORT`` (the kernel spreads connections);
the supervisor first binds it *without* that option and lets go, so a port
held by anyone else, including orphans of an earlier supervisor, fails at
once with a clear message.

* Config: each worker reads the supervisor's exact ``Config`` (JSON) from a
  pipe it inherits, then closes it. Nothing of the config, and none of the
  environment variables the config loader reads (``GATEWAY_REDIS_URL`` with
  its password, ``GATEWAY_UPSTREAM_*`` with provider keys), is in a
  worker's environment or command line.
* Readiness: a worker writes its pid to a shared pipe once it listens; the
  banner is printed when every first worker has.
* Parent death: workers ask the kernel for SIGTERM when the supervisor dies
  (``PR_SET_PDEATHSIG``) and also poll their parent pid, so a killed
  supervisor never leaves workers serving old code beside a new one.
* A worker that dies is restarted after ``server.restart_backoff_s``,
  doubled for each death in a row within ``restart_backoff_max_s`` of its
  start, capped there. The gateway never gives up on its own.
* SIGHUP: reload the config (file + env, CLI flags kept), start a new set of
  workers, and once they listen SIGTERM the old ones (they drain). A config
  that does not load, or new workers none of which listens within
  ``server.worker_ready_timeout_s``, keeps the old workers serving.
* Metrics: the supervisor serves ``/metrics`` on ``server.metrics_listen``
  for every worker (their samples merged); workers start no listener of
  their own. The address is kept across SIGHUP, like the RPC address.
* SIGINT/SIGTERM: passed on to every worker; the supervisor exits when all
  have. A worker still running ``_KILL_AFTER_S`` past its drain timeout is
  killed, so a stuck worker cannot keep the supervisor (and the port) forever.

It stays whole because the supervisor's signals, restarts, reload and shutdown
all act on one set of ``_Worker`` records and the shared readiness pipe; split
up, each part would need the whole supervisor's state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

from gateway.config import AdminToken, Config, MethodSet
from gateway.config.adminload import admin_to_raw
from gateway.config.diff import config_changes
from gateway.config.load import SECTIONS
from gateway.config.nodes import network_raw
from gateway.ops.metricsport import SupervisorMetricsListener
from gateway.server.listener import ListenError, bind_listener
from gateway.store.audit import append_sync, entry
from gateway.telemetry.metrics import MULTIPROC_ENV, multiprocess_dir

log = logging.getLogger("gateway.workers")

_TICK_S = 0.2
_KILL_AFTER_S = 10.0  # beyond server.drain_timeout_s, when stopping
# Environment the config loader reads: secrets live here, workers get the config by pipe.
_CONFIG_ENV = ("GATEWAY_CONFIG", "GATEWAY_REDIS_URL", "GATEWAY_WORKER_CONFIG")
_CONFIG_ENV_PREFIXES = ("GATEWAY_UPSTREAM_",)


def worker_env(environ: Mapping[str, str], metrics_dir: str) -> dict[str, str]:
    """The supervisor's environment minus every variable that may carry config secrets."""
    env = {
        k: v
        for k, v in environ.items()
        if k not in _CONFIG_ENV and not k.startswith(_CONFIG_ENV_PREFIXES)
    }
    env[MULTIPROC_ENV] = metrics_dir
    return env


def config_to_raw(cfg: Config) -> dict[str, Any]:
    """``cfg`` in the TOML shape ``config_from_dict`` reads (for worker processes)."""

    def plain(value: Any) -> Any:
        if isinstance(value, MethodSet):  # names, then its patterns as "prefix*"
            return sorted(value) + [p + "*" for p in value.patterns]
        if isinstance(value, frozenset):
            return sorted(value)
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return value

    def table(obj: Any, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        return {
            f.name: plain(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if f.name not in skip
        }

    raw: dict[str, Any] = {name: table(getattr(cfg, name)) for name in SECTIONS}
    raw["networks"] = {n.name: table(n, ("name",)) for n in cfg.networks}
    for net in cfg.networks:  # nodes and routes as the TOML tables they came from
        network_raw(net, raw["networks"][net.name])
    # A plan's weights hold its "prefix*" patterns too; weight_patterns is derived.
    raw["plans"] = {p.name: table(p, ("name", "weight_patterns")) for p in cfg.plans}
    raw["default_plan"] = cfg.default_plan
    raw["admin"] = admin_to_raw(cfg.admin)
    return raw


def _worker_config(cfg: Config) -> Config:
    """What a worker runs: the supervisor's config, minus the metrics listener it holds."""
    return dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, metrics_listen=""))


@dataclasses.dataclass(slots=True)
class _Worker:
    proc: subprocess.Popen[bytes]
    slot: int
    generation: int
    started: float
    ready: bool = False


class Supervisor:
    """Runs the workers until SIGINT/SIGTERM; see the module docstring."""

    def __init__(
        self,
        cfg: Config,
        reload: Callable[[], Config] | None = None,
        check: Callable[[], tuple[Config | None, list[str]]] | None = None,
    ) -> None:
        """``check``: the config read again with every mistake (``POST /admin/reload``)."""
        self._cfg = cfg
        self._reload_config = reload
        self._check = check
        self._checked: list[Config] = []  # a config the admin API checked, for the next SIGHUP
        self._workers: list[_Worker] = []
        self._generation = 0
        self._stable: tuple[int, Config] = (0, cfg)  # last generation that listened
        self._reload_started: float | None = None
        self._due: dict[int, float] = {}  # slot -> when to restart its worker
        self._deaths: dict[int, int] = {}  # slot -> quick deaths in a row
        self._signals: list[int] = []
        self._stopping = False
        self._stop_deadline = 0.0
        self._banner = False
        self._ready_r, self._ready_w = os.pipe()
        os.set_blocking(self._ready_r, False)
        self._ready_buf = b""
        self._env: dict[str, str] = {}
        self._metrics: SupervisorMetricsListener | None = None

    # -- public --------------------------------------------------------------
    def run(self) -> int:
        """Serve until told to stop; 0 after a clean stop, 1 if the port cannot be used."""
        server = self._cfg.server
        if server.port == 0:
            print("gateway: --workers needs a fixed --port (not 0)", file=sys.stderr)
            return 1
        try:  # without SO_REUSEPORT: fails if anyone at all listens there
            bind_listener(server.host, server.port, reuse_port=False, backlog=1).close()
        except ListenError as exc:
            print(f"gateway: {exc}", file=sys.stderr)
            return 1
        metrics_dir, own_dir = multiprocess_dir(), False
        if metrics_dir is None:
            metrics_dir, own_dir = tempfile.mkdtemp(prefix="gateway-metrics-"), True
        else:  # an operator's directory: start from zero, as prometheus-client asks
            for stale in Path(metrics_dir).glob("*.db"):
                stale.unlink(missing_ok=True)
        self._env = worker_env(os.environ, metrics_dir)
        listen = server.metrics_listen
        self._metrics = (
            SupervisorMetricsListener(listen, metrics_dir, admin=self) if listen else None
        )
        handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        old = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        code = 0
        try:
            code = self._loop(metrics_dir)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
            if self._metrics is not None:
                self._metrics.close()
            for worker in self._workers:  # only if the loop itself failed
                worker.proc.kill()
                worker.proc.wait()
            os.close(self._ready_r)
            os.close(self._ready_w)
            if own_dir:
                shutil.rmtree(metrics_dir, ignore_errors=True)
        return code

    # -- the loop ------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signals.append(signum)  # acted on in the loop, not in the handler

    def _loop(self, metrics_dir: str) -> int:
        code = 0
        while True:
            if self._metrics is not None:
                self._metrics.poll()
            self._read_ready()
            while self._signals:
                self._handle_signal(self._signals.pop(0))
            for worker in [w for w in self._workers if w.proc.poll() is not None]:
                self._workers.remove(worker)
                _mp_dead(worker.proc.pid, metrics_dir)
                code = max(code, self._exited(worker))
            if self._stopping:
                if not self._workers:
                    return code
                if time.monotonic() > self._stop_deadline:
                    for worker in self._workers:
                        log.error(
                            "worker pid=%s did not drain in time; killing it", worker.proc.pid
                        )
                        _signal(worker, signal.SIGKILL)
                    self._stop_deadline = float("inf")
                continue
            self._check_reload()
            self._fill_slots()
            self._print_banner()

    def _read_ready(self) -> None:
        readable, _, _ = select.select([self._ready_r], [], [], _TICK_S)
        if not readable:
            return
        with contextlib.suppress(BlockingIOError):
            self._ready_buf += os.read(self._ready_r, 4096)
        *lines, self._ready_buf = self._ready_buf.split(b"\n")
        pids = {int(line) for line in lines if line.strip().isdigit()}
        for worker in self._workers:
            if worker.proc.pid in pids:
                worker.ready = True

    def _handle_signal(self, signum: int) -> None:
        if signum == signal.SIGHUP:
            if not self._stopping:
                self._reload()
            return
        if not self._stopping:
            log.info("stopping signal=%s workers=%s", signal.Signals(signum).name, len(self))
            self._stop_deadline = (
                time.monotonic() + self._cfg.server.drain_timeout_s + _KILL_AFTER_S
            )
        self._stopping = True
        for worker in self._workers:
            _signal(worker, signum)

    def __len__(self) -> int:
        return len(self._workers)

    def _exited(self, worker: _Worker) -> int:
        """Log a worker's exit and schedule its restart; the exit code that counts."""
        returncode = worker.proc.returncode
        if self._stopping or worker.generation != self._generation:
            return max(returncode, 0) if self._stopping else 0
        lived = time.monotonic() - worker.started
        server = self._cfg.server
        deaths = self._deaths.get(worker.slot, 0) if lived < server.restart_backoff_max_s else 0
        delay = min(server.restart_backoff_s * 2**deaths, server.restart_backoff_max_s)
        self._deaths[worker.slot] = deaths + 1
        self._due[worker.slot] = time.monotonic() + delay
        log.warning(
            "worker exited pid=%s code=%s lived_s=%.1f; restarting in %.1fs",
            worker.proc.pid,
            returncode,
            lived,
            delay,
        )
        return 0

    def _fill_slots(self) -> None:
        now = time.monotonic()
        taken = {w.slot for w in self._workers if w.generation == self._generation}
        for slot in range(self._cfg.server.workers):
            if slot not in taken and self._due.get(slot, 0.0) <= now:
                self._due.pop(slot, None)
                self._spawn(slot)

    def _spawn(self, slot: int) -> None:
        cfg_r, cfg_w = os.pipe()
        cmd = [
            sys.executable,
            "-m",
            "gateway.server.runner",
            "--worker",
            "--config-fd",
            str(cfg_r),
            "--ready-fd",
            str(self._ready_w),
            "--parent",
            str(os.getpid()),
        ]
        try:
            proc = subprocess.Popen(cmd, env=self._env, pass_fds=(cfg_r, self._ready_w))
        finally:
            os.close(cfg_r)
        try:
            with open(cfg_w, "wb") as pipe:  # closes cfg_w; blocks only until the child reads
                pipe.write(orjson.dumps(config_to_raw(_worker_config(self._cfg))))
        except BrokenPipeError:  # it died before reading; reaped and restarted by the loop
            pass
        self._workers.append(_Worker(proc, slot, self._generation, time.monotonic()))

    def _print_banner(self) -> None:
        if self._banner:
            return
        first = [w for w in self._workers if w.generation == 0]
        if len(first) == self._cfg.server.workers and all(w.ready for w in first):
            server = self._cfg.server
            print(
                f"======== {len(first)} workers on http://{server.host}:{server.port} ========\n"
                "(Press CTRL+C to quit; SIGHUP reloads the config)",
                flush=True,
            )
            self._banner = True

    # -- the admin API's part (called from the metrics listener's thread) ---------
    def admin_tokens(self) -> tuple[AdminToken, ...]:
        return self._cfg.admin.tokens

    def admin_reload(self, who: str) -> tuple[int, dict[str, Any]]:
        """``POST /admin/reload``: check the whole config, then reload as SIGHUP does."""
        if self._check is None or self._reload_config is None:
            return 409, {"error": "this gateway has no config file to read again"}
        cfg, problems = self._check()
        if cfg is None or problems:
            self._audit(who, 400, {"ok": False, "errors": len(problems)})
            return 400, {"ok": False, "applied": False, "errors": problems}
        changed = config_changes(self._cfg, cfg)
        self._checked.append(cfg)
        self._signals.append(signal.SIGHUP)  # the loop reloads within a tick
        self._audit(who, 200, {"ok": True, "changed": changed, "applied": True})
        note = "new workers start with it; the old ones drain once the new ones listen"
        return 200, {"ok": True, "applied": True, "changed": changed, "note": note}

    def _audit(self, who: str, status: int, detail: dict[str, Any]) -> None:
        redis = self._cfg.redis
        item = entry(who, "reload", "config", status, detail)
        try:
            append_sync(redis.url, redis.cluster, redis.prefix, self._cfg.admin.audit_cap, item)
        except Exception as exc:  # the reload goes on; the missing line is logged
            log.error("audit entry not written token=%s action=reload: %s", who, exc)

    # -- SIGHUP --------------------------------------------------------------
    def _reload(self) -> None:
        if self._reload_config is None:
            log.warning("SIGHUP ignored: no config to reload")
            return
        try:
            cfg = self._checked.pop(0) if self._checked else self._reload_config()
        except Exception as exc:  # a bad file must not take the running workers down
            log.error("reload failed, workers keep the old config: %s", exc)
            return
        if cfg.server.port != self._cfg.server.port or cfg.server.host != self._cfg.server.host:
            log.warning("reload: the listen address cannot change on SIGHUP; keeping the old one")
            server = dataclasses.replace(
                cfg.server, host=self._cfg.server.host, port=self._cfg.server.port
            )
            cfg = dataclasses.replace(cfg, server=server)
        self._cfg = cfg
        self._generation += 1
        self._due.clear()
        self._reload_started = time.monotonic()
        log.info(
            "reload: starting %s new workers generation=%s", cfg.server.workers, self._generation
        )

    def _check_reload(self) -> None:
        if self._reload_started is None:
            return
        current = [w for w in self._workers if w.generation == self._generation]
        ready = [w for w in current if w.ready]
        waited = time.monotonic() - self._reload_started
        if len(ready) == self._cfg.server.workers or (
            ready and waited > self._cfg.server.worker_ready_timeout_s
        ):
            old = [w for w in self._workers if w.generation != self._generation]
            log.info("reload: new workers listen; draining %s old ones", len(old))
            for worker in old:
                _signal(worker, signal.SIGTERM)
            self._stable = (self._generation, self._cfg)
            self._reload_started = None
        elif waited > self._cfg.server.worker_ready_timeout_s:
            log.error("reload: no new worker listened in time; keeping the old workers")
            for worker in current:
                _signal(worker, signal.SIGTERM)
            self._generation, self._cfg = self._stable
            self._due.clear()
            self._reload_started = None


def _signal(worker: _Worker, signum: int) -> None:
    if worker.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            worker.proc.send_signal(signum)


def _mp_dead(pid: int, path: str) -> None:
    from prometheus_client import multiprocess

    with contextlib.suppress(OSError):
        multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]

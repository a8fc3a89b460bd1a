"""Start-or-connect to the rollout service (``uniagent serve``).

Two ways, picked by :class:`ServiceConfig`:

- **A URL**: a service someone else runs; it is used as given.
- **A binary and a config**: one service per node, launched by the first worker of the node
  that finds none, as ``BINARY serve CONFIG --host 127.0.0.1 --port 0``. The launch happens
  under an exclusive ``flock`` on ``RUN_DIR/service.lock``; the launcher waits (up to
  ``start_timeout_s``) for the first stdout line ``listening on http://HOST:PORT`` and writes the
  URL to ``RUN_DIR/service.url`` (and the pid to ``service.pid``). The other workers of the node
  block on the lock, then read the URL file. The service is started in its own session so that
  it outlives the worker that launched it; its stdout goes to ``RUN_DIR/service.out`` (where the
  `listening on` line is read) and its stderr (logs) to ``RUN_DIR/service.log``.

Every call checks ``GET /healthz`` (a local round trip): a dead service is restarted by the next
call. ``RUN_DIR`` defaults to ``$UNIAGENT_VERL_RUN_DIR`` or
``$TMPDIR/uniagent-verl-<uid>/<hash of binary and config>``, node-local either way.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import logging
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .client import UniagentClient
from .errors import UniagentConfigError, UniagentServiceStartError

logger = logging.getLogger(__name__)

LISTENING_PREFIX = "listening on "


@dataclass(frozen=True)
class ServiceConfig:
    """Where the rollout service is, or how to start it."""

    url: str | None = None
    binary: str | None = None
    config: str | None = None
    run_dir: str | None = None
    start_timeout_s: float = 120.0
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.url is None and (self.binary is None or self.config is None):
            raise UniagentConfigError(
                "the rollout service needs either a URL (service_url / UNIAGENT_SERVICE_URL) or a "
                "binary and a config (service_binary + service_config / UNIAGENT_BIN + UNIAGENT_CONFIG)"
            )

    def resolved_run_dir(self) -> Path:
        if self.run_dir:
            return Path(self.run_dir)
        env = os.environ.get("UNIAGENT_VERL_RUN_DIR")
        key = hashlib.sha256(
            f"{os.path.abspath(self.binary or '')}\0{os.path.abspath(self.config or '')}\0{self.extra_args}".encode()
        ).hexdigest()[:16]
        base = Path(env) if env else Path(tempfile.gettempdir()) / f"uniagent-verl-{os.getuid()}"
        return base / key


_clients: dict[tuple[int, str], UniagentClient] = {}


def client_for(url: str) -> UniagentClient:
    """One client (one connection pool) per event loop and service URL."""
    loop = asyncio.get_running_loop()
    key = (id(loop), url)
    client = _clients.get(key)
    if client is None:
        client = UniagentClient(url)
        _clients[key] = client
    return client


async def ensure_service(cfg: ServiceConfig) -> str:
    """The base URL of a live service, starting one on this node when needed."""
    if cfg.url is not None:
        return cfg.url.rstrip("/")
    run_dir = cfg.resolved_run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    url = _read_url(run_dir)
    if url is not None and await client_for(url).healthz():
        return url
    deadline = time.monotonic() + cfg.start_timeout_s
    lock_path = run_dir / "service.lock"
    with open(lock_path, "a+") as lock_file:
        await _lock(lock_file, deadline, lock_path)
        try:
            # Another worker may have started it while this one waited for the lock.
            url = _read_url(run_dir)
            if url is not None and await client_for(url).healthz():
                return url
            _stop_stale(run_dir)
            return await _launch(cfg, run_dir, deadline)
        finally:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)


async def _lock(lock_file: object, deadline: float, lock_path: Path) -> None:
    fd = lock_file.fileno()  # type: ignore[attr-defined]
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise UniagentServiceStartError(
                    f"another process held {lock_path} (starting the rollout service) past the deadline"
                ) from None
            await asyncio.sleep(0.1)


def _read_url(run_dir: Path) -> str | None:
    try:
        url = (run_dir / "service.url").read_text().strip()
    except FileNotFoundError:
        return None
    return url or None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _stop_stale(run_dir: Path) -> None:
    """Stop the service a previous launch left running but not answering (it is ours)."""
    pid_file = run_dir / "service.pid"
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
        logger.warning("stopped the rollout service pid %d: it no longer answered /healthz", pid)
    except ProcessLookupError:
        pass
    except PermissionError:
        logger.warning("rollout service pid %d does not answer and is not ours to stop", pid)
    pid_file.unlink(missing_ok=True)
    (run_dir / "service.url").unlink(missing_ok=True)


async def _launch(cfg: ServiceConfig, run_dir: Path, deadline: float) -> str:
    assert cfg.binary is not None and cfg.config is not None
    out_path, log_path = run_dir / "service.out", run_dir / "service.log"
    argv = [cfg.binary, "serve", cfg.config, "--host", "127.0.0.1", "--port", "0", *cfg.extra_args]
    with open(out_path, "ab") as out, open(log_path, "ab") as log:
        start, log_start = out.tell(), log.tell()
        try:
            proc = subprocess.Popen(  # noqa: S603 - the operator's configured binary
                argv, stdout=out, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
            )
        except OSError as e:
            raise UniagentServiceStartError(f"could not start the rollout service {argv}: {e}") from e
    logger.info("started the rollout service pid %d: %s (log %s)", proc.pid, " ".join(argv), log_path)
    while True:
        line = _first_line(out_path, start)
        if line is not None:
            if not line.startswith(LISTENING_PREFIX):
                proc.terminate()
                raise UniagentServiceStartError(
                    f"the rollout service's first line is not `listening on URL`: {line!r} (log {log_path})"
                )
            url = line[len(LISTENING_PREFIX) :].strip().rstrip("/")
            _write_atomic(run_dir / "service.pid", f"{proc.pid}\n")
            _write_atomic(run_dir / "service.url", f"{url}\n")
            return url
        code = proc.poll()
        if code is not None:
            raise UniagentServiceStartError(
                f"the rollout service exited with {code} before listening: {_tail(log_path, log_start)}"
            )
        if time.monotonic() >= deadline:
            proc.terminate()
            raise UniagentServiceStartError(
                f"the rollout service printed no `listening on` line within {cfg.start_timeout_s:.0f}s "
                f"(log {log_path}): {_tail(log_path, log_start)}"
            )
        await asyncio.sleep(0.05)


def _first_line(log_path: Path, start: int) -> str | None:
    with open(log_path, "rb") as f:
        f.seek(start)
        data = f.read(64 * 1024)
    end = data.find(b"\n")
    if end < 0:
        return None
    return data[:end].decode("utf-8", errors="replace")


def _tail(log_path: Path, start: int, limit: int = 2000) -> str:
    with open(log_path, "rb") as f:
        f.seek(start)
        data = f.read()
    return data[-limit:].decode("utf-8", errors="replace")

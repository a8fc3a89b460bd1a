"""Start-or-connect to the rollout service, with a stand-in ``uniagent`` binary.

The stand-in (written by the test) does what ``uniagent serve CONFIG --host H --port 0`` does
for the launcher: listens on a free port, prints ``listening on http://HOST:PORT`` as its first
stdout line, answers ``GET /healthz``. It also appends a line to ``launches.txt`` per start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import run

from uniagent_verl.errors import UniagentConfigError, UniagentServiceStartError
from uniagent_verl.service import ServiceConfig, ensure_service

FAKE_SERVE = """\
#!{python}
import http.server, os, sys
assert sys.argv[1] == "serve", sys.argv
config = sys.argv[2]
with open(os.path.join(os.path.dirname(config), "launches.txt"), "a") as f:
    f.write(f"{{os.getpid()}}\\n")
mode = open(config).read().strip()
print("starting up", file=sys.stderr, flush=True)
if mode == "exit":
    print("config error: no such environment", file=sys.stderr, flush=True)
    sys.exit(2)
if mode == "chatty":
    print("hello there", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(f"listening on http://127.0.0.1:{{server.server_address[1]}}", flush=True)
server.serve_forever()
"""


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    binary = tmp_path / "uniagent"
    binary.write_text(FAKE_SERVE.format(python=sys.executable))
    binary.chmod(0o755)
    config = tmp_path / "serve.yaml"
    config.write_text("ok\n")
    return binary, config


def _launches(config: Path) -> list[int]:
    path = config.parent / "launches.txt"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _stop_all(config: Path) -> None:
    for pid in _launches(config):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_url_is_used_as_given() -> None:
    assert run(ensure_service(ServiceConfig(url="http://10.0.0.1:8000/"))) == "http://10.0.0.1:8000"


def test_neither_url_nor_binary_is_a_config_error() -> None:
    with pytest.raises(UniagentConfigError, match="UNIAGENT_SERVICE_URL"):
        ServiceConfig(binary="/bin/uniagent")


def test_one_launch_per_node_across_processes_and_a_dead_service_is_restarted(fake: tuple[Path, Path], tmp_path: Path) -> None:
    binary, config = fake
    run_dir = tmp_path / "run"
    try:
        # Four worker processes ask at once: one launches, the others wait for its URL.
        worker = textwrap.dedent(
            f"""
            import asyncio
            from uniagent_verl.service import ServiceConfig, ensure_service
            cfg = ServiceConfig(binary={str(binary)!r}, config={str(config)!r}, run_dir={str(run_dir)!r}, start_timeout_s=30)
            print(asyncio.run(ensure_service(cfg)))
            """
        )
        procs = [subprocess.Popen([sys.executable, "-c", worker], stdout=subprocess.PIPE, text=True) for _ in range(4)]
        urls = {p.communicate(timeout=60)[0].strip() for p in procs}
        assert all(p.returncode == 0 for p in procs)
        assert len(urls) == 1 and next(iter(urls)).startswith("http://127.0.0.1:")
        assert len(_launches(config)) == 1
        (url,) = urls
        assert (run_dir / "service.url").read_text().strip() == url
        pid = int((run_dir / "service.pid").read_text())
        assert pid == _launches(config)[0]

        cfg = ServiceConfig(binary=str(binary), config=str(config), run_dir=str(run_dir), start_timeout_s=30)
        assert run(ensure_service(cfg)) == url  # alive: no second launch
        assert len(_launches(config)) == 1

        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        new_url = run(ensure_service(cfg))
        assert new_url != url
        assert len(_launches(config)) == 2
        assert run(ensure_service(cfg)) == new_url
    finally:
        _stop_all(config)


def test_a_service_that_exits_or_says_something_else_first_fails_to_start(fake: tuple[Path, Path], tmp_path: Path) -> None:
    binary, config = fake
    try:
        config.write_text("exit\n")
        cfg = ServiceConfig(binary=str(binary), config=str(config), run_dir=str(tmp_path / "a"), start_timeout_s=30)
        with pytest.raises(UniagentServiceStartError, match="(?s)exited with 2.*no such environment"):
            run(ensure_service(cfg))
        config.write_text("chatty\n")
        cfg = ServiceConfig(binary=str(binary), config=str(config), run_dir=str(tmp_path / "b"), start_timeout_s=30)
        with pytest.raises(UniagentServiceStartError, match="hello there"):
            run(ensure_service(cfg))
        cfg = ServiceConfig(binary=str(tmp_path / "nope"), config=str(config), run_dir=str(tmp_path / "c"))
        with pytest.raises(UniagentServiceStartError, match="could not start"):
            run(ensure_service(cfg))
    finally:
        _stop_all(config)

"""Helpers of the tests against the real ``uniagent serve`` (``UNIAGENT_BIN``): the binary, a
scripted ``server_manager`` that plays the correct file-lookup policy, and the cleanup of every
process a test's services started.

The scripted policy is the one of ``crates/uniagent-cli/tests/serve_cli.rs`` (``policy()``):
turn 0 reads ``data/<target>.txt`` with ``execute_bash``, turn 1 calls ``finish`` with the
digits of the last tool response, both as Hermes ``<tool_call>`` JSON, the stop id appended.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from verl.workers.rollout.replica import TokenOutput

IM_END = 151645


def binary() -> str:
    """The ``uniagent`` binary of ``UNIAGENT_BIN``; skips without it (fails with UNIAGENT_REQUIRE_VERL=1)."""
    path = os.environ.get("UNIAGENT_BIN")
    if not path:
        if os.environ.get("UNIAGENT_REQUIRE_VERL") == "1":
            pytest.fail("UNIAGENT_REQUIRE_VERL=1 but UNIAGENT_BIN is not set: build `uniagent` and point UNIAGENT_BIN at it")
        pytest.skip("UNIAGENT_BIN is not set (the `uniagent` binary with `serve`); set it to run against the real service")
    # The binary may be being rebuilt: give it a minute to come back.
    deadline = time.monotonic() + 60
    while not os.access(path, os.X_OK):
        if time.monotonic() > deadline:
            pytest.fail(f"UNIAGENT_BIN={path} is not an executable file")
        time.sleep(2)
    return path


def file_lookup_config(
    path: Path,
    model_dir: Path,
    *,
    tasks: int,
    seed: int,
    prompt_len: int,
    response_len: int,
    max_turns: int = 3,
    max_tokens: int = 64,
    bridge_timeout: float | None = None,
) -> Path:
    """Writes a ``uniagent serve`` config for file-lookup tasks in host sandboxes, generating
    through verl (``model.type: verl`` with ``model_dir``'s tokenizer), and returns its path."""
    timeout = f"  bridge_timeout: {bridge_timeout}\n" if bridge_timeout is not None else ""
    path.write_text(
        f"tasks:\n  generate: {{count: {tasks}, seed: {seed}}}\n"
        "environment:\n  type: file-lookup\n  sandbox: {type: host}\n"
        f"model:\n  type: verl\n  tokenizer: {model_dir}\n{timeout}"
        f"  limits: {{max_prompt_len: {prompt_len}, max_response_len: {response_len}}}\n"
        f"loop:\n  max_turns: {max_turns}\n  sampling: {{max_tokens: {max_tokens}}}\n"
    )
    return path


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def policy_text(turn: int, text: str) -> str:
    """The correct file-lookup policy's answer at ``turn`` to the rendered prompt ``text``."""
    if turn == 0:
        target = text.split("What is the code of ", 1)[1].split("?", 1)[0]
        return "Let me look.\n" + tool_call("execute_bash", {"command": f"cat data/{target}.txt"})
    last = text.rsplit("<tool_response>", 1)[-1].split("</tool_response>", 1)[0]
    return tool_call("finish", {"answer": "".join(c for c in last if c.isdigit())})


def policy_ids(tokenizer: Any, prompt_ids: list[int]) -> list[int]:
    """The policy's tokens (stop id appended) for a prompt."""
    text = tokenizer.decode(prompt_ids, skip_special_tokens=False)
    turn = text.count("<|im_start|>assistant") - 1
    return list(tokenizer.encode(policy_text(turn, text), add_special_tokens=False)) + [IM_END]


class ScriptedServerManager:
    """verl's ``server_manager`` answering as the scripted policy, at once (or after ``delay_s``,
    or never while ``hang`` is set, until :meth:`release`). Records each call's wall time."""

    def __init__(self, tokenizer: Any, *, global_steps: int = 3, delay_s: float = 0.0, hang: bool = False) -> None:
        self.tokenizer = tokenizer
        self.global_steps = global_steps
        self.delay_s = delay_s
        self.hang = hang
        self.calls: list[dict[str, Any]] = []
        self.in_flight = 0
        self.seconds: dict[str, float] = {}
        self._released: asyncio.Event | None = None
        self._arrivals: asyncio.Condition | None = None

    def release(self) -> None:
        """Let every held generation go (they then fail: the test is over)."""
        if self._released is not None:
            self._released.set()

    async def wait_in_flight(self, n: int, timeout_s: float) -> None:
        """Until ``n`` generations are in flight at once."""
        if self._arrivals is None:
            self._arrivals = asyncio.Condition()
        async with self._arrivals:
            await asyncio.wait_for(self._arrivals.wait_for(lambda: self.in_flight >= n), timeout_s)

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any) -> TokenOutput:
        started = time.perf_counter()
        if self._released is None:
            self._released = asyncio.Event()
        if self._arrivals is None:
            self._arrivals = asyncio.Condition()
        call = {"request_id": request_id, "prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params)}
        self.calls.append(call)
        self.in_flight += 1
        async with self._arrivals:
            self._arrivals.notify_all()
        try:
            if self.hang:
                await asyncio.wait_for(self._released.wait(), 600)
                raise RuntimeError("held generation released at the end of the test")
            if self.delay_s:
                try:
                    await asyncio.wait_for(self._released.wait(), self.delay_s)
                    raise RuntimeError("held generation released at the end of the test")
                except asyncio.TimeoutError:
                    pass
            ids = policy_ids(self.tokenizer, prompt_ids)
        finally:
            self.in_flight -= 1
            self.seconds[request_id] = self.seconds.get(request_id, 0.0) + time.perf_counter() - started
        output = TokenOutput(
            token_ids=ids,
            log_probs=[-0.25 * (i % 7) for i in range(len(ids))] if sampling_params.get("logprobs") else None,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )
        call["output"] = output
        return output


def _proc_table() -> list[tuple[int, int, str]]:
    """(pid, sid, command line) of every process."""
    rows = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        # Fields after the command name (in parentheses): state ppid pgrp session ...
        fields = stat.rsplit(")", 1)[1].split()
        rows.append((int(entry), int(fields[3]), cmdline))
    return rows


def service_pids(config: Path) -> list[int]:
    """The pids of the ``uniagent serve`` processes started with this (test-unique) config."""
    needle = f" serve {config} "
    return [pid for pid, _, cmd in _proc_table() if needle in cmd + " " and pid != os.getpid()]


def kill_services(config: Path) -> list[int]:
    """SIGKILL every ``uniagent serve`` of this config and every process of its session (the
    launcher starts each in its own session: its sandboxes are there too). Returns the pids."""
    services = set(service_pids(config))
    killed = []
    for pid, sid, _ in _proc_table():
        if pid in services or (sid in services and pid != os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in killed):
        time.sleep(0.05)
    return killed


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def session_processes(sid: int) -> list[int]:
    return [pid for pid, s, _ in _proc_table() if s == sid and _alive(pid)]


def print_log(run_dir: Path, limit: int = 4000) -> None:
    log = run_dir / "service.log"
    if log.exists():
        print(log.read_text(errors="replace")[-limit:])

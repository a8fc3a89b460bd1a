"""Faults against the real rollout service (``uniagent serve`` of ``UNIAGENT_BIN``, file-lookup
in host sandboxes, launched by the agent loop itself):

- the service SIGKILLed while rollouts are in flight (their generations held in verl's
  ``server_manager``): every in-flight ``UniagentAgentLoop.run`` raises
  ``UniagentInfrastructureError`` (verl's v1 worker then tags those groups ``failure``), and
  the next batch runs on a service the launcher started again;
- a generation that never returns, with ``model.bridge_timeout: 2``: the rollout ends as a
  ``model_error`` failure within a deadline;
- bad rows: no ``extra_info.uniagent_task`` (``UniagentConfigError`` naming the field) and a
  task the environment refuses (metadata stripped: ``UniagentRequestError`` with
  ``field == "task"``), neither an infrastructure error; the service keeps serving.

Every test runs under an overall deadline and kills, at the end, every process of every service
it started (found by the test's unique config path, with their sessions).
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
import real_helpers as rh
import verl_harness as h
from verl.experimental.agent_loop.agent_loop import DictConfigWrap

from uniagent_verl.agent_loop import UniagentAgentLoop
from uniagent_verl.bridge import close_bridge
from uniagent_verl.errors import UniagentConfigError, UniagentInfrastructureError, UniagentRequestError
from uniagent_verl.service import ServiceConfig, client_for, ensure_service

P, R = 1024, 256
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def _config(tmp_path: Path, model_dir: Path, *, tasks: int, bridge_timeout: float) -> Path:
    return rh.file_lookup_config(
        tmp_path / "serve.yaml", model_dir, tasks=tasks, seed=11, prompt_len=P, response_len=R,
        bridge_timeout=bridge_timeout,
    )


class Setup:
    def __init__(self, tmp_path: Path, model_dir: Path, *, tasks: int = 4, bridge_timeout: float = 60) -> None:
        self.binary = rh.binary()
        self.config_path = _config(tmp_path, model_dir, tasks=tasks, bridge_timeout=bridge_timeout)
        self.run_dir = tmp_path / "run"
        self.service = ServiceConfig(binary=self.binary, config=str(self.config_path), run_dir=str(self.run_dir), start_timeout_s=60)
        self.trainer = h.trainer_config(model_dir, n=1, prompt_length=P, response_length=R)
        self.worker = h.worker(self.trainer, None)
        self.tokenizer = self.worker.tokenizer

    def loop(self, manager: Any, **kwargs: Any) -> UniagentAgentLoop:
        return UniagentAgentLoop(
            trainer_config=DictConfigWrap(self.trainer), server_manager=manager, tokenizer=self.tokenizer, processor=None,
            dataset_cls=self.worker.dataset_cls, data_config=DictConfigWrap(self.trainer.data),
            service_binary=self.binary, service_config=str(self.config_path), service_run_dir=str(self.run_dir),
            service_start_timeout_s=60, **kwargs,
        )

    def pid(self) -> int:
        return int((self.run_dir / "service.pid").read_text())

    def cleanup(self) -> None:
        rh.kill_services(self.config_path)
        assert rh.service_pids(self.config_path) == [], "a service of the test outlived it"
        rh.print_log(self.run_dir)


def row(task: dict[str, Any] | None, session: int = 0) -> dict[str, Any]:
    extra = {"index": 0} if task is None else {"index": 0, "uniagent_task": json.dumps(task)}
    return {"raw_prompt": [{"role": "user", "content": "x"}], "extra_info": extra, "index": 0, "session_id": session}


def within(coro: Any, seconds: float) -> Any:
    async def bounded() -> Any:
        try:
            return await asyncio.wait_for(coro, seconds)
        finally:
            await close_bridge()

    return asyncio.run(bounded())


def test_service_killed_mid_batch_fails_in_flight_rollouts_and_next_batch_restarts_it(model_dir: Path, tmp_path: Path) -> None:
    s = Setup(tmp_path, model_dir, tasks=4)
    held = rh.ScriptedServerManager(s.tokenizer, hang=True)
    fast = rh.ScriptedServerManager(s.tokenizer)

    async def go() -> dict[str, Any]:
        url = await ensure_service(s.service)
        tasks = await client_for(url).tasks()
        assert len(tasks) == 4
        first_pid = s.pid()
        # Batch 1: 4 rollouts, each held in its first generation; then the service is killed.
        runs = [asyncio.ensure_future(s.loop(held, timeout_s=120).run(dict(SAMPLING), **row(t, 0))) for t in tasks]
        await held.wait_in_flight(len(tasks), 60)
        os.kill(first_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        outcomes = await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), 30)
        failed_within = time.monotonic() - killed_at
        held.release()
        # The sandbox servers of the killed service notice their parent is gone (they poll it)
        # and exit on their own: nothing of its session outlives it for long.
        seen = rh.session_processes(first_pid)
        gone_by = time.monotonic() + 10
        while rh.session_processes(first_pid) and time.monotonic() < gone_by:
            await asyncio.sleep(0.1)
        leftovers = rh.session_processes(first_pid)
        # Batch 2: the launcher finds the service dead (healthz) and starts it again.
        ok = await asyncio.gather(*(s.loop(fast, timeout_s=120).run(dict(SAMPLING), **row(t, 1)) for t in tasks))
        return {"first_pid": first_pid, "outcomes": outcomes, "failed_within": failed_within, "ok": ok, "second_pid": s.pid(), "leftovers": leftovers, "seen": seen}

    try:
        out = within(go(), 150)
    finally:
        held.release()
        s.cleanup()

    for outcome in out["outcomes"]:
        assert isinstance(outcome, UniagentInfrastructureError), f"in-flight rollout ended with {outcome!r}"
        assert not isinstance(outcome, UniagentRequestError)
    assert out["failed_within"] < 10, "the in-flight rollouts noticed the dead service late"
    assert out["second_pid"] != out["first_pid"]
    assert not rh._alive(out["first_pid"])
    print(f"processes of the killed service's session right after the kill: {out['seen']}")
    assert out["leftovers"] == [], "processes of the killed service's session outlived it by 10 s"
    # Batch 2 ran to the end with the correct policy: finished, rewarded, two generations each.
    for o in out["ok"]:
        assert o.extra_fields["exit_reason"] == "finished", o.extra_fields
        assert o.reward_score == 1.0
        assert o.num_turns >= 3 and sum(o.response_mask) > 0
    assert len(fast.calls) == 2 * 4


def test_a_generation_that_never_returns_ends_the_rollout_as_a_model_error(model_dir: Path, tmp_path: Path) -> None:
    s = Setup(tmp_path, model_dir, tasks=1, bridge_timeout=2)
    held = rh.ScriptedServerManager(s.tokenizer, hang=True)

    async def go() -> tuple[BaseException | None, float]:
        url = await ensure_service(s.service)
        (task,) = await client_for(url).tasks()
        started = time.monotonic()
        try:
            await s.loop(held, timeout_s=60).run(dict(SAMPLING), **row(task))
        except Exception as e:  # noqa: BLE001 - inspected below
            return e, time.monotonic() - started
        finally:
            held.release()  # the bridge's handler still awaits it; closing the bridge waits for it
        return None, time.monotonic() - started

    try:
        error, seconds = within(go(), 60)
    finally:
        held.release()
        s.cleanup()

    assert isinstance(error, UniagentInfrastructureError), repr(error)
    assert error.exit_reason == "model_error", error.rollout
    assert error.rollout is not None and error.rollout["status"] == "failure"
    assert error.rollout["reward_score"] is None
    assert len(held.calls) == 1, "the service gave up on the generation, it did not retry"
    assert 2 <= seconds < 15, f"model_error after {seconds:.1f}s with bridge_timeout 2"


def test_bad_rows_are_configuration_errors_naming_the_field(model_dir: Path, tmp_path: Path) -> None:
    s = Setup(tmp_path, model_dir, tasks=1)
    fast = rh.ScriptedServerManager(s.tokenizer)

    async def go() -> dict[str, Any]:
        url = await ensure_service(s.service)
        (task,) = await client_for(url).tasks()
        loop = s.loop(fast, timeout_s=60)
        out: dict[str, Any] = {}
        for name, bad in (
            ("no_task", row(None)),
            ("no_metadata", row({k: v for k, v in task.items() if k != "metadata"})),
            ("metadata_stripped", row({**task, "metadata": {}})),
            ("no_messages", row({"id": task["id"], "metadata": task["metadata"]})),
        ):
            try:
                await loop.run(dict(SAMPLING), **bad)
                out[name] = None
            except Exception as e:  # noqa: BLE001 - inspected below
                out[name] = e
        out["ok"] = await loop.run(dict(SAMPLING), **row(task))
        return out

    try:
        out = within(go(), 90)
    finally:
        s.cleanup()

    assert isinstance(out["no_task"], UniagentConfigError), repr(out["no_task"])
    assert "extra_info.uniagent_task" in str(out["no_task"])
    for name in ("no_metadata", "metadata_stripped", "no_messages"):
        e = out[name]
        assert isinstance(e, UniagentRequestError), f"{name}: {e!r}"
        assert not isinstance(e, UniagentInfrastructureError)
        assert e.http_status == 422 and e.field == "task", f"{name}: {e.field} {e}"
    assert "target" in str(out["metadata_stripped"])
    # No rollout reached the policy, and the service kept serving.
    assert out["ok"].extra_fields["exit_reason"] == "finished" and out["ok"].reward_score == 1.0
    assert len(fast.calls) == 2

"""The whole chain on the ``swe`` environment in Docker: ``uniagent serve`` (``UNIAGENT_BIN``) on
the swe-mini tasks (``datasets/swe-mini``, images built locally by
``scripts/setup/50-swe-mini-images.sh``), launched by the agent loop; its ``GET /v1/tasks`` made
into verl's dataset by ``uniagent-verl-dataset``; verl's ``RLHFDataset`` and
``AgentLoopWorker.generate_sequences`` with every generation through the bridge to the tiny
Qwen2 (random outputs: rollouts end by ``max_turns`` or format errors); verl's post-processing.

Checks the tensors' shapes, that ``response_mask`` is 1 exactly on the tokens the bridge handed
out (in order, rollout by rollout), and that every container the service started was removed
(``docker ps -a`` filtered by ``dev.uniagent.run-id``, the label the Docker backend puts on each
container, set through ``UNIAGENT_RUN_ID``). Overall deadline: 6 minutes.

Skipped only when no Docker daemon answers and ``UNIAGENT_REQUIRE_DOCKER`` is not ``1``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import real_helpers as rh
import torch
import verl_harness as h
from conftest import REPO_ROOT
from tiny_qwen import TinyQwenServerManager

from uniagent_verl.bridge import close_bridge
from uniagent_verl.dataset import main as dataset_main
from uniagent_verl.service import ServiceConfig, client_for, ensure_service

N, P, R = 2, 4096, 512
ROWS = 2
DEADLINE_S = 360
RUN_ID_LABEL = "dev.uniagent.run-id"
DATASET = REPO_ROOT / "datasets/swe-mini/tasks.jsonl"


def _docker_or_skip() -> None:
    why = None
    if shutil.which("docker") is None:
        why = "no `docker` client on PATH"
    else:
        try:
            probe = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, text=True, timeout=20)
            if probe.returncode != 0:
                why = f"no Docker daemon answers: {probe.stderr.strip()[:300]}"
        except subprocess.TimeoutExpired:
            why = "`docker version` did not answer within 20 s"
    if why is None:
        return
    if os.environ.get("UNIAGENT_REQUIRE_DOCKER") == "1":
        pytest.fail(f"UNIAGENT_REQUIRE_DOCKER=1 but {why}")
    pytest.skip(why)


def _containers(run_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label={RUN_ID_LABEL}={run_id}"],
        capture_output=True, text=True, timeout=30, check=True,
    )
    return out.stdout.split()


def _serve_config(tmp_path: Path, model_dir: Path) -> Path:
    config = tmp_path / "swe-serve.yaml"
    config.write_text(
        f"""\
tasks:
  path: {DATASET}
  layout: swe-bench
environment:
  type: swe
  sandbox:
    type: docker
    image: "uniagent-swe-mini:{{instance_id}}"
    memory_bytes: 268435456
    cpus: 0.5
  test_timeout: 120
model:
  type: verl
  tokenizer: {model_dir}
  bridge_timeout: 120
  limits: {{max_prompt_len: {P}, max_response_len: {R}}}
loop:
  max_turns: 3
  tool_timeout: 60
  sampling: {{max_tokens: 24}}
"""
    )
    return config


def test_swe_mini_in_docker_through_verl(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _docker_or_skip()
    binary = rh.binary()
    images = subprocess.run(["docker", "images", "-q", "uniagent-swe-mini"], capture_output=True, text=True, timeout=30)
    assert images.stdout.split(), "no uniagent-swe-mini images: run scripts/setup/50-swe-mini-images.sh"
    run_id = f"test-verl-swe-{uuid.uuid4().hex[:10]}"
    # The launched service inherits the environment: its Docker backend labels every container
    # with this run id.
    monkeypatch.setenv("UNIAGENT_RUN_ID", run_id)
    config_path = _serve_config(tmp_path, model_dir)
    run_dir = tmp_path / "run"
    service = ServiceConfig(binary=binary, config=str(config_path), run_dir=str(run_dir), start_timeout_s=120)
    manager = TinyQwenServerManager(model_dir, global_steps=2)
    config = h.trainer_config(model_dir, n=N, prompt_length=P, response_length=R)
    parquet = tmp_path / "train.parquet"
    started = time.monotonic()
    seen_containers: set[str] = set()

    async def watch() -> None:
        while True:
            seen_containers.update(await asyncio.to_thread(_containers, run_id))
            await asyncio.sleep(1.0)

    async def go() -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
        url = await ensure_service(service)
        info = await client_for(url).info()
        tasks = await client_for(url).tasks()
        code = await asyncio.to_thread(dataset_main, [url, str(parquet), "--limit", str(ROWS)])
        assert code == 0
        h.register_uniagent(service_binary=binary, service_config=str(config_path), service_run_dir=str(run_dir), timeout_s=240)
        worker = h.worker(config, manager)
        batch = h.batch_from_parquet(config, parquet, worker.tokenizer, rows=ROWS)
        watcher = asyncio.ensure_future(watch())
        try:
            return await worker.generate_sequences(batch), info, tasks
        finally:
            watcher.cancel()
            await close_bridge()

    async def bounded() -> Any:
        return await asyncio.wait_for(go(), DEADLINE_S - 30)

    try:
        output, info, tasks = asyncio.run(bounded())
        # The rollouts are over: every container the service started is gone (each rollout
        # removes its sandbox and its grading sandbox before answering).
        left = _containers(run_id)
    finally:
        pids = rh.kill_services(config_path)
        rh.print_log(run_dir)
        stray = _containers(run_id)
        if stray:
            subprocess.run(["docker", "rm", "-f", *stray], capture_output=True, timeout=60)
    elapsed = time.monotonic() - started
    print(f"swe through verl: {elapsed:.0f}s, containers seen {len(seen_containers)}, service pids killed at the end {pids}")

    assert info["environment"] == "swe"
    tool_names = [t.get("name") or t.get("function", {}).get("name") for t in info["tools"]]
    assert tool_names == ["execute_bash", "str_replace_editor", "submit"], info["tools"]
    assert len(tasks) == 6 and all(t["id"].startswith("swe-mini__") for t in tasks)
    assert left == [], f"containers left behind by the service: {left}"
    assert seen_containers, "no container carried the run id: the label or the run id did not reach the backend"
    assert elapsed < DEADLINE_S

    B = ROWS * N
    assert output.batch["prompts"].shape == (B, P)
    assert output.batch["responses"].shape == (B, R)
    assert output.batch["input_ids"].shape == (B, P + R)
    assert output.batch["attention_mask"].shape == (B, P + R)
    assert output.batch["response_mask"].shape == (B, R)
    assert output.batch["rollout_log_probs"].shape == (B, R)
    assert "rm_scores" in output.batch.keys()

    # Mask 1 exactly on the bridge's tokens: the sampled tokens of a row are its rollout's
    # generations, in order, and their count is the sum of the generations' lengths (so no
    # tool-output or template token carries a 1).
    generated: dict[str, list[Any]] = {}
    for c in manager.calls:
        generated.setdefault(c["request_id"], []).append(c["output"])
    assert len(generated) == B, "one request id per rollout"
    matched = set()
    for i in range(B):
        mask = output.batch["response_mask"][i].bool()
        sampled = output.batch["responses"][i][mask].tolist()
        attn = output.batch["attention_mask"][i][P:].bool()
        assert not (mask & ~attn).any(), "a mask-1 token outside the response"
        candidates = [
            rid for rid, outs in generated.items()
            if rid not in matched and [t for o in outs for t in o.token_ids][: len(sampled)] == sampled
        ]
        assert candidates, f"row {i}: sampled tokens are not the bridge's generations"
        rid = candidates[0]
        matched.add(rid)
        total = sum(len(o.token_ids) for o in generated[rid])
        # All of them, unless verl cut the response at rollout.response_length.
        assert len(sampled) == total or int(attn.sum()) == R, (len(sampled), total)
        logprobs = output.batch["rollout_log_probs"][i][mask]
        expected = [lp for o in generated[rid] for lp in o.log_probs][: len(sampled)]
        torch.testing.assert_close(logprobs, torch.tensor(expected), rtol=0, atol=1e-5)
    reasons = output.non_tensor_batch["exit_reason"].tolist()
    print(f"exit reasons: {reasons}")
    assert all(isinstance(r, str) for r in reasons)

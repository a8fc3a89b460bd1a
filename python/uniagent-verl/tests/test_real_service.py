"""The whole chain against the real rollout service: ``uniagent serve`` (the binary in
``UNIAGENT_BIN``) on a file-lookup config in host sandboxes, launched by the agent loop itself
(binary + config), its tasks made into verl's dataset by ``uniagent-verl-dataset``, rollouts run
by verl's ``AgentLoopWorker`` with every generation through the bridge to the tiny Qwen2
(standing in for vLLM), then verl's post-processing and GRPO.

Without ``UNIAGENT_BIN`` the test is skipped, or fails when ``UNIAGENT_REQUIRE_VERL=1`` (CI
sets it where the binary is built).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
import real_helpers as rh
import verl_harness as h
from conftest import run
from tiny_qwen import TinyQwenServerManager

from uniagent_verl.bridge import close_bridge
from uniagent_verl.dataset import main as dataset_main
from uniagent_verl.service import ServiceConfig, client_for, ensure_service

N, P, R = 2, 2048, 512
TASKS = 2




def _serve_config(tmp_path: Path, model_dir: Path) -> Path:
    return rh.file_lookup_config(
        tmp_path / "serve.yaml", model_dir, tasks=TASKS, seed=5, prompt_len=P, response_len=R,
        max_turns=2, max_tokens=24,
    )


def test_rollouts_from_the_real_service(model_dir: Path, tmp_path: Path) -> None:
    binary = rh.binary()
    config_path = _serve_config(tmp_path, model_dir)
    run_dir = tmp_path / "run"
    service = ServiceConfig(binary=binary, config=str(config_path), run_dir=str(run_dir), start_timeout_s=120)
    manager = TinyQwenServerManager(model_dir, global_steps=4)
    config = h.trainer_config(model_dir, n=N, prompt_length=P, response_length=R)
    parquet = tmp_path / "train.parquet"

    async def go() -> tuple[Any, dict[str, Any]]:
        import asyncio

        url = await ensure_service(service)
        info = await client_for(url).info()
        code = await asyncio.to_thread(dataset_main, [url, str(parquet)])
        assert code == 0
        h.register_uniagent(
            service_binary=binary, service_config=str(config_path), service_run_dir=str(run_dir), timeout_s=300
        )
        worker = h.worker(config, manager)
        batch = h.batch_from_parquet(config, parquet, worker.tokenizer, rows=TASKS)
        try:
            return await worker.generate_sequences(batch), info
        finally:
            await close_bridge()

    try:
        output, info = run(go())
    finally:
        pid_file = run_dir / "service.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
            except ProcessLookupError:
                pass
        log = run_dir / "service.log"
        if log.exists():
            print(log.read_text()[-4000:])

    assert info["environment"]
    B = TASKS * N
    assert output.batch["responses"].shape == (B, R)
    assert output.batch["prompts"].shape == (B, P)
    assert "rm_scores" in output.batch.keys()
    # Every sampled token (mask 1) is one the bridge handed out, with its log prob; turn by
    # turn, the generations of each rollout appear in order in its response.
    generated = {}
    for c in manager.calls:
        generated.setdefault(c["request_id"], []).append(c["output"])
    assert len(generated) == B, "one request id per rollout"
    for i in range(B):
        mask = output.batch["response_mask"][i].bool()
        sampled = output.batch["responses"][i][mask].tolist()
        logprobs = output.batch["rollout_log_probs"][i][mask]
        matches = [
            outs for outs in generated.values()
            if [t for o in outs for t in o.token_ids][: len(sampled)] == sampled
        ]
        assert matches, f"row {i}: sampled tokens are not the bridge's generations"
        expected = [lp for o in matches[0] for lp in o.log_probs][: len(sampled)]
        torch.testing.assert_close(logprobs, torch.tensor(expected), rtol=0, atol=1e-5)
        # The prompt is the tokenizer's chat-template rendering of the task's messages, and the
        # first generation was asked with exactly that prompt.
        first_prompt = next(c["prompt_ids"] for c in manager.calls if c["output"] is matches[0][0])
        attn = output.batch["attention_mask"][i][:P].bool()
        assert output.batch["prompts"][i][attn].tolist() == first_prompt
    assert set(output.non_tensor_batch["min_global_steps"].tolist()) <= {4, None}
    assert all(isinstance(r, str) for r in output.non_tensor_batch["exit_reason"].tolist())
    advantages, _ = h.grpo(output)
    assert torch.isfinite(advantages).all()
    assert advantages[~output.batch["response_mask"].bool()].abs().sum() == 0

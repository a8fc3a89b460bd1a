"""``UniagentAgentLoop`` inside verl's own ``AgentLoopWorker``, on CPU.

The rollouts here are served by a stand-in of the service's HTTP behaviour (fake_service.py)
that runs one turn through the request's generation bridge; the generations are the tiny
Qwen2's (tiny_qwen.py, standing in for vLLM). So every hop of the Python half is real: verl's
dataset and worker, the agent loop's registry instantiation, the bridge, verl's
post-processing and GRPO. The same chain against the real ``uniagent serve`` is
test_real_service.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import verl_harness as h
from conftest import run
from fake_service import FakeService
from tiny_qwen import TinyQwenServerManager
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.trainer.ppo.v1 import agent_loop_tq

from uniagent_verl.agent_loop import UniagentAgentLoop, task_of_row
from uniagent_verl.bridge import close_bridge
from uniagent_verl.dataset import main as dataset_main
from uniagent_verl.errors import UniagentConfigError, UniagentInfrastructureError

N, P, R = 2, 256, 32


@pytest.fixture(scope="module")
def manager(model_dir: Path) -> TinyQwenServerManager:
    return TinyQwenServerManager(model_dir, global_steps=3)


def test_rollouts_through_verl_worker_postprocess_and_grpo(model_dir: Path, manager: TinyQwenServerManager, tmp_path: Path) -> None:
    config = h.trainer_config(model_dir, n=N, prompt_length=P, response_length=R)
    parquet = tmp_path / "train.parquet"
    manager.calls.clear()

    async def go() -> tuple[Any, FakeService, Any]:
        service = FakeService(tokenizer=None, max_tokens=8)
        await service.start()
        try:
            # The dataset command against the service's GET /v1/tasks (in a thread: it runs its
            # own event loop).
            import asyncio

            code = await asyncio.to_thread(dataset_main, [service.url, str(parquet)])
            assert code == 0
            h.register_uniagent(service_url=service.url, timeout_s=60)
            worker = h.worker(config, manager)
            service.tokenizer = worker.tokenizer
            batch = h.batch_from_parquet(config, parquet, worker.tokenizer, rows=2)
            output = await worker.generate_sequences(batch)
            return output, service, worker
        finally:
            await close_bridge()
            await service.close()

    output, service, worker = run(go())
    B = 2 * N
    assert output.batch["prompts"].shape == (B, P)
    assert output.batch["responses"].shape == (B, R)
    assert output.batch["input_ids"].shape == (B, P + R)
    assert output.batch["rollout_log_probs"].shape == (B, R)

    # One rollout request per sample, each with its own request id, verl's sampling params and
    # this worker's bridge; every generation of a rollout went to verl's client under that id.
    assert len(service.requests) == B
    request_ids = [q["request_id"] for q in service.requests]
    assert len(set(request_ids)) == B
    for q in service.requests:
        assert q["sampling_params"] == {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
        assert q["bridge_url"].startswith("http://127.0.0.1:") and q["bridge_url"].endswith("/generate")
        assert q["group_size"] == N and q["timeout_s"] == 60
    assert sorted(c["request_id"] for c in manager.calls) == sorted(request_ids)
    by_task = {}
    for q in service.requests:
        by_task.setdefault(q["task"]["id"], []).append(q["request_id"])
    assert sorted(by_task) == ["t0", "t1"] and all(len(v) == N for v in by_task.values())

    # The tensors are the generations: the response is the tokens the model sampled (mask 1),
    # the rollout log probs are its log probs, the prompt is the chat-template rendering,
    # left-padded; rm_scores carries the reward at the last response token.
    calls = {c["request_id"]: c for c in manager.calls}
    uids = output.non_tensor_batch["uid"]
    scores = []
    for i in range(B):
        prompt_row = output.batch["prompts"][i]
        mask = output.batch["response_mask"][i]
        n_tok = int(mask.sum())
        # find which call this row is: match by prompt + tokens
        tokens = output.batch["responses"][i][:n_tok].tolist()
        (call,) = [c for c in calls.values() if c["output"].token_ids == tokens and prompt_row[P - len(c["prompt_ids"]):].tolist() == c["prompt_ids"]]
        assert n_tok == len(call["output"].token_ids) >= 1
        assert mask[n_tok:].sum() == 0
        assert output.batch["attention_mask"][i][: P - len(call["prompt_ids"])].sum() == 0
        torch.testing.assert_close(output.batch["rollout_log_probs"][i][:n_tok], torch.tensor(call["output"].log_probs), rtol=0, atol=1e-6)
        assert output.batch["rollout_log_probs"][i][n_tok:].abs().sum() == 0
        assert output.batch["rm_scores"][i].nonzero().flatten().tolist() in ([n_tok - 1], [])
        score = (tokens[0] % 100) / 100
        assert float(output.batch["rm_scores"][i][n_tok - 1]) == pytest.approx(score)
        scores.append(score)
    assert output.non_tensor_batch["__num_turns__"].tolist() == [2] * B
    assert output.non_tensor_batch["min_global_steps"].tolist() == [3] * B
    assert output.non_tensor_batch["max_global_steps"].tolist() == [3] * B
    assert output.non_tensor_batch["exit_reason"].tolist() == ["finished"] * B
    assert [len(v) for v in output.non_tensor_batch["weight_versions"]] == [int(m.sum()) for m in output.batch["response_mask"]]
    assert "first_token" in output.meta_info["reward_extra_keys"]
    assert len(output.meta_info["metrics"]) == B

    # GRPO over the groups (uid): the advantage of each row is its group-normalised score,
    # broadcast over its sampled tokens.
    advantages, returns = h.grpo(output)
    for uid in set(uids.tolist()):
        rows = [i for i in range(B) if uids[i] == uid]
        group = torch.tensor([scores[i] for i in rows])
        expected = (group - group.mean()) / (group.std() + 1e-6)
        for k, i in enumerate(rows):
            m = output.batch["response_mask"][i].bool()
            torch.testing.assert_close(advantages[i][m], torch.full((int(m.sum()),), float(expected[k])), rtol=1e-5, atol=1e-5)
            assert advantages[i][~m].abs().sum() == 0


def _row(task: dict[str, Any] | None) -> dict[str, Any]:
    return {"raw_prompt": [{"role": "user", "content": "x"}], "extra_info": {} if task is None else {"index": 0, "uniagent_task": task}, "index": 0}


def test_a_failure_raises_and_a_row_without_task_is_a_config_error(model_dir: Path, manager: TinyQwenServerManager) -> None:
    config = h.trainer_config(model_dir, n=N, prompt_length=P, response_length=R)

    async def go() -> tuple[BaseException, BaseException, Any]:
        service = FakeService()
        await service.start()
        try:
            worker = h.worker(config, manager)
            loop = UniagentAgentLoop(
                trainer_config=DictConfigWrap(config), server_manager=manager, tokenizer=worker.tokenizer, processor=None,
                dataset_cls=worker.dataset_cls, data_config=DictConfigWrap(config.data), service_url=service.url, timeout_s=30,
            )
            with pytest.raises(UniagentInfrastructureError) as failed:
                await loop.run({"temperature": 1.0}, **_row({"id": "fail", "messages": []}))
            with pytest.raises(UniagentConfigError) as missing:
                await loop.run({"temperature": 1.0}, **_row(None))
            ok = await loop.run({"temperature": 1.0}, **_row({"id": "ok", "messages": []}), priority=7, session_id=1)
            return failed.value, missing.value, (ok, service.requests[-1])
        finally:
            await close_bridge()
            await service.close()

    failed, missing, (ok, last) = run(go())
    assert isinstance(failed, UniagentInfrastructureError) and failed.exit_reason == "sandbox_error"
    assert "extra_info.uniagent_task" in str(missing)
    assert last["sample"] == 1
    assert ok.prompt_ids == [1, 2, 3] and ok.response_ids == [4, 5, 6] and ok.response_mask == [1, 1, 0]
    assert ok.response_logprobs == [-0.5, -0.25, 0.0]
    assert ok.reward_score == 1.0 and ok.num_turns == 2
    assert ok.metrics.num_preempted == 0 and ok.metrics.generate_sequences == pytest.approx(0.1)
    assert ok.extra_fields["exit_class"] == "agent" and ok.extra_fields["uniagent_id"] == "ok:1"
    assert ok.extra_fields["weight_versions"] == [3, 3, None]


def test_a_rollout_that_sampled_nothing_takes_its_dispatch_step(model_dir: Path) -> None:
    """verl's v1 trainer makes an ``int`` array of every trajectory's min/max global steps:
    a record without them (no token sampled: the prompt was over the limits) must not carry
    ``None`` there; it gets the dataloader step that dispatched the prompt."""
    config = h.trainer_config(model_dir, n=N, prompt_length=P, response_length=R)
    loop = UniagentAgentLoop.__new__(UniagentAgentLoop)
    loop.rollout_config = config.actor_rollout_ref.rollout
    record = {
        "status": "success", "id": "t:0", "exit_reason": "context_overflow", "exit_class": "policy",
        "prompt_ids": [1, 2], "response_ids": [], "response_mask": [], "response_logprobs": [],
        "reward_score": 0.0, "num_turns": 1, "metrics": {},
        "extra_fields": {"min_global_steps": None, "max_global_steps": None, "weight_versions": []},
    }
    out = loop.output_of(record, dispatch_step=np.int64(5))
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (5, 5)
    np.array([out.extra_fields["min_global_steps"]], dtype=int)
    sampled = dict(record, extra_fields={"min_global_steps": 3, "max_global_steps": 4})
    out = loop.output_of(sampled, dispatch_step=5)
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (3, 4)


def test_task_of_row_accepts_json_text_and_numpy_values() -> None:
    task = {"id": "a", "messages": [{"role": "user", "content": "hi"}], "metadata": {"k": [1, 2]}}
    import json

    assert task_of_row({"extra_info": {"uniagent_task": json.dumps(task)}}) == task
    numpy_task = {"id": "a", "messages": np.array([{"role": "user", "content": "hi"}], dtype=object), "metadata": {"k": np.array([1, 2])}}
    assert task_of_row({"extra_info": {"uniagent_task": numpy_task}}) == task


class _MemoryTQ:
    """In-memory stand-in for the three TransferQueue calls verl's v1 worker makes."""

    def __init__(self) -> None:
        self.tags: list[tuple[str, dict[str, Any]]] = []
        self.rows: dict[str, Any] = {}

    def init(self, *a: Any, **k: Any) -> None:
        pass

    async def async_kv_put(self, key: str, partition_id: str, tag: dict[str, Any]) -> None:
        self.tags.append((key, tag))

    async def async_kv_batch_put(self, keys: list[str], fields: Any, tags: list[dict[str, Any]], partition_id: str) -> None:
        for i, key in enumerate(keys):
            self.rows[key] = (fields[i], tags[i])


def test_v1_transferqueue_worker_marks_a_group_with_a_failed_rollout_failure(
    model_dir: Path, manager: TinyQwenServerManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verl's own AgentLoopWorkerTQ (v1 trainer) with our agent loop, unchanged: a group whose
    sessions all succeed is tagged ``finished`` with one TransferQueue row per session carrying
    ``min/max_global_steps``; a group with a ``status: failure`` session is tagged ``failure``."""
    store = _MemoryTQ()
    monkeypatch.setattr(agent_loop_tq, "tq", store)
    config = h.trainer_config(model_dir, n=N, prompt_length=P, response_length=R)
    worker_cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class

    async def go() -> None:
        service = FakeService()
        await service.start()
        try:
            h.register_uniagent(service_url=service.url, timeout_s=30)
            worker = worker_cls(config, manager)
            sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
            for uid, task_id in (("good", "ok"), ("bad", "fail")):
                prompt = {
                    "uid": uid, "agent_name": "uniagent", "global_steps": 5, "index": 0,
                    "raw_prompt": [{"role": "user", "content": "x"}],
                    "extra_info": {"index": 0, "uniagent_task": {"id": task_id, "messages": []}},
                }
                trajectory = {"step": 5, "sample_index": 0, "rollout_n": 0, "validate": False}
                await worker._run_prompt(prompt, sampling, trajectory=trajectory)
        finally:
            await close_bridge()
            await service.close()

    run(go())
    final = {key: tag["status"] for key, tag in store.tags}
    assert final == {"good": "finished", "bad": "failure"}
    assert sorted(store.rows) == ["good_0_0", "good_1_0"]
    for key in ("good_0_0", "good_1_0"):
        _, tag = store.rows[key]
        assert tag["status"] == "success" and tag["global_steps"] == 5
        assert tag["min_global_steps"] == 3 and tag["max_global_steps"] == 3
        assert tag["prompt_len"] == 3 and tag["response_len"] == 3

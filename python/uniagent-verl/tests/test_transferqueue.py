"""verl's v1 path with a real TransferQueue (transferqueue 0.1.11: a Ray controller actor and a
ZMQ ``SimpleStorage`` unit, on a local Ray started here) and the real rollout service
(``uniagent serve`` of ``UNIAGENT_BIN``, file-lookup in host sandboxes).

verl's own ``AgentLoopWorkerTQ`` (the class its ``ray.remote`` wraps, run in this process)
runs our agent loop for each prompt's ``n`` sessions and writes them to TransferQueue; the
prompts are registered first as the trainer does (``{"is_prompt": True, "status": "pending",
"global_steps": k}``); verl's ``ReplayBufferAsync`` (``max_off_policy_threshold=2``,
strategy ``drop``) then samples at ``global_steps=5``:

- ``fresh`` (dispatched at step 5, every session finished) is sampled, and its trajectories read
  back from TransferQueue are the service's (tokens, mask, reward, weight-version tags);
- ``broken`` (one session's generation fails → ``model_error`` → ``UniagentInfrastructureError``)
  is tagged ``failure`` by the worker and evicted by the buffer;
- ``stale`` (dispatched at step 1: span 5 - 1 + 1 = 5 > 2) finished fine but is evicted as
  stale. verl's staleness rule reads the *prompt's* dispatch step, not the trajectories'
  ``min/max_global_steps`` (those only feed the trainer's off-policy metrics).

Needs ``ray`` and ``transfer_queue``; skipped without ``UNIAGENT_BIN`` (failed with
``UNIAGENT_REQUIRE_VERL=1``). Overall deadline 240 s (SIGALRM).
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
import real_helpers as rh
import verl_harness as h

ray = pytest.importorskip("ray")
tq = pytest.importorskip("transfer_queue")

from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.v1 import agent_loop_tq  # noqa: E402
from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync  # noqa: E402

from uniagent_verl.bridge import close_bridge  # noqa: E402
from uniagent_verl.service import ServiceConfig, client_for, ensure_service  # noqa: E402

N, P, R = 2, 1024, 256
DEADLINE_S = 240
STEP = 5


class _Deadline(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Deadline(f"test_transferqueue passed its {DEADLINE_S}s deadline")


class FailOnce(rh.ScriptedServerManager):
    """The scripted policy, except that every generation of the first session (request id) of
    the task whose prompt names ``target`` raises (verl's generate failing; the service may retry
    a generation, so the whole session fails): exactly one session of that group fails."""

    def __init__(self, tokenizer: Any, target: str) -> None:
        super().__init__(tokenizer)
        self.target = target
        self.failing: str | None = None
        self.failed = 0

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        text = self.tokenizer.decode(prompt_ids)
        if self.failing is None and f"code of {self.target}?" in text:
            self.failing = request_id
        if request_id == self.failing:
            self.failed += 1
            raise RuntimeError("the replica died")
        return await super().generate(request_id, prompt_ids=prompt_ids, sampling_params=sampling_params, **kwargs)


def _config(tmp_path: Path, model_dir: Path) -> Path:
    return rh.file_lookup_config(
        tmp_path / "serve.yaml", model_dir, tasks=3, seed=21, prompt_len=P, response_len=R, bridge_timeout=30,
    )


def test_v1_worker_writes_to_a_real_transferqueue_and_the_replay_buffer_samples(model_dir: Path, tmp_path: Path) -> None:
    binary = rh.binary()
    config_path = _config(tmp_path, model_dir)
    run_dir = tmp_path / "run"
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(DEADLINE_S)
    started_ray = False
    try:
        if not ray.is_initialized():
            # Logical CPUs: the controller and the storage unit ask for one each.
            ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
            started_ray = True
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        trainer = h.trainer_config(model_dir, n=N, prompt_length=P, response_length=R)
        service = ServiceConfig(binary=binary, config=str(config_path), run_dir=str(run_dir), start_timeout_s=60)
        h.register_uniagent(service_binary=binary, service_config=str(config_path), service_run_dir=str(run_dir), timeout_s=60)
        worker_cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class

        async def go() -> dict[str, Any]:
            url = await ensure_service(service)
            tasks = await client_for(url).tasks()
            assert len(tasks) == 3
            groups = {"fresh": (tasks[0], STEP), "broken": (tasks[1], STEP), "stale": (tasks[2], 1)}
            manager = FailOnce(None, target=tasks[1]["metadata"]["target"])
            worker = worker_cls(trainer, manager)
            manager.tokenizer = worker.tokenizer
            # The trainer's registration of each prompt (GRPO group).
            tq.kv_batch_put(
                keys=list(groups), partition_id="train",
                tags=[{"is_prompt": True, "status": "pending", "global_steps": step} for _, step in groups.values()],
            )
            sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
            try:
                for uid, (task, step) in groups.items():
                    manager.global_steps = step
                    prompt = {
                        "uid": uid, "agent_name": "uniagent", "global_steps": step, "index": 0,
                        "raw_prompt": task["messages"], "data_source": "uniagent/file-lookup",
                        "extra_info": {"index": 0, "uniagent_task": json.dumps(task)},
                    }
                    trajectory = {"step": step, "sample_index": 0, "rollout_n": 0, "validate": False}
                    await worker._run_prompt(prompt, dict(sampling), trajectory=trajectory)
            finally:
                await close_bridge()
            return {"manager": manager}

        out = asyncio.run(go())
        listed = tq.kv_list("train")["train"]
        prompt_status = {k: v["status"] for k, v in listed.items() if v.get("is_prompt")}
        trajectory_tags = {k: v for k, v in listed.items() if not v.get("is_prompt")}

        buffer = ReplayBufferAsync(
            trainer_mode="async", trainer_config=trainer, max_off_policy_threshold=2, max_off_policy_strategy="drop",
            sampler_kwargs=OmegaConf.create({}), poll_interval=0.2,
        )
        assert buffer.get_sampleable_count(STEP, "train") == 1
        meta, metrics = buffer.sample(global_steps=STEP, partition_id="train", batch_size=1)
        data = tq.kv_batch_get_by_meta(meta)
        after = tq.kv_list("train").get("train", {})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        try:
            tq.close()
        finally:
            if started_ray:
                ray.shutdown()
            rh.kill_services(config_path)
            rh.print_log(run_dir)

    # The worker's tags: one failed session makes its group `failure`; the others `finished`.
    assert prompt_status == {"fresh": "finished", "broken": "failure", "stale": "finished"}
    assert out["manager"].failed >= 1
    assert sorted(trajectory_tags) == ["broken_1_0", "fresh_0_0", "fresh_1_0", "stale_0_0", "stale_1_0"] or sorted(
        trajectory_tags
    ) == ["broken_0_0", "fresh_0_0", "fresh_1_0", "stale_0_0", "stale_1_0"]
    for key, tag in trajectory_tags.items():
        step = 1 if key.startswith("stale") else STEP
        assert tag["status"] == "success" and tag["global_steps"] == step
        assert tag["min_global_steps"] == step and tag["max_global_steps"] == step, tag

    # The replay buffer: the stale group and the failure group are evicted, the fresh one sampled.
    assert metrics["training/off_policy/evicted_samples"] == 1
    assert metrics["training/rollout_failure/evicted_samples"] == 1
    assert sorted(meta.keys) == ["fresh_0_0", "fresh_1_0"]
    assert not any(k.startswith(("stale", "broken")) for k in after), after
    # What comes back out of TransferQueue is the service's record: the correct policy's two
    # generations, mask 1 on them only, reward 1.
    calls = {}
    for c in out["manager"].calls:
        if "output" in c:
            calls.setdefault(c["request_id"], []).extend(c["output"].token_ids)
    for i in range(len(meta.keys)):
        response = data["responses"][i].tolist()
        mask = data["response_mask"][i].tolist()
        sampled = [t for t, m in zip(response, mask, strict=True) if m]
        assert sampled in calls.values()
        assert 0 < sum(mask) < len(mask)
        assert float(data["rm_scores"][i].sum()) == 1.0
        extra = data["extra_fields"][i]
        extra = getattr(extra, "data", extra)
        assert extra["exit_reason"] == "finished" and extra["success"] is True

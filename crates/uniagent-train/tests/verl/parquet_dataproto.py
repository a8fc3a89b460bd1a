"""Loads uniagent's verl Parquet export with verl 0.9.1's own code and checks the batch.

    parquet_dataproto.py HOMOGENEOUS.parquet MIXED.parquet EXPECTED.json TOKENIZER_DIR OUT.json

HOMOGENEOUS.parquet holds rows that all have logprobs (the writer's default); MIXED.parquet was
written with mixed logprobs allowed. EXPECTED.json (written by tests/verl_parquet.rs from the
trajectories themselves, not from the files) holds per file the rows expected in it, and the
prompt/response lengths to pad to.

Every row becomes verl's `AgentLoopOutput` and goes through `AgentLoopWorker._agent_loop_postprocess`
then `_postprocess` (verl's padding, masks, position ids, rm_scores, non-tensor batch), and the
DataProto is checked against tensors computed here with plain Python from EXPECTED.json. Then
verl's `compute_grpo_outcome_advantage` runs on the batch's `rm_scores` and `uid`. OUT.json
reports every check ("ok" or the first mismatch), the schema pyarrow reads, and what verl does
with a batch mixing rows with and without logprobs, for the Rust test to assert on.
"""

import asyncio
import json
import math
import sys

import numpy as np
import pyarrow.parquet as pq
import torch
import verl
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput, AgentLoopWorker
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from verl.utils import hf_tokenizer
from verl.workers.config import RolloutConfig


def worker(tokenizer, prompt_length, response_length):
    """A worker without Ray, servers or config: only what the two post-processing methods read."""
    w = object.__new__(AgentLoopWorker)
    w.tokenizer = tokenizer  # _pad_token_ids: tokenizer.pad and pad_token_id
    w.processor = None  # text-only: no multi-modal inputs, 1-D position ids
    w.rollout_config = RolloutConfig(prompt_length=prompt_length, response_length=response_length)
    w.mm_processor_kwargs = {}  # _get_mm_processor_kwargs
    w.reward_loop_worker_handles = None  # _compute_score: the rows carry their reward
    w.distillation_enabled = False  # _compute_teacher_logprobs
    return w


def read(path):
    table = pq.read_table(path)
    schema = {f.name: str(f.type) for f in table.schema}
    return schema, table.to_pandas().to_dict("records")


def ints(values):
    return [int(v) for v in values]


def to_output(row):
    """A Parquet row as verl's AgentLoopOutput (what a verl-side loader does)."""
    lps = row["response_logprobs"]
    reward = row["reward_score"]
    return AgentLoopOutput(
        prompt_ids=ints(row["prompt_ids"]),
        response_ids=ints(row["response_ids"]),
        response_mask=ints(row["response_mask"]),
        response_logprobs=None if lps is None else [float(v) for v in lps],
        reward_score=None if reward is None or math.isnan(reward) else float(reward),
        num_turns=int(row["num_turns"]),
        metrics=AgentLoopMetrics(),
        extra_fields={"uniagent_id": row["id"]},
    )


async def dataproto(w, rows):
    outputs = [await w._agent_loop_postprocess(to_output(r), False, raw_prompt=None) for r in rows]
    uids = np.array([r["uid"] for r in rows], dtype=object)
    return w._postprocess(outputs, input_non_tensor_batch={"uid": uids})


def padded(rows, pad_id, plen, rlen):
    """verl's batch for these rows, computed from the trajectories' JSON."""
    out = {k: [] for k in ["prompts", "responses", "response_mask", "attention_mask", "input_ids",
                           "position_ids", "rollout_log_probs", "rm_scores"]}
    for r in rows:
        p, resp, mask = r["prompt_ids"], r["response_ids"], r["response_mask"]
        lps = r["response_logprobs"] or [0.0] * len(resp)
        left, right = plen - len(p), rlen - len(resp)
        out["prompts"].append([pad_id] * left + p)
        out["responses"].append(resp + [pad_id] * right)
        out["response_mask"].append(mask + [0] * right)
        attention = [0] * left + [1] * len(p) + [1] * len(resp) + [0] * right
        out["attention_mask"].append(attention)
        out["input_ids"].append(out["prompts"][-1] + out["responses"][-1])
        # Position of the last real token so far (0 before the first).
        positions, seen = [], 0
        for a in attention:
            seen += a
            positions.append(max(seen - 1, 0))
        out["position_ids"].append(positions)
        # float32 as the engine reported them, zeros on the padding.
        out["rollout_log_probs"].append([float(np.float32(v)) for v in lps] + [0.0] * right)
        # The reward sits on the last response token; an empty response wraps to the last column.
        scores = [0.0] * rlen
        scores[(len(resp) - 1) % rlen] = float(np.float32(r["expected_reward"]))
        out["rm_scores"].append(scores)
    return out


def compare(batch, expected, keys):
    report = {}
    for key in keys:
        got = batch[key].tolist()
        want = expected[key]
        if got == want:
            report[key] = "ok"
        else:
            bad = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w) if len(got) == len(want) else -1
            report[key] = f"row {bad}: verl {got[bad] if bad >= 0 else len(got)} vs expected {want[bad] if bad >= 0 else len(want)}"
    return report


def columns(rows, expected):
    """The file's own columns against the trajectories they came from."""
    report = {}
    pairs = {
        "id": lambda r: r["id"],
        "uid": lambda r: r["uid"],
        "exit_reason": lambda r: r["exit_reason"],
        "reward_score": lambda r: r["reward_score"],
        "num_turns": lambda r: int(r["num_turns"]),
        "weight_versions": lambda r: None if r["weight_versions"] is None
        else [None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in r["weight_versions"]],
        "response_logprobs": lambda r: None if r["response_logprobs"] is None
        else [float(v) for v in r["response_logprobs"]],
        "step": lambda r: None if r["step"] is None or math.isnan(r["step"]) else int(r["step"]),
    }
    want_of = {
        "id": lambda e: e["id"],
        "uid": lambda e: e["task_id"],
        "exit_reason": lambda e: e["exit_reason"],
        "reward_score": lambda e: e["expected_reward"],
        "num_turns": lambda e: e["num_turns"],
        "weight_versions": lambda e: e.get("weight_versions"),
        "response_logprobs": lambda e: None if e.get("response_logprobs") is None
        else [float(np.float32(v)) for v in e["response_logprobs"]],
        "step": lambda e: e.get("expected_step"),
    }
    for key, got_of in pairs.items():
        got = [got_of(r) for r in rows]
        want = [want_of[key](e) for e in expected]
        report[key] = "ok" if got == want else f"file {got} vs expected {want}"
    return report


def grpo(batch, uids, expected):
    """verl's GRPO advantages against group statistics computed here (unbiased std)."""
    adv, _ = compute_grpo_outcome_advantage(batch["rm_scores"], batch["response_mask"], uids)
    groups = {}
    for e in expected:
        groups.setdefault(e["task_id"], []).append(float(np.float32(e["expected_reward"])))
    worst = 0.0
    for i, e in enumerate(expected):
        scores = groups[e["task_id"]]
        mean = sum(scores) / len(scores) if len(scores) > 1 else 0.0
        std = (sum((s - mean) ** 2 for s in scores) / (len(scores) - 1)) ** 0.5 if len(scores) > 1 else 1.0
        want = (float(np.float32(e["expected_reward"])) - mean) / (std + 1e-6)
        mask = batch["response_mask"][i].tolist()
        for a, m in zip(adv[i].tolist(), mask):
            worst = max(worst, abs(a - want * m))
    return {"groups": len(groups), "max_abs_error": worst}


async def main():
    homogeneous_path, mixed_path, expected_path, tokenizer_dir, out_path = sys.argv[1:6]
    expected = json.load(open(expected_path))
    tokenizer = hf_tokenizer(tokenizer_dir)
    pad_id = expected["pad_token_id"]
    plen, rlen = expected["prompt_length"], expected["response_length"]
    w = worker(tokenizer, plen, rlen)
    report = {"verl": verl.__version__, "pad_token_id": tokenizer.pad_token_id}
    all_keys = ["prompts", "responses", "response_mask", "attention_mask", "input_ids", "position_ids",
                "rollout_log_probs", "rm_scores"]

    # All rows with logprobs: the whole batch, rollout_log_probs included.
    schema, rows = read(homogeneous_path)
    want = expected["homogeneous"]
    report["schema"] = schema
    report["ids"] = [r["id"] for r in rows]
    report["columns"] = columns(rows, want)
    data = await dataproto(w, rows)
    report["batch_keys"] = sorted(data.batch.keys())
    report["shapes"] = {k: list(data.batch[k].shape) for k in data.batch.keys()}
    report["dtypes"] = {k: str(data.batch[k].dtype) for k in data.batch.keys()}
    report["homogeneous"] = compare(data.batch, padded(want, pad_id, plen, rlen), all_keys)
    report["uid"] = "ok" if list(data.non_tensor_batch["uid"]) == [e["task_id"] for e in want] else "mismatch"
    report["num_turns"] = [int(v) for v in data.non_tensor_batch["__num_turns__"]]
    report["grpo"] = grpo(data.batch, data.non_tensor_batch["uid"], want)
    report["first_row"] = {k: data.batch[k][0].tolist() for k in ["prompts", "responses", "position_ids"]}

    # Rows with and without logprobs in one batch: verl decides from the first row.
    _, rows = read(mixed_path)
    want = expected["mixed"]
    report["mixed_columns"] = columns(rows, want)
    without = [i for i, r in enumerate(rows) if r["response_logprobs"] is None]
    first_without = [rows[i] for i in without] + [r for i, r in enumerate(rows) if i not in without]
    want_first_without = [want[i] for i in without] + [e for i, e in enumerate(want) if i not in without]
    data = await dataproto(w, first_without)
    report["mixed_first_without"] = {
        "has_rollout_log_probs": "rollout_log_probs" in data.batch.keys(),
        **compare(data.batch, padded(want_first_without, pad_id, plen, rlen), all_keys[:-2] + ["rm_scores"]),
    }
    try:
        await dataproto(w, rows)
        report["mixed_first_with"] = "no error"
    except Exception as e:  # noqa: BLE001 - the type is the result
        report["mixed_first_with"] = type(e).__name__

    with open(out_path, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    asyncio.run(main())

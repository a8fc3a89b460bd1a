"""What the verl bridge costs per rollout, beside generation.

64 rollouts in flight at once: 64 concurrent ``UniagentAgentLoop.run`` calls against the real
``uniagent serve`` (file-lookup, host sandboxes, ``--max-in-flight 64``), each with its own
``server_manager`` that answers at once as the scripted correct policy (read the file, then
``finish`` with its digits; ``tests/real_helpers.py``). Per rollout: the client's wall time, the
time spent inside ``server_manager.generate``, and the service's own metrics
(``generate_sequences``, ``tool_calls``, ``compute_score``).

Baseline, in the same run: the same tasks through ``uniagent run`` with a vLLM
``/v1/completions`` stand-in answering the same tokens (``runner.max_concurrent_rollouts: 64``),
per-rollout ``timings`` from ``trajectories.jsonl`` (``total``, ``model``).

    UNIAGENT_BIN=target/debug/uniagent .venv-torch/bin/python python/uniagent-verl/bench/overhead.py [--rollouts 64]

Columns (seconds, median / p99 over rollouts):
- ``wall``: the whole rollout as its caller sees it (verl: ``run`` awaited; run: ``timings.total``);
- ``wall-gen``: wall minus generation: for verl, minus the time inside ``server_manager.generate``
  (so the bridge's HTTP hops count as overhead); for ``uniagent run``, minus ``timings.model``
  (its HTTP hop to the stand-in counts as generation);
- ``wall-svc_gen``: verl only: wall minus the service's ``generate_sequences`` (the bridge hop
  counted as generation, like ``uniagent run``'s ``model``): the agent loop's and service's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PKG = HERE.parent
REPO = PKG.parents[1]
sys.path.insert(0, str(PKG / "tests"))

import real_helpers as rh  # noqa: E402
import verl_harness as h  # noqa: E402
from aiohttp import web  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402

from uniagent_verl.agent_loop import UniagentAgentLoop  # noqa: E402
from uniagent_verl.bridge import close_bridge  # noqa: E402
from uniagent_verl.service import ServiceConfig, client_for, ensure_service  # noqa: E402

TINY_QWEN2 = REPO / "crates/uniagent-train/tests/fixtures/tiny-qwen2"
QWEN_TOKENIZER = REPO / "crates/uniagent-core/tests/fixtures/tokenizers/qwen2.5"
P, R = 1024, 256
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def model_dir(root: Path) -> Path:
    out = root / "tiny-qwen2-hf"
    out.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        os.symlink(TINY_QWEN2 / name, out / name)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        os.symlink(QWEN_TOKENIZER / name, out / name)
    return out


def common_yaml(n: int) -> str:
    return f"""\
tasks:
  generate: {{count: {n}, seed: 5}}
environment:
  type: file-lookup
  sandbox: {{type: host}}
loop:
  max_turns: 4
  sampling: {{max_tokens: 64}}
"""


def q(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]


async def vllm_stand_in(tokenizer: Any) -> tuple[web.AppRunner, str]:
    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        ids = rh.policy_ids(tokenizer, body["prompt"])
        ids[-1] = int(body["stop_token_ids"][0])
        return web.json_response({"choices": [{"index": 0, "text": "", "finish_reason": "stop", "logprobs": {
            "tokens": [f"token_id:{i}" for i in ids], "token_logprobs": [-0.25 * (i % 7) for i in range(len(ids))]}}]})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def bench_verl(binary: str, root: Path, mdir: Path, n: int) -> list[dict[str, float]]:
    config = root / "serve.yaml"
    config.write_text(common_yaml(n) + f"model:\n  type: verl\n  tokenizer: {mdir}\n  limits: {{max_prompt_len: {P}, max_response_len: {R}}}\n")
    service = ServiceConfig(binary=binary, config=str(config), run_dir=str(root / "run"), extra_args=("--max-in-flight", str(n)))
    trainer = h.trainer_config(mdir, n=1, prompt_length=P, response_length=R)
    worker = h.worker(trainer, None)
    try:
        url = await ensure_service(service)
        tasks = await client_for(url).tasks()
        managers = [rh.ScriptedServerManager(worker.tokenizer) for _ in tasks]
        loops = [
            UniagentAgentLoop(
                trainer_config=DictConfigWrap(trainer), server_manager=m, tokenizer=worker.tokenizer, processor=None,
                dataset_cls=worker.dataset_cls, data_config=DictConfigWrap(trainer.data), service_url=url, timeout_s=120,
            )
            for m in managers
        ]

        async def one(loop: UniagentAgentLoop, manager: rh.ScriptedServerManager, task: dict[str, Any]) -> dict[str, float]:
            row = {"extra_info": {"index": 0, "uniagent_task": json.dumps(task)}, "index": 0, "session_id": 0}
            start = time.perf_counter()
            out = await loop.run(dict(SAMPLING), **row)
            wall = time.perf_counter() - start
            assert out.extra_fields["exit_reason"] == "finished" and out.reward_score == 1.0, out.extra_fields
            return {"wall": wall, "gen": sum(manager.seconds.values()), "svc_gen": out.metrics.generate_sequences,
                    "tools": out.metrics.tool_calls, "score": out.metrics.compute_score}

        # One warm-up rollout (bridge start, connection pool), then all at once.
        await one(loops[0], managers[0], tasks[0])
        managers[0].seconds.clear()
        return await asyncio.gather(*(one(lp, m, t) for lp, m, t in zip(loops, managers, tasks, strict=True)))
    finally:
        await close_bridge()
        rh.kill_services(config)


async def bench_run(binary: str, root: Path, mdir: Path, n: int, tokenizer: Any) -> list[dict[str, float]]:
    runner, url = await vllm_stand_in(tokenizer)
    try:
        config = root / "run.yaml"
        config.write_text(
            common_yaml(n)
            + f"runner: {{samples_per_task: 1, max_concurrent_rollouts: {n}}}\n"
            + f"model:\n  type: vllm\n  tokenizer: {mdir}\n  limits: {{max_prompt_len: {P}, max_response_len: {R}}}\n"
            + f"  http: {{endpoints: [\"{url}\"], model: m, timeout: 30}}\n"
        )
        proc = await asyncio.create_subprocess_exec(
            binary, "run", str(config), "--out", str(root / "out"), "--quiet",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 300)
        if proc.returncode != 0:
            raise RuntimeError(f"uniagent run failed ({proc.returncode}): {err.decode()[-2000:]}")
        rows = []
        for line in (root / "out/trajectories.jsonl").read_text().splitlines():
            t = json.loads(line)
            assert t["exit_reason"] == "finished", t["exit_reason"]
            tm = t["timings"]
            rows.append({"wall": tm["total"], "gen": tm["model"], "tools": tm["tools"], "score": tm["reward"]})
        return rows
    finally:
        await runner.cleanup()


def table(verl: list[dict[str, float]], run: list[dict[str, float]]) -> str:
    def stats(rows: list[dict[str, float]], f: Any) -> tuple[float, float]:
        v = [f(r) for r in rows]
        return statistics.median(v), q(v, 0.99)

    lines = [f"{'path':<24}{'metric':<16}{'median s':>10}{'p99 s':>10}"]
    for name, rows, metrics in (
        ("verl bridge (serve)", verl, [
            ("wall", lambda r: r["wall"]), ("gen", lambda r: r["gen"]), ("wall-gen", lambda r: r["wall"] - r["gen"]),
            ("wall-svc_gen", lambda r: r["wall"] - r["svc_gen"]), ("svc tool_calls", lambda r: r["tools"]),
            ("svc compute_score", lambda r: r["score"])]),
        ("uniagent run", run, [
            ("wall", lambda r: r["wall"]), ("gen", lambda r: r["gen"]), ("wall-gen", lambda r: r["wall"] - r["gen"]),
            ("tools", lambda r: r["tools"]), ("reward", lambda r: r["score"])]),
    ):
        for metric, f in metrics:
            med, p99 = stats(rows, f)
            lines.append(f"{name:<24}{metric:<16}{med:>10.4f}{p99:>10.4f}")
    vm, vp = stats(verl, lambda r: r["wall"] - r["gen"])
    rm, rp = stats(run, lambda r: r["wall"] - r["gen"])
    vw, _ = stats(verl, lambda r: r["wall"])
    rw, _ = stats(run, lambda r: r["wall"])
    lines.append(f"ratio verl/run  wall-gen: median {vm / rm:.2f}x  p99 {vp / rp:.2f}x;  wall: median {vw / rw:.2f}x")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    binary = args.bin or os.environ.get("UNIAGENT_BIN")
    if not binary:
        print("set UNIAGENT_BIN or --bin", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="uniagent-verl-bench-") as tmp:
        root = Path(tmp)
        mdir = model_dir(root)
        (root / "verl").mkdir()
        (root / "run").mkdir()
        verl = await bench_verl(binary, root / "verl", mdir, args.rollouts)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(mdir))
        run = await bench_run(binary, root / "run", mdir, args.rollouts, tokenizer)
    print(f"{args.rollouts} rollouts in flight, file-lookup, host sandboxes, scripted policy (instant generation)")
    print(table(verl, run))
    if args.json:
        Path(args.json).write_text(json.dumps({"verl": verl, "run": run}, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--bin", help="the uniagent binary (default $UNIAGENT_BIN)")
    parser.add_argument("--json", help="write the per-rollout figures here")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())

"""A stand-in for the HTTP behaviour of ``uniagent serve`` (docs/verl.md), for transport tests.

It is not the rollout service: it runs no environment. ``POST /v1/rollouts`` answers by the
task's id: ``ok`` a success record, ``fail`` a ``status: failure`` record, ``bad`` a 422 naming
a field, ``busy`` 429 (``Retry-After: 0``) twice then success, ``busy-forever`` 429
(``Retry-After: 1``) always, ``boom`` a 500, ``drop`` closes the connection mid-rollout, and
``generate`` a one-turn rollout through the request's ``bridge_url`` (render the task's
messages with the tokenizer's chat template, ask the bridge for up to ``max_tokens`` tokens
stopping at ``<|im_end|>``, reward ``(first token id % 100) / 100`` so that the rewards of a
group differ) — enough to drive the
agent loop end to end on CPU while the Rust service is not at hand.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from aiohttp import web

IM_END = 151645


def record(task: dict[str, Any], body: dict[str, Any], **over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "status": "success",
        "id": f"{task['id']}:{body.get('sample', 0)}",
        "exit_reason": "finished",
        "exit_class": "agent",
        "prompt_ids": [1, 2, 3],
        "response_ids": [4, 5, 6],
        "response_mask": [1, 1, 0],
        "response_logprobs": [-0.5, -0.25, None],
        "reward_score": 1.0,
        "num_turns": 2,
        "metrics": {"generate_sequences": 0.1, "tool_calls": 0.0, "compute_score": 0.0, "num_preempted": 0},
        "extra_fields": {
            "weight_versions": [3, 3, None],
            "min_global_steps": 3,
            "max_global_steps": 3,
            "reward_extra_info": {"success": 1.0},
            "exit_reason": "finished",
        },
    }
    out.update(over)
    return out


class FakeService:
    def __init__(self, tokenizer: Any = None, max_tokens: int = 8) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens
        self.requests: list[dict[str, Any]] = []
        self.busy_left = 2
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/rollouts", self.rollouts)
        app.router.add_get("/v1/tasks", self.tasks)
        app.router.add_get("/v1/info", self.info)
        app.router.add_get("/healthz", self.healthz)
        self.runner = web.AppRunner(app, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def tasks(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "tasks": [
                    {"id": "t0", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}], "metadata": {"answer": "hi"}},
                    {"id": "t1", "messages": [{"role": "user", "content": "Say bye."}], "metadata": {"answer": "bye", "extra": [1, 2]}},
                ]
            }
        )

    async def info(self, request: web.Request) -> web.Response:
        return web.json_response({"environment": "fake", "tools": [], "max_in_flight": 8, "in_flight": 0})

    async def rollouts(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        task = body["task"]
        kind = task["id"]
        if kind == "ok":
            return web.json_response(record(task, body))
        if kind == "fail":
            return web.json_response(
                record(task, body, status="failure", exit_reason="sandbox_error", exit_class="infrastructure", reward_score=None, error="sandbox: container exited 137")
            )
        if kind == "bad":
            return web.json_response(
                {"error": {"type": "invalid_request", "field": "task.messages", "message": "missing field `messages`"}}, status=422
            )
        if kind == "busy":
            if self.busy_left > 0:
                self.busy_left -= 1
                return web.json_response({"error": {"type": "busy", "message": "too many"}}, status=429, headers={"Retry-After": "0"})
            return web.json_response(record(task, body))
        if kind == "busy-forever":
            return web.json_response({"error": {"type": "busy", "message": "too many"}}, status=429, headers={"Retry-After": "1"})
        if kind == "boom":
            return web.json_response({"error": {"type": "internal", "message": "panicked"}}, status=500)
        if kind == "drop":
            assert request.transport is not None
            request.transport.close()
            await asyncio.sleep(5)
            return web.Response()
        return await self.generate_rollout(task, body)

    async def generate_rollout(self, task: dict[str, Any], body: dict[str, Any]) -> web.Response:
        assert self.tokenizer is not None, "a generating fake service needs a tokenizer"
        prompt_ids = list(self.tokenizer.apply_chat_template(task["messages"], add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
        async with aiohttp.ClientSession() as s:
            async with s.post(
                body["bridge_url"],
                json={
                    "request_id": body["request_id"],
                    "prompt_ids": prompt_ids,
                    "sampling_params": body["sampling_params"],
                    "max_tokens": self.max_tokens,
                    "stop_token_ids": [IM_END],
                },
            ) as resp:
                gen = await resp.json()
                if resp.status != 200:
                    return web.json_response(record(task, body, status="failure", exit_reason="model_error", exit_class="infrastructure", reward_score=None, error=str(gen)))
        tokens = gen["token_ids"]
        logprobs = gen["log_probs"]
        steps = gen["global_steps"]
        return web.json_response(
            record(
                task,
                body,
                prompt_ids=prompt_ids,
                response_ids=tokens,
                response_mask=[1] * len(tokens),
                response_logprobs=logprobs,
                reward_score=(tokens[0] % 100) / 100 if tokens else 0.0,
                num_turns=2,
                extra_fields={
                    "weight_versions": [steps] * len(tokens),
                    "min_global_steps": steps,
                    "max_global_steps": steps,
                    "reward_extra_info": {"first_token": float(tokens[0]) if tokens else -1.0},
                    "exit_reason": "finished",
                },
            )
        )

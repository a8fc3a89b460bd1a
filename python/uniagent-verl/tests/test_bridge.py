"""The generation bridge, driven over real HTTP against the tiny Qwen2 (standing in for vLLM)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import run
from tiny_qwen import TinyQwenServerManager

from uniagent_verl.bridge import GenerationBridge, close_bridge, get_bridge

PROMPT = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198]


@pytest.fixture(scope="module")
def manager_dir(model_dir: Path) -> Path:
    return model_dir


async def _post(url: str, body: Any, *, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s:
        kwargs: dict[str, Any] = {"data": raw, "headers": {"Content-Type": "application/json"}} if raw is not None else {"json": body}
        async with s.post(url, **kwargs) as resp:
            return resp.status, await resp.json()


def _body(request_id: str, **over: Any) -> dict[str, Any]:
    body = {
        "request_id": request_id,
        "prompt_ids": PROMPT,
        "sampling_params": {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True},
        "max_tokens": 6,
        "stop_token_ids": [151645],
    }
    body.update(over)
    return body


def test_generate_answers_verl_token_output(model_dir: Path) -> None:
    manager = TinyQwenServerManager(model_dir, global_steps=7)

    async def go() -> tuple[int, dict[str, Any]]:
        bridge = await get_bridge()
        try:
            with bridge.register("r1", manager, {"priority": 5}):
                return await _post(bridge.url, _body("r1"))
        finally:
            await close_bridge()

    status, answer = run(go())
    assert status == 200, answer
    assert set(answer) == {"token_ids", "log_probs", "stop_reason", "global_steps", "num_preempted"}
    assert 1 <= len(answer["token_ids"]) <= 6
    assert len(answer["log_probs"]) == len(answer["token_ids"])
    assert answer["stop_reason"] == "completed"
    assert answer["global_steps"] == 7
    assert answer["num_preempted"] == 0
    # The log probs are the model's own: a full forward pass over prompt + tokens agrees.
    expected = manager.sequence_logprobs(PROMPT, answer["token_ids"])
    assert answer["log_probs"] == pytest.approx(expected, abs=1e-4)
    # What reached verl's generate: the request id (sticky routing), the budget and the stop ids
    # inside sampling_params (as verl's vLLM/SGLang servers read them), the per-rollout kwargs.
    (call,) = manager.calls
    assert call["request_id"] == "r1"
    assert call["prompt_ids"] == PROMPT
    assert call["sampling_params"]["max_tokens"] == 6
    assert call["sampling_params"]["stop_token_ids"] == [151645]
    assert call["sampling_params"]["logprobs"] is True
    assert call["kwargs"] == {"priority": 5}


def test_max_tokens_and_stop_token_ids_are_honoured(model_dir: Path) -> None:
    manager = TinyQwenServerManager(model_dir)
    greedy = {"temperature": 0, "top_p": 1.0, "top_k": -1, "logprobs": False, "ignore_eos": True}

    async def go() -> list[dict[str, Any]]:
        bridge = await get_bridge()
        answers = []
        try:
            with bridge.register("g", manager):
                # verl's max_new_tokens spelling in the incoming params is replaced, not doubled.
                params = dict(greedy, max_new_tokens=99)
                _, a = await _post(bridge.url, _body("g", sampling_params=params, max_tokens=10, stop_token_ids=None))
                answers.append(a)
                _, b = await _post(bridge.url, _body("g", sampling_params=greedy, max_tokens=3, stop_token_ids=[]))
                answers.append(b)
                stop = a["token_ids"][4]
                _, c = await _post(bridge.url, _body("g", sampling_params=greedy, max_tokens=10, stop_token_ids=[stop]))
                answers.append(c)
        finally:
            await close_bridge()
        return answers

    full, short, stopped = run(go())
    assert len(full["token_ids"]) == 10
    assert full["log_probs"] is None
    assert "max_new_tokens" not in manager.calls[0]["sampling_params"]
    assert short["token_ids"] == full["token_ids"][:3]
    first = full["token_ids"].index(full["token_ids"][4])
    assert stopped["token_ids"] == full["token_ids"][: first + 1]


def test_serves_concurrent_requests_and_routes_each_to_its_manager(model_dir: Path) -> None:
    # Each manager holds its requests until 4 are in flight at once: a bridge that served one
    # request at a time would time out here.
    a = TinyQwenServerManager(model_dir, global_steps=1, wait_for=4)
    b = TinyQwenServerManager(model_dir, global_steps=2, wait_for=4)

    async def go() -> list[tuple[int, dict[str, Any]]]:
        bridge = await get_bridge()
        assert await get_bridge() is bridge  # one bridge per event loop
        try:
            ids = [f"a{i}" for i in range(4)] + [f"b{i}" for i in range(4)]
            with_all = [bridge.register(i, a if i.startswith("a") else b) for i in ids]
            for cm in with_all:
                cm.__enter__()
            try:
                assert bridge.in_flight == 8
                return list(await asyncio.gather(*[_post(bridge.url, _body(i, max_tokens=4)) for i in ids]))
            finally:
                for cm in with_all:
                    cm.__exit__(None, None, None)
        finally:
            await close_bridge()

    answers = run(go())
    assert [s for s, _ in answers] == [200] * 8
    assert [ans["global_steps"] for _, ans in answers] == [1] * 4 + [2] * 4
    assert a.max_in_flight == 4 and b.max_in_flight == 4
    assert sorted(c["request_id"] for c in a.calls) == ["a0", "a1", "a2", "a3"]
    assert sorted(c["request_id"] for c in b.calls) == ["b0", "b1", "b2", "b3"]


class _Raising:
    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kw: Any) -> Any:
        raise RuntimeError("engine died")


def test_bad_bodies_are_400_unknown_ids_404_and_generate_errors_502() -> None:
    bad = [
        (b"{not json", "bad_request"),
        (b"[1, 2]", "bad_request"),
        (b'{"prompt_ids": [1], "sampling_params": {}}', "bad_request"),
        (b'{"request_id": "r", "prompt_ids": ["a"], "sampling_params": {}}', "bad_request"),
        (b'{"request_id": "r", "prompt_ids": [], "sampling_params": {}}', "bad_request"),
        (b'{"request_id": "r", "prompt_ids": [1], "sampling_params": []}', "bad_request"),
        (b'{"request_id": "r", "prompt_ids": [1], "sampling_params": {}, "max_tokens": 0}', "bad_request"),
        (b'{"request_id": "r", "prompt_ids": [1], "sampling_params": {}, "max_tokens": true}', "bad_request"),
        (b'{"request_id": "r", "prompt_ids": [1], "sampling_params": {}, "stop_token_ids": [1.5]}', "bad_request"),
    ]

    async def go() -> tuple[list[tuple[int, dict[str, Any]]], tuple[int, dict[str, Any]], tuple[int, dict[str, Any]], tuple[int, dict[str, Any]]]:
        bridge = GenerationBridge()
        await bridge.start()
        try:
            with bridge.register("r", _Raising()):
                answers = [await _post(bridge.url, None, raw=raw) for raw, _ in bad]
                failed = await _post(bridge.url, _body("r"))
            unknown = await _post(bridge.url, _body("nobody"))
            ended = await _post(bridge.url, _body("r"))  # the rollout's registration has ended
            return answers, failed, unknown, ended
        finally:
            await bridge.close()

    answers, failed, unknown, ended = run(go())
    for (status, body), (raw, kind) in zip(answers, bad, strict=True):
        assert status == 400, raw
        assert body["error"]["type"] == kind, raw
        assert body["error"]["message"], raw
    assert failed[0] == 502
    assert failed[1]["error"]["type"] == "generate_failed"
    assert "RuntimeError" in failed[1]["error"]["message"] and "engine died" in failed[1]["error"]["message"]
    assert unknown[0] == 404 and unknown[1]["error"]["type"] == "unknown_request"
    assert ended[0] == 404


def test_a_request_id_registers_once() -> None:
    async def go() -> None:
        bridge = GenerationBridge()
        await bridge.start()
        try:
            with bridge.register("r", _Raising()):
                with pytest.raises(ValueError, match="already registered"):
                    with bridge.register("r", _Raising()):
                        pass
            assert bridge.in_flight == 0
        finally:
            await bridge.close()

    run(go())

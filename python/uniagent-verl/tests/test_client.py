"""The service client's error mapping, against a real aiohttp server standing in for the
HTTP behaviour of ``uniagent serve`` (see fake_service.py)."""

from __future__ import annotations

import time
from email.utils import formatdate
from typing import Any

import pytest
from conftest import run
from fake_service import FakeService

from uniagent_verl.client import UniagentClient, parse_retry_after
from uniagent_verl.errors import UniagentInfrastructureError, UniagentRequestError


def _rollout(service: FakeService, client: UniagentClient, task_id: str, **kw: Any) -> Any:
    return client.rollout(
        task={"id": task_id, "messages": []},
        request_id="rid",
        sampling_params={"temperature": 1.0},
        bridge_url="http://127.0.0.1:1/generate",
        sample=2,
        group_size=4,
        **kw,
    )


def test_rollout_error_mapping() -> None:
    async def go() -> dict[str, Any]:
        service = FakeService()
        await service.start()
        results: dict[str, Any] = {}
        try:
            async with UniagentClient(service.url) as client:
                results["ok"] = await _rollout(service, client, "ok", timeout_s=60)
                for kind in ("fail", "bad", "boom", "drop"):
                    try:
                        await _rollout(service, client, kind, timeout_s=60)
                    except (UniagentInfrastructureError, UniagentRequestError) as e:
                        results[kind] = e
                started = time.monotonic()
                results["busy"] = await _rollout(service, client, "busy", timeout_s=60)
                results["busy_s"] = time.monotonic() - started
                try:
                    await _rollout(service, client, "busy-forever", deadline_s=0.5)
                except UniagentInfrastructureError as e:
                    results["busy-forever"] = e
                results["requests"] = service.requests
        finally:
            await service.close()
        return results

    r = run(go())
    assert r["ok"]["status"] == "success" and r["ok"]["id"] == "ok:2"
    first = r["requests"][0]
    assert first == {
        "task": {"id": "ok", "messages": []},
        "request_id": "rid",
        "sampling_params": {"temperature": 1.0},
        "bridge_url": "http://127.0.0.1:1/generate",
        "sample": 2,
        "group_size": 4,
        "timeout_s": 60,
    }
    fail = r["fail"]
    assert isinstance(fail, UniagentInfrastructureError)
    assert fail.http_status == 200 and fail.exit_reason == "sandbox_error"
    assert fail.rollout is not None and fail.rollout["error"] == "sandbox: container exited 137"
    assert "sandbox_error" in str(fail)
    bad = r["bad"]
    assert isinstance(bad, UniagentRequestError)
    assert bad.field == "task.messages" and bad.http_status == 422 and "missing field" in str(bad)
    assert isinstance(r["boom"], UniagentInfrastructureError) and r["boom"].http_status == 500
    assert "panicked" in str(r["boom"])
    drop = r["drop"]
    assert isinstance(drop, UniagentInfrastructureError) and drop.http_status is None
    assert "connection" in str(drop)
    # 429 twice with Retry-After: 0, then the rollout: three posts, no error.
    assert r["busy"]["status"] == "success"
    assert sum(1 for q in r["requests"] if q["task"]["id"] == "busy") == 3
    assert r["busy_s"] < 5
    # Retry-After: 1 always, with half a second of deadline: gives up without sleeping past it.
    assert isinstance(r["busy-forever"], UniagentInfrastructureError)
    assert r["busy-forever"].http_status == 429


def test_a_service_that_is_not_there_is_an_infrastructure_error() -> None:
    async def go() -> tuple[bool, Exception | None]:
        async with UniagentClient("http://127.0.0.1:9") as client:
            healthy = await client.healthz(timeout_s=1)
            try:
                await client.rollout(task={"id": "x"}, request_id="r", sampling_params={}, bridge_url="http://x/")
            except UniagentInfrastructureError as e:
                return healthy, e
        return healthy, None

    healthy, error = run(go())
    assert healthy is False
    assert isinstance(error, UniagentInfrastructureError)


def test_tasks_info_healthz() -> None:
    async def go() -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
        service = FakeService()
        await service.start()
        try:
            async with UniagentClient(service.url) as client:
                return await client.tasks(), await client.info(), await client.healthz()
        finally:
            await service.close()

    tasks, info, healthy = run(go())
    assert [t["id"] for t in tasks] == ["t0", "t1"]
    assert info["environment"] == "fake"
    assert healthy


def test_parse_retry_after() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) == 1.0
    assert parse_retry_after("soon") == 1.0
    now = time.time()
    assert parse_retry_after(formatdate(now + 10, usegmt=True), now=now) == pytest.approx(10, abs=1)
    assert parse_retry_after(formatdate(now - 10, usegmt=True), now=now) == 0.0

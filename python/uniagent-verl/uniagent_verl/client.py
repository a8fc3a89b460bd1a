"""Async HTTP client of the Rust rollout service (``uniagent serve``, see docs/verl.md).

Error mapping, decided here and nowhere else:

======================================  =====================================
answer                                   raised
======================================  =====================================
200, ``status: success``                 nothing: the record is returned
200, ``status: failure``                 :class:`UniagentInfrastructureError` (``rollout`` set)
200 with a body that is not the record   :class:`UniagentInfrastructureError`
422                                      :class:`UniagentRequestError` (``field`` set)
other 4xx                                :class:`UniagentRequestError`
429                                      retried after ``Retry-After`` within the deadline, then
                                         :class:`UniagentInfrastructureError`
5xx                                      :class:`UniagentInfrastructureError`
connection refused / dropped, timeout    :class:`UniagentInfrastructureError`
======================================  =====================================
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from typing import Any

import aiohttp

from .errors import UniagentInfrastructureError, UniagentRequestError

#: Seconds added to a rollout's own ``timeout_s`` before the client gives up on the answer: the
#: service enforces the rollout deadline itself and needs a moment to answer with the record.
DEADLINE_MARGIN_S = 30.0
#: Wait before retrying a 429 that carries no usable ``Retry-After``.
DEFAULT_RETRY_AFTER_S = 1.0


def parse_retry_after(value: str | None, *, now: float | None = None) -> float:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return DEFAULT_RETRY_AFTER_S
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return DEFAULT_RETRY_AFTER_S
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


class UniagentClient:
    """Client of one rollout service. Bound to the event loop it is first used on.

    Args:
        base_url: ``http://HOST:PORT`` of ``uniagent serve``.
        request_timeout_s: the deadline of the short routes (``/v1/tasks``, ``/v1/info``,
            ``/healthz``).
    """

    def __init__(self, base_url: str, *, request_timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.request_timeout_s = request_timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No connection limit: verl runs hundreds of rollouts per worker at once, and the
            # service has its own --max-in-flight (429) for back pressure.
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> UniagentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def rollout(
        self,
        *,
        task: dict[str, Any],
        request_id: str,
        sampling_params: dict[str, Any],
        bridge_url: str,
        sample: int = 0,
        group_size: int | None = None,
        timeout_s: float | None = None,
        deadline_s: float | None = None,
    ) -> dict[str, Any]:
        """Run one rollout: ``POST /v1/rollouts``. Returns the record of a ``success``.

        ``timeout_s`` is sent to the service as the rollout's own deadline. ``deadline_s``
        bounds the whole call, 429 retries included (default: ``timeout_s`` plus
        :data:`DEADLINE_MARGIN_S`, or no bound when neither is given).
        """
        body: dict[str, Any] = {
            "task": task,
            "request_id": request_id,
            "sampling_params": sampling_params,
            "bridge_url": bridge_url,
            "sample": sample,
        }
        if group_size is not None:
            body["group_size"] = group_size
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        if deadline_s is None and timeout_s is not None:
            deadline_s = timeout_s + DEADLINE_MARGIN_S
        deadline = None if deadline_s is None else time.monotonic() + deadline_s
        url = f"{self.base_url}/v1/rollouts"
        session = self._get_session()
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise UniagentInfrastructureError(
                    f"rollout {request_id}: no answer from {url} within {deadline_s:.0f}s", http_status=None
                )
            try:
                async with session.post(
                    url, json=body, timeout=aiohttp.ClientTimeout(total=remaining)
                ) as resp:
                    if resp.status == 429:
                        wait = parse_retry_after(resp.headers.get("Retry-After"))
                        await resp.read()
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and wait >= left:
                            raise UniagentInfrastructureError(
                                f"rollout {request_id}: the service stayed busy (429) until the "
                                f"deadline of {deadline_s:.0f}s",
                                http_status=429,
                            )
                        await asyncio.sleep(wait)
                        continue
                    text = await resp.text()
                    return _rollout_answer(resp.status, text, url)
            except (UniagentInfrastructureError, UniagentRequestError):
                raise
            except asyncio.TimeoutError as e:
                raise UniagentInfrastructureError(
                    f"rollout {request_id}: no answer from {url} within {deadline_s}s"
                ) from e
            except aiohttp.ClientError as e:
                # Connection refused, reset or dropped mid-rollout (the service died or restarted),
                # or a truncated body.
                raise UniagentInfrastructureError(
                    f"rollout {request_id}: connection to {url} failed: {type(e).__name__}: {e}"
                ) from e

    async def tasks(self) -> list[dict[str, Any]]:
        """``GET /v1/tasks``: the config's tasks (``[]`` when it has none)."""
        body = await self._get_json("/v1/tasks")
        tasks = body.get("tasks")
        if not isinstance(tasks, list):
            raise UniagentInfrastructureError(f"GET {self.base_url}/v1/tasks: no `tasks` list in the answer")
        return tasks

    async def info(self) -> dict[str, Any]:
        """``GET /v1/info``: environment name, tool specs, ``max_in_flight``, ``in_flight``."""
        return await self._get_json("/v1/info")

    async def healthz(self, *, timeout_s: float = 2.0) -> bool:
        """``GET /healthz``: whether the service answers 200 within ``timeout_s``."""
        try:
            async with self._get_session().get(
                f"{self.base_url}/healthz", timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                await resp.read()
                return resp.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            return False

    async def _get_json(self, path: str) -> dict[str, Any]:
        url = f"{self.base_url}{path}"
        try:
            async with self._get_session().get(
                url, timeout=aiohttp.ClientTimeout(total=self.request_timeout_s)
            ) as resp:
                text = await resp.text()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise UniagentInfrastructureError(f"GET {url} failed: {type(e).__name__}: {e}") from e
        _raise_for_status(status, text, url)
        body = _json_object(text)
        if body is None:
            raise UniagentInfrastructureError(f"GET {url}: the answer is not a JSON object", http_status=status)
        return body


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _raise_for_status(status: int, text: str, url: str) -> None:
    if 200 <= status < 300:
        return
    body = _json_object(text) or {}
    error = body.get("error")
    detail = error if isinstance(error, dict) else {}
    message = detail.get("message") if isinstance(detail.get("message"), str) else None
    if message is None:
        message = error if isinstance(error, str) else text[:500]
    if 400 <= status < 500:
        field = detail.get("field")
        raise UniagentRequestError(
            f"{url}: {status}: {message}",
            field=field if isinstance(field, str) else None,
            http_status=status,
        )
    raise UniagentInfrastructureError(f"{url}: {status}: {message}", http_status=status)


def _rollout_answer(status: int, text: str, url: str) -> dict[str, Any]:
    _raise_for_status(status, text, url)
    record = _json_object(text)
    if record is None:
        raise UniagentInfrastructureError(f"{url}: the answer is not a JSON object: {text[:200]!r}", http_status=status)
    outcome = record.get("status")
    if outcome == "success":
        return record
    if outcome == "failure":
        what = record.get("error") or record.get("exit_reason") or "unspecified"
        raise UniagentInfrastructureError(
            f"rollout {record.get('id')} failed ({record.get('exit_reason')}): {what}",
            http_status=status,
            rollout=record,
        )
    raise UniagentInfrastructureError(f"{url}: unknown rollout status {outcome!r}", http_status=status, rollout=record)

"""The generation bridge: the Rust rollout service's way to call verl's ``server_manager``.

One small aiohttp server per event loop (in verl: per ``AgentLoopWorker`` Ray actor), started
lazily by the first rollout. Its one route::

    POST /generate {"request_id", "prompt_ids", "sampling_params", "max_tokens", "stop_token_ids"}
    -> 200 {"token_ids", "log_probs", "stop_reason", "global_steps", "num_preempted"}
    -> 400 {"error": {"type": "bad_request", "message"}}            malformed body
    -> 404 {"error": {"type": "unknown_request", "message"}}        no live rollout has that id
    -> 502 {"error": {"type": "generate_failed", "message"}}        server_manager.generate raised

awaits ``server_manager.generate(request_id=..., prompt_ids=..., sampling_params=...)``, so every
token still goes through verl's ``LLMServerClient``: sticky routing by ``request_id`` (prefix
caching across turns), least-in-flight balancing, abort/resume across weight syncs, and the
``global_steps`` weight-version stamp.

**Routing: one registration per rollout.** Several agent-loop instances of one worker share the
bridge. Each ``UniagentAgentLoop.run`` registers its ``request_id`` with its own
``server_manager`` (and per-sample ``generate`` kwargs such as verl's ``priority``) for the
length of the rollout, and the bridge routes by ``request_id``. In verl 0.9.1 all loops of a
worker hold the same ``LLMServerClient``, so one client per worker would route the same today;
per-rollout registration is chosen because it also (a) refuses (404) the generations of a
rollout whose ``run`` has already ended (cancelled, timed out): such a rollout cannot keep
sampling on verl's servers, (b) carries per-sample kwargs, and (c) stays right if a worker ever
holds several clients.

**max_tokens and stop_token_ids.** verl 0.9.1's servers take both inside ``sampling_params``:
``vLLMHttpServer.generate`` pops ``sampling_params["max_tokens"]`` (else ``"max_new_tokens"``,
else a default from ``rollout.response_length``) and builds ``SamplingParams(max_tokens=...,
**sampling_params)``, so a second budget key left in the dict is a duplicate-keyword/unknown-field
error, and ``stop_token_ids`` reaches vLLM's ``SamplingParams`` through the ``**``.
``SGLangHttpServer.generate`` pops ``"max_new_tokens"`` (else ``"max_tokens"``) and passes the
rest as SGLang sampling params, where ``stop_token_ids`` is a field. verl's own
``ToolAgentLoop`` adds stop ids the same way (``sampling_params["stop_token_ids"]``), and
``FullyAsyncLLMServerClient`` reads ``sampling_params["max_tokens"]`` to keep the budget across
abort/resume. So the bridge sets ``sampling_params["max_tokens"]``, drops ``max_new_tokens``, and
merges ``stop_token_ids`` into ``sampling_params["stop_token_ids"]``; it passes neither as a
keyword of ``generate``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

logger = logging.getLogger(__name__)

GENERATE_PATH = "/generate"


class ServerManager(Protocol):
    """What the bridge needs of verl's ``LLMServerClient``."""

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any) -> Any: ...


@dataclass
class _Route:
    server_manager: ServerManager
    generate_kwargs: dict[str, Any] = field(default_factory=dict)


class BadRequest(ValueError):
    """A ``/generate`` body the bridge cannot use."""


@dataclass(frozen=True)
class GenerateRequest:
    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    max_tokens: int | None
    stop_token_ids: list[int] | None

    @staticmethod
    def parse(body: Any) -> GenerateRequest:
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        request_id = body.get("request_id")
        if not isinstance(request_id, str) or not request_id:
            raise BadRequest("`request_id` must be a non-empty string")
        prompt_ids = body.get("prompt_ids")
        if not _is_int_list(prompt_ids) or not prompt_ids:
            raise BadRequest("`prompt_ids` must be a non-empty list of integers")
        sampling_params = body.get("sampling_params")
        if not isinstance(sampling_params, dict):
            raise BadRequest("`sampling_params` must be an object")
        max_tokens = body.get("max_tokens")
        if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
            raise BadRequest("`max_tokens` must be a positive integer or null")
        stop_token_ids = body.get("stop_token_ids")
        if stop_token_ids is not None and not _is_int_list(stop_token_ids):
            raise BadRequest("`stop_token_ids` must be a list of integers or null")
        return GenerateRequest(request_id, list(prompt_ids), dict(sampling_params), max_tokens, stop_token_ids)

    def verl_sampling_params(self) -> dict[str, Any]:
        """verl's sampling params with this request's budget and stop ids folded in (see module doc)."""
        params = dict(self.sampling_params)
        if self.max_tokens is not None:
            params.pop("max_new_tokens", None)
            params["max_tokens"] = self.max_tokens
        if self.stop_token_ids:
            merged = list(params.get("stop_token_ids") or [])
            merged += [t for t in self.stop_token_ids if t not in merged]
            params["stop_token_ids"] = merged
        return params


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_int_list(value: Any) -> bool:
    return isinstance(value, list) and all(_is_int(v) for v in value)


def token_output_to_json(output: Any) -> dict[str, Any]:
    """verl's ``TokenOutput`` as the bridge's answer body."""
    extra = getattr(output, "extra_fields", None) or {}
    log_probs = getattr(output, "log_probs", None)
    return {
        "token_ids": [int(t) for t in output.token_ids],
        "log_probs": None if log_probs is None else [float(x) for x in log_probs],
        "stop_reason": getattr(output, "stop_reason", None),
        "global_steps": extra.get("global_steps") if isinstance(extra, Mapping) else None,
        "num_preempted": getattr(output, "num_preempted", None),
    }


def _error(status: int, kind: str, message: str) -> web.Response:
    return web.json_response({"error": {"type": kind, "message": message}}, status=status)


class GenerationBridge:
    """The bridge server of one event loop. Use :func:`get_bridge` rather than this directly."""

    def __init__(self, host: str = "127.0.0.1", advertise_host: str | None = None) -> None:
        self.host = host
        self.advertise_host = advertise_host or host
        self._routes: dict[str, _Route] = {}
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT/generate``, the ``bridge_url`` the service is given."""
        if self._port is None:
            raise RuntimeError("the generation bridge is not started")
        return f"http://{self.advertise_host}:{self._port}{GENERATE_PATH}"

    @property
    def in_flight(self) -> int:
        """Rollouts registered now."""
        return len(self._routes)

    async def start(self) -> str:
        if self._runner is not None:
            return self.url
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(GENERATE_PATH, self._handle_generate)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, 0)
        await site.start()
        server = site._server  # aiohttp keeps the bound asyncio server here
        sockets = getattr(server, "sockets", None) or []
        if not sockets:
            await runner.cleanup()
            raise RuntimeError("the generation bridge bound no socket")
        self._port = int(sockets[0].getsockname()[1])
        self._runner = runner
        logger.info("uniagent generation bridge listening on %s", self.url)
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        self._runner = None
        self._port = None

    @contextmanager
    def register(
        self, request_id: str, server_manager: ServerManager, generate_kwargs: Mapping[str, Any] | None = None
    ) -> Iterator[None]:
        """Route ``request_id``'s generations to ``server_manager`` while the block runs."""
        if request_id in self._routes:
            raise ValueError(f"request id {request_id!r} is already registered with the bridge")
        self._routes[request_id] = _Route(server_manager, dict(generate_kwargs or {}))
        try:
            yield
        finally:
            self._routes.pop(request_id, None)

    async def _handle_generate(self, request: web.Request) -> web.Response:
        try:
            raw = await request.read()
            body = json.loads(raw)
            req = GenerateRequest.parse(body)
        except (ValueError, UnicodeDecodeError) as e:  # json.JSONDecodeError and BadRequest are ValueErrors
            return _error(400, "bad_request", f"{type(e).__name__}: {e}" if not isinstance(e, BadRequest) else str(e))
        route = self._routes.get(req.request_id)
        if route is None:
            return _error(404, "unknown_request", f"no rollout with request id {req.request_id!r} is running here")
        try:
            output = await route.server_manager.generate(
                request_id=req.request_id,
                prompt_ids=req.prompt_ids,
                sampling_params=req.verl_sampling_params(),
                **route.generate_kwargs,
            )
            answer = token_output_to_json(output)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # any failure of verl's generate is the rollout's model error
            logger.warning("server_manager.generate failed for %s: %r", req.request_id, e)
            return _error(502, "generate_failed", f"server_manager.generate raised {type(e).__name__}: {e}")
        return web.json_response(answer)


_bridges: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GenerationBridge] = weakref.WeakKeyDictionary()
_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


async def get_bridge(host: str = "127.0.0.1", advertise_host: str | None = None) -> GenerationBridge:
    """The running loop's bridge, started on first use (``host`` only matters then)."""
    loop = asyncio.get_running_loop()
    bridge = _bridges.get(loop)
    if bridge is not None:
        return bridge
    lock = _locks.setdefault(loop, asyncio.Lock())
    async with lock:
        bridge = _bridges.get(loop)
        if bridge is None:
            bridge = GenerationBridge(host, advertise_host)
            await bridge.start()
            _bridges[loop] = bridge
    return bridge


async def close_bridge() -> None:
    """Stop the running loop's bridge, if any (tests; verl never needs it)."""
    bridge = _bridges.pop(asyncio.get_running_loop(), None)
    if bridge is not None:
        await bridge.close()

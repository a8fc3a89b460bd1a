"""``UniagentAgentLoop``: verl's agent loop ``"uniagent"``, whose rollouts run in uniagent.

verl builds one instance per trajectory (``hydra.utils.instantiate`` of the registry entry) and
awaits ``run(sampling_params, **row)``. ``run`` posts the row's uniagent task to the rollout
service with the URL of this worker's generation bridge (:mod:`uniagent_verl.bridge`), so the
service's every generation goes back through verl's ``server_manager``; the service answers
with the finished trajectory in ``AgentLoopOutput`` terms.

Configuration, each key first from the constructor (an entry of verl's
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` YAML passes its keys as constructor
kwargs), else from the environment of the Ray worker:

=========================  ============================  ============================================
kwarg                      environment variable          meaning
=========================  ============================  ============================================
``service_url``            ``UNIAGENT_SERVICE_URL``      a running ``uniagent serve``; else:
``service_binary``         ``UNIAGENT_BIN``              the ``uniagent`` binary, launched once per node
``service_config``         ``UNIAGENT_CONFIG``           ... with this run config (``model: {type: verl}``)
``service_run_dir``        ``UNIAGENT_VERL_RUN_DIR``     node-local dir for its lock/URL/log files
``service_start_timeout_s`` ``UNIAGENT_START_TIMEOUT_S`` deadline of the launch (120)
``timeout_s``              ``UNIAGENT_ROLLOUT_TIMEOUT_S`` the rollout's deadline, sent to the service
                                                         (unset: the config's ``loop.wall_clock_budget``)
``deadline_s``             ``UNIAGENT_DEADLINE_S``       the whole call incl. 429 waits (default
                                                         ``timeout_s`` + 30, or 7200 without it)
``bridge_host``            ``UNIAGENT_BRIDGE_HOST``      where the bridge binds (127.0.0.1)
=========================  ============================  ============================================

``actor_rollout_ref.rollout.agent`` itself takes no custom keys: verl converts it to its
``AgentLoopConfig`` dataclass, which rejects unknown fields.

Failures: a ``status: failure`` answer (and a dropped connection, a 5xx) raises
:class:`~uniagent_verl.errors.UniagentInfrastructureError`; verl's v1 manager
(``AgentLoopManagerTQ``) then tags the prompt's group ``failure`` and its replay buffer drops the
group. verl's older manager (``AgentLoopManager``) gathers the rollouts of a batch without
``return_exceptions``, so there the error fails the training step.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from .bridge import get_bridge
from .errors import UniagentConfigError
from .service import ServiceConfig, client_for, ensure_service

logger = logging.getLogger(__name__)

TASK_FIELD = "uniagent_task"
DEFAULT_DEADLINE_S = 7200.0


def _setting(value: Any, env: str) -> Any:
    if value is not None:
        return value
    text = os.environ.get(env)
    return text if text else None


def _float(value: Any, name: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as e:
        raise UniagentConfigError(f"{name} must be a number, got {value!r}") from e


def plain(value: Any) -> Any:
    """A row value as plain JSON-able Python (numpy arrays and scalars from verl's batches)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # numpy arrays and numpy scalars
        return plain(tolist())
    return value


def task_of_row(row: dict[str, Any]) -> dict[str, Any]:
    """The uniagent task of a verl dataset row: ``extra_info.uniagent_task`` (an object or its JSON)."""
    extra_info = row.get("extra_info")
    if not isinstance(extra_info, dict) or extra_info.get(TASK_FIELD) is None:
        raise UniagentConfigError(
            f"the dataset row has no `extra_info.{TASK_FIELD}` (the uniagent task): build the verl "
            f"dataset with `uniagent-verl-dataset`, or set extra_info.{TASK_FIELD} to the task object"
        )
    task = extra_info[TASK_FIELD]
    if isinstance(task, str):
        try:
            task = json.loads(task)
        except ValueError as e:
            raise UniagentConfigError(f"`extra_info.{TASK_FIELD}` is a string but not JSON: {e}") from e
    task = plain(task)
    if not isinstance(task, dict):
        raise UniagentConfigError(f"`extra_info.{TASK_FIELD}` must be an object, got {type(task).__name__}")
    return task


@register("uniagent")
class UniagentAgentLoop(AgentLoopBase):
    """verl agent loop whose rollouts run in uniagent's rollout service (see the module doc)."""

    def __init__(
        self,
        trainer_config: Any,
        server_manager: Any,
        tokenizer: Any,
        processor: Any,
        dataset_cls: Any = None,
        data_config: Any = None,
        hf_model_type: str | None = None,
        *,
        service_url: str | None = None,
        service_binary: str | None = None,
        service_config: str | None = None,
        service_run_dir: str | None = None,
        service_start_timeout_s: float | None = None,
        timeout_s: float | None = None,
        deadline_s: float | None = None,
        bridge_host: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            trainer_config=trainer_config,
            server_manager=server_manager,
            tokenizer=tokenizer,
            processor=processor,
            dataset_cls=dataset_cls,
            data_config=data_config,
            hf_model_type=hf_model_type,
            **kwargs,
        )
        start_timeout = _float(_setting(service_start_timeout_s, "UNIAGENT_START_TIMEOUT_S"), "service_start_timeout_s")
        self.service = ServiceConfig(
            url=_setting(service_url, "UNIAGENT_SERVICE_URL"),
            binary=_setting(service_binary, "UNIAGENT_BIN"),
            config=_setting(service_config, "UNIAGENT_CONFIG"),
            run_dir=_setting(service_run_dir, "UNIAGENT_VERL_RUN_DIR"),
            start_timeout_s=start_timeout if start_timeout is not None else 120.0,
        )
        self.timeout_s = _float(_setting(timeout_s, "UNIAGENT_ROLLOUT_TIMEOUT_S"), "timeout_s")
        deadline = _float(_setting(deadline_s, "UNIAGENT_DEADLINE_S"), "deadline_s")
        if deadline is None:
            deadline = self.timeout_s + 30.0 if self.timeout_s is not None else DEFAULT_DEADLINE_S
        self.deadline_s = deadline
        self.bridge_host = _setting(bridge_host, "UNIAGENT_BRIDGE_HOST") or "127.0.0.1"

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        task = task_of_row(kwargs)
        request_id = uuid4().hex
        priority = kwargs.get("priority", 0)
        # verl's LLMServerClient forwards `priority` to vLLM (when non-zero); the bridge hands it
        # to every generate of this rollout.
        generate_kwargs = {"priority": int(priority)} if priority else {}
        sample = kwargs.get("session_id", 0)
        started = time.monotonic()
        bridge = await get_bridge(self.bridge_host)
        with bridge.register(request_id, self.server_manager, generate_kwargs):
            base_url = await ensure_service(self.service)
            record = await client_for(base_url).rollout(
                task=task,
                request_id=request_id,
                sampling_params=plain(dict(sampling_params)),
                bridge_url=bridge.url,
                sample=int(sample) if sample is not None else 0,
                group_size=int(self.rollout_config.n),
                timeout_s=self.timeout_s,
                deadline_s=self.deadline_s,
            )
        logger.debug("rollout %s (%s) done in %.1fs", record.get("id"), request_id, time.monotonic() - started)
        return self.output_of(record, dispatch_step=kwargs.get("global_steps"))

    def output_of(self, record: dict[str, Any], dispatch_step: Any = None) -> AgentLoopOutput:
        """The service's ``success`` record as verl's ``AgentLoopOutput``.

        A rollout that sampled no token (its prompt was over the limits) has no weight version:
        its ``min_global_steps`` / ``max_global_steps`` become ``dispatch_step``, the dataloader
        step that dispatched its prompt (verl's v1 worker passes it as ``global_steps``), because
        verl's v1 trainer builds an ``int`` array of them for its metrics and ``None`` breaks it.
        """
        prompt_ids = list(record["prompt_ids"])
        response_ids = list(record["response_ids"])
        response_mask = list(record["response_mask"])
        logprobs = record.get("response_logprobs")
        response_logprobs = None if logprobs is None else [0.0 if x is None else float(x) for x in logprobs]
        extra = dict(record.get("extra_fields") or {})
        for key in ("min_global_steps", "max_global_steps"):
            if extra.get(key) is None:
                extra[key] = int(dispatch_step) if dispatch_step is not None else None
        extra.setdefault("weight_versions", None)
        extra.setdefault("reward_extra_info", {})
        extra.setdefault("exit_reason", record.get("exit_reason"))
        extra["exit_class"] = record.get("exit_class")
        extra["uniagent_id"] = record.get("id")

        # verl pads prompts to rollout.prompt_length and responses to rollout.response_length and
        # cannot take longer ones; the service's limits should keep within them, but a config
        # that disagrees with verl's must not crash the batch: cut as verl's own loops do.
        prompt_length = int(self.rollout_config.prompt_length)
        response_length = int(self.rollout_config.response_length)
        if len(prompt_ids) > prompt_length:
            logger.warning(
                "rollout %s: prompt of %d tokens > rollout.prompt_length=%d; left-truncating",
                record.get("id"), len(prompt_ids), prompt_length,
            )
            prompt_ids = prompt_ids[-prompt_length:]
            extra["truncated_prompt"] = True
        if len(response_ids) > response_length:
            logger.warning(
                "rollout %s: response of %d tokens > rollout.response_length=%d; cutting",
                record.get("id"), len(response_ids), response_length,
            )
            response_ids = response_ids[:response_length]
            response_mask = response_mask[:response_length]
            if response_logprobs is not None:
                response_logprobs = response_logprobs[:response_length]
            if isinstance(extra.get("weight_versions"), list):
                extra["weight_versions"] = extra["weight_versions"][:response_length]
            extra["truncated_response"] = True

        metrics = dict(record.get("metrics") or {})
        reward = record.get("reward_score")
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=response_mask,
            response_logprobs=response_logprobs,
            reward_score=None if reward is None else float(reward),
            num_turns=int(record.get("num_turns") or 0),
            metrics={
                "generate_sequences": float(metrics.get("generate_sequences") or 0.0),
                "tool_calls": float(metrics.get("tool_calls") or 0.0),
                "compute_score": float(metrics.get("compute_score") or 0.0),
                "num_preempted": int(metrics["num_preempted"]) if metrics.get("num_preempted") is not None else -1,
            },
            extra_fields=extra,
        )

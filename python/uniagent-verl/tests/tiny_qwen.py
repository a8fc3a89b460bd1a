"""A ``server_manager`` whose ``generate`` runs the tiny Qwen2 in ``transformers``.

It stands in for verl's ``LLMServerClient`` in front of vLLM: same call
(``generate(request_id, *, prompt_ids, sampling_params, **kwargs)``), same reading of the
sampling parameters as verl's vLLM server (``max_tokens`` from ``sampling_params``, else a
default; ``stop_token_ids``; ``ignore_eos``; ``logprobs`` truthy → the sampled tokens' log
probabilities; ``temperature`` 0 → greedy; ``top_k`` -1 → off; ``top_p``), and the same answer:
verl's ``TokenOutput`` with ``stop_reason="completed"`` and ``extra_fields={"global_steps": k}``.
Generated tokens include the stop token, as vLLM's token ids do. Log probabilities are those of
the temperature-scaled distribution the token was drawn from (the greedy ones: raw logits).
Sampling uses a ``torch.Generator`` seeded from the manager's seed, the request id and the
prompt, so a given request gives the same tokens whatever the order of concurrent requests, and
the samples of one group (distinct request ids) differ.
"""

from __future__ import annotations

import asyncio
import threading
import zlib
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM
from verl.workers.rollout.replica import TokenOutput

EOS_IDS = (151645, 151643)


class TinyQwenServerManager:
    def __init__(
        self,
        model_dir: Path,
        *,
        seed: int = 0,
        global_steps: int = 3,
        default_max_tokens: int = 16,
        wait_for: int = 0,
        wait_timeout_s: float = 10.0,
    ) -> None:
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        self.model.eval()
        self.seed = seed
        self.global_steps = global_steps
        self.default_max_tokens = default_max_tokens
        self.calls: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._wait_for = wait_for
        self._wait_timeout_s = wait_timeout_s
        self._arrived: asyncio.Event | None = None
        self._lock = threading.Lock()

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kwargs: Any
    ) -> TokenOutput:
        call = {"request_id": request_id, "prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params), "kwargs": kwargs}
        self.calls.append(call)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self._wait_for:
                # Hold every request until `wait_for` of them are in flight at once: only a
                # bridge that serves requests concurrently gets past this.
                if self._arrived is None:
                    self._arrived = asyncio.Event()
                if self.in_flight >= self._wait_for:
                    self._arrived.set()
                await asyncio.wait_for(self._arrived.wait(), self._wait_timeout_s)
            output = await asyncio.to_thread(self._generate, request_id, list(prompt_ids), dict(sampling_params))
        finally:
            self.in_flight -= 1
        call["output"] = output
        return output

    def _generate(self, request_id: str, prompt_ids: list[int], params: dict[str, Any]) -> TokenOutput:
        max_tokens = int(params.pop("max_tokens", self.default_max_tokens))
        if "max_new_tokens" in params:
            raise TypeError("SamplingParams got both max_tokens and max_new_tokens")
        temperature = float(params.get("temperature", 1.0))
        top_k = int(params.get("top_k", -1))
        top_p = float(params.get("top_p", 1.0))
        stop = set(params.get("stop_token_ids") or [])
        if not params.get("ignore_eos", False):
            stop |= set(EOS_IDS)
        want_logprobs = bool(params.get("logprobs", False))
        generator = torch.Generator().manual_seed(self.seed ^ zlib.crc32(f"{request_id}:{prompt_ids}".encode()))
        tokens: list[int] = []
        logprobs: list[float] = []
        with self._lock, torch.no_grad():
            ids = torch.tensor([prompt_ids])
            past = None
            for _ in range(max_tokens):
                out = self.model(input_ids=ids, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                if temperature <= 0:
                    logp = torch.log_softmax(logits, -1)
                    token = int(torch.argmax(logp))
                else:
                    logp = torch.log_softmax(logits / temperature, -1)
                    probs = logp.exp()
                    if top_k > 0:
                        kth = torch.topk(probs, top_k).values[-1]
                        probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
                    if top_p < 1.0:
                        sorted_probs, order = torch.sort(probs, descending=True)
                        keep = torch.cumsum(sorted_probs, 0) - sorted_probs < top_p
                        mask = torch.zeros_like(probs, dtype=torch.bool)
                        mask[order[keep]] = True
                        probs = torch.where(mask, probs, torch.zeros_like(probs))
                    token = int(torch.multinomial(probs / probs.sum(), 1, generator=generator))
                tokens.append(token)
                logprobs.append(float(logp[token]))
                if token in stop:
                    break
                ids = torch.tensor([[token]])
        return TokenOutput(
            token_ids=tokens,
            log_probs=logprobs if want_logprobs else None,
            stop_reason="completed",
            num_preempted=0,
            extra_fields={"global_steps": self.global_steps},
        )

    def sequence_logprobs(self, prompt_ids: list[int], token_ids: list[int], temperature: float = 1.0) -> list[float]:
        """The tokens' log probabilities from one full forward pass (to check the sampled ones)."""
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor([prompt_ids + token_ids])).logits[0].float()
        scale = temperature if temperature > 0 else 1.0
        logp = torch.log_softmax(logits / scale, -1)
        start = len(prompt_ids) - 1
        return [float(logp[start + i, t]) for i, t in enumerate(token_ids)]

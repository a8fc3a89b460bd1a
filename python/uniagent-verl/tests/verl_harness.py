"""verl's own machinery, outside Ray, for the agent-loop tests.

Builds verl 0.9.1's full trainer config (its generated ``ppo_trainer`` YAML with a few
overrides), a real ``AgentLoopWorker`` (the class verl wraps in ``ray.remote``) holding the
given ``server_manager`` as its LLM client, and the batch verl's trainer would hand it: rows
read by verl's ``RLHFDataset`` from a Parquet file, collated by its ``collate_fn``, given
``uid``s and repeated ``n`` times interleaved, as ``RayPPOTrainer.fit`` does. Then
``AgentLoopWorker.generate_sequences`` runs each sample's agent loop (``_run_agent_loop``, which
instantiates the loop from verl's registry), post-processes each output
(``_agent_loop_postprocess``) and the batch (``_postprocess``); the GRPO advantages come from
verl's ``compute_grpo_outcome_advantage``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch
import verl
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, _agent_loop_registry
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

VERL_CONFIG = Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml"


def trainer_config(model_dir: Path, *, n: int, prompt_length: int, response_length: int) -> DictConfig:
    config = OmegaConf.load(VERL_CONFIG)
    overrides = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "model": {"path": str(model_dir)},
                "rollout": {
                    "name": "vllm",
                    "mode": "async",
                    "n": n,
                    "prompt_length": prompt_length,
                    "response_length": response_length,
                    "temperature": 1.0,
                    "top_p": 1.0,
                    "top_k": -1,
                    "calculate_log_probs": True,
                    "agent": {"default_agent_loop": "uniagent", "num_workers": 1},
                },
            },
            "data": {"prompt_key": "prompt", "max_prompt_length": prompt_length, "max_response_length": response_length,
                     "filter_overlong_prompts": False, "return_raw_chat": True},
            "algorithm": {"adv_estimator": "grpo"},
        }
    )
    return OmegaConf.merge(config, overrides)  # type: ignore[return-value]


def register_uniagent(**kwargs: Any) -> None:
    """Put a ``uniagent`` entry with constructor kwargs into verl's registry, as an
    ``agent_loop_config_path`` entry does."""
    _agent_loop_registry["uniagent"] = OmegaConf.create(
        {"name": "uniagent", "_target_": "uniagent_verl.agent_loop.UniagentAgentLoop", **kwargs}
    )


def worker(config: DictConfig, server_manager: Any) -> AgentLoopWorker:
    return AgentLoopWorker(config, server_manager)


def batch_from_parquet(config: DictConfig, parquet: Path, tokenizer: Any, *, rows: int) -> DataProto:
    dataset = RLHFDataset(data_files=[str(parquet)], tokenizer=tokenizer, config=config.data)
    loader = DataLoader(dataset, batch_size=rows, shuffle=False, collate_fn=collate_fn)
    batch = DataProto.from_single_dict(next(iter(loader)))
    batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
    # RayPPOTrainer._get_gen_batch keeps every non-tensor column for the agent loop.
    gen = batch.pop(batch_keys=[], non_tensor_batch_keys=list(batch.non_tensor_batch.keys()))
    gen.meta_info["global_steps"] = 1
    return gen.repeat(repeat_times=config.actor_rollout_ref.rollout.n, interleave=True)


def grpo(output: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
    return compute_grpo_outcome_advantage(
        token_level_rewards=output.batch["rm_scores"],
        response_mask=output.batch["response_mask"],
        index=output.non_tensor_batch["uid"],
    )

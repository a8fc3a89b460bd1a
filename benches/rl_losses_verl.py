"""Baseline for benches/rl_losses.rs: verl 0.9.1's policy losses in PyTorch eager.

Usage: python rl_losses_verl.py B T ITERS THREADS  -> JSON {case: median ms} on stdout.
Same batch construction and the same trainer semantics as the Rust side (bool mask,
global_batch_info for one mini-batch on one rank).
"""

import json
import sys
import time
import warnings

import numpy as np
import torch
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig

warnings.filterwarnings("ignore")


def median_ms(fn, iters):
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return times[iters // 2]


def main():
    b, t, iters, threads = (int(x) for x in sys.argv[1:5])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    mask = (torch.rand(b, t) < 0.8).long()
    old = -torch.rand(b, t) * 3.0
    logp = old + torch.randn(b, t) * 0.3
    scores = (torch.rand(b) < 0.5).float()
    index = np.array([f"p{i // 8}" for i in range(b)], dtype=object)
    rewards = torch.zeros(b, t)
    for i in range(b):
        idx = torch.nonzero(mask[i]).flatten()
        rewards[i, int(idx[-1]) if len(idx) else t - 1] = scores[i]
    adv, _ = core_algos.compute_grpo_outcome_advantage(rewards.clone(), mask, index)
    out = {}
    for mode in ["vanilla", "gspo", "cispo"]:
        fn = core_algos.get_policy_loss_fn(mode)
        for agg in ["token-mean", "seq-mean-token-mean"]:
            config = ActorConfig(
                strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0,
            )
            config.global_batch_info.update(
                dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=b, loss_scale_factor=t
            )

            def step():
                lp = logp.detach().requires_grad_(True)
                loss, _ = fn(old_log_prob=old, log_prob=lp, advantages=adv, response_mask=mask.to(bool),
                             loss_agg_mode=agg, config=config)
                loss.backward()

            out[f"{mode}/{agg}"] = median_ms(step, iters)
    out["grpo advantages"] = median_ms(
        lambda: core_algos.compute_grpo_outcome_advantage(rewards, mask, index), iters
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""Golden rollout-correction numerics computed with verl 0.9.1's own functions.

Run with the .venv-torch python (scripts/setup/30-torch.sh):

    python rollout_corr_golden.py OUT.json

For random batches (several seeds; an all-zero mask row; ratios far beyond every threshold) and
every correction of verl's `rollout_corr` family used here — token TIS, sequence TIS, token
IcePop, sequence MIS (`seq_sum_k1` rejection + sequence TIS), Geo-RS (`seq_mean_k1`), the k2/k3
and max filters, batch normalisation — it writes the inputs and what
`compute_rollout_correction_and_rejection_mask` returns (IS weights, modified mask, metrics),
plus verl's vanilla PPO loss with those weights and that mask (token-mean, the trainer's global
batch info from the modified mask): value and gradient w.r.t. `log_prob`.
"""

import json
import sys

import numpy as np
import torch
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_rejection_mask
from verl.workers.config import ActorConfig

CORRECTIONS = {
    "token_tis": dict(rollout_is="token", rollout_is_threshold=2.0),
    "seq_tis": dict(rollout_is="sequence", rollout_is_threshold=2.0),
    "token_icepop": dict(rollout_is="token", rollout_is_threshold="0.5_2.0"),
    "token_tis_batch_norm": dict(rollout_is="token", rollout_is_threshold=2.0, rollout_is_batch_normalize=True),
    "seq_tis_batch_norm": dict(rollout_is="sequence", rollout_is_threshold=3.0, rollout_is_batch_normalize=True),
    "seq_mis": dict(rollout_is="sequence", rollout_is_threshold=2.0, rollout_rs="seq_sum_k1", rollout_rs_threshold="0.5_2.0"),
    "geo_rs": dict(rollout_is=None, rollout_rs="seq_mean_k1", rollout_rs_threshold="0.8_1.25"),
    "geo_rs_token_tis": dict(rollout_is="token", rollout_is_threshold=2.0, rollout_rs="seq_mean_k1", rollout_rs_threshold=1.3),
    "token_k1_k2": dict(rollout_is=None, rollout_rs="token_k1,token_k2", rollout_rs_threshold="0.6_1.5,0.2"),
    "token_k3": dict(rollout_is=None, rollout_rs="token_k3", rollout_rs_threshold=0.1),
    "seq_sum_k2_k3": dict(rollout_is=None, rollout_rs="seq_sum_k2,seq_sum_k3", rollout_rs_threshold="0.8,0.8"),
    "seq_mean_k2_k3": dict(rollout_is=None, rollout_rs="seq_mean_k2,seq_mean_k3", rollout_rs_threshold="0.3,0.3"),
    "seq_max_k2_k3": dict(rollout_is=None, rollout_rs="seq_max_k2,seq_max_k3", rollout_rs_threshold="0.3,0.3"),
}
METRICS = {
    "is_mean": "rollout_corr/rollout_is_mean",
    "is_max": "rollout_corr/rollout_is_max",
    "is_fraction_high": "rollout_corr/rollout_is_ratio_fraction_high",
    "is_fraction_low": "rollout_corr/rollout_is_ratio_fraction_low",
    "rs_masked_fraction": "rollout_corr/rollout_rs_masked_fraction",
    "rs_seq_masked_fraction": "rollout_corr/rollout_rs_seq_masked_fraction",
}


def rows(t):
    return t.detach().to(torch.float32).tolist()


def make_case(seed, spread):
    rng = np.random.default_rng(seed)
    b, t = 6, 9
    mask = (rng.random((b, t)) < 0.8).astype(np.int64)
    mask[:, 0] = 1
    mask[2, :] = 0  # a row with nothing to train on
    rollout = -rng.random((b, t)) * 3.0 - 0.05
    old = rollout + rng.normal(0.0, spread, (b, t))
    old[4, 1] = rollout[4, 1] + 30.0  # beyond the ±20 safety bound
    old = np.minimum(old, -1e-3)
    logp = old + rng.normal(0.0, 0.2, (b, t))
    adv = rng.normal(0.0, 1.0, (b, 1)).repeat(t, axis=1)
    return {
        "seed": seed,
        "response_mask": mask.tolist(),
        "rollout_log_prob": rollout.astype(np.float32).tolist(),
        "old_log_prob": old.astype(np.float32).tolist(),
        "log_prob": logp.astype(np.float32).tolist(),
        "advantages": adv.astype(np.float32).tolist(),
    }


def compute(case, spec):
    mask = torch.tensor(case["response_mask"], dtype=torch.int64)
    old = torch.tensor(case["old_log_prob"], dtype=torch.float32)
    rollout = torch.tensor(case["rollout_log_prob"], dtype=torch.float32)
    weights, new_mask, metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old, rollout_log_prob=rollout, response_mask=mask, **spec
    )
    w = weights.batch["rollout_is_weights"] if weights is not None else None
    logp = torch.tensor(case["log_prob"], dtype=torch.float32, requires_grad=True)
    adv = torch.tensor(case["advantages"], dtype=torch.float32)
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1)
    config.global_batch_info.update(
        dp_size=1,
        batch_num_tokens=int(new_mask.sum()),
        global_batch_size=new_mask.shape[0],
        loss_scale_factor=new_mask.shape[1],
    )
    fn = core_algos.get_policy_loss_fn("vanilla")
    loss, _ = fn(
        old_log_prob=old,
        log_prob=logp,
        advantages=adv,
        response_mask=new_mask.to(bool),
        loss_agg_mode="token-mean",
        config=config,
        rollout_is_weights=w,
    )
    loss.backward()
    return {
        "weights": rows(w) if w is not None else None,
        "mask": new_mask.tolist(),
        "metrics": {k: metrics[v] for k, v in METRICS.items() if v in metrics},
        # Everything rejected: verl's loss divides by zero tokens (NaN); nothing to compare.
        "loss": loss.item() if torch.isfinite(loss) else None,
        "grad_log_prob": rows(logp.grad) if torch.isfinite(loss) else None,
    }


def main():
    import verl

    cases = []
    for seed, spread in [(1, 0.3), (2, 0.8), (3, 0.05), (4, 1.5)]:
        case = make_case(seed, spread)
        case["results"] = {name: compute(case, spec) for name, spec in CORRECTIONS.items()}
        cases.append(case)
    with open(sys.argv[1], "w") as f:
        json.dump({"verl": verl.__version__, "cases": cases}, f)


if __name__ == "__main__":
    main()

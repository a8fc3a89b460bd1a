"""Golden RL numerics computed with verl 0.9.1's own functions.

Run with the .venv-torch python (scripts/setup/30-torch.sh):

    python golden.py OUT.json

Writes deterministic batches (several seeds plus edge cases: singleton groups, identical scores,
all-zero mask rows, extreme ratios hitting every clip) and, for each, what verl computes:
the `rl_numerics` report (advantages, policy losses with gradients w.r.t. log_prob, KL values)
plus REINFORCE++, GAE, every KL estimator with its gradient, entropy with its gradient, and the
policy losses under verl's standalone (local) aggregation.

Semantics follow verl's trainer for one mini-batch on one rank: the policy losses get a boolean
mask (as `workers/utils/losses.py::ppo_loss` passes it) and `global_batch_info = {dp_size: 1,
batch_num_tokens: sum(mask), global_batch_size: B, loss_scale_factor: T}`; advantages get the
int64 mask and the `uid` strings as `index`. Scores sit at the last mask-1 position of a row (the
last column when the row has none) in `token_level_rewards`.
"""

import json
import sys

import numpy as np
import torch
from verl.trainer.ppo import core_algos
from verl.utils import torch_functional as verl_F
from verl.workers.config import ActorConfig

AGG_MODES = ["token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean"]
LOSS_MODES = ["vanilla", "gspo", "cispo"]
KL_NAMES = ["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k1+", "abs+", "k2+", "k3+"]
GAMMA = 0.99
LAM = 0.95


def rows(t):
    return t.detach().to(torch.float32).tolist()


def token_level_rewards(scores, mask):
    b, t = mask.shape
    out = torch.zeros(b, t, dtype=torch.float32)
    for i in range(b):
        idx = torch.nonzero(mask[i]).flatten()
        pos = int(idx[-1]) if len(idx) else t - 1
        out[i, pos] = scores[i]
    return out


def actor_config(cfg, mask, local):
    c = ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=cfg["clip_ratio_low"],
        clip_ratio_high=cfg["clip_ratio_high"],
        clip_ratio_c=cfg["clip_ratio_c"],
    )
    if not local:
        c.global_batch_info.update(
            dp_size=1,
            batch_num_tokens=int(mask.sum()),
            global_batch_size=mask.shape[0],
            loss_scale_factor=mask.shape[1],
        )
    return c


def policy_losses(case, adv, local):
    mask = torch.tensor(case["response_mask"], dtype=torch.int64)
    old = torch.tensor(case["old_log_prob"], dtype=torch.float32)
    out = {}
    for mode in LOSS_MODES:
        fn = core_algos.get_policy_loss_fn(mode)
        out[mode] = {}
        for agg in AGG_MODES:
            logp = torch.tensor(case["log_prob"], dtype=torch.float32, requires_grad=True)
            config = actor_config(case["config"], mask, local)
            loss, metrics = fn(
                old_log_prob=old,
                log_prob=logp,
                advantages=adv,
                response_mask=mask.to(bool),
                loss_agg_mode=agg,
                config=config,
            )
            loss.backward()
            grad = logp.grad if logp.grad is not None else torch.zeros_like(logp)
            out[mode][agg] = {"loss": loss.item(), "grad_log_prob": rows(grad), "metrics": metrics}
    return out


def compute(case):
    mask = torch.tensor(case["response_mask"], dtype=torch.int64)
    scores = torch.tensor(case["scores"], dtype=torch.float32)
    index = np.array(case["uid"], dtype=object)
    rewards = token_level_rewards(scores, mask)
    logp = torch.tensor(case["log_prob"], dtype=torch.float32)
    ref = torch.tensor(case["ref_log_prob"], dtype=torch.float32)
    values = torch.tensor(case["values"], dtype=torch.float32)

    grpo, _ = core_algos.compute_grpo_outcome_advantage(rewards.clone(), mask, index, norm_adv_by_std_in_grpo=True)
    grpo_no_std, _ = core_algos.compute_grpo_outcome_advantage(
        rewards.clone(), mask, index, norm_adv_by_std_in_grpo=False
    )
    rloo, _ = core_algos.compute_rloo_outcome_advantage(rewards.clone(), mask, index)
    rfpp_b, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards.clone(), mask, index)
    algo = core_algos.AlgoConfig(gamma=GAMMA, lam=LAM)
    rfpp_adv, rfpp_ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards.clone(), mask, config=algo)
    gae_adv, gae_ret = core_algos.compute_gae_advantage_return(rewards.clone(), values, mask, GAMMA, LAM)

    kl = {}
    for name in ["k1", "abs", "k2", "k3"]:
        kl[name] = rows(core_algos.kl_penalty(logp, ref, name))
    kl_grads = {}
    for name in KL_NAMES:
        lp = logp.clone().requires_grad_(True)
        value = core_algos.kl_penalty(lp, ref, name)
        value.sum().backward()
        kl_grads[name] = {"value": rows(value), "grad": rows(lp.grad)}

    logits = torch.tensor(case["logits"], dtype=torch.float32, requires_grad=True)
    entropy = verl_F.entropy_from_logits(logits)
    weights = torch.tensor(case["entropy_weights"], dtype=torch.float32)
    (entropy * weights).sum().backward()

    report = {
        "advantages": {
            "grpo": rows(grpo),
            "grpo_no_std": rows(grpo_no_std),
            "rloo": rows(rloo),
            "reinforce_plus_plus_baseline": rows(rfpp_b),
        },
        "policy_loss": policy_losses(case, grpo, local=False),
        "kl": kl,
    }
    return {
        "report": report,
        "policy_loss_local": policy_losses(case, grpo, local=True),
        "reinforce_plus_plus": {"advantages": rows(rfpp_adv), "returns": rows(rfpp_ret)},
        "gae": {"advantages": rows(gae_adv), "returns": rows(gae_ret)},
        "kl_grads": kl_grads,
        "entropy": {"value": rows(entropy), "grad_logits": logits.grad.tolist()},
    }


def make_case(name, seed, *, rows_per_group, width, clip, mask_style="random", score_style="binary", spread=1.0,
              extreme=False):
    g = torch.Generator().manual_seed(seed)
    b = sum(rows_per_group)
    uid = [f"prompt-{k}" for k, n in enumerate(rows_per_group) for _ in range(n)]
    # interleave the groups a little: verl groups by value, not by position
    order = torch.randperm(b, generator=g).tolist()
    uid = [uid[i] for i in order]
    if score_style == "binary":
        scores = torch.randint(0, 2, (b,), generator=g).float()
    elif score_style == "identical_inexact":
        # float32 group means off by an ulp: verl's GRPO gives small non-zero advantages
        scores = torch.tensor([0.4621566 + k for k, n in enumerate(rows_per_group) for _ in range(n)])
        scores = scores[order]
    elif score_style == "identical":
        scores = torch.tensor([float(k % 3) * 0.5 for k, n in enumerate(rows_per_group) for _ in range(n)])
        scores = scores[order]
    else:
        scores = torch.randn(b, generator=g)
    mask = torch.zeros(b, width, dtype=torch.int64)
    for i in range(b):
        length = int(torch.randint(1, width + 1, (1,), generator=g))
        mask[i, :length] = 1
        if mask_style == "random" and length > 2:
            # an observation span inside the response
            start = int(torch.randint(1, length - 1, (1,), generator=g))
            mask[i, start : start + 1] = 0
    if mask_style == "zero_rows":
        mask[0] = 0
        mask[-1] = 0
    old = -torch.rand(b, width, generator=g) * 3.0 - 0.05
    noise = torch.randn(b, width, generator=g) * spread * torch.rand(b, 1, generator=g)
    logp = old + noise
    if extreme:
        # ratios far outside every clip, including the ±20 clamp and GSPO's max 10
        logp[0] = old[0] + 25.0
        logp[1] = old[1] - 25.0
        logp[2] = old[2] + 12.0
    ref = old + torch.randn(b, width, generator=g) * 0.5
    values = torch.randn(b, width, generator=g)
    vocab = 7
    logits = torch.randn(b, width, vocab, generator=g) * 3.0
    entropy_weights = torch.randn(b, width, generator=g)
    return {
        "name": name,
        "uid": uid,
        "scores": scores.tolist(),
        "response_mask": mask.tolist(),
        "old_log_prob": old.tolist(),
        "log_prob": logp.tolist(),
        "ref_log_prob": ref.tolist(),
        "values": values.tolist(),
        "logits": logits.tolist(),
        "entropy_weights": entropy_weights.tolist(),
        "config": clip,
    }


PPO = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0}
GSPO = {"clip_ratio_low": 3e-4, "clip_ratio_high": 4e-4, "clip_ratio_c": 10.0}


def cases():
    out = []
    for seed in range(5):
        g = torch.Generator().manual_seed(1000 + seed)
        groups = [int(x) for x in torch.randint(1, 5, (4,), generator=g)]
        out.append(
            make_case(
                f"random-{seed}",
                seed,
                rows_per_group=groups,
                width=5 + seed,
                clip=PPO if seed % 2 == 0 else GSPO,
                score_style="binary" if seed < 3 else "normal",
            )
        )
    out.append(make_case("singletons", 11, rows_per_group=[1] * 6, width=6, clip=PPO, score_style="normal"))
    out.append(make_case("identical-scores", 12, rows_per_group=[3, 3, 2], width=6, clip=PPO, score_style="identical"))
    out.append(
        make_case("identical-inexact", 17, rows_per_group=[3, 3], width=5, clip=PPO, score_style="identical_inexact")
    )
    out.append(make_case("zero-mask-rows", 13, rows_per_group=[3, 3, 1, 1], width=6, clip=PPO, mask_style="zero_rows"))
    out.append(make_case("extreme-ratios", 14, rows_per_group=[4, 4], width=7, clip=PPO, extreme=True, spread=3.0))
    out.append(make_case("extreme-ratios-gspo", 15, rows_per_group=[4, 4], width=7, clip=GSPO, extreme=True))
    out.append(make_case("one-group-contiguous-mask", 16, rows_per_group=[8], width=8, clip=PPO, mask_style="prefix"))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: golden.py OUT.json")
    torch.use_deterministic_algorithms(True)
    result = {
        "generator": "crates/uniagent-train/tests/verl/golden.py",
        "verl": __import__("verl").__version__,
        "torch": torch.__version__,
        "gamma": GAMMA,
        "lam": LAM,
        "cases": [],
    }
    for case in cases():
        case["verl"] = compute(case)
        result["cases"].append(case)
    with open(sys.argv[1], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()

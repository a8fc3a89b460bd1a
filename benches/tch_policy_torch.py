"""PyTorch eager baseline of benches/tch_policy.rs: the same greedy generation and SFT step on the
same checkpoint, with transformers' Qwen2ForCausalLM (eager attention). Prints tokens/s as JSON."""
import json
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def median(fn, iters):
    fn()
    return statistics.median(fn() for _ in range(iters))


def main() -> None:
    args = json.loads(sys.argv[1])
    torch.set_num_threads(args["threads"])
    prompts, new, iters = args["prompts"], args["new"], args["iters"]
    model = AutoModelForCausalLM.from_pretrained(
        args["model_dir"], dtype=torch.float32, attn_implementation="eager"
    )

    model.eval()
    gen_ids = torch.tensor(prompts[: args["gen_batch"]])
    mask = torch.ones_like(gen_ids)

    def generate():
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                input_ids=gen_ids, attention_mask=mask, do_sample=False, max_new_tokens=new,
                min_new_tokens=new, pad_token_id=0,
            )
        tokens = (out.shape[1] - gen_ids.shape[1]) * out.shape[0]
        return tokens / (time.perf_counter() - start)

    gen = median(generate, iters)

    model.train()
    rows = prompts[: args["train_batch"]]
    ids = torch.tensor([p + (list(reversed(p)) * (new // len(p) + 1))[:new] for p in rows])
    labels_mask = torch.zeros_like(ids, dtype=torch.float32)
    labels_mask[:, len(rows[0]):] = 1.0
    decay = [p for n, p in model.named_parameters() if not (n.endswith("norm.weight") or n.endswith(".bias"))]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("norm.weight") or n.endswith(".bias")]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-4
    )

    def step():
        start = time.perf_counter()
        opt.zero_grad()
        logits = model(ids, use_cache=False).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        m = labels_mask[:, 1:]
        loss = -(logp * m).sum() / m.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return ids.numel() / (time.perf_counter() - start)

    train = median(step, iters)
    print(json.dumps({"gen_tokens_per_s": gen, "train_tokens_per_s": train}))


if __name__ == "__main__":
    main()

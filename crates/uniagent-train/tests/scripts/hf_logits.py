"""Loads a checkpoint folder with transformers' from_pretrained and prints, as JSON, per position
of the given ids: logsumexp, argmax and the logits of the probe ids.

usage: hf_logits.py MODEL_DIR IDS_JSON PROBE_IDS_JSON
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main() -> None:
    model_dir, ids, probes = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    assert type(model).__name__ == "Qwen2ForCausalLM", type(model).__name__
    with torch.no_grad():
        logits = model(torch.tensor([ids]), use_cache=False).logits[0].float()
    out = {
        "logsumexp": torch.logsumexp(logits, -1).tolist(),
        "argmax": logits.argmax(-1).tolist(),
        "probes": logits[:, probes].tolist(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()

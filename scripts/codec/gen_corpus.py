#!/usr/bin/env python3
"""Golden files for the codec's chat-template corpus test (crates/uniagent-core/tests/codec_corpus.rs).

For every template in tests/data/codec_corpus/templates/ this renders seeded random
conversations with Hugging Face `transformers`' `apply_chat_template` (the reference: run it
with the `.venv-codec` of scripts/setup/10-codec.sh) and writes, per template, a JSON file in
tests/data/codec_corpus/golden/ with

  - the expected render (or that the template raises), and
  - the expected incremental token stream of docs/cli.md's `codec` section: the prompt, each
    assistant message as its sampled span (the ids after the prompt's render with the generation
    prompt, through the first eos id, or the rest of that turn's render when it has none), the
    messages in between; `append_only` says whether every later render's ids extended the ids
    built so far. When it does, `ids` is the final render's ids; in every case `sampled` holds
    the sampled spans in order (the mask-1 tokens).

The tokenizer is one shared byte-level BPE (Qwen2.5's tokenizer.json, Apache-2.0, already in the
test fixtures) with each template's special tokens added, since most model tokenizers may not be
redistributed here; which tokens are added is stored in the golden file so Rust does the same.

Usage: $UNIAGENT_CODEC_VENV/bin/python scripts/codec/gen_corpus.py [--conversations N]
"""

import argparse
import hashlib
import json
import random
import re
import sys
from pathlib import Path

from datetime import datetime

import transformers.utils.chat_template_utils as chat_template_utils
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

# Templates that print today's date (Llama 3.x, Hunyuan) render at this fixed local time, which
# the Rust test gives the codec too (`ChatTemplate::with_fixed_clock`).
CLOCK = "2024-07-26T10:30:00"


class _FixedClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return cls.fromisoformat(CLOCK)


chat_template_utils.datetime = _FixedClock

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "crates/uniagent-core"
CORPUS = CORE / "tests/data/codec_corpus"
BASE_TOKENIZER = CORE / "tests/fixtures/tokenizers/qwen2.5/tokenizer.json"

# (name prefix or substring, family, bos_token, eos_token) - the special tokens of the model
# repositories these templates come from (tokenizer_config.json's bos_token / eos_token).
FAMILIES = [
    ("ByteDance-Seed-OSS", "seed-oss", "<seed:bos>", "<seed:eos>"),
    ("CohereForAI", "command-r", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("Mistral-Small", "mistral", "<s>", "</s>"),
    ("Devstral", "mistral", "<s>", "</s>"),
    ("Mistral-Nemo", "mistral", "<s>", "</s>"),
    ("vllm-mistral", "mistral", "<s>", "</s>"),
    ("cz-mistral", "mistral", "<s>", "</s>"),
    ("Nemotron", "nemotron", None, "<SPECIAL_12>"),
    ("Hermes", "hermes", "<|begin_of_text|>", "<|im_end|>"),
    ("vllm-hermes", "hermes", None, "<|im_end|>"),
    ("QwQ", "qwen", None, "<|im_end|>"),
    ("Qwen", "qwen", None, "<|im_end|>"),
    ("qwen", "qwen", None, "<|im_end|>"),
    ("chatml", "chatml", None, "<|im_end|>"),
    ("deepseek", "deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("DeepSeek", "deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("firefunction", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("functionary", "functionary", "<|begin_of_text|>", "<|eot_id|>"),
    ("Llama-3", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama-3", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama3", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("toolace", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("xlam_llama", "llama3", "<|begin_of_text|>", "<|eot_id|>"),
    ("llama4", "llama4", "<|begin_of_text|>", "<|eot|>"),
    ("gemma", "gemma", "<bos>", "<eos>"),
    ("granite_20b", "granite", None, "<|endoftext|>"),
    ("granite", "granite", None, "<|end_of_text|>"),
    ("Phi-3", "phi", "<s>", "<|endoftext|>"),
    ("phi-3", "phi", "<s>", "<|endoftext|>"),
    ("phi4", "phi", None, "<|endoftext|>"),
    ("Kimi", "kimi", "[BOS]", "<|im_end|>"),
    ("gpt-oss", "gpt-oss", "<|startoftext|>", "<|return|>"),
    ("hunyuan", "hunyuan", "<|startoftext|>", "<|eos|>"),
    ("internlm2", "internlm", "<s>", "</s>"),
    ("minimax", "minimax", "<beginning_of_sentence>", "<end_of_sentence>"),
    ("openchat", "openchat", "<s>", "<|end_of_turn|>"),
    ("falcon", "falcon", None, "<|endoftext|>"),
    ("rwkv", "rwkv", "<s>", "</s>"),
    ("xlam_qwen", "qwen", None, "<|im_end|>"),
    ("", "classic", "<s>", "</s>"),  # alpaca, vicuna, zephyr, llama-2, baichuan, chatglm, ...
]

# Literal markers a template emits that its model's tokenizer has as special tokens.
MARKER = re.compile(
    r"<\|[A-Za-z0-9_.\-]+\|>|<[a-z_]+_of_[a-z_]+>|\[/?[A-Z_]{2,}\]|<｜[^｜]+｜>|<seed:[a-z_]+>"
    r"|<SPECIAL_\d+>|<begin_of_document>"
)

KWARG_NAMES = ["enable_thinking", "thinking"]

TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
     "parameters": {"type": "object", "properties": {
         "command": {"type": "string", "description": "The command."},
         "timeout": {"type": "number", "description": "Seconds."}},
         "required": ["command"]}}},
    {"type": "function", "function": {"name": "edit", "description": "Edit a file.",
     "parameters": {"type": "object", "properties": {
         "path": {"type": "string"},
         "edits": {"type": "array", "items": {"type": "object", "properties": {
             "old": {"type": "string"}, "new": {"type": "string"}}}}},
         "required": ["path", "edits"]}}},
]

WORDS = ["Hello", "the file", "ls -la", "é", "中文", "😀", "<b>&amp;</b>", "'q'", '"dq"', "\\",
         "  x", "1e-05", "ok.", "\n", "\n\n", "42", "done", "error: not found", "{\"a\": 1}"]


def family_of(name):
    for key, family, bos, eos in FAMILIES:
        if key in name:
            return family, bos, eos
    raise AssertionError(name)


def text(rng, empty_ok=True):
    n = rng.randint(0 if empty_ok else 1, 6)
    return "".join(rng.choice(WORDS) + rng.choice(["", " "]) for _ in range(n))


def arguments(rng):
    args = {"command": text(rng, False), "timeout": rng.choice([1, 2.5, 1e-05, 10.0, None]),
            "nested": {"list": [1, "two", {"three": [3.0, True]}], "flag": rng.random() < 0.5}}
    if rng.random() < 0.2:
        return json.dumps(args, ensure_ascii=False)
    return args


def content(rng):
    r = rng.random()
    if r < 0.15:
        return None
    if r < 0.3:
        return ""
    return text(rng, False)


def conversation(rng):
    """A random conversation; sometimes out of the usual role order (to exercise errors)."""
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text(rng, False)})
    call_no = 0
    plain = rng.random() < 0.4  # no tool calls: what templates without tool support accept
    for _ in range(rng.randint(1, 6)):
        msgs.append({"role": "user", "content": text(rng, False)})
        if rng.random() < 0.05:
            msgs.append({"role": "user", "content": text(rng)})
        while True:
            a = {"role": "assistant", "content": content(rng)}
            if rng.random() < 0.3:
                a["reasoning_content"] = text(rng, False)
            calls = []
            if not plain and rng.random() < 0.4:
                for _ in range(rng.choice([1, 1, 2, 3])):
                    # Mistral's templates insist on 9 alphanumeric characters.
                    call_id = f"call{call_no:05d}" if rng.random() < 0.7 else f"call_{call_no}"
                    calls.append({"id": call_id, "type": "function",
                                  "function": {"name": rng.choice(["bash", "edit"]),
                                               "arguments": arguments(rng)}})
                    call_no += 1
                a["tool_calls"] = calls
            if a["content"] is None and not calls:
                a["content"] = text(rng, False)
            msgs.append(a)
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                             "content": text(rng)})
            if not calls or rng.random() < 0.3:
                break
    cut = rng.randint(1, len(msgs))
    while cut < len(msgs) and msgs[cut - 1]["role"] == "system":
        cut += 1
    return msgs[:cut]


def make_tokenizer(specials, bos, eos):
    tok = Tokenizer.from_file(str(BASE_TOKENIZER))
    tok.add_special_tokens(specials)
    kw = {"eos_token": eos}
    if bos is not None:
        kw["bos_token"] = bos
    return PreTrainedTokenizerFast(tokenizer_object=tok, **kw)


class Renderer:
    def __init__(self, tok, source, tools, kwargs):
        self.tok, self.source, self.tools, self.kwargs = tok, source, tools, kwargs

    def text(self, msgs, agp):
        return self.tok.apply_chat_template(msgs, tools=self.tools or None, add_generation_prompt=agp,
                                            tokenize=False, chat_template=self.source, **self.kwargs)

    def ids(self, msgs, agp):
        return self.tok.encode(self.text(msgs, agp), add_special_tokens=False)


def incremental(r, msgs, agp, eos_id):
    """The incremental semantics of docs/cli.md (`codec`), computed from full renders only."""
    first = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), None)
    if first is None:
        return {"ids": r.ids(msgs, agp), "sampled": [], "span_starts": [], "append_only": True}
    if first == 0:
        return None
    built = r.ids(msgs[:first], True)
    append_only = True
    spans, starts = [], []
    i = first
    while i < len(msgs):
        if msgs[i]["role"] == "assistant":
            if i > first and msgs[i - 1]["role"] == "assistant":
                prompt = r.ids(msgs[:i], True)
                append_only &= prompt[:len(built)] == built
                built = prompt
            prompt_text = r.text(msgs[:i], True)
            full_text = r.text(msgs[:i + 1], False)
            prompt, full = r.ids(msgs[:i], True), r.ids(msgs[:i + 1], False)
            if full[:len(prompt)] == prompt:
                span = full[len(prompt):]
            elif full_text.startswith(prompt_text):
                span = r.tok.encode(full_text[len(prompt_text):], add_special_tokens=False)
                append_only = False
            else:
                common = 0
                while common < min(len(prompt), len(full)) and prompt[common] == full[common]:
                    common += 1
                span = full[common:]
                append_only = False
            if eos_id in span:
                span = span[:span.index(eos_id) + 1]
            spans.append(span)
            starts.append(len(built))
            built = built + span
            append_only &= full[:len(built)] == built
            i += 1
            continue
        end = next((k for k in range(i, len(msgs)) if msgs[k]["role"] == "assistant"), len(msgs))
        gen = end < len(msgs) or agp
        full = r.ids(msgs[:end], gen)
        append_only &= full[:len(built)] == built
        built = full
        i = end
    if msgs[-1]["role"] == "assistant":
        full = r.ids(msgs, agp)
        append_only &= full[:len(built)] == built
        built = full
    out = {"sampled": spans, "append_only": bool(append_only)}
    if append_only:
        out["ids"] = built
        out["span_starts"] = starts
    return out


def golden_for(name, source, n, seed):
    family, bos, eos = family_of(name)
    specials = []
    for t in [bos, eos] + MARKER.findall(source):
        if t is not None and t not in specials:
            specials.append(t)
    tok = make_tokenizer(specials, bos, eos)
    eos_id = tok.convert_tokens_to_ids(eos)
    rng = random.Random(f"{seed}:{name}")
    used_kwargs = [k for k in KWARG_NAMES if re.search(r"\b" + k + r"\b", source)]
    cases = []
    for _ in range(n):
        msgs = conversation(rng)
        has_calls = any("tool_calls" in m for m in msgs)
        tools = TOOLS if rng.random() < (0.8 if has_calls else 0.3) else []
        kwargs = {k: rng.random() < 0.5 for k in used_kwargs if rng.random() < 0.7}
        agp = msgs[-1]["role"] != "assistant"
        if rng.random() < 0.2:
            agp = not agp
        r = Renderer(tok, source, tools, kwargs)
        case = {"messages": msgs, "tools": tools, "add_generation_prompt": agp, "template_kwargs": kwargs}
        try:
            case["render"] = r.text(msgs, agp)
        except Exception as e:  # the template raised: the codec must fail too
            case["render"] = None
            case["render_error"] = f"{type(e).__name__}: {e}"[:200]
        try:
            case["incremental"] = incremental(r, msgs, agp, eos_id)
        except Exception as e:
            case["incremental"] = None
            case["incremental_error"] = f"{type(e).__name__}: {e}"[:200]
        cases.append(case)
    return {"template": name, "family": family, "bos_token": bos, "eos_token": eos, "clock": CLOCK,
            "special_tokens": specials,
            "template_sha256": hashlib.sha256(source.encode()).hexdigest(), "cases": cases}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=12)
    ap.add_argument("--seed", default="uniagent-codec-corpus-1")
    ap.add_argument("--only", default=None, help="regenerate one template")
    args = ap.parse_args()
    out = CORPUS / "golden"
    out.mkdir(exist_ok=True)
    for path in sorted((CORPUS / "templates").glob("*.jinja")):
        name = path.stem
        if args.only and name != args.only:
            continue
        g = golden_for(name, path.read_text(), args.conversations, args.seed)
        (out / f"{name}.json").write_text(json.dumps(g, ensure_ascii=False, separators=(",", ":")) + "\n")
        bad = sum(c["render"] is None for c in g["cases"])
        print(f"{name}: {len(g['cases'])} conversations, {bad} raise", file=sys.stderr)


if __name__ == "__main__":
    main()

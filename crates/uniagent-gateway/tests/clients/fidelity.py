"""Drives a running gateway with the official `openai` and `anthropic` SDKs at temperature 1 on
a random-weight model, so that answers are arbitrary tokens: turns cut by `max_tokens`, leading
and trailing whitespace, characters split across tokens, special tokens as text. Each
conversation echoes the answers exactly as the SDK returned them; in the `*-rewrite` sessions
the harness then rewrites an earlier assistant turn and asks again.

Usage: python fidelity.py BASE_URL. Prints one JSON object: per session, the answers' texts in
order, the conversation of the last request with its answer appended (OpenAI message shape),
and the trajectories `end` returned. The `*-long` sessions stream one answer of 1,500 tokens. The Rust test checks the tokens against transformers.
"""

import json
import sys
import urllib.request

import anthropic
import openai

BASE = sys.argv[1]
USERS = ["  hi there  ", "\n日本語 🙂 ok\n", "tab\there ", "   "]
MAX_TOKENS = 6
REWRITTEN = " rewritten ✓ \n"
LONG_TOKENS = 1500


def end(session):
    req = urllib.request.Request(f"{BASE}/sessions/{session}/end", data=b"", method="POST")
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def openai_session(session, stream, rewrite, max_tokens=MAX_TOKENS, turns=3):
    client = openai.OpenAI(base_url=f"{BASE}/sessions/{session}/v1", api_key="unused",
                           max_retries=0)
    msgs, texts = [{"role": "system", "content": " Be brief. "}], []

    def ask(seed):
        if not stream:
            r = client.chat.completions.create(model="m", messages=msgs, max_tokens=max_tokens,
                                               temperature=1.0, seed=seed)
            return r.choices[0].message.content or ""
        parts = []
        for chunk in client.chat.completions.create(model="m", messages=msgs,
                                                    max_tokens=max_tokens, temperature=1.0,
                                                    seed=seed, stream=True):
            for ch in chunk.choices:
                if ch.delta.content:
                    parts.append(ch.delta.content)
        return "".join(parts)

    for i, user in enumerate(USERS[:turns]):
        msgs.append({"role": "user", "content": user})
        text = ask(100 + i)
        texts.append(text)
        msgs.append({"role": "assistant", "content": text})
    if rewrite:
        msgs[2] = {"role": "assistant", "content": REWRITTEN}
        msgs.append({"role": "user", "content": USERS[3]})
        text = ask(200)
        texts.append(text)
        msgs.append({"role": "assistant", "content": text})
    return {"texts": texts, "conversation": msgs, "trajectories": end(session)}


def anthropic_session(session, stream, rewrite, max_tokens=MAX_TOKENS, turns=3):
    client = anthropic.Anthropic(base_url=f"{BASE}/sessions/{session}", api_key="unused",
                                 max_retries=0)
    system, msgs, texts = " Be brief. ", [], []

    def text_of(message):
        return "".join(b.text for b in message.content if b.type == "text")

    def ask(seed):
        # This SDK version has no sampling keywords; the wire fields are still honoured.
        extra = {"temperature": 1.0}
        if not stream:
            m = client.messages.create(model="m", max_tokens=max_tokens, system=system,
                                       messages=msgs, extra_body=extra)
            return text_of(m)
        with client.messages.stream(model="m", max_tokens=max_tokens, system=system,
                                    messages=msgs, extra_body=extra) as s:
            streamed = "".join(s.text_stream)
            assert streamed == text_of(s.get_final_message()), streamed
            return streamed

    for i, user in enumerate(USERS[:turns]):
        msgs.append({"role": "user", "content": user})
        text = ask(300 + i)
        texts.append(text)
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
    if rewrite:
        msgs[1] = {"role": "assistant", "content": [{"type": "text", "text": REWRITTEN}]}
        msgs.append({"role": "user", "content": USERS[3]})
        text = ask(400)
        texts.append(text)
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
    # The same conversation in OpenAI's message shape, for the template.
    conversation = [{"role": "system", "content": system}] + [
        {"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
         else "".join(b["text"] for b in m["content"])}
        for m in msgs]
    return {"texts": texts, "conversation": conversation, "trajectories": end(session)}


report = {}
for api, drive in (("oa", openai_session), ("an", anthropic_session)):
    for kind, stream, rewrite in (("plain", False, False), ("stream", True, False),
                                  ("rewrite", False, True)):
        name = f"{api}-{kind}"
        report[name] = drive(name, stream, rewrite)
    # Long streamed answers: byte-level tokens that split a character are sampled, and the
    # stream must not cut the character's bytes apart.
    report[f"{api}-long"] = drive(f"{api}-long", True, False, max_tokens=LONG_TOKENS, turns=1)
print(json.dumps(report, ensure_ascii=False))

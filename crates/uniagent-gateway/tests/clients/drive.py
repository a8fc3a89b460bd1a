"""Drives a running gateway with the official `openai` and `anthropic` SDKs, the way harnesses
use them: multi-turn conversations echoing the SDK's own message objects, streaming and not,
tool declarations, harness-made tool calls and results, and an edited assistant turn.

Usage: python drive.py BASE_URL. Prints one JSON object: per session, the answers' texts in
order and the trajectories `end` returned. Exits non-zero (an assertion) on any SDK-level
inconsistency; the Rust test checks the tokens.
"""

import json
import sys
import urllib.request

import anthropic
import openai

BASE = sys.argv[1]


def end(session):
    req = urllib.request.Request(f"{BASE}/sessions/{session}/end", data=b"", method="POST")
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def post(path, body):
    req = urllib.request.Request(
        f"{BASE}{path}", data=json.dumps(body).encode(), method="POST",
        headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)


report = {}

# --- OpenAI: multi-turn with tools, logprobs, a harness-made tool exchange, an edit --------
TOOLS = [{"type": "function", "function": {
    "name": "ls", "description": "List files.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
oc = openai.OpenAI(base_url=f"{BASE}/sessions/oa/v1", api_key="unused", max_retries=0)
assert [m.id for m in oc.models.list()] == ["uniagent-policy"]
msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
texts = []


def ask(**extra):
    r = oc.chat.completions.create(model="uniagent-policy", messages=msgs, max_tokens=8,
                                   temperature=0, tools=TOOLS, **extra)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls"), choice.finish_reason
    return r, choice


r1, c1 = ask(logprobs=True)
assert len(c1.logprobs.content) == r1.usage.completion_tokens
assert all(t.logprob <= 0 for t in c1.logprobs.content)
texts.append(c1.message.content)
msgs.append(c1.message.model_dump(exclude_none=True))
msgs.append({"role": "user", "content": "list /"})
r2, c2 = ask()
texts.append(c2.message.content)
msgs.append(c2.message.model_dump(exclude_none=True))
# The harness makes a tool call itself and feeds its result.
msgs.append({"role": "user", "content": "use the tool"})
msgs.append({"role": "assistant", "content": None, "tool_calls": [
    {"id": "h1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\": \"/\"}"}}]})
msgs.append({"role": "tool", "tool_call_id": "h1", "content": "a.txt"})
r3, c3 = ask()
texts.append(c3.message.content)
msgs.append(c3.message.model_dump(exclude_none=True))
# The harness edits the last answer and goes on: a rollback, not a new chain.
msgs[-1] = {"role": "assistant", "content": "edited answer"}
msgs.append({"role": "user", "content": "go on"})
r4, c4 = ask()
texts.append(c4.message.content)
assert r4.model_extra["uniagent"]["chain"] == 0, r4.model_extra
post("/sessions/oa/reward", {"score": 1.0, "details": {"by": "drive.py"}})
report["oa"] = {"texts": texts, "trajectories": end("oa")}

# --- OpenAI streaming: the same first turn as above, streamed -------------------------------
os_ = openai.OpenAI(base_url=f"{BASE}/sessions/os/v1", api_key="unused", max_retries=0)
stream = os_.chat.completions.create(
    model="uniagent-policy", messages=msgs[:2], max_tokens=8, temperature=0, tools=TOOLS,
    stream=True, stream_options={"include_usage": True})
parts, finish, usage = [], None, None
for chunk in stream:
    if chunk.usage:
        usage = chunk.usage
    for ch in chunk.choices:
        if ch.delta.content:
            parts.append(ch.delta.content)
        if ch.finish_reason:
            finish = ch.finish_reason
assert "".join(parts) == (texts[0] or ""), (parts, texts[0])
assert finish == c1.finish_reason
assert usage.completion_tokens == r1.usage.completion_tokens
report["os"] = {"texts": ["".join(parts)], "trajectories": end("os")}

# --- Anthropic: system blocks, multi-turn, harness tool_use/tool_result, streaming ----------
ac = anthropic.Anthropic(base_url=f"{BASE}/sessions/an", api_key="unused", max_retries=0)
# This SDK version has no sampling keywords; the wire field is still honoured.
GREEDY = {"temperature": 0}
ATOOLS = [{"name": "ls", "description": "List files.",
           "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
system = [{"type": "text", "text": "You are terse."}]
amsgs = [{"role": "user", "content": "hi"}]
atexts = []


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


m1 = ac.messages.create(model="uniagent-policy", max_tokens=8, system=system,
                        extra_body=GREEDY,
                        tools=ATOOLS, messages=amsgs)
assert m1.stop_reason in ("end_turn", "max_tokens", "tool_use", "stop_sequence")
atexts.append(text_of(m1))
amsgs.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m1.content]})
amsgs.append({"role": "user", "content": [{"type": "text", "text": "use the tool"}]})
m2 = ac.messages.create(model="uniagent-policy", max_tokens=8, system=system,
                        extra_body=GREEDY,
                        tools=ATOOLS, messages=amsgs)
atexts.append(text_of(m2))
amsgs.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m2.content]})
amsgs.append({"role": "user", "content": "call it"})
amsgs.append({"role": "assistant", "content": [
    {"type": "tool_use", "id": "toolu_h1", "name": "ls", "input": {"path": "/"}}]})
amsgs.append({"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": "toolu_h1", "content": "a.txt"}]})
with ac.messages.stream(model="uniagent-policy", max_tokens=8, system=system,
                        extra_body=GREEDY,
                        tools=ATOOLS, messages=amsgs) as s:
    streamed = "".join(s.text_stream)
    m3 = s.get_final_message()
assert streamed == text_of(m3), (streamed, m3)
atexts.append(text_of(m3))
report["an"] = {"texts": atexts, "trajectories": end("an")}

print(json.dumps(report))

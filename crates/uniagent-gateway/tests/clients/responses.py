"""Drives a running gateway through the Responses API with the official `openai` SDK:
`client.responses.create` and `client.responses.stream`, a function call answered through
`previous_response_id`, a third turn, and a `previous_response_id` the gateway never made.

Usage: python responses.py BASE_URL. Prints one JSON object: per session what the SDK parsed
(output items, `output_text`, streamed event types) and the trajectories `end` returned.
"""

import json
import sys
import urllib.request

import openai

BASE = sys.argv[1]
TOOLS = [{"type": "function", "name": "ls", "description": "List a directory.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                         "required": ["path"]}}]
INSTRUCTIONS = "Be brief."


def end(session):
    req = urllib.request.Request(f"{BASE}/sessions/{session}/end", data=b"", method="POST")
    with urllib.request.urlopen(req) as r:
        return json.load(r)


def client(session):
    return openai.OpenAI(base_url=f"{BASE}/sessions/{session}/v1", api_key="unused",
                         max_retries=0)


def summary(response):
    return {"id": response.id, "status": response.status, "output_text": response.output_text,
            "output": [item.to_dict() for item in response.output],
            "usage": response.usage.to_dict() if response.usage else None}


def call_of(response):
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1, response.output
    return calls[0]


def created_session(session):
    c = client(session)
    first = c.responses.create(model="m", instructions=INSTRUCTIONS, input="what is in /?",
                               tools=TOOLS)
    call = call_of(first)
    second = c.responses.create(model="m", instructions=INSTRUCTIONS, tools=TOOLS,
                                previous_response_id=first.id,
                                input=[{"type": "function_call_output", "call_id": call.call_id,
                                        "output": "a.txt b.txt"}])
    third = c.responses.create(model="m", instructions=INSTRUCTIONS, tools=TOOLS,
                               previous_response_id=second.id,
                               input=[{"role": "user", "content": "thanks"}])
    return {"responses": [summary(r) for r in (first, second, third)],
            "arguments": json.loads(call.arguments), "trajectories": end(session)}


def streamed_session(session):
    c = client(session)
    kinds, responses = [], []
    previous, call = None, None
    for turn in range(2):
        kwargs = {"model": "m", "instructions": INSTRUCTIONS, "tools": TOOLS}
        if previous is None:
            kwargs["input"] = "what is in /?"
        else:
            kwargs["previous_response_id"] = previous.id
            kwargs["input"] = [{"type": "function_call_output", "call_id": call.call_id,
                                "output": "a.txt b.txt"}]
        with c.responses.stream(**kwargs) as stream:
            turn_kinds = [event.type for event in stream]
            final = stream.get_final_response()
        kinds.append(turn_kinds)
        responses.append(summary(final))
        previous = final
        if turn == 0:
            call = call_of(final)
    return {"responses": responses, "kinds": kinds, "trajectories": end(session)}


def missing_previous(session):
    try:
        client(session).responses.create(model="m", input="x", previous_response_id="resp-none")
    except openai.BadRequestError as e:
        return {"status": e.status_code, "code": e.code}
    return {"status": 200}


print(json.dumps({"created": created_session("rs"), "streamed": streamed_session("rst"),
                  "missing": missing_previous("rerr")}))

"""A small agent harness written against the official `openai` SDK, as users write them.

It knows nothing of uniagent: it reads its task from $UNIAGENT_TASK, builds its own
environment (the task's files under $UNIAGENT_WORKDIR/data), talks to whatever
$OPENAI_BASE_URL serves, runs the bash commands the model asks for, and writes the answer
the model gives with `finish` to $UNIAGENT_WORKDIR/answer.txt. grade.py scores it.
examples/configs/harness-train.yaml trains it with `uniagent train`.
"""

import json
import os
import subprocess

import openai

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "execute_bash",
            "description": "Run a bash command and see its output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "finish",
            "description": "Give your final answer.",
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "The answer."}},
                "required": ["answer"],
            },
        },
    },
]
MAX_TURNS = int(os.environ.get("HARNESS_MAX_TURNS", "3"))


def main():
    with open(os.environ["UNIAGENT_TASK"]) as f:
        task = json.load(f)
    work = os.environ["UNIAGENT_WORKDIR"]
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    for name, code in task["metadata"]["files"]:
        with open(os.path.join(work, "data", f"{name}.txt"), "w") as f:
            f.write(f"{code}\n")

    client = openai.OpenAI(max_retries=0, timeout=120)
    messages = list(task["messages"])
    for _ in range(MAX_TURNS):
        reply = client.chat.completions.create(
            model=os.environ["UNIAGENT_MODEL"],
            messages=messages,
            tools=TOOLS,
            max_tokens=48,
            temperature=1.0,
        )
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return
        for call in message.tool_calls:
            try:
                args = json.loads(call.function.arguments)
            except json.JSONDecodeError as e:
                output = f"bad arguments: {e}"
            else:
                if call.function.name == "finish":
                    with open(os.path.join(work, "answer.txt"), "w") as f:
                        f.write(str(args.get("answer", "")))
                    return
                if call.function.name == "execute_bash":
                    run = subprocess.run(
                        ["bash", "-c", str(args.get("command", ""))],
                        cwd=work,
                        capture_output=True,
                        text=True,
                        timeout=10,
                    )
                    output = run.stdout + run.stderr
                else:
                    output = f"unknown tool {call.function.name}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})


if __name__ == "__main__":
    main()

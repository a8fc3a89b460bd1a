"""verl RL dataset Parquet from uniagent tasks, and the ``uniagent-verl-dataset`` command.

One row per task, in the columns verl's ``RLHFDataset`` reads:

- ``prompt``: the task's chat messages (``data.prompt_key``, default ``prompt``); verl hands
  them to the agent loop as ``raw_prompt`` and filters overlong prompts with them.
- ``data_source``: ``uniagent/<environment>``.
- ``agent_name``: ``"uniagent"``, so the row runs in ``UniagentAgentLoop`` whatever
  ``rollout.agent.default_agent_loop`` is.
- ``reward_model``: ``{"style": "rule", "ground_truth": ""}`` (the reward is uniagent's).
- ``extra_info``: ``{"index": i, "uniagent_task": <the task as JSON text>}``. ``index`` is what
  verl's dataset copies to the row's ``index`` (groups, traces).

The task travels as JSON text, not as a nested Parquet struct: Arrow gives all rows of a struct
column one schema, so a task whose ``metadata`` lacks a key another task has would come back with
that key set to null, and the service would get a task that is not the one it listed. The agent
loop accepts both forms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .client import UniagentClient

AGENT_NAME = "uniagent"


def _message(message: Any) -> dict[str, str]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ValueError(f"a task message must be an object with a `role`: {message!r}")
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        content = json.dumps(content)
    return {"role": message["role"], "content": content}


def rows_of_tasks(tasks: Iterable[dict[str, Any]], environment: str) -> list[dict[str, Any]]:
    """The dataset rows of ``tasks`` (see the module doc)."""
    rows = []
    for i, task in enumerate(tasks):
        if not isinstance(task, dict) or not isinstance(task.get("messages"), list):
            raise ValueError(f"task {i} has no `messages` list: {str(task)[:200]}")
        rows.append(
            {
                "prompt": [_message(m) for m in task["messages"]],
                "data_source": f"uniagent/{environment}",
                "agent_name": AGENT_NAME,
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": {"index": i, "uniagent_task": json.dumps(task, sort_keys=True)},
            }
        )
    return rows


SCHEMA = pa.schema(
    [
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("data_source", pa.string()),
        ("agent_name", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        ("extra_info", pa.struct([("index", pa.int64()), ("uniagent_task", pa.string())])),
    ]
)


def write_parquet(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    table = pa.Table.from_pylist(list(rows), schema=SCHEMA)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))


def read_tasks_jsonl(path: str | Path) -> list[dict[str, Any]]:
    tasks = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    tasks.append(json.loads(line))
                except ValueError as e:
                    raise ValueError(f"{path}:{n}: not JSON: {e}") from e
    return tasks


async def fetch_tasks(url: str) -> tuple[list[dict[str, Any]], str]:
    """The service's tasks and environment name (``GET /v1/tasks``, ``GET /v1/info``)."""
    async with UniagentClient(url) as client:
        tasks = await client.tasks()
        info = await client.info()
    environment = info.get("environment")
    return tasks, environment if isinstance(environment, str) else "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="uniagent-verl-dataset",
        description="Write a verl RL dataset (Parquet) of uniagent tasks, from a running "
        "`uniagent serve` (its GET /v1/tasks) or from a tasks.jsonl file.",
    )
    parser.add_argument("source", help="http://HOST:PORT of `uniagent serve`, or a tasks .jsonl file")
    parser.add_argument("out", help="the Parquet file to write")
    parser.add_argument("--environment", help="the environment name for data_source (a .jsonl has none; default: the file's stem)")
    parser.add_argument("--skip", type=int, default=0, help="leave out the first N tasks")
    parser.add_argument("--limit", type=int, help="keep at most N tasks (after --skip)")
    args = parser.parse_args(argv)

    if args.source.startswith(("http://", "https://")):
        tasks, environment = asyncio.run(fetch_tasks(args.source))
    else:
        tasks = read_tasks_jsonl(args.source)
        environment = Path(args.source).stem
    environment = args.environment or environment
    tasks = tasks[args.skip :]
    if args.limit is not None:
        tasks = tasks[: args.limit]
    if not tasks:
        print(f"uniagent-verl-dataset: {args.source} has no tasks", file=sys.stderr)
        return 1
    write_parquet(rows_of_tasks(tasks, environment), args.out)
    print(f"wrote {len(tasks)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

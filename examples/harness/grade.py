"""Scores file_agent.py's session: 1 when answer.txt holds the asked file's code."""

import json
import os

with open(os.environ["UNIAGENT_TASK"]) as f:
    task = json.load(f)
path = os.path.join(os.environ["UNIAGENT_WORKDIR"], "answer.txt")
answer = open(path).read().strip() if os.path.exists(path) else None
solved = answer is not None and answer == task["metadata"]["answer"]
print(json.dumps({"score": 1.0 if solved else 0.0, "success": solved,
                  "details": {"answer": answer}}))

"""Loads Harbor task directories with Harbor's own `Task` class (the `harbor` package's task
model) and prints, per task, what Harbor read: one JSON object keyed by directory.

Usage: python load_tasks.py HARBOR_SRC TASK_DIR... (HARBOR_SRC: the unpacked wheel). Exits 1,
naming the directory, on the first task Harbor refuses.
"""

import json
import sys
import typing
from pathlib import Path

import typing_extensions

# Harbor needs Python >= 3.12 for `typing.override` alone (in its task model).
if not hasattr(typing, "override"):
    typing.override = typing_extensions.override

sys.path.insert(0, sys.argv[1])
from harbor.models.task.task import Task  # noqa: E402

out = {}
for d in sys.argv[2:]:
    try:
        task = Task(Path(d))
    except Exception as e:  # report which task, then fail
        print(f"{d}: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    c = task.config
    out[d] = {
        "name": task.name,
        "instruction": task.instruction,
        "agent_timeout_sec": c.agent.timeout_sec,
        "verifier_timeout_sec": c.verifier.timeout_sec,
        "build_timeout_sec": c.environment.build_timeout_sec,
        "cpus": c.environment.cpus,
        "memory_mb": c.environment.memory_mb,
        "docker_image": c.environment.docker_image,
        "workdir": c.environment.workdir,
        "metadata": c.metadata,
    }
print(json.dumps(out))

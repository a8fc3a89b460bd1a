"""Runs mini-swe-agent, unmodified, against a gateway session on one swe-mini task in Docker.

Usage: python mini_swe.py BASE_URL SESSION IMAGE TASK_JSON OUT_DIR

The agent is mini-swe-agent's own `DefaultAgent` + `LitellmModel` + `DockerEnvironment`
with the package's shipped SWE-bench config (`config/benchmarks/swebench.yaml`); only what
any user sets is set: the model name and base URL (the gateway session), the image, a step
limit, cost tracking off (a local model has no price). The container is removed at the end.

Writes OUT_DIR/result.json (stdout is the harness's own console): `exit_status`, `submission`, the conversation as the harness last
sent it (`messages`, roles system/user/assistant/tool, without mini-swe-agent's `extra`
bookkeeping or its final `exit` pseudo-message) and the tool list it declares (`tools`).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

# No network here: litellm must use its bundled price map instead of fetching one.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

import yaml  # noqa: E402
from minisweagent import package_dir  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.environments.docker import DockerEnvironment  # noqa: E402
from minisweagent.models.litellm_model import LitellmModel  # noqa: E402
from minisweagent.models.utils.actions_toolcall import BASH_TOOL  # noqa: E402

base, session, image, task_path, out_dir = sys.argv[1:6]
task = json.loads(Path(task_path).read_text())
config = yaml.safe_load((Path(package_dir) / "config/benchmarks/swebench.yaml").read_text())

model_cfg = dict(config["model"])
model_cfg["model_name"] = "openai/uniagent-policy"
model_cfg["model_kwargs"] = {
    **model_cfg.get("model_kwargs", {}),
    "api_base": f"{base}/sessions/{session}/v1",
    "api_key": "unused",
    "temperature": 0.0,
}
model_cfg["cost_tracking"] = "ignore_errors"
env_cfg = {k: v for k, v in config["environment"].items() if k != "environment_class"}
env_cfg["image"] = image
agent_cfg = dict(config["agent"])
agent_cfg["step_limit"] = 12
agent_cfg["output_path"] = Path(out_dir) / "trajectory.json"

env = DockerEnvironment(**env_cfg)
try:
    agent = DefaultAgent(LitellmModel(**model_cfg), env, **agent_cfg)
    result = agent.run(task["problem_statement"])
finally:
    # DockerEnvironment.cleanup stops the container in the background; remove it for sure.
    subprocess.run(["docker", "rm", "-f", env.container_id], capture_output=True)

messages = [
    {k: v for k, v in m.items() if k != "extra"} for m in agent.messages if m["role"] != "exit"
]
(Path(out_dir) / "result.json").write_text(json.dumps(
    {
        "exit_status": result.get("exit_status"),
        "submission": result.get("submission"),
        "container": env.container_id,
        "messages": messages,
        "tools": [BASH_TOOL],
    }
))

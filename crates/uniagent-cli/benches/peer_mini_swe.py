"""mini-swe-agent's side of the `peer_trajectories` bench.

Runs the given rollouts through mini-swe-agent's own SWE-bench batch path
(`run.benchmarks.swebench.process_instance`: its `DefaultAgent`, its `DockerEnvironment` with the
settings of its `swebench.yaml`, one trajectory file per instance and a preds file), with its
`DeterministicModel` replaying the scripted actions, `concurrency` at a time in a thread pool as
its batch runner does. Then it waits until every container it started is gone (its cleanup
stops them in the background).

Usage: python peer_mini_swe.py <rollouts.json> <out dir> <concurrency>
where rollouts.json is a list of {"instance_id", "image", "problem_statement", "actions": [...]}.
Prints one JSON object: wall times, CPU seconds (this process and its waited-for children),
peak RSS of this process, and how the trajectories ended.
"""

import concurrent.futures
import json
import logging
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml
from minisweagent.config import builtin_config_dir
from minisweagent.models.test_models import make_output
from minisweagent.run.benchmarks.swebench import process_instance
from minisweagent.run.benchmarks.utils.batch_progress import RunBatchProgressManager

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"


def config_for(rollout: dict, base: dict) -> dict:
    """swebench.yaml with the deterministic model replaying this rollout's actions."""
    outputs = [make_output(f"Step {i}.", [{"command": c}]) for i, c in enumerate(rollout["actions"])]
    outputs.append(make_output("Done.", [{"command": SUBMIT}]))
    config = json.loads(json.dumps(base))
    config["model"] = {
        **config.get("model", {}),
        "model_class": "deterministic",
        "model_name": "deterministic",
        "outputs": outputs,
    }
    config["model"].pop("model_kwargs", None)
    config["agent"]["step_limit"] = len(outputs) + 1
    config["agent"]["cost_limit"] = 0
    return config


def containers_left() -> int:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "name=minisweagent-"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return len(out.stdout.split())


def main() -> None:
    rollouts = json.loads(Path(sys.argv[1]).read_text())
    out_dir = Path(sys.argv[2])
    concurrency = int(sys.argv[3])
    logging.getLogger("minisweagent").setLevel(logging.WARNING)
    base = yaml.safe_load((builtin_config_dir / "benchmarks" / "swebench.yaml").read_text())
    progress = RunBatchProgressManager(len(rollouts))
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = []
        for i, rollout in enumerate(rollouts):
            instance = {
                "instance_id": f"{rollout['instance_id']}.{i}",
                "image_name": rollout["image"],
                "problem_statement": rollout["problem_statement"],
            }
            futures.append(pool.submit(process_instance, instance, out_dir, config_for(rollout, base), progress))
        for future in futures:
            future.result()
    done_s = time.monotonic() - started
    deadline = time.monotonic() + 300
    while containers_left() and time.monotonic() < deadline:
        time.sleep(0.2)
    clean_s = time.monotonic() - started
    endings = Counter()
    submissions = {}
    for path in out_dir.glob("*/*.traj.json"):
        info = json.loads(path.read_text())["info"]
        endings[info.get("exit_status") or "?"] += 1
        submissions[path.parent.name] = info.get("submission") or ""
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "done_s": done_s,
                "clean_s": clean_s,
                "containers_left": containers_left(),
                "cpu_self_s": me.ru_utime + me.ru_stime,
                "cpu_children_s": children.ru_utime + children.ru_stime,
                "peak_rss_self_kib": me.ru_maxrss,
                "endings": endings,
                "submissions": submissions,
            }
        )
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The swe-mini tasks in R2E-Gym's layout and images (datasets/swe-mini-r2e), built locally.

    python3 scripts/swe-mini/r2e.py tasks    # writes datasets/swe-mini-r2e/tasks.jsonl
    python3 scripts/swe-mini/r2e.py check    # tasks.jsonl is what the sources give
    python3 scripts/swe-mini/r2e.py images   # one image per task, FROM its swe-mini image

R2E-Gym's convention, as its Docker runtime expects it: the repository at /testbed at the
commit before the fix (here the swe-mini base commit), the hidden tests at /r2e_tests (here:
the project's tests after the swe-mini test patch), and /testbed/run_tests.sh (untracked) that
runs them from /testbed through a `r2e_tests` link (here with the vendored runner, which prints
pytest's `-rA` summary; R2E-Gym's images use `.venv/bin/python -m pytest -rA r2e_tests`).

Rows: `docker_image, repo_name, commit_hash, parsed_commit_content, problem_statement,
expected_output_json` as R2E-Gym has them, plus the gold `patch`. `expected_output_json` is not
written by hand: it is R2E-Gym's map (test name without its file → status) of running the
hidden tests after the gold patch, and the build fails unless the map differs before it.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build  # noqa: E402  (the swe-mini builder: repositories, patches, runner)

DATASET = os.path.join(build.ROOT, "datasets", "swe-mini-r2e")
TASKS = os.path.join(DATASET, "tasks.jsonl")
IMAGE_REPO = "uniagent-swe-mini-r2e"
RUN_TESTS = "python3 /opt/swe-mini/runtests.py r2e_tests\n"
LABEL = "dev.uniagent.swe-mini-r2e"


def r2e_map(repo):
    """Runs the hidden tests as run_tests.sh does and reads them as R2E-Gym does."""
    out = subprocess.run(
        [sys.executable, build.RUNNER, "r2e_tests"], cwd=repo, capture_output=True, text=True,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
    )
    status = {}
    summary = out.stdout.split("short test summary info", 1)[-1]
    for line in summary.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR"):
            node = rest.split(" - ")[0] if word != "PASSED" else rest
            name = ".".join(node.split("::")[1:])
            if name in status:
                raise SystemExit(f"{repo}: two hidden tests are both named {name!r}")
            status[name] = word
    return status


def hidden_tests(project, work):
    """The repository at the base commit, the hidden tests dir and the fix commit's hash."""
    repo = os.path.join(work, project)
    base_commit = build.make_repo(project, repo)
    patch = build.gold_patch(project)
    test_patch = build.diff_of(repo, os.path.join(build.PROJECTS, project, "tests"))
    build.apply(repo, test_patch)
    hidden = os.path.join(work, project + "-r2e_tests")
    shutil.copytree(os.path.join(repo, "tests"), hidden)
    build.git(repo, "reset", "-q", "--hard", "HEAD")
    build.git(repo, "clean", "-q", "-fdx")
    return repo, base_commit, patch, test_patch, hidden


def build_task(task, work):
    project = task["repo"].split("/", 1)[1]
    repo, base_commit, patch, test_patch, hidden = hidden_tests(project, work)
    if base_commit != task["base_commit"]:
        raise SystemExit(f"{project}: built {base_commit}, swe-mini says {task['base_commit']}")
    os.symlink(hidden, os.path.join(repo, "r2e_tests"))
    before = r2e_map(repo)
    build.apply(repo, patch)
    after = r2e_map(repo)
    if before == after:
        raise SystemExit(f"{project}: the gold patch does not change the hidden tests' results")
    # The fix commit (R2E-Gym's commit_hash): gold patch and test patch, fixed author and date.
    os.remove(os.path.join(repo, "r2e_tests"))
    build.apply(repo, test_patch)
    build.git(repo, "add", "-A")
    build.git(repo, "commit", "-q", "-m", f"{project}: fix", date="2024-01-03T00:00:00Z")
    new_commit = build.git(repo, "rev-parse", "HEAD").strip()
    return {
        "docker_image": f"{IMAGE_REPO}:{project}-1",
        "repo_name": project,
        "commit_hash": new_commit,
        "parsed_commit_content": json.dumps(
            {"old_commit_hash": base_commit, "new_commit_hash": new_commit}, sort_keys=True),
        "problem_statement": task["problem_statement"],
        "expected_output_json": json.dumps(after, sort_keys=True),
        "patch": patch,
    }


def swe_mini_tasks():
    with open(build.TASKS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def all_tasks(work):
    return [build_task(t, work) for t in swe_mini_tasks()]


def write_tasks():
    with tempfile.TemporaryDirectory() as work:
        build.write_jsonl(all_tasks(work), TASKS)


def check_tasks():
    with tempfile.TemporaryDirectory() as work:
        build.check_jsonl(all_tasks(work), TASKS, "python3 scripts/swe-mini/r2e.py tasks")


def image_id(tag):
    out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def tree_hash(h, root):
    for path, dirs, names in os.walk(root):
        dirs.sort()
        for n in sorted(names):
            full = os.path.join(path, n)
            h.update(os.path.relpath(full, root).encode())
            with open(full, "rb") as f:
                h.update(f.read())


def build_images():
    with tempfile.TemporaryDirectory() as work:
        for task in swe_mini_tasks():
            project = task["repo"].split("/", 1)[1]
            base = f"{build.IMAGE_REPO}:{task['instance_id']}"
            base_id = image_id(base)
            if base_id is None:
                raise SystemExit(f"{base} is missing: run scripts/setup/50-swe-mini-images.sh")
            _repo, _base, _patch, _test_patch, hidden = hidden_tests(project, work)
            h = hashlib.sha256(base_id.encode() + RUN_TESTS.encode())
            tree_hash(h, hidden)
            recipe = h.hexdigest()[:16]
            tag = f"{IMAGE_REPO}:{project}-1"
            out = subprocess.run(
                ["docker", "image", "inspect", "-f", f'{{{{index .Config.Labels "{LABEL}"}}}}', tag],
                capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip() == recipe:
                print(f"{tag} is up to date")
                continue
            ctx = os.path.join(work, "ctx-" + project)
            os.makedirs(ctx)
            shutil.copytree(hidden, os.path.join(ctx, "r2e_tests"))
            with open(os.path.join(ctx, "run_tests.sh"), "w") as f:
                f.write(RUN_TESTS)
            build.docker_build(ctx, tag,
                               f"FROM {base}\n"
                               "COPY r2e_tests /r2e_tests\n"
                               "COPY run_tests.sh /testbed/run_tests.sh\n"
                               f"LABEL {LABEL}={recipe}\n")


if __name__ == "__main__":
    build.main(write_tasks, check_tasks, build_images)

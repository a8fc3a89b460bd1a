#!/usr/bin/env python3
"""Builds the swe-mini dataset (SWE-bench layout) and its Docker images, locally.

    python3 scripts/swe-mini/build.py tasks    # writes datasets/swe-mini/tasks.jsonl
    python3 scripts/swe-mini/build.py images   # builds one image per task (no registry)
    python3 scripts/swe-mini/build.py check    # tasks.jsonl is what the sources give

Each project under datasets/swe-mini/projects/<name>/ has ``base/`` (the repository at the
base commit: the package, then its tests, as two commits), ``fix.patch`` (the gold ``patch``,
a unified diff against the base commit), ``tests/`` (the new tests: the ``test_patch``) and ``problem.md``. Commits
use a fixed author and date, so the base commit hash is the same on every machine.
FAIL_TO_PASS and PASS_TO_PASS are not written by hand: they come from running the tests with
the vendored runner before and after the gold patch, and the build fails unless every
FAIL_TO_PASS test fails before it and every test passes after it.

Images: ``uniagent-swe-mini:<instance_id>``, FROM the sandbox base image that
scripts/setup/40-docker-image.sh builds (``uniagent-sandbox-base:latest``: Debian, python3,
git), with the repository at /testbed and the runner at /opt/swe-mini/runtests.py.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATASET = os.path.join(ROOT, "datasets", "swe-mini")
PROJECTS = os.path.join(DATASET, "projects")
RUNNER = os.path.join(DATASET, "runner", "runtests.py")
TASKS = os.path.join(DATASET, "tasks.jsonl")
IMAGE_REPO = "uniagent-swe-mini"
BASE_IMAGE = os.environ.get("SWE_MINI_BASE_IMAGE", "uniagent-sandbox-base:latest")
TEST_CMD = "python3 /opt/swe-mini/runtests.py tests"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "swe-mini",
    "GIT_AUTHOR_EMAIL": "swe-mini@uniagent.invalid",
    "GIT_COMMITTER_NAME": "swe-mini",
    "GIT_COMMITTER_EMAIL": "swe-mini@uniagent.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo, *args, date="2024-01-01T00:00:00Z"):
    env = dict(os.environ, **GIT_ENV, GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    out = subprocess.run(
        ["git", "-c", "core.autocrlf=false", "-c", "init.defaultBranch=main", *args],
        cwd=repo, env=env, check=True, capture_output=True, text=True,
    )
    return out.stdout


def copy_tree(src, dst, only=None):
    for root, _dirs, names in os.walk(src):
        rel = os.path.relpath(root, src)
        if only is not None and not (rel == "." or rel.split(os.sep)[0] in only):
            continue
        for n in sorted(names):
            if n.endswith(".pyc"):
                continue
            s = os.path.join(root, n)
            if only is not None and rel == "." and n not in only:
                continue
            d = os.path.join(dst, rel, n)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            shutil.copyfile(s, d)


def make_repo(project, repo):
    """The repository at the base commit: commit 1 the package, commit 2 its tests."""
    base = os.path.join(PROJECTS, project, "base")
    os.makedirs(repo)
    git(repo, "init", "-q")
    packages = [n for n in os.listdir(base) if n != "tests"]
    copy_tree(base, repo, only=set(packages))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{project}: initial version", date="2024-01-01T00:00:00Z")
    copy_tree(base, repo, only={"tests"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{project}: tests", date="2024-01-02T00:00:00Z")
    return git(repo, "rev-parse", "HEAD").strip()


def diff_of(repo, overlay):
    copy_tree(overlay, repo)
    git(repo, "add", "-A")
    patch = git(repo, "diff", "--cached", "--no-color", "HEAD")
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "clean", "-q", "-fdx")
    return patch


def gold_patch(project):
    """The project's gold patch (``fix.patch``), checked to apply to the base commit later."""
    with open(os.path.join(PROJECTS, project, "fix.patch"), encoding="utf-8") as f:
        return f.read()


def apply(repo, patch):
    subprocess.run(["git", "apply", "-"], cwd=repo, input=patch, text=True, check=True)


def run_tests(repo):
    out = subprocess.run(
        [sys.executable, RUNNER, "tests"], cwd=repo, capture_output=True, text=True,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
    )
    status = {}
    for line in out.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR"):
            status[rest.split(" - ")[0]] = word
    return status


def build_task(project, work):
    repo = os.path.join(work, project)
    base_commit = make_repo(project, repo)
    patch = gold_patch(project)
    test_patch = diff_of(repo, os.path.join(PROJECTS, project, "tests"))
    apply(repo, test_patch)
    before = run_tests(repo)
    apply(repo, patch)
    after = run_tests(repo)
    git(repo, "reset", "-q", "--hard", "HEAD")
    git(repo, "clean", "-q", "-fdx")
    bad = sorted(t for t, s in after.items() if s != "PASSED")
    if bad or not after:
        raise SystemExit(f"{project}: tests fail with the gold patch: {bad}")
    fail_to_pass = sorted(t for t in after if before.get(t) != "PASSED")
    pass_to_pass = sorted(t for t in after if before.get(t) == "PASSED")
    if not fail_to_pass:
        raise SystemExit(f"{project}: no test fails before the gold patch")
    with open(os.path.join(PROJECTS, project, "problem.md"), encoding="utf-8") as f:
        problem = f.read()
    return {
        "instance_id": f"swe-mini__{project}-1",
        "repo": f"swe-mini/{project}",
        "base_commit": base_commit,
        "problem_statement": problem,
        "patch": patch,
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(fail_to_pass),
        "PASS_TO_PASS": json.dumps(pass_to_pass),
        "version": "0.1",
        "environment_setup_commit": base_commit,
        "created_at": "2024-01-02T00:00:00Z",
        "hints_text": "",
        "test_cmd": TEST_CMD,
    }


def all_tasks(work):
    return [build_task(p, work) for p in sorted(os.listdir(PROJECTS))]


def write_jsonl(tasks, path):
    """Writes `tasks` as sorted-key JSON lines to `path`."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps(t, sort_keys=True) + "\n")
    print(f"wrote {len(tasks)} tasks to {os.path.relpath(path, ROOT)}")


def check_jsonl(tasks, path, command):
    """Fails unless `path` holds exactly `tasks`; `command` regenerates it."""
    with open(path, encoding="utf-8") as f:
        stored = [json.loads(line) for line in f if line.strip()]
    if stored != tasks:
        raise SystemExit(f"{os.path.basename(path)} is stale: run `{command}`")
    print(f"{os.path.basename(path)} matches the sources ({len(tasks)} tasks)")


def write_tasks():
    with tempfile.TemporaryDirectory() as work:
        write_jsonl(all_tasks(work), TASKS)


def check_tasks():
    with tempfile.TemporaryDirectory() as work:
        check_jsonl(all_tasks(work), TASKS, "python3 scripts/swe-mini/build.py tasks")


def recipe_hash():
    """Hash of everything an image is built from (sources, runner, tasks, base image id)."""
    import hashlib

    h = hashlib.sha256()
    base_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", BASE_IMAGE],
                             capture_output=True, text=True)
    if base_id.returncode != 0:
        raise SystemExit(f"base image {BASE_IMAGE} is missing: run scripts/setup/40-docker-image.sh")
    h.update(base_id.stdout.strip().encode())
    for root, dirs, names in os.walk(DATASET):
        dirs.sort()
        for n in sorted(names):
            if n.endswith(".pyc"):
                continue
            path = os.path.join(root, n)
            h.update(os.path.relpath(path, DATASET).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


def image_label(tag):
    out = subprocess.run(
        ["docker", "image", "inspect", "-f", '{{index .Config.Labels "dev.uniagent.swe-mini"}}', tag],
        capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def build_images():
    with open(TASKS, encoding="utf-8") as f:
        tasks = [json.loads(line) for line in f if line.strip()]
    recipe = recipe_hash()
    with tempfile.TemporaryDirectory() as work:
        for t in tasks:
            tag = f"{IMAGE_REPO}:{t['instance_id']}"
            if image_label(tag) == recipe:
                print(f"{tag} is up to date")
                continue
            project = t["repo"].split("/", 1)[1]
            ctx = os.path.join(work, "ctx-" + project)
            os.makedirs(ctx)
            commit = make_repo(project, os.path.join(ctx, "repo"))
            if commit != t["base_commit"]:
                raise SystemExit(f"{project}: built {commit}, tasks.jsonl says {t['base_commit']}")
            shutil.copyfile(RUNNER, os.path.join(ctx, "runtests.py"))
            docker_build(ctx, tag,
                         f"FROM {BASE_IMAGE}\n"
                         "COPY runtests.py /opt/swe-mini/runtests.py\n"
                         "COPY repo /testbed\n"
                         "WORKDIR /testbed\n"
                         f"LABEL dev.uniagent.swe-mini={recipe}\n")


def docker_build(ctx, tag, dockerfile):
    """Builds `dockerfile` with the build context `ctx` as image `tag`, quietly."""
    with open(os.path.join(ctx, "Dockerfile"), "w") as f:
        f.write(dockerfile)
    subprocess.run(["docker", "build", "-q", "-t", tag, ctx], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"built {tag}")


def main(write, check, images):
    """Runs the command named on the command line (`tasks` by default)."""
    what = sys.argv[1] if len(sys.argv) > 1 else "tasks"
    {"tasks": write, "check": check, "images": images}.get(
        what, lambda: sys.exit(f"unknown command {what!r} (tasks, check, images)"))()


if __name__ == "__main__":
    main(write_tasks, check_tasks, build_images)

"""Drive a SWE-ReX-protocol server with SWE-ReX 1.4.0's own Python `RemoteRuntime`, through the
scenario list shared with the Rust tests (`scenarios.json`).

Usage: python drive_server.py --url http://127.0.0.1:PORT --token TOKEN [--scenarios FILE]

Prints one line per step and exits 0 when every step matched, 1 otherwise. Run by
`tests/swerex_compat_server.rs` with the interpreter of `$UNIAGENT_SWEREX_VENV`.
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from swerex.runtime.abstract import (
    BashAction,
    BashInterruptAction,
    CloseBashSessionRequest,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    UploadRequest,
    WriteFileRequest,
)
from swerex.runtime.remote import RemoteRuntime


def substitute(value, tmp):
    if isinstance(value, str):
        return value.replace("{tmp}", tmp)
    if isinstance(value, list):
        return [substitute(v, tmp) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, tmp) for k, v in value.items()}
    return value


async def run_step(runtime, step, local_tmp):
    op = step["op"]
    req = step.get("request", {})
    if op == "is_alive":
        return await runtime.is_alive(timeout=10)
    if op == "create_session":
        return await runtime.create_session(CreateBashSessionRequest(**req))
    if op == "run_in_session":
        model = BashInterruptAction if req.get("action_type") == "bash_interrupt" else BashAction
        return await runtime.run_in_session(model(**req))
    if op == "close_session":
        return await runtime.close_session(CloseBashSessionRequest(**req))
    if op == "execute":
        return await runtime.execute(Command(**req))
    if op == "read_file":
        return await runtime.read_file(ReadFileRequest(**req))
    if op == "write_file":
        return await runtime.write_file(WriteFileRequest(**req))
    if op == "close":
        return await runtime.close()
    if op == "upload_file":
        source = Path(local_tmp) / f"upload-{os.urandom(4).hex()}"
        source.write_bytes(bytes.fromhex(step["bytes_hex"]))
        return await runtime.upload(UploadRequest(source_path=str(source), target_path=step["target_path"]))
    if op == "upload_dir":
        source = Path(local_tmp) / f"upload-{os.urandom(4).hex()}"
        for name, content in step["files"].items():
            path = source / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        return await runtime.upload(UploadRequest(source_path=str(source), target_path=step["target_path"]))
    raise ValueError(f"unknown op {op}")


def judge(step, outcome, error):
    want_error = step.get("error_py", step.get("error"))
    if want_error is not None:
        if error is None:
            return f"want {want_error}, got {outcome!r}"
        got = f"{type(error).__module__}.{type(error).__name__}"
        if got != want_error:
            return f"raised {got} ({error}), want {want_error}"
        needle = step.get("message_contains", "")
        if needle not in str(error):
            return f"message {str(error)!r} lacks {needle!r}"
        return None
    if error is not None:
        return f"unexpected {type(error).__module__}.{type(error).__name__}: {error}"
    response = outcome.model_dump() if outcome is not None and hasattr(outcome, "model_dump") else {}
    wrong = [
        f"{k}: got {response.get(k, '<missing>')!r}, want {v!r}" for k, v in step["expect"].items() if response.get(k, "<missing>") != v
    ]
    return "; ".join(wrong) or None


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--scenarios", default=str(Path(__file__).with_name("scenarios.json")))
    args = parser.parse_args()
    steps = json.loads(Path(args.scenarios).read_text())["steps"]
    host, port = args.url.rsplit(":", 1)
    runtime = RemoteRuntime(host=host, port=int(port), auth_token=args.token, timeout=30)
    failures = 0
    with tempfile.TemporaryDirectory() as remote_tmp, tempfile.TemporaryDirectory() as local_tmp:
        for step in steps:
            step = substitute(step, remote_tmp)
            outcome, error = None, None
            try:
                outcome = await run_step(runtime, step, local_tmp)
            except Exception as e:  # the step decides whether an exception was expected
                error = e
            problem = judge(step, outcome, error)
            failures += problem is not None
            print(f"{'FAIL' if problem else 'ok  '} {step['name']}" + (f": {problem}" if problem else ""), flush=True)
    print(f"{len(steps) - failures}/{len(steps)} steps matched")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""Regenerates the R2E-Gym parity goldens of uniagent-rewards.

    python3 crates/uniagent-rewards/tests/golden/r2e/generate.py PATH/TO/execution_log_parser.py

The argument is R2E-Gym's `src/r2egym/repo_analysis/execution_log_parser.py` (from a checkout
of github.com/R2E-Gym/R2E-Gym; it imports only `re`). Every log in logs/ here and every real
pytest log of the swebench goldens is read as bytes (so `\\r` survives) and fed to R2E-Gym's
own `parse_log_pytest` and `decolor_dict_keys`, twice: as written, and after the cleaning its
Docker runtime applies to test output (`re.sub(r"\\x1b\\[[0-9;]*m|\\r", "", output)`).
What it answers goes to expected.json; the Rust test (tests/r2e_golden.rs) needs no Python.
"""

import importlib.util
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = [HERE / "logs", HERE.parent / "swebench" / "logs" / "real"]


def load_parser(path):
    spec = importlib.util.spec_from_file_location("r2e_execution_log_parser", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    parser = load_parser(sys.argv[1])
    cases = {}
    for source in SOURCES:
        for path in sorted(source.glob("*.log")):
            text = path.read_bytes().decode("utf-8", errors="replace")
            cleaned = re.sub(r"\x1b\[[0-9;]*m|\r", "", text)
            name = f"{source.relative_to(HERE.parent)}/{path.name}"
            cases[name] = {
                "raw": parser.decolor_dict_keys(parser.parse_log_pytest(text)),
                "cleaned": parser.decolor_dict_keys(parser.parse_log_pytest(cleaned)),
            }
    out = HERE / "expected.json"
    out.write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()

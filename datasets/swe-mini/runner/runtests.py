#!/usr/bin/env python3
"""A small pure-Python test runner for the swe-mini projects (the sandbox image has no pytest).

Collects ``tests/test_*.py`` (or the files/directories given), runs every module-level
function named ``test_*`` and every ``test_*`` method of ``Test*`` classes, and prints one
line per test in the shape of pytest's ``-rA`` summary (``PASSED path::name``,
``FAILED path::name - error``), so SWE-bench's pytest log parser reads it. The test files are
plain pytest-style (bare ``assert``), so ``python -m pytest -rA`` runs them the same way.
Exit status: 0 when every test passed, 1 otherwise.
"""

import importlib.util
import os
import sys
import traceback


def collect(paths):
    files = []
    for path in paths:
        if os.path.isdir(path):
            for root, _dirs, names in sorted(os.walk(path)):
                files.extend(
                    os.path.join(root, n)
                    for n in sorted(names)
                    if n.startswith("test_") and n.endswith(".py")
                )
        elif os.path.isfile(path):
            files.append(path)
    return files


def load(path, index):
    spec = importlib.util.spec_from_file_location(f"_swe_mini_test_{index}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(module):
    for name, obj in vars(module).items():
        if name.startswith("test_") and callable(obj):
            yield name, obj
        elif name.startswith("Test") and isinstance(obj, type):
            for attr in sorted(vars(obj)):
                if attr.startswith("test_"):
                    yield f"{name}::{attr}", getattr(obj(), attr)


def main(argv):
    root = os.getcwd()
    sys.path.insert(0, root)
    files = collect(argv or ["tests"])
    results = []
    for index, path in enumerate(files):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        try:
            module = load(path, index)
        except Exception as e:  # a file that does not import is one error
            results.append(("ERROR", rel, f"{type(e).__name__}: {e}"))
            continue
        for name, fn in cases(module):
            try:
                fn()
                results.append(("PASSED", f"{rel}::{name}", ""))
            except Exception as e:
                traceback.print_exc()
                results.append(("FAILED", f"{rel}::{name}", f"{type(e).__name__}: {e}"))
    print("=" * 20 + " short test summary info " + "=" * 20)
    for status, test_id, why in results:
        print(f"{status} {test_id}" + (f" - {why}" if why else ""))
    failed = sum(1 for s, _, _ in results if s != "PASSED")
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

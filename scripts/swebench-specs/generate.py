#!/usr/bin/env python3
"""Writes the SWE-bench harness's per-repository spec table for uniagent-rewards, and its golden.

    pip download --no-deps swebench==4.1.0 -d /tmp/swb && python3 -m zipfile -e /tmp/swb/*.whl /tmp/swb/x
    .venv-swebench/bin/python scripts/swebench-specs/generate.py /tmp/swb/x

The argument is an unpacked swebench 4.1.0 wheel. swebench 5.x dropped the table (its
datasets carry their own `eval_script`), so 4.1.0, the last release with it, is the source.
Only facts are taken: for each Python (repo, version), `test_cmd`, `eval_commands` and
`install` of MAP_REPO_VERSION_TO_SPECS_PY, and NON_TEST_EXTS. The rule that appends test
directives from the test patch (`get_test_directives`) is written in Rust
(`uniagent_rewards::swebench::specs`); the golden file holds, for a sample of (repo, version,
test_patch), the command the package's own `make_eval_script_list_py` builds, so the Rust
test checks the port without Python.

Outputs: crates/uniagent-rewards/data/swebench_specs.json (the table) and
crates/uniagent-rewards/tests/golden/swebench_specs.json (the golden cases).
"""

import importlib.abc
import importlib.machinery
import json
import pathlib
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parents[2]
TABLE = ROOT / "crates" / "uniagent-rewards" / "data" / "swebench_specs.json"
GOLDEN = ROOT / "crates" / "uniagent-rewards" / "tests" / "golden" / "swebench_specs.json"
# Third-party modules the package imports at load time but the functions used here never call.
STUBBED = {"requests", "datasets", "dotenv", "docker", "tqdm", "ghapi", "bs4", "fastcore",
           "modal", "unidiff", "tenacity", "openai", "anthropic", "tiktoken", "transformers"}


class _Anything(type):
    """A class whose every attribute and call is itself: stands in for any stubbed API."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls

    def __call__(cls, *args, **kwargs):
        return cls


Anything = _Anything("Anything", (), {})


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Stub(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


# Hand-written test patches with the path shapes of real SWE-bench instances: test modules,
# package test directories, data files the harness filters out, several files at once.
def diff(*paths):
    return "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1,2 @@\n x\n+y\n" for p in paths)


SAMPLE = [
    ("django/django", "3.0", diff("tests/queries/test_qs_combinators.py")),
    ("django/django", "4.2", diff("tests/migrations/test_operations.py", "tests/migrations/models.py",
                                  "tests/fixtures/data.json")),
    ("django/django", "5.0", diff("tests/admin_views/tests.py", "django/contrib/admin/static/x.txt")),
    ("sympy/sympy", "1.1", diff("sympy/core/tests/test_basic.py")),
    ("sympy/sympy", "1.12", diff("sympy/printing/tests/test_latex.py", "sympy/printing/tests/test_str.py")),
    ("astropy/astropy", "5.0", diff("astropy/io/fits/tests/test_table.py", "astropy/io/fits/tests/data/x.fits")),
    ("scikit-learn/scikit-learn", "0.22", diff("sklearn/linear_model/tests/test_logistic.py")),
    ("pytest-dev/pytest", "5.4", diff("testing/test_skipping.py", "changelog/1234.bugfix.rst")),
    ("sphinx-doc/sphinx", "4.0", diff("tests/test_ext_autodoc.py", "tests/roots/test-ext/conf.py")),
    ("matplotlib/matplotlib", "3.5", diff("lib/matplotlib/tests/test_axes.py",
                                          "lib/matplotlib/tests/baseline_images/test_axes/a.png")),
    ("pydata/xarray", "2022.06", diff("xarray/tests/test_dataset.py", "ci/requirements/env.yml")),
    ("psf/requests", "2.0", diff("test_requests.py")),
    ("pylint-dev/pylint", "2.15", diff("tests/functional/u/unused/unused_import.py",
                                       "tests/functional/u/unused/unused_import.txt")),
    ("mwaskom/seaborn", "0.12", diff("tests/test_core.py", "pyproject.toml")),
    ("pallets/flask", "2.3", diff("tests/test_blueprints.py", "docs/changes.md")),
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.path.insert(0, sys.argv[1])
    sys.meta_path.append(_StubFinder())
    for name in [m for m in sys.modules if m == "swebench" or m.startswith("swebench.")]:
        del sys.modules[name]
    import swebench
    from swebench.harness import constants
    from swebench.harness.constants.python import MAP_REPO_VERSION_TO_SPECS_PY
    from swebench.harness.test_spec import python as spec_py

    if swebench.__version__ != "4.1.0":
        sys.exit(f"expected swebench 4.1.0, got {swebench.__version__}")
    table = {}
    for repo, versions in sorted(MAP_REPO_VERSION_TO_SPECS_PY.items()):
        # Specs without a test command (the harness cannot evaluate those) are left out.
        runnable = {v: s for v, s in versions.items() if isinstance(s.get("test_cmd"), str)}
        if not runnable:
            continue
        table[repo] = {}
        for version, specs in sorted(runnable.items()):
            table[repo][version] = {
                "test_cmd": specs["test_cmd"],
                "eval_commands": list(specs.get("eval_commands", [])),
                "install": specs.get("install"),
            }
    TABLE.parent.mkdir(parents=True, exist_ok=True)
    TABLE.write_text(json.dumps({
        "package": f"swebench {swebench.__version__}",
        "non_test_exts": list(constants.NON_TEST_EXTS),
        "specs": table,
    }, indent=1, sort_keys=True) + "\n", encoding="utf-8")

    cases = []
    marker_start = f": '{constants.START_TEST_OUTPUT}'"
    for repo, version, test_patch in SAMPLE:
        instance = {"repo": repo, "version": version, "test_patch": test_patch}
        specs = MAP_REPO_VERSION_TO_SPECS_PY[repo][version]
        script = spec_py.make_eval_script_list_py(
            instance, specs, "testbed", "/testbed", "base", test_patch)
        # The test command is the line after the start-of-output marker.
        command = script[script.index(marker_start) + 1]
        cases.append({"repo": repo, "version": version, "test_patch": test_patch,
                      "test_command": command})
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(cases, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {sum(len(v) for v in table.values())} specs of {len(table)} repositories "
          f"and {len(cases)} golden commands")


if __name__ == "__main__":
    main()

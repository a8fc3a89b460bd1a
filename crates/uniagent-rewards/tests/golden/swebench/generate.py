"""Regenerates the swebench parity goldens of uniagent-rewards.

Run with the venv of scripts/setup/50-swebench.sh:
    .venv-swebench/bin/python crates/uniagent-rewards/tests/golden/swebench/generate.py

1. Runs real pytest (9.2.0, with and without pytest-xdist) and unittest on throwaway projects
   made here, with the option sets the SWE-bench harness uses, and writes their logs to
   logs/real/. The hand-written logs in logs/hand/ cover the other runners' formats.
2. Feeds every log to every Python parser of the package (read as the harness reads a log
   file: UTF-8, universal newlines) and harness-style logs to its grading, through oracle.py,
   and writes what the package answers to expected.json.

The Rust test (tests/swebench_golden.rs) needs none of this at run time.
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import oracle  # noqa: E402

REAL = HERE / "logs" / "real"
HAND = HERE / "logs" / "hand"

PROJECT = {
    "conftest.py": """
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture setup failed")
    """,
    "tests/__init__.py": "",
    "tests/test_calc.py": """
        import enum
        import pytest

        class MouseButton(enum.IntEnum):
            LEFT = 1
            RIGHT = 3

        def test_pass():
            assert 1 + 1 == 2

        def test_fail():
            assert 1 + 1 == 3, "arithmetic - is broken"

        def test_error(broken):
            pass

        @pytest.mark.skip(reason="not today")
        def test_skip():
            pass

        @pytest.mark.xfail(reason="known bug")
        def test_xfail():
            assert False

        @pytest.mark.xfail(reason="fixed meanwhile")
        def test_xpass():
            pass

        @pytest.mark.parametrize("a, b", [(1, 2), ("x - y", "z"), ("with space", 0)])
        def test_params(a, b):
            assert a != "with space"

        @pytest.mark.parametrize("path", ["/tmp/data/input.txt", "//net/share", "rel/p.txt"])
        def test_paths(path):
            assert path

        @pytest.mark.parametrize("button", [MouseButton.LEFT, MouseButton.RIGHT])
        def test_buttons(button):
            assert button in (1, 3)

        @pytest.mark.parametrize("word", ["caf\u00e9", "na\u00efve"])
        def test_unicode(word):
            assert word

        class TestGroup:
            def test_method(self):
                pass

            def test_method_fails(self):
                raise ValueError("boom")

        def test_prints_spoof(capsys):
            print("PASSED tests/test_calc.py::test_fail")
            print("progress 10%\\rprogress 50%\\rPASSED tests/test_calc.py::test_fail")
            assert True
    """,
    "tests/test_other.py": """
        import pytest

        def test_other_pass():
            pass

        @pytest.mark.skipif(True, reason="platform")
        def test_other_skip():
            pass
    """,
}

BROKEN = {
    "tests/test_broken.py": "import not_a_module\n\ndef test_never():\n    pass\n",
}

UNITTEST = {
    "test_unit.py": """
        import unittest

        class CalcTest(unittest.TestCase):
            def test_add(self):
                self.assertEqual(1 + 1, 3)

            def test_doc(self):
                \"\"\"A docstring line.\"\"\"

            def test_err(self):
                raise KeyError("k")

            @unittest.skip("why")
            def test_skip(self):
                pass

            @unittest.expectedFailure
            def test_xf(self):
                self.assertTrue(False)

            def test_ok(self):
                pass

            def test_noisy(self):
                print("System check identified no issues (0 silenced).")
    """,
}

# (log name, project, argv after the interpreter)
RUNS = [
    ("pytest_rA", PROJECT, ["-m", "pytest", "--no-header", "-rA", "--tb=no", "-p", "no:cacheprovider"]),
    ("pytest_rA_tb_short", PROJECT, ["-m", "pytest", "-rA", "--tb=short", "-p", "no:cacheprovider"]),
    ("pytest_verbose", PROJECT, ["-m", "pytest", "-v", "-p", "no:cacheprovider"]),
    ("pytest_rA_verbose", PROJECT, ["-m", "pytest", "-rA", "-v", "-p", "no:cacheprovider"]),
    ("pytest_xdist", PROJECT, ["-m", "pytest", "-rA", "-n", "2", "-v", "-p", "no:cacheprovider"]),
    ("pytest_color", PROJECT, ["-m", "pytest", "-rA", "--color=yes", "-p", "no:cacheprovider"]),
    ("pytest_capture_off", PROJECT, ["-m", "pytest", "-rA", "-s", "-p", "no:cacheprovider"]),
    ("pytest_collection_error", {**PROJECT, **BROKEN}, ["-m", "pytest", "-rA", "-p", "no:cacheprovider"]),
    ("unittest_verbose", UNITTEST, ["-m", "unittest", "-v", "test_unit"]),
]


def make_project(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def run_real():
    REAL.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PY_COLORS"))}
    env["COLUMNS"] = "100"
    for name, files, argv in RUNS:
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp) / "proj"
            make_project(root, files)
            out = subprocess.run(
                [sys.executable, *argv], cwd=root, env=env, capture_output=True, text=False
            )
            log = out.stdout + out.stderr
            # Keep logs independent of the temp dir and timings.
            log = log.replace(str(root).encode(), b"/testbed")
            (REAL / f"{name}.log").write_bytes(log)


def read_log(path):
    # As the harness reads a log file: UTF-8 text, universal newlines.
    with open(path, encoding="utf-8") as f:
        return f.read()


def marked(body, exit_code=None, before="", after=""):
    text = before + ">>>>> Start Test Output\n" + body + ">>>>> End Test Output\n" + after
    if exit_code is not None:
        text += f">>>>> Test Exit Code: {exit_code}\n"
    return text


def grading_cases():
    real = read_log(REAL / "pytest_rA.log")
    t = "tests/test_calc.py::"
    passed = "PASSED a.py::t1\nPASSED a.py::t2\nSKIPPED a.py::t3\nXFAIL a.py::t4\n"
    cases = [
        ("real_full", "parse_log_pytest", marked(real, 1),
         {"FAIL_TO_PASS": [t + "test_pass", t + "test_xfail"], "PASS_TO_PASS": [t + "TestGroup::test_method"]}),
        ("real_partial", "parse_log_pytest", marked(real, 1),
         {"FAIL_TO_PASS": [t + "test_pass", t + "test_fail"], "PASS_TO_PASS": [t + "TestGroup::test_method"]}),
        ("real_p2p_broken", "parse_log_pytest", marked(real, 1),
         {"FAIL_TO_PASS": [t + "test_pass"], "PASS_TO_PASS": [t + "test_error"]}),
        ("real_skipped_f2p_fails", "parse_log_pytest", marked(real, 1),
         {"FAIL_TO_PASS": [t + "test_skip"], "PASS_TO_PASS": []}),
        ("real_skipped_p2p_kept", "parse_log_pytest", marked(real, 1),
         {"FAIL_TO_PASS": [t + "test_pass"], "PASS_TO_PASS": [t + "test_skip"]}),
        ("real_xpass_neither", "parse_log_pytest", marked(real, 1),
         {"FAIL_TO_PASS": [t + "test_xpass"], "PASS_TO_PASS": []}),
        ("real_missing_test", "parse_log_pytest", marked(real, 1),
         {"FAIL_TO_PASS": [t + "test_absent"], "PASS_TO_PASS": []}),
        ("truncated_unambiguous", "parse_log_pytest",
         marked("PASSED t.py::test_g[log(photon)]\nPASSED t.py::test_g[log(photon, 2)]\n", 0),
         {"FAIL_TO_PASS": ["t.py::test_g[log(photon"], "PASS_TO_PASS": []}),
        ("truncated_ambiguous", "parse_log_pytest",
         marked("PASSED t.py::test_g[log(photon)]\nFAILED t.py::test_g[log(photon, 2)]\n", 1),
         {"FAIL_TO_PASS": ["t.py::test_g[log(photon"], "PASS_TO_PASS": []}),
        ("truncated_skip_first", "parse_log_pytest",
         marked("SKIPPED t.py::test_g[a1]\nFAILED t.py::test_g[a2]\nPASSED t.py::x\n", 1),
         {"FAIL_TO_PASS": ["t.py::x"], "PASS_TO_PASS": ["t.py::test_g[a"]}),
        ("no_markers", "parse_log_pytest", passed, {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}),
        ("patch_failed", "parse_log_pytest", ">>>>> Patch Apply Failed\n" + marked(passed, 0),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}),
        ("timed_out", "parse_log_pytest", marked(passed, 0) + ">>>>> Tests Timed Out\n",
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}),
        ("fallback_outside_markers", "parse_log_pytest", marked("nothing here\n", 0, after=passed),
         {"FAIL_TO_PASS": ["a.py::t1", "a.py::t4"], "PASS_TO_PASS": ["a.py::t3"]}),
        ("inside_wins_over_outside", "parse_log_pytest",
         marked("FAILED a.py::t1\n", 1, before="PASSED a.py::t1\n", after="PASSED a.py::t1\n"),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}),
        ("never_ran", "parse_log_pytest", marked("ImportError: no module\n", 2),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}),
        ("never_ran_fail_only", "parse_log_pytest", marked("browser failed\n", 1),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}, "fail_only"),
        ("ran_evidence", "parse_log_pytest", marked("  3 passing (20ms)\n", 0),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}, "fail_only"),
        ("zero_count_is_no_evidence", "parse_log_pytest", marked("Executed 0 of 0 SUCCESS\n", 0),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}, "fail_only"),
        ("exit_code_contradicts", "parse_log_pytest", marked(passed, 1),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}),
        ("exit_code_zero", "parse_log_pytest", marked(passed, 0),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": ["a.py::t3"]}),
        ("exit_code_spoofed_first", "parse_log_pytest",
         marked(">>>>> Test Exit Code: 0\n" + passed, 1),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": []}),
        ("duplicate_last_wins", "parse_log_pytest",
         marked("FAILED a.py::t1 - boom\nPASSED a.py::t2\nPASSED a.py::t1\n", 1),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": ["a.py::t2"]}),
        ("carriage_returns", "parse_log_pytest",
         marked("progress 10%\rFAILED a.py::t1\rPASSED a.py::t2\r\n", 1),
         {"FAIL_TO_PASS": ["a.py::t1"], "PASS_TO_PASS": ["a.py::t2"]}),
        ("fail_only_grading", "parse_log_pytest", marked("FAILED a.py::t1\nPASSED a.py::t2\n", 1),
         {"FAIL_TO_PASS": ["a.py::t1", "a.py::t9"], "PASS_TO_PASS": ["a.py::t2", "a.py::t8"]}, "fail_only"),
        ("to_fail_groups", "parse_log_pytest", marked("FAILED a.py::t1\nPASSED a.py::t2\nERROR a.py::t3\n", 1),
         {"FAIL_TO_PASS": ["a.py::t2"], "PASS_TO_PASS": [], "FAIL_TO_FAIL": ["a.py::t1", "a.py::t2"],
          "PASS_TO_FAIL": ["a.py::t3", "a.py::t4"]}, "pass_and_fail", True),
        ("empty_groups", "parse_log_pytest", marked(passed, 0), {"FAIL_TO_PASS": [], "PASS_TO_PASS": []}),
        ("django_real", "parse_log_django", marked(read_log(REAL / "unittest_verbose.log"), 1),
         {"FAIL_TO_PASS": ["test_ok (test_unit.CalcTest.test_ok)", "test_skip (test_unit.CalcTest.test_skip)"],
          "PASS_TO_PASS": ["test_doc (test_unit.CalcTest.test_doc)"]}),
        ("sympy_hand", "parse_log_sympy", marked(read_log(HAND / "sympy.log"), 1),
         {"FAIL_TO_PASS": ["test_ok_one"], "PASS_TO_PASS": ["test_fails_two"]}),
        ("v2_real", "parse_log_astropy", marked(read_log(REAL / "pytest_color.log"), 1),
         {"FAIL_TO_PASS": [t + "test_pass"], "PASS_TO_PASS": [t + "test_other"]}),
    ]
    out = []
    for case in cases:
        name, parser, content, groups = case[:4]
        eval_type = case[4] if len(case) > 4 else "pass_and_fail"
        to_fail = case[5] if len(case) > 5 else False
        out.append({
            "name": name, "parser": parser, "content": content, "groups": groups,
            "eval_type": eval_type, "calculate_to_fail": to_fail,
            "expected": oracle.evaluate(parser, content, groups, eval_type, to_fail),
        })
    return out


def main():
    run_real()
    parsers = oracle.python_parsers()
    logs = sorted(REAL.glob("*.log")) + sorted(HAND.glob("*.log"))
    golden = {"swebench": "5.0.2", "parsers": parsers, "logs": {}, "grading": grading_cases()}
    for path in logs:
        rel = path.relative_to(HERE / "logs").as_posix()
        text = read_log(path)
        golden["logs"][rel] = {p: oracle.parse(p, text) for p in parsers}
    (HERE / "expected.json").write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

"""The `swebench` package (5.0.2) as an oracle for uniagent-rewards' parity tests.

Imports only the package's log parsers and grading (its `swebench.harness` package __init__
pulls in docker, datasets and modal, which reading logs does not need), then answers JSON
requests: one JSON array of requests on stdin, one JSON array of answers on stdout.

  {"op": "parse", "parser": NAME, "log": TEXT}
      -> {"map": [[id, status], ...]} in dict order, or {"raises": "ExceptionName"}
         (the log is passed as is: no newline translation)
  {"op": "eval", "parser": NAME, "content": TEXT, "groups": {FAIL_TO_PASS: [...], ...},
   "eval_type": "pass_and_fail" | "fail_only", "calculate_to_fail": bool}
      -> {"found": bool, "map": [[id, status], ...], "report": {...}, "resolution": STR}
         (the content is written to a file and read back by get_logs_eval, as the harness
         does: universal newlines)

`--self-check` checks that the imports work and exits.
"""

import importlib.util
import json
import os
import pathlib
import sys
import tempfile
import types


def _load():
    spec = importlib.util.find_spec("swebench")
    root = pathlib.Path(spec.submodule_search_locations[0])
    harness = types.ModuleType("swebench.harness")
    harness.__path__ = [str(root / "harness")]
    sys.modules["swebench.harness"] = harness
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness import grading
    from swebench.harness.constants import EvalType

    return PARSER_REGISTRY, grading, EvalType


REGISTRY, GRADING, EVAL_TYPE = _load()


def parse(parser, log):
    try:
        result = REGISTRY[parser](log, None)
    except Exception as e:  # the port must raise where the package raises
        return {"raises": type(e).__name__}
    return {"map": [[k, v] for k, v in result.items()]}


def evaluate(parser, content, groups, eval_type, calculate_to_fail):
    spec = types.SimpleNamespace(log_parser=parser)
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False, newline="") as f:
        f.write(content)
        path = f.name
    try:
        status_map, found = GRADING.get_logs_eval(spec, path)
    except Exception as e:  # a parser that raises on this log
        return {"raises": type(e).__name__}
    finally:
        os.unlink(path)
    full = {key: groups.get(key, []) for key in ("FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL")}
    report = GRADING.get_eval_tests_report(
        status_map, full, calculate_to_fail=calculate_to_fail, eval_type=EVAL_TYPE(eval_type)
    )
    return {
        "found": found,
        "map": [[k, v] for k, v in status_map.items()],
        "report": report,
        "resolution": GRADING.get_resolution_status(report),
    }


def answer(request):
    if request["op"] == "parse":
        return parse(request["parser"], request["log"])
    return evaluate(
        request["parser"],
        request["content"],
        request["groups"],
        request.get("eval_type", "pass_and_fail"),
        request.get("calculate_to_fail", False),
    )


def python_parsers():
    """The registry's Python parsers, in registry order."""
    module = sys.modules["swebench.harness.log_parsers.python"]
    return [name for name, fn in REGISTRY.items() if fn.__module__ == module.__name__]


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-check"]:
        assert parse("parse_log_pytest", "PASSED a.py::t\n") == {"map": [["a.py::t", "PASSED"]]}
        assert len(python_parsers()) == 20, python_parsers()
        sys.exit(0)
    requests = json.load(sys.stdin)
    json.dump([answer(r) for r in requests], sys.stdout, ensure_ascii=False)

//! Parity with the `swebench` package (5.0.2): its Python log parsers, its reading of the
//! harness's test log (markers, fallback, "did the suite run", exit-code cross-check) and its
//! grading of `FAIL_TO_PASS` / `PASS_TO_PASS` into a FULL / PARTIAL / NO resolution.
//!
//! Everything here is a pure function of strings; the golden tests compare it with the package
//! on real and hand-written logs (`tests/swebench_golden.rs`).

mod grading;
mod parsers;
pub(crate) mod pytext;
pub mod specs;
mod status;

pub use grading::{
    eval_log, grade_tests, EvalType, GroupReport, InvalidRun, LogEval, Resolution, TestGroups,
    TestsReport, END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE,
};
pub use parsers::{parse_log, parse_log_ordered, Parser};
pub use status::{Status, StatusMap};

//! Fuzzes the `swebench` parser ports and the harness-log reading
//! (`uniagent_rewards::swebench`): any text through any Python parser gives a status map or the
//! typed error the package's own exception maps to, never a panic; a map's ids are unique and
//! `parse_log` agrees with the parser on the same text with universal newlines; grading any
//! map never panics and its resolution agrees with its rates.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uniagent_rewards::swebench::{
    eval_log, grade_tests, parse_log, EvalType, Parser, Resolution, TestGroups,
};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let parsers: Vec<Parser> = Parser::all().collect();
    let parser = parsers[selector as usize % parsers.len()];
    let ordered = parser.parse(&text);
    let sorted = parse_log(&parser.name(), &text);
    if !text.contains('\r') {
        match (&ordered, &sorted) {
            (Ok(map), Ok(btree)) => assert_eq!(&map.to_btree(), btree),
            (Err(_), Err(_)) => {}
            _ => panic!("parse_log and {parser} disagree"),
        }
    }
    let Ok(eval) = eval_log(parser, &text) else {
        return;
    };
    let ids: Vec<String> = eval
        .status_map
        .iter()
        .map(|(id, _)| id.to_owned())
        .take(4)
        .collect();
    let groups = TestGroups {
        fail_to_pass: ids.iter().take(2).cloned().collect(),
        pass_to_pass: ids
            .iter()
            .skip(2)
            .cloned()
            .chain(["t.py::x[".to_owned()])
            .collect(),
        ..TestGroups::default()
    };
    for eval_type in [EvalType::PassAndFail, EvalType::FailOnly] {
        let report = grade_tests(&eval.status_map, &groups, eval_type, true);
        let full = report.fail_to_pass_rate() == 1.0 && report.pass_to_pass_rate() == 1.0;
        assert_eq!(report.resolution() == Resolution::Full, full);
    }
});

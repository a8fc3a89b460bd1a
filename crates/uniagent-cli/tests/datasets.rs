//! Datasets and config errors: Parquet and JSONL give the same tasks; every key of a config
//! file is found at its own line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use uniagent_cli::config::line_of;
use uniagent_core::config::ConfigFormat;
use uniagent_envs::dataset::{load_tasks, Layout, TasksConfig};

#[test]
fn parquet_and_jsonl_give_the_same_swe_bench_tasks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let jsonl = TasksConfig {
        path: Some(root.join("../../datasets/swe-mini/tasks.jsonl")),
        layout: Layout::SweBench,
        ..TasksConfig::default()
    };
    // The fixture stores every column as a string (test lists JSON-encoded), as HF does.
    let parquet = TasksConfig {
        path: Some(root.join("tests/fixtures/swe-mini.parquet")),
        ..jsonl.clone()
    };
    let a = load_tasks(&jsonl, None).unwrap();
    let b = load_tasks(&parquet, None).unwrap();
    assert_eq!(a.len(), 6);
    assert_eq!(a, b);
    assert!(a[0].metadata["FAIL_TO_PASS"].is_array());
    assert!(a[0].messages[0]
        .text()
        .contains(a[0].metadata["problem_statement"].as_str().unwrap().trim()));
    assert_eq!(load_tasks(&parquet, Some(2)).unwrap().len(), 2);
}

fn key() -> impl Strategy<Value = String> {
    "[a-z][a-z_]{0,7}"
}

/// A nested map of depth <= 3 with unique keys per level.
fn tree() -> impl Strategy<Value = BTreeMap<String, serde_json::Value>> {
    let leaf = prop_oneof![
        any::<i32>().prop_map(serde_json::Value::from),
        "[a-z ]{0,10}".prop_map(serde_json::Value::from)
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop::collection::btree_map(key(), inner, 1..4)
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect()))
    });
    prop::collection::btree_map(key(), value, 1..5)
}

fn leaves(prefix: &[String], v: &serde_json::Value, out: &mut Vec<Vec<String>>) {
    if let Some(m) = v.as_object() {
        for (k, v) in m {
            let mut p = prefix.to_vec();
            p.push(k.clone());
            out.push(p.clone());
            leaves(&p, v, out);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn every_key_is_located_on_its_own_line(tree in tree()) {
        let value = serde_json::Value::Object(tree.into_iter().collect());
        let mut paths = Vec::new();
        leaves(&[], &value, &mut paths);
        for (format, text) in [
            (ConfigFormat::Yaml, serde_norway::to_string(&value).unwrap()),
            (ConfigFormat::Toml, toml::to_string(&value).unwrap()),
        ] {
            let lines: Vec<&str> = text.lines().collect();
            for path in &paths {
                let line = line_of(&text, format, path);
                prop_assert!(line.is_some(), "{format:?}: {path:?} not found in\n{text}");
                let found = lines[line.unwrap() - 1];
                let last = path.last().unwrap();
                prop_assert!(found.contains(last.as_str()), "{format:?}: {path:?} -> line {found:?} in\n{text}");
            }
        }
    }
}

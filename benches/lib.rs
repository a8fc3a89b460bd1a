//! Criterion benchmarks of uniagent live in this package's `[[bench]]` targets; run them with
//! `cargo bench -p uniagent-benches`.

//! [`TrajRow`]: what the index keeps of one trajectory line (the list columns and the filter
//! keys), read without materialising the token arrays.

use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use uniagent_core::agent::PhaseTimings;

/// The summary of one trajectory line.
#[derive(Debug, Clone, Serialize)]
pub struct TrajRow {
    /// Rollout id (`task:sample`).
    pub id: String,
    /// Task id.
    pub task_id: String,
    /// Sample index.
    pub sample: u64,
    /// How it ended (`unknown` when the line has none).
    pub exit_reason: String,
    /// Reward score, when rewarded.
    pub score: Option<f64>,
    /// Whether the reward says solved, when rewarded.
    pub success: Option<bool>,
    /// Training step (`train` output), when tagged.
    pub step: Option<u64>,
    /// Phase (`train` output: `rl`, `eval`, ...), when tagged.
    pub phase: Option<String>,
    /// Smallest weight version of a sampled token.
    pub version_min: Option<u64>,
    /// Largest weight version of a sampled token.
    pub version_max: Option<u64>,
    /// Assistant turns.
    pub turns: u64,
    /// Messages in the conversation.
    pub messages: u64,
    /// Prompt tokens (0 without token data).
    pub prompt_tokens: u64,
    /// Response tokens (0 without token data).
    pub response_tokens: u64,
    /// Response tokens with mask 1 (`counts.sampled_tokens` for lines without token data).
    pub sampled_tokens: u64,
    /// Tool calls executed (`counts.tool_calls`).
    pub tool_calls: u64,
    /// Excluded from training.
    pub masked: bool,
    /// Time per phase, seconds.
    pub timings: PhaseTimings,
}

#[derive(Deserialize)]
struct Reward {
    score: Option<f64>,
    success: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Counts {
    turns: u64,
    tool_calls: u64,
    sampled_tokens: u64,
}

#[derive(Deserialize)]
struct Line {
    id: Option<String>,
    task_id: Option<String>,
    sample: Option<u64>,
    exit_reason: Option<String>,
    reward: Option<Reward>,
    step: Option<u64>,
    phase: Option<String>,
    #[serde(default)]
    masked: bool,
    #[serde(default)]
    counts: Counts,
    #[serde(default)]
    timings: PhaseTimings,
    #[serde(default)]
    messages: SeqLen,
    #[serde(default)]
    prompt_ids: SeqLen,
    #[serde(default)]
    response_ids: SeqLen,
    #[serde(default)]
    response_mask: MaskSum,
    #[serde(default)]
    weight_versions: VersionRange,
}

/// Extracts a [`TrajRow`] from one line.
pub(super) fn extract(line: &[u8]) -> Result<TrajRow, String> {
    let l: Line = serde_json::from_slice(line).map_err(|e| format!("not a trajectory: {e}"))?;
    let id = l.id.or_else(|| {
        l.task_id
            .as_ref()
            .map(|t| format!("{t}:{}", l.sample.unwrap_or(0)))
    });
    let Some(id) = id else {
        return Err("not a trajectory: no `id` and no `task_id`".into());
    };
    Ok(TrajRow {
        task_id: l.task_id.unwrap_or_else(|| id.clone()),
        id,
        sample: l.sample.unwrap_or(0),
        exit_reason: l.exit_reason.unwrap_or_else(|| "unknown".into()),
        score: l.reward.as_ref().and_then(|r| r.score),
        success: l.reward.as_ref().and_then(|r| r.success),
        step: l.step,
        phase: l.phase,
        version_min: l.weight_versions.min,
        version_max: l.weight_versions.max,
        turns: l.counts.turns,
        messages: l.messages.0,
        prompt_tokens: l.prompt_ids.0,
        response_tokens: l.response_ids.0,
        sampled_tokens: if l.response_mask.0 > 0 {
            l.response_mask.0
        } else {
            l.counts.sampled_tokens
        },
        tool_calls: l.counts.tool_calls,
        masked: l.masked,
        timings: l.timings,
    })
}

impl TrajRow {
    /// Reads one line of `trajectories.jsonl` (any writer's) without materialising its token
    /// arrays; an error says why the line is not a trajectory.
    pub fn from_line(line: &[u8]) -> Result<Self, String> {
        extract(line)
    }
}

/// Every trajectory of a `trajectories.jsonl` file, in file order: the one reader of the
/// summaries (`summary.json` of `run` and `train`, `uniagent report`). Blank lines, a torn last
/// line (a run killed mid-write) and lines that are not trajectories are skipped, as the viewer
/// skips them; the error is the file's, unopened or unreadable.
pub fn read_rows(path: &Path) -> std::io::Result<Vec<TrajRow>> {
    let file = std::fs::File::open(path)?;
    let mut rows = Vec::new();
    for line in BufReader::new(file).split(b'\n') {
        if let Ok(row) = TrajRow::from_line(&line?) {
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The length of a JSON array, counted without keeping its elements.
#[derive(Default)]
struct SeqLen(u64);

impl<'de> Deserialize<'de> for SeqLen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SeqLen;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<SeqLen, E> {
                Ok(SeqLen(0))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SeqLen, A::Error> {
                let mut n = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n += 1;
                }
                Ok(SeqLen(n))
            }
        }
        d.deserialize_any(V)
    }
}

/// The sum of a 0/1 mask array.
#[derive(Default)]
struct MaskSum(u64);

impl<'de> Deserialize<'de> for MaskSum {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaskSum;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of 0/1 or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<MaskSum, E> {
                Ok(MaskSum(0))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaskSum, A::Error> {
                let mut n = 0;
                while let Some(m) = seq.next_element::<u64>()? {
                    n += m.min(1);
                }
                Ok(MaskSum(n))
            }
        }
        d.deserialize_any(V)
    }
}

/// The smallest and largest non-null entry of a `weight_versions` array.
#[derive(Default)]
struct VersionRange {
    min: Option<u64>,
    max: Option<u64>,
}

impl<'de> Deserialize<'de> for VersionRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = VersionRange;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of versions or null")
            }
            fn visit_unit<E: de::Error>(self) -> Result<VersionRange, E> {
                Ok(VersionRange::default())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<VersionRange, A::Error> {
                let mut r = VersionRange::default();
                while let Some(v) = seq.next_element::<Option<u64>>()? {
                    if let Some(v) = v {
                        r.min = Some(r.min.map_or(v, |m| m.min(v)));
                        r.max = Some(r.max.map_or(v, |m| m.max(v)));
                    }
                }
                Ok(r)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_summary_without_the_arrays() {
        let line = br#"{"id":"t:1","task_id":"t","sample":1,"exit_reason":"finished",
            "reward":{"score":0.5,"success":false},"counts":{"turns":3},"step":4,
            "prompt_ids":[1,2,3],"response_ids":[4,5,6,7],"response_mask":[1,0,1,1],
            "weight_versions":[2,null,3,2],"messages":[{"role":"user","content":"x"}]}"#;
        let r = extract(line).unwrap();
        assert_eq!(
            (r.id.as_str(), r.task_id.as_str(), r.sample),
            ("t:1", "t", 1)
        );
        assert_eq!(
            (r.score, r.success, r.step),
            (Some(0.5), Some(false), Some(4))
        );
        assert_eq!(
            (r.prompt_tokens, r.response_tokens, r.sampled_tokens),
            (3, 4, 3)
        );
        assert_eq!(
            (r.version_min, r.version_max, r.turns, r.messages),
            (Some(2), Some(3), 3, 1)
        );
        assert!(extract(b"[1,2]").is_err());
        assert!(extract(br#"{"id": 5}"#).is_err());
        assert!(extract(br#"{"foo": 1}"#).unwrap_err().contains("no `id`"));
    }
}

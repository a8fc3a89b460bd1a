//! Trajectories as a Parquet file with verl's `AgentLoopOutput` columns (verl 0.9.1), for
//! training with verl on Ray (FSDP/Megatron) while rollouts keep running through uniagent's
//! loop, sandboxes and rewards.
//!
//! # Columns
//!
//! | column | Arrow type | from |
//! |---|---|---|
//! | `prompt_ids` | `list<int64>` | `AgentLoopOutput::prompt_ids` |
//! | `response_ids` | `list<int64>` | `response_ids` (sampled, template and tool tokens) |
//! | `response_mask` | `list<int64>` | `response_mask` (1 = sampled by the policy) |
//! | `response_logprobs` | `list<float>`, nullable | the engine's logprobs; **null** when the backend gave none (never zeros) |
//! | `reward_score` | `double`, nullable | the reward trained on: [`Trajectory::training_use`] (0 for failures the agent could cause); null only from [`VerlWriter::push_row`] without one (verl's reward workers then score the row, and its batch gets `rm_scores` only when every row has a score) |
//! | `num_turns` | `int64` | `num_turns` |
//! | `uid` | `string` | the task id: verl's GRPO groups `non_tensor_batch["uid"]` |
//! | `id` | `string` | the rollout id `<task id>:<sample>` |
//! | `exit_reason` | `string` | how the rollout ended (`finished`, `max_turns`, ...) |
//! | `weight_versions` | `list<int64>`, nullable | the policy version behind each response token; null elements on mask-0 tokens |
//! | `step` | `int64`, nullable | the training step that produced the rollout (`uniagent train`), null otherwise |
//!
//! A verl-side loader turns a row into `AgentLoopOutput(prompt_ids=..., response_ids=...,
//! response_mask=..., response_logprobs=..., reward_score=..., num_turns=..., metrics={})`
//! and hands it to `AgentLoopWorker._agent_loop_postprocess` and `_postprocess`, with `uid` as
//! the batch's `non_tensor_batch["uid"]`. verl pads prompts on the left to
//! `rollout.prompt_length` and responses on the right to `rollout.response_length` without
//! truncating, so those must be at least [`ExportSummary::max_prompt_len`] and
//! [`ExportSummary::max_response_len`]. `tests/verl_parquet.rs` runs verl 0.9.1's own code on
//! such a file.
//!
//! `uid` is the task id, so a file spanning several training steps (`uniagent train` samples a
//! task again in later epochs) holds one group per task *and step* under the same `uid`:
//! batch by `step`, as verl does (one step, one batch), or those groups merge in GRPO.
//!
//! # What is written
//!
//! [`Trajectory::training_use`] decides, as for uniagent's own trainer: [`TrainingUse::Drop`]
//! rows (infrastructure failures the policy had no part in) are skipped by default
//! ([`DroppedRows`]) since writing them would put them in their group's baseline; every other
//! row is written with the reward it trains on. Masked rows (`response_mask` all 0) are written:
//! they carry no gradient but count in their group's baseline, as in uniagent's trainer.
//!
//! # Rows without logprobs
//!
//! verl's `_postprocess` looks at the **first** sample of a batch only: when it has
//! `response_logprobs`, it concatenates every sample's (and raises `TypeError` on a sample
//! without); when it has none, the batch gets no `rollout_log_probs` at all and the other
//! samples' logprobs are dropped silently (so rollout correction and the rollout/training
//! mismatch metrics cannot run). A file is therefore either all with or all without logprobs:
//! mixing them is refused by default ([`MixedLogprobs`]).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, FloatType, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use uniagent_core::agent::{TrainingUse, Trajectory};
use uniagent_core::rollout::AgentLoopOutput;
use uniagent_core::{Error, Result};

use super::columns::{FlatColumn, ListColumn};

/// The file's schema, in column order. List elements are nullable as pyarrow writes them
/// (so the Arrow type is `list<int64>`, not `list<int64 not null>`).
const SCHEMA: &str = "message verl_agent_loop_output {
  required group prompt_ids (LIST) { repeated group list { optional int64 element; } }
  required group response_ids (LIST) { repeated group list { optional int64 element; } }
  required group response_mask (LIST) { repeated group list { optional int64 element; } }
  optional group response_logprobs (LIST) { repeated group list { optional float element; } }
  optional double reward_score;
  required int64 num_turns;
  required binary uid (STRING);
  required binary id (STRING);
  required binary exit_reason (STRING);
  optional group weight_versions (LIST) { repeated group list { optional int64 element; } }
  optional int64 step;
}";

/// The verl version whose `AgentLoopOutput` the columns follow (file metadata
/// `uniagent.verl_version`).
pub const VERL_VERSION: &str = "0.9.1";

/// What to do with [`TrainingUse::Drop`] trajectories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DroppedRows {
    /// Leave them out of the file, counted in [`ExportSummary::dropped`] (the default: the
    /// policy had no part in how they ended, and in the file they would shift their group's
    /// baseline).
    #[default]
    Skip,
    /// Fail with [`Error::InvalidInput`] on the first one (for pipelines that expect none).
    Refuse,
}

/// What to do when some rows have `response_logprobs` and others do not (see the module
/// documentation for what verl does with such a batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MixedLogprobs {
    /// Fail with [`Error::InvalidInput`] naming the first row that differs (the default).
    #[default]
    Refuse,
    /// Write them as they are (null `response_logprobs` on the rows without); the reader must
    /// batch rows with and without logprobs separately.
    Allow,
}

/// Options of [`VerlWriter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerlOptions {
    /// [`TrainingUse::Drop`] rows.
    pub dropped: DroppedRows,
    /// Rows with and without logprobs in one file.
    pub mixed_logprobs: MixedLogprobs,
    /// Prompt plus response tokens buffered before a row group is written: bounds memory
    /// (about 25 bytes per token) and sets the row-group size readers see.
    pub row_group_tokens: usize,
}

impl Default for VerlOptions {
    fn default() -> Self {
        Self {
            dropped: DroppedRows::default(),
            mixed_logprobs: MixedLogprobs::default(),
            row_group_tokens: 1 << 22,
        }
    }
}

/// What a finished export holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct ExportSummary {
    /// Rows written.
    pub rows: usize,
    /// [`TrainingUse::Drop`] trajectories skipped.
    pub dropped: usize,
    /// Rows written with `response_logprobs`.
    pub rows_with_logprobs: usize,
    /// The longest `prompt_ids`: verl's `rollout.prompt_length` must be at least this.
    pub max_prompt_len: usize,
    /// The longest `response_ids`: verl's `rollout.response_length` must be at least this.
    pub max_response_len: usize,
}

/// What [`VerlWriter::push`] did with a trajectory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Buffered as a row.
    Written,
    /// Left out: [`TrainingUse::Drop`].
    Dropped,
}

/// One row in verl's terms, for callers that hold `AgentLoopOutput`s rather than
/// [`Trajectory`]s ([`VerlWriter::push_row`]).
#[derive(Debug, Clone, Copy)]
pub struct VerlRow<'a> {
    /// GRPO's group key (`uid`): the task id.
    pub uid: &'a str,
    /// The rollout's id.
    pub id: &'a str,
    /// How it ended (an [`ExitReason`](uniagent_core::agent::ExitReason) name).
    pub exit_reason: &'a str,
    /// The token record.
    pub output: &'a AgentLoopOutput,
    /// The reward trained on (`None`: leave it to verl's reward workers).
    pub reward_score: Option<f64>,
    /// The training step that produced it, if any.
    pub step: Option<u64>,
}

/// Buffered columns, written as one row group at a time.
#[derive(Debug)]
struct Columns {
    prompt_ids: ListColumn<i64>,
    response_ids: ListColumn<i64>,
    response_mask: ListColumn<i64>,
    response_logprobs: ListColumn<f32>,
    reward_score: FlatColumn<f64>,
    num_turns: FlatColumn<i64>,
    uid: FlatColumn<ByteArray>,
    id: FlatColumn<ByteArray>,
    exit_reason: FlatColumn<ByteArray>,
    weight_versions: ListColumn<i64>,
    step: FlatColumn<i64>,
    rows: usize,
    tokens: usize,
}

impl Columns {
    fn new() -> Self {
        Self {
            prompt_ids: ListColumn::new(false),
            response_ids: ListColumn::new(false),
            response_mask: ListColumn::new(false),
            response_logprobs: ListColumn::new(true),
            reward_score: FlatColumn::new(true),
            num_turns: FlatColumn::new(false),
            uid: FlatColumn::new(false),
            id: FlatColumn::new(false),
            exit_reason: FlatColumn::new(false),
            weight_versions: ListColumn::new(true),
            step: FlatColumn::new(true),
            rows: 0,
            tokens: 0,
        }
    }

    fn push(&mut self, row: &VerlRow<'_>) {
        let o = row.output;
        let ids = |v: &[u32]| Some(v.iter().map(|&t| Some(i64::from(t))).collect::<Vec<_>>());
        self.prompt_ids.push(ids(&o.prompt_ids));
        self.response_ids.push(ids(&o.response_ids));
        self.response_mask
            .push(Some(o.response_mask.iter().map(|&m| Some(i64::from(m)))));
        self.response_logprobs.push(
            o.response_logprobs
                .as_ref()
                .map(|lps| lps.iter().map(|&lp| Some(lp))),
        );
        self.reward_score.push(row.reward_score);
        self.num_turns.push(Some(i64::from(o.num_turns)));
        self.uid.push(Some(ByteArray::from(row.uid)));
        self.id.push(Some(ByteArray::from(row.id)));
        self.exit_reason
            .push(Some(ByteArray::from(row.exit_reason)));
        // Versions and steps count updates: far below 2^63, saturating is only a formality.
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.weight_versions.push(
            o.weight_versions
                .as_ref()
                .map(|vs| vs.iter().map(|v| v.map(int)).collect::<Vec<_>>()),
        );
        self.step.push(row.step.map(int));
        self.rows += 1;
        self.tokens += o.prompt_ids.len() + o.response_ids.len();
    }

    /// Writes the buffered rows as one row group (in [`SCHEMA`]'s column order).
    fn flush(
        &mut self,
        file: &mut SerializedFileWriter<BufWriter<File>>,
    ) -> parquet::errors::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let mut group = file.next_row_group()?;
        macro_rules! column {
            ($field:ident, $ty:ty) => {{
                let mut col = group.next_column()?.ok_or_else(|| {
                    parquet::errors::ParquetError::General(
                        concat!("no column for ", stringify!($field)).into(),
                    )
                })?;
                self.$field.write(col.typed::<$ty>())?;
                col.close()?;
            }};
        }
        column!(prompt_ids, Int64Type);
        column!(response_ids, Int64Type);
        column!(response_mask, Int64Type);
        column!(response_logprobs, FloatType);
        column!(reward_score, DoubleType);
        column!(num_turns, Int64Type);
        column!(uid, ByteArrayType);
        column!(id, ByteArrayType);
        column!(exit_reason, ByteArrayType);
        column!(weight_versions, Int64Type);
        column!(step, Int64Type);
        group.close()?;
        self.rows = 0;
        self.tokens = 0;
        Ok(())
    }
}

/// Writes a verl Parquet file row by row, in bounded memory (a row group is written every
/// [`VerlOptions::row_group_tokens`] tokens). The file appears at its path only when
/// [`finish`](Self::finish) succeeds: until then it is `<path>.partial`, removed if the
/// writer is dropped or fails.
///
/// ```
/// use uniagent_core::agent::{ExitReason, Trajectory};
/// use uniagent_core::Message;
/// use uniagent_train::export::verl::{VerlOptions, VerlWriter};
///
/// let mut t = Trajectory::empty("task-1", 0, vec![Message::user("2+2?")], ExitReason::Finished, None);
/// t.set_exit(ExitReason::Finished, false);
/// t.output.prompt_ids = vec![151644, 872, 198];
/// t.output.response_ids = vec![19, 151645];
/// t.output.response_mask = vec![1, 1];
/// t.output.response_logprobs = Some(vec![-0.25, -0.01]);
/// t.output.reward_score = Some(1.0);
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("rollouts.parquet");
/// let mut writer = VerlWriter::create(&path, VerlOptions::default()).unwrap();
/// writer.push(&t, None).unwrap();
/// let summary = writer.finish().unwrap();
/// assert_eq!((summary.rows, summary.max_prompt_len, summary.max_response_len), (1, 3, 2));
/// assert!(path.is_file());
/// ```
#[derive(Debug)]
pub struct VerlWriter {
    file: Option<SerializedFileWriter<BufWriter<File>>>,
    columns: Columns,
    options: VerlOptions,
    summary: ExportSummary,
    /// Whether the first row had logprobs, and its id (for [`MixedLogprobs::Refuse`]).
    first_logprobs: Option<(bool, String)>,
    path: PathBuf,
    partial: PathBuf,
    /// Set once the file is at `path`; until then dropping removes `partial`.
    done: bool,
}

impl VerlWriter {
    /// Starts `path` (written as `<path>.partial` until [`finish`](Self::finish)).
    pub fn create(path: &Path, options: VerlOptions) -> Result<Self> {
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let file = File::create(&partial)
            .map_err(|e| Error::io(format!("creating {}", partial.display()), e))?;
        let schema = parse_message_type(SCHEMA)
            .map_err(|e| Error::internal(format!("the verl Parquet schema: {e}")))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("uniagent-train {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(vec![
                KeyValue::new("uniagent.format".into(), "verl.AgentLoopOutput".to_owned()),
                KeyValue::new("uniagent.verl_version".into(), VERL_VERSION.to_owned()),
            ]))
            .build();
        let writer =
            SerializedFileWriter::new(BufWriter::new(file), Arc::new(schema), Arc::new(props))
                .map_err(|e| parquet_error(&partial, e))?;
        Ok(Self {
            file: Some(writer),
            columns: Columns::new(),
            options,
            summary: ExportSummary::default(),
            first_logprobs: None,
            path: path.to_owned(),
            partial,
            done: false,
        })
    }

    /// Adds a trajectory, as [`Trajectory::training_use`] decides: a [`TrainingUse::Drop`] one
    /// is skipped (or refused, [`DroppedRows`]); any other is written with the reward it
    /// trains on. `step` is the training step that produced it, when known.
    ///
    /// Errors: [`Error::InvalidInput`] for a trajectory without token ids (a backend that is
    /// not token-level), with inconsistent lengths, a mix of rows with and without logprobs
    /// under [`MixedLogprobs::Refuse`], or a dropped row under [`DroppedRows::Refuse`];
    /// [`Error::Io`] when writing fails.
    pub fn push(&mut self, t: &Trajectory, step: Option<u64>) -> Result<Pushed> {
        let reward = match t.training_use() {
            TrainingUse::Train { reward } => reward,
            TrainingUse::Drop => match self.options.dropped {
                DroppedRows::Skip => {
                    self.summary.dropped += 1;
                    return Ok(Pushed::Dropped);
                }
                DroppedRows::Refuse => {
                    return Err(Error::invalid_input(format!(
                        "trajectory {} ended with {} and is not trained on (TrainingUse::Drop)",
                        t.id, t.exit_reason
                    )))
                }
            },
        };
        if t.output.prompt_ids.is_empty() {
            return Err(Error::invalid_input(format!(
                "trajectory {} has no token ids: it came from a model backend that is not token-level (use vllm, sglang or tch)",
                t.id
            )));
        }
        self.push_row(VerlRow {
            uid: &t.task_id,
            id: &t.id,
            exit_reason: t.exit_reason.as_str(),
            output: &t.output,
            reward_score: Some(reward),
            step,
        })?;
        Ok(Pushed::Written)
    }

    /// Adds one row as given: no training policy applied (the caller decided `reward_score`).
    ///
    /// Errors: [`Error::InvalidInput`] when `response_mask`, `response_logprobs` or
    /// `weight_versions` is not as long as `response_ids`, a mask value is not 0 or 1, or logprobs
    /// are mixed under [`MixedLogprobs::Refuse`]; [`Error::Io`] when writing fails.
    pub fn push_row(&mut self, row: VerlRow<'_>) -> Result<()> {
        let o = row.output;
        let n = o.response_ids.len();
        let check_len = |what: &str, len: usize| {
            if len == n {
                Ok(())
            } else {
                Err(Error::invalid_input(format!(
                    "row {}: {what} has {len} entries for {n} response tokens",
                    row.id
                )))
            }
        };
        check_len("response_mask", o.response_mask.len())?;
        if let Some(lps) = &o.response_logprobs {
            check_len("response_logprobs", lps.len())?;
        }
        if let Some(vs) = &o.weight_versions {
            check_len("weight_versions", vs.len())?;
        }
        if let Some(m) = o.response_mask.iter().find(|&&m| m > 1) {
            return Err(Error::invalid_input(format!(
                "row {}: response_mask holds {m} (only 0 and 1 are valid)",
                row.id
            )));
        }
        let has_logprobs = o.response_logprobs.is_some();
        match &self.first_logprobs {
            None => self.first_logprobs = Some((has_logprobs, row.id.to_owned())),
            Some((first, first_id))
                if *first != has_logprobs
                    && self.options.mixed_logprobs == MixedLogprobs::Refuse =>
            {
                let (with, without) = if *first {
                    (first_id.as_str(), row.id)
                } else {
                    (row.id, first_id.as_str())
                };
                return Err(Error::invalid_input(format!(
                    "row {with} has response_logprobs and row {without} has none: verl's batch keeps rollout_log_probs only when its first row has them and fails when a later one lacks them, so export rows with and without logprobs to separate files (or allow mixing)"
                )));
            }
            Some(_) => {}
        }

        self.columns.push(&row);
        let s = &mut self.summary;
        s.rows += 1;
        s.rows_with_logprobs += usize::from(has_logprobs);
        s.max_prompt_len = s.max_prompt_len.max(o.prompt_ids.len());
        s.max_response_len = s.max_response_len.max(n);
        if self.columns.tokens >= self.options.row_group_tokens {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let Some(file) = self.file.as_mut() else {
            return Err(Error::internal(
                "the verl Parquet writer is already finished",
            ));
        };
        self.columns
            .flush(file)
            .map_err(|e| parquet_error(&self.partial, e))
    }

    /// Writes the last row group and the footer, and moves the file to its path.
    pub fn finish(mut self) -> Result<ExportSummary> {
        self.flush()?;
        let Some(file) = self.file.take() else {
            return Err(Error::internal(
                "the verl Parquet writer is already finished",
            ));
        };
        let buffered = file
            .into_inner()
            .map_err(|e| parquet_error(&self.partial, e))?;
        let file = buffered.into_inner().map_err(|e| {
            Error::io(
                format!("writing {}", self.partial.display()),
                e.into_error(),
            )
        })?;
        file.sync_all()
            .map_err(|e| Error::io(format!("syncing {}", self.partial.display()), e))?;
        std::fs::rename(&self.partial, &self.path).map_err(|e| {
            Error::io(
                format!(
                    "moving {} to {}",
                    self.partial.display(),
                    self.path.display()
                ),
                e,
            )
        })?;
        self.done = true;
        Ok(self.summary)
    }

    /// What has been pushed so far.
    pub fn summary(&self) -> ExportSummary {
        self.summary
    }
}

impl Drop for VerlWriter {
    fn drop(&mut self) {
        // Unfinished (an error, or never finished): no half-written file at any path.
        if !self.done {
            let _ = std::fs::remove_file(&self.partial);
        }
    }
}

/// Parquet's errors are I/O failures of the sink or broken invariants; both surface as I/O on
/// the file being written.
fn parquet_error(path: &Path, e: parquet::errors::ParquetError) -> Error {
    Error::io(
        format!("writing Parquet file {}", path.display()),
        std::io::Error::other(e),
    )
}

/// Writes `trajectories` to the Parquet file `path` ([`VerlWriter`] in one call).
///
/// ```no_run
/// # fn main() -> uniagent_core::Result<()> {
/// use uniagent_train::export::{read_jsonl, verl};
/// let lines = read_jsonl("runs/swe/trajectories.jsonl".as_ref())?;
/// let trajectories: Vec<_> = lines.map(|l| l.map(|l| l.trajectory)).collect::<Result<_, _>>()?;
/// let summary = verl::write_trajectories("rollouts.parquet".as_ref(), &trajectories, Default::default())?;
/// eprintln!("{} rows; rollout.prompt_length >= {}", summary.rows, summary.max_prompt_len);
/// # Ok(()) }
/// ```
pub fn write_trajectories<'a>(
    path: &Path,
    trajectories: impl IntoIterator<Item = &'a Trajectory>,
    options: VerlOptions,
) -> Result<ExportSummary> {
    let mut writer = VerlWriter::create(path, options)?;
    for t in trajectories {
        writer.push(t, None)?;
    }
    writer.finish()
}

//! Run checkpoints: a sync training run killed (SIGKILL, in a child process) after a
//! checkpoint and resumed from it gives the step metrics, held-out curve and final weights of
//! the same run left uninterrupted.

#![cfg(feature = "tch")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers

mod word_family;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use uniagent_train::model::{ModelDtype, Qwen2ForCausalLM};
use uniagent_train::pipeline::{Pipeline, PipelineConfig, StepRecord, Summary, TaskSource};
use word_family::{codec_and_policy, demonstrator, metrics, spec, tasks};

/// The run under test; `engine_batch: 1` makes generation independent of which rollouts
/// happen to be decoded together, so two runs are comparable number for number.
const CONFIG: &str = "seed: 3\nengine_batch: 1\nsft:\n  steps: 45\n  batch_size: 12\n  lr: 0.003\n\
    rl:\n  steps: 5\n  tasks_per_step: 3\n  group_size: 4\n  lr: 0.0005\n  eval_every: 2\n\
    checkpoint:\n  every: 1\n  keep: 2\n";
const CHILD_OUT: &str = "UNIAGENT_RESUME_TEST_OUT";

/// The tests of this binary share libtorch's global seed and thread settings: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn train(out: &Path, resume: bool) -> Summary {
    let (codec, policy) = codec_and_policy(3);
    let config = PipelineConfig::from_yaml_str(CONFIG).unwrap();
    let mut pipeline = if resume {
        let checkpoint = Pipeline::latest_checkpoint(out).unwrap().unwrap();
        Pipeline::resume(policy, spec(codec.clone()), config.clone(), checkpoint).unwrap()
    } else {
        Pipeline::new(policy, spec(codec.clone()), config.clone(), out).unwrap()
    };
    let held_out = tasks("eval", 6);
    pipeline
        .run(
            demonstrator(codec, 12),
            tasks("sft", 12),
            TaskSource::new(tasks("rl", 30), config.seed),
            &held_out,
        )
        .await
        .unwrap()
}

/// Not a test on its own: the child process the resume test starts and kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by a_killed_sync_run_resumes_with_the_numbers_of_an_uninterrupted_one"]
async fn child_training_run() {
    let Ok(out) = std::env::var(CHILD_OUT) else {
        return;
    };
    train(Path::new(&out), false).await;
}

/// What a resumed run must reproduce: everything but wall-clock figures.
fn comparable(r: &StepRecord) -> StepRecord {
    StepRecord {
        tokens_per_s: 0.0,
        rollouts_per_s: 0.0,
        rollout_wait_s: 0.0,
        train_s: 0.0,
        sync_s: 0.0,
        ..r.clone()
    }
}

fn policy_of(dir: &Path) -> Vec<(String, tch::Tensor)> {
    let p = Qwen2ForCausalLM::load(dir, tch::Device::Cpu, ModelDtype::F32).unwrap();
    let mut v: Vec<(String, tch::Tensor)> = p.var_store().variables().into_iter().collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_sync_run_resumes_with_the_numbers_of_an_uninterrupted_one() {
    let _serial = SERIAL.lock().await;
    let straight = tempfile::tempdir().unwrap();
    let killed = tempfile::tempdir().unwrap();

    // The run that gets killed: a child process, SIGKILLed once step 2's checkpoint is
    // complete (it is then inside step 3, so records past the checkpoint are on disk).
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_training_run", "--ignored", "--nocapture"])
        .env(CHILD_OUT, killed.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let latest = killed.path().join("checkpoints/latest");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        if std::fs::read_to_string(&latest).is_ok_and(|s| s.trim() == "step-000002") {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child run ended before its step-2 checkpoint"
        );
        assert!(Instant::now() < deadline, "no step-2 checkpoint in 10 min");
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let at_kill = Pipeline::checkpoint_step(killed.path()).unwrap().unwrap();
    assert!((2..5).contains(&at_kill), "killed after step {at_kill}");

    // Meanwhile nothing: the uninterrupted run goes after the kill, so the two never share
    // the two cores (timing does not enter the numbers, but the test stays short).
    let a = train(straight.path(), false).await;
    let b = train(killed.path(), true).await;

    let (ma, mb) = (metrics(straight.path()), metrics(killed.path()));
    assert_eq!(ma.len(), 5);
    assert_eq!(
        ma.iter().map(comparable).collect::<Vec<_>>(),
        mb.iter().map(comparable).collect::<Vec<_>>(),
        "step records differ after resuming from step {at_kill}"
    );
    assert!(
        ma.iter()
            .any(|r| r.mixed_groups > 0.0 && r.grad_norm.is_some_and(|g| g > 0.0)),
        "no step had a learning signal, so the comparison proves little: {ma:?}"
    );
    assert_eq!(a.curve, b.curve);
    assert_eq!(a.reward_curve, b.reward_curve);
    assert_eq!(a.sft_only_success, b.sft_only_success);
    assert_eq!(a.sft_steps, b.sft_steps);

    // The trajectories file holds each rollout once (the killed step's partial lines cut).
    let lines = |d: &Path| {
        std::fs::read_to_string(d.join("trajectories.jsonl"))
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["phase"].clone(),
                    v["step"].clone(),
                    v["id"].clone(),
                    v["response_ids"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(lines(straight.path()), lines(killed.path()));

    // The final policies are equal bit for bit.
    let (pa, pb) = (
        policy_of(&straight.path().join("checkpoints/step-000005")),
        policy_of(&killed.path().join("checkpoints/step-000005")),
    );
    assert_eq!(pa.len(), pb.len());
    for ((na, ta), (nb, tb)) in pa.iter().zip(&pb) {
        assert_eq!(na, nb);
        assert!(ta.equal(tb), "{na} differs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_needs_a_checkpoint_and_the_same_configuration() {
    let _serial = SERIAL.lock().await;
    let out = tempfile::tempdir().unwrap();
    let (codec, _) = codec_and_policy(3);
    let config = PipelineConfig::from_yaml_str(CONFIG).unwrap();
    assert!(Pipeline::latest_checkpoint(out.path()).unwrap().is_none());

    // Two RL steps without SFT leave a checkpoint at step 2.
    let mut short = config.clone();
    short.sft.steps = 0;
    short.rl.steps = 2;
    let (_, policy) = codec_and_policy(3);
    let mut pipeline =
        Pipeline::new(policy, spec(codec.clone()), short.clone(), out.path()).unwrap();
    pipeline
        .rl(TaskSource::new(tasks("rl", 30), 3), &[])
        .await
        .unwrap();
    assert_eq!(Pipeline::checkpoint_step(out.path()).unwrap(), Some(2));

    let mut other = short.clone();
    other.rl.lr *= 2.0;
    let (_, policy) = codec_and_policy(3);
    let checkpoint = Pipeline::latest_checkpoint(out.path()).unwrap().unwrap();
    assert_eq!((checkpoint.step(), checkpoint.run_dir()), (2, out.path()));
    let err = Pipeline::resume(policy, spec(codec.clone()), other, checkpoint)
        .unwrap_err()
        .to_string();
    assert!(err.contains("rl.lr"), "{err}");

    // Training longer is allowed: two more steps continue the numbering.
    let mut longer = short.clone();
    longer.rl.steps = 4;
    let (_, policy) = codec_and_policy(3);
    let checkpoint = Pipeline::latest_checkpoint(out.path()).unwrap().unwrap();
    let mut pipeline = Pipeline::resume(policy, spec(codec), longer, checkpoint).unwrap();
    let rl = pipeline
        .rl(TaskSource::new(tasks("rl", 30), 3), &[])
        .await
        .unwrap();
    assert_eq!(
        rl.steps.iter().map(|s| s.step).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert_eq!(metrics(out.path()).len(), 4);
    assert_eq!(Pipeline::checkpoint_step(out.path()).unwrap(), Some(4));

    // A fresh run in the same folder starts over and drops the old checkpoints.
    let (_, policy) = codec_and_policy(3);
    let _fresh = Pipeline::new(policy, spec(codec_and_policy(3).0), short, out.path()).unwrap();
    assert_eq!(Pipeline::checkpoint_step(out.path()).unwrap(), None);
    assert!(metrics(out.path()).is_empty());
}

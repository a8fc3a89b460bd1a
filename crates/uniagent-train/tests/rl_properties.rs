//! Invariants of the RL numerics, for any batch: identical scores in a group give zero
//! advantage; mask-0 tokens get zero gradient under every loss and aggregation; splitting a
//! mini-batch into micro-batches (with the mini-batch's [`GlobalBatchInfo`]) does not change
//! the accumulated gradient; bad input is a typed error.
#![cfg(feature = "tch")]
// Helpers outside #[test] functions unwrap too: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use tch::{Kind, Tensor};
use uniagent_train::rl::*;

/// A random batch: B rows of width T, group ids, mask, log-probs, advantages.
#[derive(Debug, Clone)]
struct Batch {
    b: i64,
    t: i64,
    uid: Vec<String>,
    scores: Vec<f32>,
    mask: Vec<i64>,
    old: Vec<f32>,
    logp: Vec<f32>,
    reference: Vec<f32>,
}

fn batch() -> impl Strategy<Value = Batch> {
    (1i64..7, 1i64..7).prop_flat_map(|(b, t)| {
        let n = (b * t) as usize;
        (
            prop::collection::vec(0usize..3, b as usize),
            prop::collection::vec(
                prop_oneof![Just(0.0f32), Just(1.0f32), -2.0f32..2.0],
                b as usize,
            ),
            prop::collection::vec(prop::bool::weighted(0.7), n),
            prop::collection::vec(-5.0f32..-0.01, n),
            prop::collection::vec(-30.0f32..30.0, n),
            prop::collection::vec(-1.0f32..1.0, n),
        )
            .prop_map(move |(groups, scores, mask, old, delta, ref_delta)| Batch {
                b,
                t,
                uid: groups.iter().map(|g| format!("g{g}")).collect(),
                scores,
                mask: mask.iter().map(|m| i64::from(*m)).collect(),
                logp: old
                    .iter()
                    .zip(&delta)
                    .map(|(o, d)| o + d * d.abs() / 30.0)
                    .collect(),
                reference: old.iter().zip(&ref_delta).map(|(o, d)| o + d).collect(),
                old,
            })
    })
}

impl Batch {
    fn m(&self, v: &[f32]) -> Tensor {
        Tensor::from_slice(v).view([self.b, self.t])
    }
    fn mask(&self) -> Tensor {
        Tensor::from_slice(&self.mask).view([self.b, self.t])
    }
    fn advantages(&self) -> Tensor {
        let mask = self.mask();
        let rewards = token_level_rewards(&Tensor::from_slice(&self.scores), &mask).unwrap();
        grpo_advantages(
            &rewards,
            &mask,
            &Groups::from_uids(&self.uid),
            true,
            GRPO_EPSILON,
        )
        .unwrap()
    }
}

fn clip() -> ClipConfig {
    ClipConfig {
        clip_ratio_low: 0.2,
        clip_ratio_high: 0.28,
        clip_ratio_c: 3.0,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn identical_scores_in_a_group_give_zero_advantage(
        groups in prop::collection::vec((1usize..5, (-12i32..12).prop_map(|k| k as f32 / 4.0)), 1..5),
        t in 1i64..6,
    ) {
        // Scores are multiples of 1/4 (0/1 rewards, partial credit): their float32 group mean
        // is exact. For scores like 0.4621566 verl's own float32 mean is off by one ulp and
        // GRPO turns that into a non-zero advantage; the golden test `identical-inexact`
        // checks that we reproduce that quirk too.
        let uid: Vec<String> = groups.iter().enumerate()
            .flat_map(|(k, (n, _))| std::iter::repeat_n(format!("p{k}"), *n)).collect();
        let scores: Vec<f32> = groups.iter().flat_map(|(n, s)| std::iter::repeat_n(*s, *n)).collect();
        let b = uid.len() as i64;
        let mask = Tensor::ones([b, t], (Kind::Int64, tch::Device::Cpu));
        let rewards = token_level_rewards(&Tensor::from_slice(&scores), &mask).unwrap();
        let g = Groups::from_uids(&uid);
        for (adv, n_of) in [
            (grpo_advantages(&rewards, &mask, &g, true, GRPO_EPSILON).unwrap(), "grpo"),
            (grpo_advantages(&rewards, &mask, &g, false, GRPO_EPSILON).unwrap(), "grpo_no_std"),
            (group_advantages(GroupEstimator::Rloo, &rewards, &mask, &g).unwrap(), "rloo"),
        ] {
            for (row, (n, s)) in groups.iter().flat_map(|(n, s)| std::iter::repeat_n((*n, *s), *n)).enumerate() {
                let row_max = adv.get(row as i64).abs().max().double_value(&[]);
                if n > 1 {
                    prop_assert_eq!(row_max, 0.0, "{} row {}", n_of, row);
                } else if n_of != "grpo_no_std" {
                    // singletons: μ = 0 (and σ = 1), so the score itself survives
                    prop_assert!(row_max <= f64::from(s.abs()) + 1e-6);
                }
            }
        }
    }

    #[test]
    fn mask_zero_tokens_get_zero_gradient(batch in batch()) {
        let mask = batch.mask();
        let adv = batch.advantages();
        let old = batch.m(&batch.old);
        let info = GlobalBatchInfo::for_mini_batch(&mask).unwrap();
        prop_assume!(info.batch_num_tokens.unwrap_or(0) > 0);
        let zero = mask.eq(0);
        for mode in PolicyLossMode::ALL {
            for agg in LossAggMode::ALL {
                for info in [info, GlobalBatchInfo::LOCAL] {
                    let logp = batch.m(&batch.logp).set_requires_grad(true);
                    let out = policy_loss(mode, LossInputs::new(&old, &logp, &adv, &mask), &clip(), agg, &info).unwrap();
                    out.loss.backward();
                    let grad = logp.grad();
                    prop_assert!(bool::try_from(grad.isfinite().all()).unwrap());
                    let leaked = grad.masked_select(&zero).abs().sum(Kind::Double).double_value(&[]);
                    prop_assert_eq!(leaked, 0.0, "{}/{}", mode, agg);
                }
            }
            // the KL loss, aggregated like the policy loss
            for name in ["k1", "abs", "k2", "k3", "k3+"] {
                let logp = batch.m(&batch.logp).set_requires_grad(true);
                let kl = kl_penalty(&logp, &batch.m(&batch.reference), name.parse().unwrap()).unwrap();
                agg_loss(&kl, &mask, LossAggMode::TokenMean, &info).unwrap().backward();
                let leaked = logp.grad().masked_select(&zero).abs().sum(Kind::Double).double_value(&[]);
                prop_assert_eq!(leaked, 0.0, "{}", name);
            }
        }
    }

    #[test]
    fn micro_batching_does_not_change_the_gradient(batch in batch(), split in 1i64..6) {
        prop_assume!(batch.b > 1);
        let split = split.min(batch.b - 1);
        let mask = batch.mask();
        let info = GlobalBatchInfo::for_mini_batch(&mask).unwrap();
        prop_assume!(info.batch_num_tokens.unwrap_or(0) > 0);
        let adv = batch.advantages();
        let old = batch.m(&batch.old);
        for mode in PolicyLossMode::ALL {
            for agg in LossAggMode::ALL {
                let whole = batch.m(&batch.logp).set_requires_grad(true);
                policy_loss(mode, LossInputs::new(&old, &whole, &adv, &mask), &clip(), agg, &info).unwrap().loss.backward();
                let logp = batch.m(&batch.logp).set_requires_grad(true);
                for (start, len) in [(0, split), (split, batch.b - split)] {
                    let part = |t: &Tensor| t.narrow(0, start, len);
                    let (old, logp, adv, mask) = (part(&old), part(&logp), part(&adv), part(&mask));
                    let out = policy_loss(mode, LossInputs::new(&old, &logp, &adv, &mask), &clip(), agg, &info).unwrap();
                    out.loss.backward();
                }
                let diff = (whole.grad() - logp.grad()).abs().max().double_value(&[]);
                prop_assert!(diff <= 1e-6, "{}/{}: {}", mode, agg, diff);
            }
        }
    }
}

#[test]
fn bad_input_is_a_typed_error() {
    let mask = Tensor::ones([2, 3], (Kind::Int64, tch::Device::Cpu));
    let x = Tensor::zeros([2, 3], (Kind::Float, tch::Device::Cpu));
    let wrong = Tensor::zeros([2, 4], (Kind::Float, tch::Device::Cpu));
    let info = GlobalBatchInfo::for_mini_batch(&mask).unwrap();
    let err = policy_loss(
        PolicyLossMode::Vanilla,
        LossInputs::new(&x, &wrong, &x, &mask),
        &clip(),
        LossAggMode::TokenMean,
        &info,
    );
    assert!(
        matches!(
            err,
            Err(RlError::Shape {
                what: "old_log_prob",
                ..
            })
        ),
        "{err:?}"
    );
    let bad_c = ClipConfig {
        clip_ratio_c: 1.0,
        ..clip()
    };
    let inputs = LossInputs::new(&x, &x, &x, &mask);
    let err = policy_loss(
        PolicyLossMode::Vanilla,
        inputs,
        &bad_c,
        LossAggMode::TokenMean,
        &info,
    );
    assert!(matches!(err, Err(RlError::InvalidConfig(_))), "{err:?}");
    assert!(matches!(
        "k4".parse::<KlEstimator>(),
        Err(RlError::UnknownName { .. })
    ));
    assert!(matches!(
        "token-max".parse::<LossAggMode>(),
        Err(RlError::UnknownName { .. })
    ));
    assert!(matches!(
        "ppo".parse::<PolicyLossMode>(),
        Err(RlError::UnknownName { .. })
    ));
    let one = Tensor::from_slice(&[1i64, 0, 0]).view([1, 3]);
    let err = masked_whiten(
        &Tensor::zeros([1, 3], (Kind::Float, tch::Device::Cpu)),
        &one,
    );
    assert!(
        matches!(err, Err(RlError::TooFewTokens { tokens: 1 })),
        "{err:?}"
    );
    let groups = Groups::from_uids(&["a"]);
    let err = grpo_advantages(&x, &mask, &groups, true, GRPO_EPSILON);
    assert!(
        matches!(err, Err(RlError::Shape { what: "uid", .. })),
        "{err:?}"
    );
    assert!(entropy_from_logits(&Tensor::from(1.0f32)).is_err());
    for mode in LossAggMode::ALL {
        assert_eq!(mode.as_str().parse::<LossAggMode>().unwrap(), mode);
    }
}

#[test]
fn rl_batch_validation_rejects_malformed_batches() {
    let good = RlBatch {
        uid: vec!["a".into(), "a".into()],
        scores: vec![1.0, 0.0],
        response_mask: vec![vec![1, 1], vec![1, 0]],
        old_log_prob: vec![vec![-1.0, -1.0], vec![-1.0, -1.0]],
        log_prob: vec![vec![-1.0, -1.0], vec![-1.0, -1.0]],
        ref_log_prob: vec![vec![-1.0, -1.0], vec![-1.0, -1.0]],
        config: RlBatchConfig {
            clip_ratio_low: 0.2,
            clip_ratio_high: 0.2,
            clip_ratio_c: 3.0,
        },
    };
    assert_eq!(good.validate().unwrap(), (2, 2));
    assert!(rl_report(&good).is_ok());
    let mut b = good.clone();
    b.scores.pop();
    assert!(matches!(b.validate(), Err(RlError::InvalidBatch(_))));
    let mut b = good.clone();
    b.log_prob[1].push(0.0);
    assert!(matches!(b.validate(), Err(RlError::InvalidBatch(_))));
    let mut b = good.clone();
    b.ref_log_prob[0][0] = f64::NAN;
    assert!(matches!(b.validate(), Err(RlError::InvalidBatch(_))));
    let mut b = good.clone();
    b.response_mask[0][0] = 3;
    assert!(matches!(b.validate(), Err(RlError::InvalidBatch(_))));
    let mut b = good;
    b.uid.clear();
    assert!(matches!(b.validate(), Err(RlError::InvalidBatch(_))));
}

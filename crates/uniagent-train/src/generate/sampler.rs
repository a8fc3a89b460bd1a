//! Choosing the next token from a row of logits.

use uniagent_core::SamplingParams;

/// A sampled token and its log-probability under the model's unmodified distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampled {
    /// The chosen id.
    pub token: u32,
    /// `log_softmax(logits)[token]`: temperature 1, no top-p/top-k (vLLM's default
    /// `raw_logprobs`).
    pub logprob: f32,
    /// The log-probability under the distribution the token was really drawn from (vLLM's
    /// `processed_logprobs`): `logits / temperature`, truncated by top-k/top-p and
    /// renormalised; 0 for greedy picks (a point mass). The behaviour policy of rollout
    /// correction.
    pub processed_logprob: f32,
}

/// Picks the next token from one row of float32 logits.
///
/// - temperature `0` (or `top_k == 1`): the arg-max (lowest id among ties);
/// - otherwise: softmax of `logits / temperature`, restricted to the `top_k` most likely ids,
///   then to the smallest set of most likely ids whose mass reaches `top_p`, renormalised, and
///   sampled by inverse CDF with one uniform draw from `rng`.
///
/// The reported logprob is always that of the unmodified distribution, which is what the
/// trainer recomputes; the sampling distribution (temperature, truncation) is a choice of the
/// rollout, corrected for, if at all, by importance weights on the trainer side.
///
/// ```
/// use uniagent_core::SamplingParams;
/// use uniagent_train::generate::sample_token;
/// let logits = [0.0f32, 2.0, 1.0];
/// let mut rng = fastrand::Rng::with_seed(7);
/// let s = sample_token(&logits, &SamplingParams::greedy(), &mut rng);
/// assert_eq!(s.token, 1);
/// let z = (0f32.exp() + 2f32.exp() + 1f32.exp()).ln();
/// assert!((s.logprob - (2.0 - z)).abs() < 1e-6);
/// ```
pub fn sample_token(logits: &[f32], params: &SamplingParams, rng: &mut fastrand::Rng) -> Sampled {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let (token, processed) = if is_greedy(params) {
        (argmax(logits), 0.0)
    } else {
        let support = Support::new(logits, max, params);
        let token = support.draw(rng);
        (token, support.logprob(token))
    };
    Sampled {
        token: token as u32,
        logprob: raw_logprob(logits, max, token),
        processed_logprob: processed as f32,
    }
}

/// The log-probabilities of an already chosen `token` under one row of float32 logits, as
/// [`sample_token`] reports them for the token it draws: the raw one, and the one under the
/// sampling distribution of `params` (0 for greedy decoding, whose pick is a point mass).
///
/// `None` when `token` is outside the vocabulary, or when `params` truncate the distribution
/// (top-k, top-p) and `token` is outside what they keep: then no draw from these logits could
/// have picked it.
///
/// ```
/// use uniagent_core::SamplingParams;
/// use uniagent_train::generate::{sample_token, score_token};
/// let logits = [0.0f32, 2.0, 1.0];
/// let params = SamplingParams { temperature: 0.7, ..SamplingParams::default() };
/// let drawn = sample_token(&logits, &params, &mut fastrand::Rng::with_seed(3));
/// assert_eq!(score_token(&logits, &params, drawn.token), Some(drawn));
/// ```
pub fn score_token(logits: &[f32], params: &SamplingParams, token: u32) -> Option<Sampled> {
    let id = token as usize;
    if id >= logits.len() {
        return None;
    }
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let processed = if is_greedy(params) {
        0.0
    } else {
        let support = Support::new(logits, max, params);
        let logprob = support.logprob(id);
        if logprob == f64::NEG_INFINITY {
            return None;
        }
        logprob
    };
    Some(Sampled {
        token,
        logprob: raw_logprob(logits, max, id),
        processed_logprob: processed as f32,
    })
}

fn is_greedy(params: &SamplingParams) -> bool {
    params.temperature <= 0.0 || params.top_k == Some(1)
}

/// `log_softmax(logits)[token]`, given the largest logit.
fn raw_logprob(logits: &[f32], max: f32, token: usize) -> f32 {
    let log_z = max + logits.iter().map(|&l| (l - max).exp()).sum::<f32>().ln();
    logits.get(token).map_or(f32::NEG_INFINITY, |&l| l - log_z)
}

fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best
}

/// The distribution a non-greedy draw samples from: `logits / temperature`, truncated by
/// top-k and top-p.
struct Support {
    /// Unnormalised probabilities of every id, in f64 for a stable cumulative sum.
    weights: Vec<f64>,
    /// The ids kept by truncation, most likely first; `None` when nothing is truncated (every
    /// id, in id order).
    kept: Option<Vec<usize>>,
    /// The total weight of the kept ids.
    mass: f64,
}

impl Support {
    fn new(logits: &[f32], max: f32, params: &SamplingParams) -> Self {
        let inv_t = 1.0 / params.temperature;
        let weights: Vec<f64> = logits
            .iter()
            .map(|&l| ((f64::from(l) - f64::from(max)) * inv_t).exp())
            .collect();
        let top_k = params
            .top_k
            .map_or(logits.len(), |k| (k as usize).min(logits.len()));
        let truncate = top_k < logits.len() || params.top_p < 1.0;
        if !truncate {
            let mass = weights.iter().sum();
            return Self {
                weights,
                kept: None,
                mass,
            };
        }
        let mut order: Vec<usize> = (0..logits.len()).collect();
        if top_k < order.len() {
            order.select_nth_unstable_by(top_k, |&a, &b| {
                weights[b].total_cmp(&weights[a]).then(a.cmp(&b))
            });
            order.truncate(top_k);
        }
        order.sort_unstable_by(|&a, &b| weights[b].total_cmp(&weights[a]).then(a.cmp(&b)));
        let kept_mass: f64 = order.iter().map(|&i| weights[i]).sum();
        let mut keep = order.len();
        if params.top_p < 1.0 {
            let target = params.top_p * kept_mass;
            let mut acc = 0.0;
            for (n, &i) in order.iter().enumerate() {
                acc += weights[i];
                if acc >= target {
                    keep = n + 1;
                    break;
                }
            }
        }
        order.truncate(keep);
        let mass = order.iter().map(|&i| weights[i]).sum();
        Self {
            weights,
            kept: Some(order),
            mass,
        }
    }

    /// One id, by inverse CDF with one uniform draw from `rng`.
    fn draw(&self, rng: &mut fastrand::Rng) -> usize {
        match &self.kept {
            None => inverse_cdf(self.weights.iter().copied().enumerate(), self.mass, rng),
            Some(kept) => inverse_cdf(kept.iter().map(|&i| (i, self.weights[i])), self.mass, rng),
        }
    }

    /// The log-probability of `token` (minus infinity outside the kept ids).
    fn logprob(&self, token: usize) -> f64 {
        let kept = self.kept.as_ref().is_none_or(|kept| kept.contains(&token));
        if kept {
            (self.weights[token] / self.mass).ln()
        } else {
            f64::NEG_INFINITY
        }
    }
}

fn inverse_cdf(
    items: impl Iterator<Item = (usize, f64)>,
    mass: f64,
    rng: &mut fastrand::Rng,
) -> usize {
    let target = rng.f64() * mass;
    let mut acc = 0.0;
    let mut last = 0;
    for (i, w) in items {
        if w <= 0.0 {
            continue;
        }
        acc += w;
        last = i;
        if acc > target {
            return i;
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f64, top_p: f64, top_k: Option<u32>) -> SamplingParams {
        SamplingParams {
            temperature,
            top_p,
            top_k,
            ..SamplingParams::default()
        }
    }

    #[test]
    fn top_k_and_top_p_never_pick_outside_the_kept_set() {
        let logits = [3.0f32, 2.9, 0.0, -1.0, 2.8, -5.0];
        let mut rng = fastrand::Rng::with_seed(1);
        for _ in 0..500 {
            let t = sample_token(&logits, &params(1.0, 1.0, Some(2)), &mut rng).token;
            assert!(t == 0 || t == 1, "top-k 2 picked {t}");
            let t = sample_token(&logits, &params(1.0, 0.3, None), &mut rng).token;
            assert!(t == 0 || t == 1, "top-p 0.3 picked {t}");
        }
    }

    #[test]
    fn frequencies_follow_the_tempered_distribution() {
        let logits = [0.0f32, 1.0, 2.0];
        let mut rng = fastrand::Rng::with_seed(3);
        let n = 20_000;
        let mut counts = [0usize; 3];
        for _ in 0..n {
            counts[sample_token(&logits, &params(0.5, 1.0, None), &mut rng).token as usize] += 1;
        }
        let w: Vec<f64> = [0.0f64, 2.0, 4.0].iter().map(|x| x.exp()).collect();
        let z: f64 = w.iter().sum();
        for i in 0..3 {
            let p = counts[i] as f64 / n as f64;
            assert!(
                (p - w[i] / z).abs() < 0.02,
                "token {i}: {p} vs {}",
                w[i] / z
            );
        }
    }

    #[test]
    fn processed_logprob_is_that_of_the_sampling_distribution() {
        let logits = [0.5f32, 1.5, -0.5, 1.0];
        let mut rng = fastrand::Rng::with_seed(4);
        for _ in 0..50 {
            // Temperature 0.5, no truncation: log_softmax(logits / 0.5).
            let s = sample_token(&logits, &params(0.5, 1.0, None), &mut rng);
            let z = logits
                .iter()
                .map(|l| f64::from(l / 0.5).exp())
                .sum::<f64>()
                .ln();
            let expected = f64::from(logits[s.token as usize] / 0.5) - z;
            assert!((f64::from(s.processed_logprob) - expected).abs() < 1e-5);
            // Top-k 2 at temperature 1: renormalised over ids 1 and 3.
            let s = sample_token(&logits, &params(1.0, 1.0, Some(2)), &mut rng);
            let z = (1.5f64.exp() + 1.0f64.exp()).ln();
            let expected = f64::from(logits[s.token as usize]) - z;
            assert!((f64::from(s.processed_logprob) - expected).abs() < 1e-5);
        }
        let g = sample_token(&logits, &params(0.0, 1.0, None), &mut rng);
        assert_eq!(g.processed_logprob, 0.0);
    }

    #[test]
    fn logprob_ignores_temperature_and_truncation() {
        let logits = [0.5f32, 1.5, -0.5];
        let z = logits.iter().map(|l| l.exp()).sum::<f32>().ln();
        let mut rng = fastrand::Rng::with_seed(9);
        let s = sample_token(&logits, &params(0.3, 0.5, Some(1)), &mut rng);
        assert_eq!(s.token, 1);
        assert!((s.logprob - (1.5 - z)).abs() < 1e-6);
    }

    #[test]
    fn scoring_a_drawn_token_gives_what_the_draw_reported() {
        let logits = [0.5f32, 1.5, -0.5, 1.0, 0.9];
        let mut rng = fastrand::Rng::with_seed(11);
        for p in [
            params(1.0, 1.0, None),
            params(0.6, 1.0, None),
            params(0.8, 0.7, None),
            params(1.2, 1.0, Some(3)),
            params(0.0, 1.0, None),
        ] {
            for _ in 0..40 {
                let drawn = sample_token(&logits, &p, &mut rng);
                assert_eq!(score_token(&logits, &p, drawn.token), Some(drawn), "{p:?}");
            }
        }
        // Outside what top-k keeps, or outside the vocabulary: no draw could pick it.
        assert_eq!(score_token(&logits, &params(1.0, 1.0, Some(2)), 2), None);
        assert_eq!(score_token(&logits, &params(1.0, 1.0, None), 5), None);
    }
}

//! Learning-rate schedules with linear warmup.

use serde::{Deserialize, Serialize};

/// The shape of the learning rate after warmup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleKind {
    /// The peak rate after warmup.
    Constant,
    /// Half a cosine from the peak down to `min_lr_ratio × peak` at `total_steps`.
    Cosine,
}

/// A learning-rate schedule: linear warmup from 0, then constant or cosine decay (verl's
/// `get_cosine_schedule_with_warmup` with `num_cycles = 0.5`).
///
/// ```
/// use uniagent_train::trainer::{LrSchedule, ScheduleKind};
/// let s = LrSchedule { kind: ScheduleKind::Cosine, warmup_steps: 2, total_steps: 10, min_lr_ratio: 0.0 };
/// assert_eq!(s.multiplier(0), 0.0);
/// assert_eq!(s.multiplier(1), 0.5);
/// assert_eq!(s.multiplier(2), 1.0);
/// assert!((s.multiplier(6) - 0.5).abs() < 1e-12);
/// assert!(s.multiplier(10).abs() < 1e-12);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LrSchedule {
    /// Constant or cosine.
    pub kind: ScheduleKind,
    /// Steps of linear warmup (`lr × step / warmup_steps`).
    pub warmup_steps: u64,
    /// Total optimizer steps (cosine only).
    pub total_steps: u64,
    /// Floor of the cosine as a fraction of the peak.
    pub min_lr_ratio: f64,
}

impl Default for LrSchedule {
    fn default() -> Self {
        Self {
            kind: ScheduleKind::Constant,
            warmup_steps: 0,
            total_steps: 0,
            min_lr_ratio: 0.0,
        }
    }
}

impl LrSchedule {
    /// The factor applied to the peak learning rate for the optimizer step number `step`
    /// (0-based).
    pub fn multiplier(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return step as f64 / self.warmup_steps.max(1) as f64;
        }
        match self.kind {
            ScheduleKind::Constant => 1.0,
            ScheduleKind::Cosine => {
                let span = self.total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
                let progress = ((step - self.warmup_steps) as f64 / span).min(1.0);
                let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
                self.min_lr_ratio + (1.0 - self.min_lr_ratio) * cosine.max(0.0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_with_warmup_and_cosine_floor() {
        let schedule = |kind, warmup_steps, total_steps, min_lr_ratio| LrSchedule {
            kind,
            warmup_steps,
            total_steps,
            min_lr_ratio,
        };
        let c = schedule(ScheduleKind::Constant, 4, 0, 0.0);
        assert_eq!(c.multiplier(2), 0.5);
        assert_eq!(c.multiplier(100), 1.0);
        let s = schedule(ScheduleKind::Cosine, 0, 4, 0.1);
        assert_eq!(s.multiplier(0), 1.0);
        assert!((s.multiplier(4) - 0.1).abs() < 1e-12);
        assert!((s.multiplier(400) - 0.1).abs() < 1e-12);
        for step in 0..4 {
            assert!(s.multiplier(step + 1) <= s.multiplier(step));
        }
    }
}

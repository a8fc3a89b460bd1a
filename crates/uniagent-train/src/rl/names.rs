//! Config spelling of the RL enums: each is written by its verl name (its `Display`) and read
//! back through its `FromStr`, so a config, a summary and verl's own YAML use one spelling.

/// Implements `Serialize` / `Deserialize` through `Display` / `FromStr` (verl's names).
macro_rules! serde_by_name {
    ($($ty:ty),* $(,)?) => {$(
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                name.parse().map_err(serde::de::Error::custom)
            }
        }
    )*};
}

serde_by_name!(
    super::PolicyLossMode,
    super::LossAggMode,
    super::KlEstimator,
    super::AdvEstimator,
);

#[cfg(test)]
mod tests {
    use std::fmt::Display;
    use std::str::FromStr;

    use crate::rl::{AdvEstimator, KlEstimator, LossAggMode, PolicyLossMode};

    /// Every name `T` is read from and written as round-trips (a helper of the unit tests).
    fn round_trips<T>(values: &[T])
    where
        T: Display
            + FromStr
            + PartialEq
            + std::fmt::Debug
            + serde::Serialize
            + serde::de::DeserializeOwned,
        <T as std::str::FromStr>::Err: std::fmt::Debug,
    {
        for v in values {
            let json = serde_json::to_string(v).unwrap_or_default();
            assert_eq!(json, format!("\"{v}\""));
            let back: T = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(&back, v);
        }
    }

    #[test]
    fn verl_names_round_trip() {
        round_trips(&PolicyLossMode::ALL);
        round_trips(&LossAggMode::ALL);
        round_trips(&AdvEstimator::ALL);
        let kl: Vec<KlEstimator> = ["kl", "abs", "mse", "low_var_kl", "low_var_kl+"]
            .iter()
            .map(|n| n.parse().unwrap_or_else(|e| panic!("{n}: {e:?}")))
            .collect();
        round_trips(&kl);
    }

    #[test]
    fn unknown_names_are_errors_naming_them() {
        let err = serde_json::from_str::<PolicyLossMode>("\"ppo2\"").unwrap_err();
        assert!(err.to_string().contains("ppo2"), "{err}");
        // The loss's earlier config name.
        assert_eq!(
            serde_json::from_str::<PolicyLossMode>("\"grpo\"").ok(),
            Some(PolicyLossMode::Vanilla)
        );
    }
}

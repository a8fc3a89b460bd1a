//! The verifier's reward files: `/logs/verifier/reward.json` (a flat object of finite numbers;
//! it wins when both exist) or `/logs/verifier/reward.txt` (one number, read as `{"reward": x}`).

use std::collections::BTreeMap;

use serde_json::Value;

/// Where the verifier writes its rewards.
pub const REWARD_DIR: &str = "/logs/verifier";
/// One number.
pub const REWARD_TXT: &str = "/logs/verifier/reward.txt";
/// A flat JSON object of numbers.
pub const REWARD_JSON: &str = "/logs/verifier/reward.json";
/// The key `reward.txt` is read as, and the conventional score of `reward.json`.
pub const REWARD_KEY: &str = "reward";

/// Why the reward files give no reward (each an infrastructure failure of the verifier, never a
/// reward of 0).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RewardFileError {
    /// Neither file exists.
    #[error("the verifier wrote neither {REWARD_JSON} nor {REWARD_TXT}")]
    NotFound,
    /// The file is empty.
    #[error("{file} is empty")]
    Empty {
        /// The file.
        file: &'static str,
    },
    /// The file holds something else than the format.
    #[error("{file}: {message}")]
    Malformed {
        /// The file.
        file: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// The rewards of one verification from the files' contents (`None`: the file does not
/// exist).
///
/// ```
/// use uniagent_rewards::harbor::rewards_from_files;
/// let rewards = rewards_from_files(None, Some(" 0.5\n")).unwrap();
/// assert_eq!(rewards["reward"], 0.5);
/// let both = rewards_from_files(Some("{\"reward\": 1, \"style\": 0.5}"), Some("0")).unwrap();
/// assert_eq!(both.len(), 2);
/// ```
pub fn rewards_from_files(
    json: Option<&str>,
    txt: Option<&str>,
) -> Result<BTreeMap<String, f64>, RewardFileError> {
    if let Some(text) = json {
        return from_json(text);
    }
    let Some(text) = txt else {
        return Err(RewardFileError::NotFound);
    };
    if text.is_empty() {
        return Err(RewardFileError::Empty { file: REWARD_TXT });
    }
    let value: f64 =
        text.trim()
            .replace('_', "")
            .parse()
            .map_err(|_| RewardFileError::Malformed {
                file: REWARD_TXT,
                message: format!("not a number: {:?}", truncate(text)),
            })?;
    if !value.is_finite() {
        return Err(RewardFileError::Malformed {
            file: REWARD_TXT,
            message: format!("{value} is not a finite number"),
        });
    }
    Ok(BTreeMap::from([(REWARD_KEY.to_owned(), value)]))
}

fn from_json(text: &str) -> Result<BTreeMap<String, f64>, RewardFileError> {
    let malformed = |message: String| RewardFileError::Malformed {
        file: REWARD_JSON,
        message,
    };
    if text.is_empty() {
        return Err(RewardFileError::Empty { file: REWARD_JSON });
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| malformed(format!("not JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(malformed(format!(
            "expected an object of numbers, got {}",
            truncate(text)
        )));
    };
    map.into_iter()
        .map(|(key, v)| match v.as_f64().filter(|f| f.is_finite()) {
            Some(f) => Ok((key, f)),
            None => Err(malformed(format!("`{key}` is {v}, not a finite number"))),
        })
        .collect()
}

fn truncate(text: &str) -> String {
    text.chars().take(80).collect()
}

/// The score of `rewards`: the key `primary`, else the only value; `None` when neither.
pub fn primary_score(rewards: &BTreeMap<String, f64>, primary: &str) -> Option<f64> {
    match rewards.get(primary) {
        Some(v) => Some(*v),
        None if rewards.len() == 1 => rewards.values().next().copied(),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reward_files_read_as_harbor_reads_them() {
        assert_eq!(
            rewards_from_files(None, None),
            Err(RewardFileError::NotFound)
        );
        assert_eq!(
            rewards_from_files(None, Some("")),
            Err(RewardFileError::Empty { file: REWARD_TXT })
        );
        assert_eq!(
            rewards_from_files(None, Some("1e-1\n")).unwrap()["reward"],
            0.1
        );
        assert_eq!(
            rewards_from_files(None, Some("1_0")).unwrap()["reward"],
            10.0
        );
        for bad in ["nan", "inf", "yes", "1 2"] {
            assert!(rewards_from_files(None, Some(bad)).is_err(), "{bad}");
        }
        // reward.json wins, whatever reward.txt says.
        let r = rewards_from_files(Some("{\"reward\": 0, \"lint\": 1}"), Some("1")).unwrap();
        assert_eq!(r["reward"], 0.0);
        for bad in [
            "",
            "[1]",
            "1",
            "{\"a\": \"1\"}",
            "{\"a\": null}",
            "{\"a\": {}}",
            "{\"a\": 1e999}",
        ] {
            assert!(rewards_from_files(Some(bad), Some("1")).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_primary_score_is_reward_else_the_only_value() {
        let one = BTreeMap::from([("pass".to_owned(), 0.5)]);
        assert_eq!(primary_score(&one, "reward"), Some(0.5));
        let two = BTreeMap::from([("a".to_owned(), 1.0), ("b".to_owned(), 0.0)]);
        assert_eq!(primary_score(&two, "reward"), None);
        assert_eq!(primary_score(&two, "b"), Some(0.0));
    }
}

//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`) and the field selectors the
//! fake supports (`metadata.name`, `metadata.namespace` with `=`, `==`, `!=`).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed `labelSelector`; every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits at commas outside parentheses.
fn split_terms(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                current.push(c);
            }
            ',' if depth == 0 => terms.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    terms.push(current);
    terms
        .into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 317
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn parse_set(rest: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set of values, found {rest:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses a `labelSelector` query value.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            if let Some(key) = term.strip_prefix('!') {
                let key = key.trim();
                if !valid_key(key) {
                    return Err(format!("invalid label key {key:?}"));
                }
                requirements.push(Requirement::NotExists(key.to_string()));
                continue;
            }
            let key_end = term
                .find(|c: char| c.is_whitespace() || matches!(c, '=' | '!' | '('))
                .unwrap_or(term.len());
            let key = term[..key_end].to_string();
            if !valid_key(&key) {
                return Err(format!("invalid label key {key:?}"));
            }
            let rest = term[key_end..].trim_start();
            let requirement = if rest.is_empty() {
                Requirement::Exists(key)
            } else if let Some(value) = rest.strip_prefix("!=") {
                Requirement::NotEquals(key, value.trim().to_string())
            } else if let Some(value) = rest.strip_prefix("==") {
                Requirement::Equals(key, value.trim().to_string())
            } else if let Some(value) = rest.strip_prefix('=') {
                Requirement::Equals(key, value.trim().to_string())
            } else if let Some(set) = rest.strip_prefix("notin") {
                Requirement::NotIn(key, parse_set(set)?)
            } else if let Some(set) = rest.strip_prefix("in") {
                Requirement::In(key, parse_set(set)?)
            } else {
                return Err(format!("unable to parse requirement {term:?}"));
            };
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let get = |key: &str| labels.get(key).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|l| !vs.iter().any(|v| v == l)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed `fieldSelector`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses a `fieldSelector` query value; fields other than `metadata.name` and
    /// `metadata.namespace` are refused, as a real server refuses unsupported field labels.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in split_terms(text) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                ));
            };
            let field = field.trim();
            if !matches!(field, "metadata.name" | "metadata.namespace") {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// A selector for one name.
    pub fn name(name: &str) -> Self {
        FieldSelector(vec![("metadata.name".into(), true, name.into())])
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let actual = match field.as_str() {
                "metadata.name" => object["metadata"]["name"].as_str(),
                _ => object["metadata"]["namespace"].as_str(),
            }
            .unwrap_or("");
            (actual == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let obj = json!({"metadata": {"labels": {"a": "1", "b": "x"}}});
        let yes = [
            "a=1",
            "a==1",
            "a!=2",
            "c!=1",
            "a in (1, 2)",
            "c notin (1)",
            "a",
            "!c",
            "a=1,b in (x,y)",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
        let no = [
            "a=2",
            "a!=1",
            "a in (2)",
            "b notin (x)",
            "c",
            "!a",
            "a=1,b=y",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&obj), "{s}");
        }
        assert!(LabelSelector::parse("a b").is_err());
    }

    #[test]
    fn field_selectors() {
        let obj = json!({"metadata": {"name": "n", "namespace": "ns"}});
        assert!(FieldSelector::parse("metadata.name=n")
            .unwrap()
            .matches(&obj));
        assert!(!FieldSelector::parse("metadata.name!=n")
            .unwrap()
            .matches(&obj));
        assert!(
            FieldSelector::parse("metadata.namespace==ns,metadata.name=n")
                .unwrap()
                .matches(&obj)
        );
        assert!(FieldSelector::parse("status.phase=Running").is_err());
    }
}

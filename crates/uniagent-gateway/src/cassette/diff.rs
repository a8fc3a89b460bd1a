//! The first difference between two JSON values, located by a JSON pointer.

use serde_json::Value;
use uniagent_core::cassette::truncate_text;

/// The first place `got` differs from `expected`: `(pointer, expected, got)`, the values
/// quoted as JSON (cut to 200 characters), `none` where a side has nothing. Object keys are
/// visited in `first` order, then sorted; arrays index by index, a length difference at the
/// shorter length.
///
/// ```
/// use serde_json::json;
/// use uniagent_gateway::cassette::first_json_difference;
/// let a = json!({"ids": [1, 2, 3], "text": "x"});
/// let b = json!({"ids": [1, 2, 4], "text": "y"});
/// let (at, expected, got) = first_json_difference(&a, &b, &["text"]).unwrap();
/// assert_eq!((at.as_str(), expected.as_str(), got.as_str()), ("/text", "\"x\"", "\"y\""));
/// assert_eq!(first_json_difference(&a, &b, &[]).unwrap().0, "/ids/2");
/// assert_eq!(first_json_difference(&a, &a, &[]), None);
/// ```
pub fn first_json_difference(
    expected: &Value,
    got: &Value,
    first: &[&str],
) -> Option<(String, String, String)> {
    let mut path = String::new();
    walk(expected, got, first, &mut path).map(|(e, g)| (path_or_root(path), show(e), show(g)))
}

fn path_or_root(path: String) -> String {
    if path.is_empty() {
        "/".into()
    } else {
        path
    }
}

fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "none".into(), |v| truncate_text(&v.to_string()))
}

type Pair<'a> = (Option<&'a Value>, Option<&'a Value>);

/// Walks both values; on a difference `path` is left pointing at it.
fn walk<'a>(a: &'a Value, b: &'a Value, first: &[&str], path: &mut String) -> Option<Pair<'a>> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&str> = first.to_vec();
            let mut rest: Vec<&str> = x
                .keys()
                .chain(y.keys())
                .map(String::as_str)
                .filter(|k| !first.contains(k))
                .collect();
            rest.sort_unstable();
            rest.dedup();
            keys.extend(rest);
            let children = keys.into_iter().map(|key| {
                let segment = key.replace('~', "~0").replace('/', "~1");
                (segment, (x.get(key), y.get(key)))
            });
            walk_children(children, path)
        }
        (Value::Array(x), Value::Array(y)) => {
            let children = (0..x.len().max(y.len())).map(|i| (i.to_string(), (x.get(i), y.get(i))));
            walk_children(children, path)
        }
        _ if a == b => None,
        _ => Some((Some(a), Some(b))),
    }
}

/// Walks `(pointer segment, pair)` children in order; a child present on one side only is a
/// difference, one absent on both is skipped.
fn walk_children<'a>(
    children: impl Iterator<Item = (String, Pair<'a>)>,
    path: &mut String,
) -> Option<Pair<'a>> {
    for (segment, pair) in children {
        let len = path.len();
        path.push('/');
        path.push_str(&segment);
        match pair {
            (None, None) => {}
            (Some(p), Some(q)) => {
                if let Some(d) = walk(p, q, &[], path) {
                    return Some(d);
                }
            }
            (p, q) => return Some((p, q)),
        }
        path.truncate(len);
    }
    None
}

//! Aligning a recorded token stream with the chat template's full re-render of the same
//! conversation (`rerender_ids`): Myers' O((N+M)·D) shortest edit script on token ids, after
//! stripping the common prefix and suffix, with the number of edits bounded so that a stream
//! that shares little with its re-render costs bounded time and memory.

use serde::Serialize;

/// What one run of the edit script does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffOp {
    /// Tokens in both, in the same place.
    Equal,
    /// Tokens of the recorded stream that the re-render does not have.
    Delete,
    /// Tokens of the re-render that the recorded stream does not have.
    Insert,
}

/// The edit script turning `a` into `b`, as runs `(op, length)` in order (neighbours differ,
/// no run is empty), or `None` when it needs more than `max_edits` inserted plus deleted
/// tokens. The script is a shortest one.
///
/// ```
/// use uniagent_cli::view::{edit_script, DiffOp::*};
/// let runs = edit_script(&[1, 2, 3, 4, 5], &[1, 3, 4, 9, 5], 10).unwrap();
/// assert_eq!(runs, vec![(Equal, 1), (Delete, 1), (Equal, 2), (Insert, 1), (Equal, 1)]);
/// assert_eq!(edit_script(&[1, 2, 3], &[4, 5, 6], 5), None);
/// ```
pub fn edit_script(a: &[u32], b: &[u32], max_edits: usize) -> Option<Vec<(DiffOp, usize)>> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a_rest, b_rest) = (&a[pre..], &b[pre..]);
    let suf = a_rest
        .iter()
        .rev()
        .zip(b_rest.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (a_mid, b_mid) = (&a_rest[..a_rest.len() - suf], &b_rest[..b_rest.len() - suf]);
    let mid = myers(a_mid, b_mid, max_edits)?;
    let mut runs: Vec<(DiffOp, usize)> = Vec::new();
    let ops = std::iter::repeat_n(DiffOp::Equal, pre)
        .chain(mid)
        .chain(std::iter::repeat_n(DiffOp::Equal, suf));
    for op in ops {
        match runs.last_mut() {
            Some((last, n)) if *last == op => *n += 1,
            _ => runs.push((op, 1)),
        }
    }
    Some(runs)
}

/// One op per token of the shortest edit script, or `None` past `max_edits`. Memory: the
/// furthest-reaching x of every diagonal reached per step, D²/2 entries for D edits.
fn myers(a: &[u32], b: &[u32], max_edits: usize) -> Option<Vec<DiffOp>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let bound = (n + m).min(max_edits as isize);
    // `v[k + off]`: the furthest x reached on diagonal k = x - y.
    let off = bound + 1;
    let mut v = vec![0isize; 2 * off as usize + 1];
    // `trace[d]`: what step d reads, v on diagonals -(d-1), -(d-1)+2, ..., d-1 (step 0 none).
    let mut trace: Vec<Vec<u32>> = Vec::new();
    let mut found = None;
    'search: for d in 0..=bound {
        trace.push(
            (-(d - 1)..=d - 1)
                .step_by(2)
                .map(|k| v[(k + off) as usize] as u32)
                .collect(),
        );
        for k in (-d..=d).step_by(2) {
            let i = (k + off) as usize;
            let mut x = if d == 0 {
                0
            } else if k == -d || (k != d && v[i - 1] < v[i + 1]) {
                v[i + 1]
            } else {
                v[i - 1] + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[i] = x;
            if x >= n && y >= m {
                found = Some(d);
                break 'search;
            }
        }
    }
    let d_total = found?;
    // Walk back from (n, m), one edit per step.
    let mut ops = Vec::with_capacity((n + m) as usize);
    let (mut x, mut y) = (n, m);
    for d in (1..=d_total).rev() {
        let before = &trace[d as usize];
        let at = |k: isize| before[((k + d - 1) / 2) as usize] as isize;
        let k = x - y;
        let prev_k = if k == -d || (k != d && at(k - 1) < at(k + 1)) {
            k + 1
        } else {
            k - 1
        };
        let prev_x = at(prev_k);
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            ops.push(DiffOp::Equal);
            x -= 1;
            y -= 1;
        }
        ops.push(if x == prev_x {
            DiffOp::Insert
        } else {
            DiffOp::Delete
        });
        (x, y) = (prev_x, prev_y);
    }
    ops.extend(std::iter::repeat_n(DiffOp::Equal, x as usize));
    ops.reverse();
    Some(ops)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::DiffOp::*;
    use super::*;

    /// Applies `runs` to `a`, taking inserted tokens from `b`: must give `b`.
    fn apply(a: &[u32], b: &[u32], runs: &[(DiffOp, usize)]) -> Vec<u32> {
        let (mut i, mut j, mut out) = (0, 0, Vec::new());
        for &(op, n) in runs {
            match op {
                Equal => {
                    assert_eq!(a[i..i + n], b[j..j + n]);
                    out.extend_from_slice(&a[i..i + n]);
                    i += n;
                    j += n;
                }
                Delete => i += n,
                Insert => {
                    out.extend_from_slice(&b[j..j + n]);
                    j += n;
                }
            }
        }
        assert_eq!((i, j), (a.len(), b.len()));
        out
    }

    fn edits(runs: &[(DiffOp, usize)]) -> usize {
        runs.iter()
            .filter(|(op, _)| *op != Equal)
            .map(|(_, n)| n)
            .sum()
    }

    /// Length of the longest common subsequence, by dynamic programming (small inputs).
    fn lcs(a: &[u32], b: &[u32]) -> usize {
        let mut row = vec![0usize; b.len() + 1];
        for x in a {
            let mut diag = 0;
            for (j, y) in b.iter().enumerate() {
                let up = row[j + 1];
                row[j + 1] = if x == y { diag + 1 } else { up.max(row[j]) };
                diag = up;
            }
        }
        row[b.len()]
    }

    #[test]
    fn a_dropped_block_is_one_deletion() {
        let a = [1, 2, 7, 7, 7, 3, 4, 5, 6];
        let b = [1, 2, 3, 4, 5, 6];
        assert_eq!(
            edit_script(&a, &b, 100).unwrap(),
            vec![(Equal, 2), (Delete, 3), (Equal, 4)]
        );
        assert_eq!(edit_script(&[], &[], 0).unwrap(), vec![]);
        assert_eq!(edit_script(&[], &[1, 2], 2).unwrap(), vec![(Insert, 2)]);
        assert_eq!(edit_script(&[], &[1, 2], 1), None);
        // The bound counts edits, not length: a long equal stream with one change is cheap.
        let long: Vec<u32> = (0..100_000).collect();
        let mut changed = long.clone();
        changed[50_000] = u32::MAX;
        assert_eq!(edits(&edit_script(&long, &changed, 2).unwrap()), 2);
    }

    proptest! {
        #[test]
        fn the_script_is_valid_and_shortest(
            a in proptest::collection::vec(0u32..4, 0..40),
            b in proptest::collection::vec(0u32..4, 0..40),
        ) {
            let runs = edit_script(&a, &b, 1000).unwrap();
            prop_assert_eq!(apply(&a, &b, &runs), b.clone());
            prop_assert_eq!(edits(&runs), a.len() + b.len() - 2 * lcs(&a, &b));
            prop_assert!(runs.windows(2).all(|w| w[0].0 != w[1].0));
            prop_assert!(runs.iter().all(|(_, n)| *n > 0));
            // Under the minimum the answer is None, never a wrong script.
            let need = edits(&runs);
            if need > 0 {
                prop_assert_eq!(edit_script(&a, &b, need - 1), None);
            }
        }
    }
}

//! Answer normalisation and scores with the semantics of the SQuAD v2.0 evaluation script that
//! search-QA work reports (exact match and token F1; v2.0 scores two empty answers as equal).

use std::collections::HashMap;

/// Normalises an answer as the SQuAD script does: lower-case, drop ASCII punctuation, drop the
/// articles `a`, `an`, `the` as whole words, collapse whitespace.
///
/// ```
/// use uniagent_rewards::answer::normalize_answer;
/// assert_eq!(normalize_answer("  The Eiffel-Tower! "), "eiffeltower");
/// assert_eq!(normalize_answer("An apple a day"), "apple day");
/// ```
pub fn normalize_answer(text: &str) -> String {
    let lowered = text.to_lowercase();
    let without_punctuation: String = lowered
        .chars()
        .filter(|c| !c.is_ascii_punctuation())
        .collect();
    without_punctuation
        .split_whitespace()
        .filter(|word| !matches!(*word, "a" | "an" | "the"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `prediction` and `gold` are equal after [`normalize_answer`].
pub fn exact_match(prediction: &str, gold: &str) -> bool {
    normalize_answer(prediction) == normalize_answer(gold)
}

/// Token-level F1 of the normalised answers (multiset overlap). Two empty answers score 1.0,
/// one empty answer scores 0.0.
///
/// ```
/// use uniagent_rewards::answer::token_f1;
/// assert_eq!(token_f1("Barack Obama", "Obama"), 2.0 / 3.0);
/// assert_eq!(token_f1("", ""), 1.0);
/// ```
pub fn token_f1(prediction: &str, gold: &str) -> f64 {
    let predicted = normalize_answer(prediction);
    let expected = normalize_answer(gold);
    let predicted: Vec<&str> = predicted.split_whitespace().collect();
    let expected: Vec<&str> = expected.split_whitespace().collect();
    if predicted.is_empty() || expected.is_empty() {
        return if predicted.is_empty() && expected.is_empty() {
            1.0
        } else {
            0.0
        };
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for word in &expected {
        *counts.entry(word).or_default() += 1;
    }
    let mut same = 0usize;
    for word in &predicted {
        if let Some(n) = counts.get_mut(word) {
            if *n > 0 {
                *n -= 1;
                same += 1;
            }
        }
    }
    if same == 0 {
        return 0.0;
    }
    let precision = same as f64 / predicted.len() as f64;
    let recall = same as f64 / expected.len() as f64;
    2.0 * precision * recall / (precision + recall)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Values computed with the SQuAD v2.0 evaluation functions (`normalize_answer`,
    /// `compute_f1`, `compute_exact`) in Python.
    const GOLDEN: &[(&str, &str, f64, bool)] = &[
        ("Denver Broncos", "Denver Broncos", 1.0, true),
        ("the Denver Broncos", "Denver Broncos", 1.0, true),
        ("Broncos", "Denver Broncos", 0.666_666_666_666_666_6, false),
        ("Santa Clara, California", "Santa Clara", 0.8, false),
        ("it's 42.", "its 42", 1.0, true),
        ("a b c", "b c d", 0.8, false),
        ("cat cat dog", "cat dog dog", 0.666_666_666_666_666_6, false),
        ("The", "an", 1.0, true),
        ("Ünïcode WORD", "ünïcode word", 1.0, true),
        ("1,000", "1000", 1.0, true),
        ("", "something", 0.0, false),
    ];

    #[test]
    fn matches_the_squad_script() {
        for &(prediction, gold, f1, em) in GOLDEN {
            assert!(
                (token_f1(prediction, gold) - f1).abs() < 1e-12,
                "f1({prediction:?}, {gold:?}) = {}",
                token_f1(prediction, gold)
            );
            assert_eq!(exact_match(prediction, gold), em, "{prediction:?} {gold:?}");
        }
    }

    proptest! {
        #[test]
        fn f1_is_symmetric_bounded_and_one_on_equal_answers(
            a in "[a-zA-Z ,.!'-]{0,30}", b in "[a-zA-Z ,.!'-]{0,30}"
        ) {
            let f = token_f1(&a, &b);
            prop_assert!((0.0..=1.0).contains(&f));
            prop_assert!((f - token_f1(&b, &a)).abs() < 1e-12);
            prop_assert_eq!(token_f1(&a, &a), 1.0);
            prop_assert_eq!(exact_match(&a, &b), normalize_answer(&a) == normalize_answer(&b));
            if exact_match(&a, &b) {
                prop_assert_eq!(f, 1.0);
            }
        }

        #[test]
        fn normalisation_is_idempotent(a in "\\PC{0,40}") {
            let once = normalize_answer(&a);
            prop_assert_eq!(normalize_answer(&once), once.clone());
        }
    }
}

//! Quoting for the POSIX shell that sandboxes run commands in. The one copy every crate uses
//! (tools, rewards, the sandbox server).

/// Quotes `text` as one word for a POSIX shell: single quotes, each `'` written as `'\''`.
/// Every byte but `'` is literal inside single quotes, so no input can escape the word.
///
/// ```
/// use uniagent_core::sandbox::shell_quote;
/// assert_eq!(shell_quote("it's $HOME"), r#"'it'\''s $HOME'"#);
/// assert_eq!(shell_quote(""), "''");
/// ```
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::shell_quote;
    use proptest::prelude::*;

    proptest! {
        /// Undoing the quoting the way a shell reads it gives the input back.
        #[test]
        fn a_shell_reads_back_the_input(text in any::<String>()) {
            let quoted = shell_quote(&text);
            let mut out = String::new();
            let mut inside = false;
            let mut chars = quoted.chars();
            while let Some(c) = chars.next() {
                match (inside, c) {
                    (false, '\'') => inside = true,
                    (true, '\'') => inside = false,
                    (false, '\\') => out.extend(chars.next()),
                    (true, c) => out.push(c),
                    (false, c) => prop_assert!(false, "unquoted {c:?} in {quoted:?}"),
                }
            }
            prop_assert!(!inside);
            prop_assert_eq!(out, text);
        }
    }
}

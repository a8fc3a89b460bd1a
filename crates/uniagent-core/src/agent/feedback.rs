//! Texts the model reads when something about its turn went wrong, and observation clipping.
//! Wording follows Uni-Agent (so prompts and reward parsers written for it keep working), with
//! its known mistakes fixed (the elided count is positive).

/// No tool call in a turn outside chat mode.
pub const NO_FUNCTION_CALL: &str = "No function call found in the response.";

/// Placeholder for calls that did not run because the sandbox failed earlier in the turn.
pub const SKIPPED_SANDBOX: &str =
    "Skipped: the sandbox failed mid-step; no further tool calls ran.";

/// Placeholder for calls that did not run because the timeout budget ran out.
pub const SKIPPED_TIMEOUT_BUDGET: &str =
    "Skipped: timeout budget exhausted mid-step; no further tool calls ran.";

/// Placeholder for calls that did not run because the wall-clock budget ran out.
pub const SKIPPED_WALL_CLOCK: &str =
    "Skipped: the time budget of the episode ran out; no further tool calls ran.";

/// Placeholder for calls that did not run because the run was cancelled.
pub const SKIPPED_CANCELLED: &str = "Skipped: the run was cancelled; no further tool calls ran.";

/// A call to a function that is not offered.
pub(crate) fn unknown_function(name: &str, allowed: &[String]) -> String {
    format!(
        "Invalid action: function '{name}' is not defined in the tools list.\nAllowed functions should be one of: {}.",
        crate::pyfmt::list_repr(allowed)
    )
}

/// A call whose arguments are not a JSON object.
pub(crate) fn invalid_arguments(name: &str) -> String {
    format!("Invalid action: arguments for function '{name}' are not valid JSON.")
}

/// A call the loop gave up on after the tool's timeout plus the transport margin.
pub(crate) fn tool_timed_out(name: &str, secs: f64) -> String {
    format!(
        "The tool call '{name}' was cancelled because it took more than {secs} seconds. Please try a different \
         command that completes more quickly. Note: A common source of this error is if the command is interactive \
         or requires user input (it is impossible to receive user input in the current environment, so the command \
         will never complete)."
    )
}

/// Clips `content` to `max` characters, appending Uni-Agent's note with the number of
/// characters left out.
///
/// ```
/// use uniagent_core::agent::clip_observation;
/// assert_eq!(clip_observation("short".into(), 10), "short");
/// let clipped = clip_observation("abcdef".into(), 4);
/// assert!(clipped.starts_with("abcd<response clipped>"));
/// assert!(clipped.contains(" 2 characters were elided"));
/// ```
pub fn clip_observation(content: String, max: usize) -> String {
    let total = content.chars().count();
    if total <= max {
        return content;
    }
    let cut = content
        .char_indices()
        .nth(max)
        .map_or(content.len(), |(i, _)| i);
    format!(
        "{}<response clipped>\n<NOTE>Observations should not exceeded {max} characters. {} characters were elided. \
         Please try a different command that produces less output or use head/tail/grep/redirect the output to a \
         file. Do not use interactive pagers.</NOTE>",
        &content[..cut],
        total - max
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_function_lists_names_like_python() {
        let msg = unknown_function("rm", &["bash".into(), "submit".into()]);
        assert_eq!(
            msg,
            "Invalid action: function 'rm' is not defined in the tools list.\nAllowed functions should be one of: ['bash', 'submit']."
        );
    }

    #[test]
    fn clipping_counts_characters_not_bytes() {
        let s = "ééééé".to_owned();
        let c = clip_observation(s, 3);
        assert!(c.starts_with("ééé<response clipped>"));
        assert!(c.contains(" 2 characters were elided"));
    }
}

//! What a chat template does around an assistant turn, found by rendering small synthetic
//! conversations with and without a trailing turn and diffing them.

use serde::Serialize;
use serde_json::{json, Value};

use super::{Codec, Kwargs};
use crate::error::Result;

/// The structure of a chat template, as seen by the incremental codec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateProbe {
    /// Text appended by `add_generation_prompt`.
    pub generation_prompt: String,
    /// Text the template emits after an assistant's end-of-turn token and before the next
    /// message (Qwen: `"\n"`, which the model never samples).
    pub turn_glue: String,
    /// Appending a tool result after a tool-calling assistant turn (with reasoning) leaves
    /// the assistant's render unchanged.
    pub append_only_after_tool: bool,
    /// Appending a user message after an assistant turn without reasoning leaves it unchanged.
    pub append_only_after_user: bool,
    /// Appending a user message after an assistant turn with reasoning leaves it unchanged
    /// (Qwen3: `false`, it drops the reasoning of turns before the last query).
    pub append_only_after_user_with_reasoning: bool,
}

impl Codec {
    /// Probes the template with `template_kwargs` (see [`TemplateProbe`]). Renders a handful of
    /// tiny conversations; call it once per template and configuration.
    pub fn probe_template(&self, template_kwargs: &Kwargs) -> Result<TemplateProbe> {
        let call = json!([{"id": "call_0", "type": "function", "function": {"name": "probe", "arguments": {"x": 1}}}]);
        let with_reasoning = json!({"role": "assistant", "content": "A", "reasoning_content": "R", "tool_calls": call});
        let plain = json!({"role": "assistant", "content": "A"});
        let thinking = json!({"role": "assistant", "content": "A", "reasoning_content": "R"});
        let tool = json!({"role": "tool", "tool_call_id": "call_0", "content": "T"});
        let user = json!({"role": "user", "content": "U"});
        let delta = |assistant: &Value, new: &Value| {
            self.window_delta(
                None,
                assistant,
                std::slice::from_ref(new),
                &[],
                template_kwargs,
                true,
            )
        };
        let glue_delta = self.window_delta(None, &plain, &[], &[], template_kwargs, false)?;
        Ok(TemplateProbe {
            generation_prompt: self.probe_generation_prompt_with(template_kwargs)?,
            turn_glue: self.decode(&glue_delta.ids(), false)?,
            append_only_after_tool: delta(&with_reasoning, &tool)?.append_only,
            append_only_after_user: delta(&plain, &user)?.append_only,
            append_only_after_user_with_reasoning: delta(&thinking, &user)?.append_only,
        })
    }
}

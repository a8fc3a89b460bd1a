//! What a chat template does around an assistant turn, found by rendering small synthetic
//! conversations with sentinel messages and diffing them: nothing about the turn layout
//! (Qwen's `<|im_start|>`/`<|im_end|>`, Llama's headers, Gemma's `<end_of_turn>`, ...) is
//! assumed.

use serde::Serialize;
use serde_json::{json, Value};

use super::incremental::{Context, DeltaRequest};
use super::{Codec, Kwargs};
use crate::error::Result;

/// The structure of a chat template, as seen by the incremental codec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateProbe {
    /// Text appended by `add_generation_prompt`.
    pub generation_prompt: String,
    /// Text the template emits after an assistant turn's sampled span and before the next
    /// message (Qwen: `"\n"` after `<|im_end|>`, which the model never samples).
    pub turn_glue: String,
    /// Appending a tool result after a tool-calling assistant turn (with reasoning) leaves
    /// the assistant's render unchanged.
    pub append_only_after_tool: bool,
    /// Appending a user message after an assistant turn without reasoning leaves it unchanged.
    pub append_only_after_user: bool,
    /// Appending a user message after an assistant turn with reasoning leaves it unchanged
    /// (Qwen3: `false`, it drops the reasoning of turns before the last query).
    pub append_only_after_user_with_reasoning: bool,
    /// What follows an assistant turn depends only on that turn, the leading system message
    /// and the new messages: rendering a small window gives the same tokens as rendering the
    /// whole conversation, so appends cost the same at any length. When `false` the codec
    /// renders the whole conversation for each append (exact, slower).
    pub window_exact: bool,
}

impl Codec {
    /// Probes the template with `template_kwargs` (see [`TemplateProbe`]). Renders a handful of
    /// tiny conversations; call it once per template and configuration.
    pub fn probe_template(&self, template_kwargs: &Kwargs) -> Result<TemplateProbe> {
        let call = json!([{"id": "call00000", "type": "function", "function": {"name": "probe", "arguments": {"x": 1}}}]);
        let with_reasoning = json!({"role": "assistant", "content": "A", "reasoning_content": "R", "tool_calls": call});
        let plain = json!({"role": "assistant", "content": "A"});
        let thinking = json!({"role": "assistant", "content": "A", "reasoning_content": "R"});
        let tool = json!({"role": "tool", "tool_call_id": "call00000", "content": "T"});
        let user = json!({"role": "user", "content": "U"});
        let delta = |assistant: &Value, new: &[Value], gen: bool| {
            self.delta_after(&DeltaRequest {
                context: Context::Window(None),
                assistant,
                sampled: None,
                new,
                tools: &[],
                kwargs: template_kwargs,
                add_generation_prompt: gen,
            })
        };
        let glue = self.probe_turn_glue(template_kwargs)?;
        let ao = |assistant: &Value, new: &Value| {
            delta(assistant, std::slice::from_ref(new), true).is_ok_and(|d| d.append_only)
        };
        Ok(TemplateProbe {
            generation_prompt: self.probe_generation_prompt_with(template_kwargs)?,
            turn_glue: glue,
            append_only_after_tool: ao(&with_reasoning, &tool),
            append_only_after_user: ao(&plain, &user),
            append_only_after_user_with_reasoning: ao(&thinking, &user),
            window_exact: self.probe_window_exact(template_kwargs),
        })
    }

    /// The text after a plain assistant turn's sampled span (Qwen: `"\n"`).
    pub(crate) fn probe_turn_glue(&self, kwargs: &Kwargs) -> Result<String> {
        let plain = json!({"role": "assistant", "content": "A"});
        let delta = self.delta_after(&DeltaRequest {
            context: Context::Window(None),
            assistant: &plain,
            sampled: None,
            new: &[],
            tools: &[],
            kwargs,
            add_generation_prompt: false,
        })?;
        Ok(delta.glue)
    }

    /// Whether window deltas equal full-context deltas on sentinel conversations: one and
    /// several exchanges, with and without a system message, after plain and tool-calling
    /// turns, before user and tool messages. Sentinels the template rejects (e.g. tool
    /// messages in a template without tool support) do not count; appends whose window the
    /// template rejects fall back to the full context anyway.
    pub(crate) fn probe_window_exact(&self, kwargs: &Kwargs) -> bool {
        let sys = json!({"role": "system", "content": "S"});
        let u = |t: &str| json!({"role": "user", "content": t});
        let a = |t: &str| json!({"role": "assistant", "content": t});
        let call = json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
            "function": {"name": "probe", "arguments": {"x": 1}}}]});
        let tool =
            json!({"role": "tool", "tool_call_id": "call00001", "name": "probe", "content": "T"});
        let cases: Vec<(Vec<Value>, Value, Vec<Value>)> = vec![
            (vec![u("U1")], a("A1"), vec![u("U2")]),
            (vec![sys.clone(), u("U1")], a("A1"), vec![u("U2")]),
            (vec![u("U1"), a("A0"), u("U2")], a("A1"), vec![u("U3")]),
            (
                vec![sys.clone(), u("U1"), a("A0"), u("U2")],
                a("A1"),
                vec![u("U3")],
            ),
            (vec![u("U1")], call.clone(), vec![tool.clone()]),
            (vec![sys.clone(), u("U1")], call.clone(), vec![tool.clone()]),
            (
                vec![u("U1"), call.clone(), tool.clone()],
                a("A1"),
                vec![u("U2")],
            ),
            (
                vec![u("U1"), call.clone(), tool.clone()],
                call.clone(),
                vec![tool.clone()],
            ),
            (vec![u("U1"), a("A0"), u("U2")], a("A1"), vec![]),
        ];
        // Some templates render tool calls only when tools are declared: probe both ways.
        let tool_spec = json!({"type": "function", "function": {"name": "probe", "description": "P",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}});
        let tool_lists = [vec![], vec![tool_spec]];
        for ((context, assistant, new), tools) in cases
            .iter()
            .flat_map(|c| tool_lists.iter().map(move |t| (c, t)))
        {
            let system = context.first().filter(|m| m["role"] == "system");
            // The turn as sampled after the real history: a window must reproduce it too (a
            // template numbering tool calls across the conversation does not).
            let Ok(sampled) = self.sampled_text(context, assistant, tools, kwargs) else {
                continue;
            };
            let mut window: Vec<Value> = system.into_iter().cloned().collect();
            window.push(json!({"role": "user", "content": ""}));
            match self.sampled_text(&window, assistant, tools, kwargs) {
                Ok(w) if w == sampled => {}
                _ => return false,
            }
            for gen in [true, false] {
                let req = DeltaRequest {
                    context: Context::Full(context),
                    assistant,
                    sampled: sampled.as_deref(),
                    new,
                    tools,
                    kwargs,
                    add_generation_prompt: gen,
                };
                let Ok(full) = self.delta_after(&req) else {
                    continue;
                };
                let window = self.delta_after(&DeltaRequest {
                    context: Context::Window(system),
                    ..req
                });
                match window {
                    Ok(w) if w.ids() == full.ids() && w.append_only == full.append_only => {}
                    _ => return false,
                }
            }
        }
        true
    }
}

//! The full re-render of a rollout's messages, recorded by writers when the token stream is
//! not append-only so that a viewer can diff the two without a tokenizer.

use super::{messages_to_json, tools_to_json, ChatInput, Codec};
use crate::error::Result;
use crate::message::Role;
use crate::rollout::RolloutCache;

impl Codec {
    /// What the chat template renders for `cache`'s messages, tools and template variables
    /// (`apply_chat_template(..., tokenize=True)`), with the generation prompt when the last
    /// message is not an assistant turn (the stream then ends with it too). When it is one,
    /// the render stops after its last stop token: the stream ends with the sampled
    /// end-of-turn, and the glue a template puts after it (Qwen's newline) belongs to no
    /// turn yet. For an append-only rollout this equals the cache's prompt plus response ids.
    pub fn full_render_ids(&self, cache: &RolloutCache) -> Result<Vec<u32>> {
        let messages = cache.messages();
        let ends_with_turn = messages.last().is_some_and(|m| m.role == Role::Assistant);
        let mut ids = self.render_ids(&ChatInput {
            messages: messages_to_json(messages)?,
            tools: tools_to_json(cache.tools())?,
            add_generation_prompt: !ends_with_turn,
            template_kwargs: cache.template_kwargs().clone(),
        })?;
        if ends_with_turn {
            if let Some(end) = ids
                .iter()
                .rposition(|id| self.stop_token_ids().contains(id))
            {
                ids.truncate(end + 1);
            }
        }
        Ok(ids)
    }

    /// [`Codec::full_render_ids`] when the codec flagged `cache` as not append-only, `None`
    /// otherwise (nothing to compare: the stream is the render) and for message-only caches.
    pub fn rerender_ids(&self, cache: &RolloutCache) -> Result<Option<Vec<u32>>> {
        if cache.append_only() || cache.tokens().is_none() {
            return Ok(None);
        }
        self.full_render_ids(cache).map(Some)
    }
}

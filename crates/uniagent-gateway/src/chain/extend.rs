//! Appending client messages to a token chain without re-tokenizing what was sampled.
//!
//! Non-assistant messages after an assistant turn go through the codec's incremental append
//! (template glue and observations, mask 0). An assistant message the gateway did not sample
//! (a harness-inserted or edited turn) is placed after the generation prompt as the template
//! renders it, also mask 0: it becomes context, never training signal.

use serde_json::Value;
use uniagent_core::codec::{messages_to_json, tools_to_json, ChatInput, Codec};
use uniagent_core::{Error, Message, Role, RolloutCache, TokenSource};

/// Why messages could not be appended to a chain.
#[derive(Debug)]
pub(crate) enum ExtendError {
    /// The messages cannot follow the chain's tokens (two non-assistant runs with nothing
    /// between them would need the template's own joining): start a new chain.
    NotExtensible(String),
    /// The codec or the length limits refused (the caller decides between a new chain and
    /// an error).
    Codec(Error),
}

impl From<Error> for ExtendError {
    fn from(e: Error) -> Self {
        Self::Codec(e)
    }
}

/// Appends `messages` to `cache`. On error `cache` may be partly extended: callers work on a
/// copy or rewind it to a checkpoint.
pub(crate) fn extend(
    codec: &Codec,
    cache: &mut RolloutCache,
    messages: &[Message],
) -> Result<(), ExtendError> {
    let mut rest = messages;
    while let Some(first) = rest.first() {
        let after_assistant = cache
            .messages()
            .last()
            .is_some_and(|m| m.role == Role::Assistant);
        if after_assistant {
            let run = rest
                .iter()
                .take_while(|m| m.role != Role::Assistant)
                .count();
            codec.append_messages(cache, &rest[..run])?;
            rest = &rest[run..];
        } else if first.role == Role::Assistant {
            insert_assistant(codec, cache, first)?;
            rest = &rest[1..];
        } else {
            return Err(ExtendError::NotExtensible(format!(
                "a {} message cannot follow a {} message in an existing chain",
                first.role.as_str(),
                cache
                    .messages()
                    .last()
                    .map_or("missing", |m| m.role.as_str())
            )));
        }
    }
    Ok(())
}

/// Appends an assistant message the policy did not sample, as the template renders it after
/// the conversation so far (mask 0). The chain must end with the generation prompt (its last
/// message is not an assistant turn).
fn insert_assistant(
    codec: &Codec,
    cache: &mut RolloutCache,
    message: &Message,
) -> Result<(), ExtendError> {
    let input = |messages: Vec<Value>, add_generation_prompt: bool| -> Result<ChatInput, Error> {
        Ok(ChatInput {
            messages,
            tools: tools_to_json(cache.tools())?,
            add_generation_prompt,
            template_kwargs: cache.template_kwargs().clone(),
        })
    };
    let mut history = messages_to_json(cache.messages())?;
    let prompt = codec.render(&input(history.clone(), true)?)?;
    history.extend(messages_to_json(std::slice::from_ref(message))?);
    let with_turn = codec.render(&input(history, false)?)?;
    let Some(turn) = with_turn.strip_prefix(prompt.as_str()) else {
        return Err(ExtendError::NotExtensible(
            "the template renders an inserted assistant turn by rewriting the text before it"
                .into(),
        ));
    };
    // The turn runs through its end-of-turn token; what follows is glue the next append adds.
    let eos = codec.eos_token();
    let end = turn.find(eos).map_or(turn.len(), |p| p + eos.len());
    let ids = codec.encode(&turn[..end])?;
    cache.check_room_for(ids.len())?;
    cache.append_inserted(&ids, TokenSource::Observation)?;
    cache.push_message(message.clone());
    Ok(())
}

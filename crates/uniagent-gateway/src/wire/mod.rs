//! Wire formats: OpenAI chat completions and Anthropic messages, to and from
//! [`TurnRequest`](crate::TurnRequest) / [`TurnAnswer`](crate::TurnAnswer).

pub mod anthropic;
pub mod openai;

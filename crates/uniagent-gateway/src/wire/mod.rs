//! Wire formats: OpenAI chat completions, the OpenAI Responses API and Anthropic messages, to and from
//! [`TurnRequest`](crate::TurnRequest) / [`TurnAnswer`](crate::TurnAnswer).

pub mod anthropic;
pub mod openai;
pub mod responses;

//! One completion exchange on the wire, route-independent: the raw body in, the status and the
//! body or event sequence out. The HTTP routes and the cassette replay both go through
//! [`Gateway::exchange`], so that a replay rebuilds exactly what the harness received.

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cassette::Placed;
use crate::error::GatewayError;
use crate::gateway::Gateway;
use crate::wire::{anthropic, openai, responses};

/// The completion route a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// `POST /sessions/{session}/v1/chat/completions` (OpenAI).
    ChatCompletions,
    /// `POST /sessions/{session}/v1/messages` (Anthropic).
    Messages,
    /// `POST /sessions/{session}/v1/responses` (the OpenAI Responses API).
    Responses,
}

impl Route {
    /// The prefix of the answer ids of this route.
    pub(crate) fn id_prefix(self) -> &'static str {
        match self {
            Self::ChatCompletions => "chatcmpl",
            Self::Messages => "msg",
            Self::Responses => "resp",
        }
    }

    /// The route's error body.
    pub(crate) fn error_body(self, e: &GatewayError) -> Value {
        match self {
            Self::ChatCompletions | Self::Responses => openai::error_body(e),
            Self::Messages => anthropic::error_body(e),
        }
    }
}

/// What a successful answer was stamped with besides the sampled turn: its id and (OpenAI)
/// creation time. A replay reuses them, so that the rebuilt answer is comparable byte for
/// byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stamp {
    /// The answer's `id`.
    pub id: String,
    /// Unix seconds of `created` (OpenAI answers).
    pub created: u64,
}

/// One server-sent event of a streamed answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SseEvent {
    /// The `event:` name (Anthropic), absent for OpenAI chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The `data:` text.
    pub data: String,
}

/// The body of an answer: one JSON object, or the events of a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ReplyBody {
    /// A JSON body (answers, error bodies).
    Json(Value),
    /// A `text/event-stream` answer.
    Events(Vec<SseEvent>),
}

/// What the client received.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: ReplyBody,
    /// The answer's stamp (successful answers only).
    pub stamp: Option<Stamp>,
}

impl Reply {
    pub(crate) fn error(route: Route, e: &GatewayError) -> Self {
        Self {
            status: e.status(),
            body: ReplyBody::Json(route.error_body(e)),
            stamp: None,
        }
    }
}

/// How the route shapes its answer.
enum Shape {
    OpenAi(openai::OpenAiOptions),
    Anthropic {
        stream: bool,
    },
    /// The conversation to store under the response's id (`store: true`).
    Responses(responses::ResponsesOptions, Vec<uniagent_core::Message>),
}

impl Gateway {
    /// Answers one completion `body` of `route` for session `session_id`, as the route's
    /// handler does: parse, place and sample ([`Gateway::complete`]), build the answer or
    /// the event sequence. `stamp` gives the answer's id and time (a replay passes the
    /// recorded ones); `None` makes fresh ones. With cassettes on, the exchange is added to
    /// the session's cassette.
    pub async fn exchange(
        &self,
        session_id: &str,
        route: Route,
        body: &[u8],
        stamp: Option<Stamp>,
    ) -> Reply {
        self.exchange_placed(session_id, route, body, stamp).await.0
    }

    /// [`exchange`](Self::exchange), and where the request was placed (`None`: rejected
    /// before placement).
    pub(crate) async fn exchange_placed(
        &self,
        session_id: &str,
        route: Route,
        body: &[u8],
        stamp: Option<Stamp>,
    ) -> (Reply, Option<Placed>) {
        // The session first: a bad or ended id is the answer whatever the body holds (and a
        // request opens its session, so that its reward is accepted later).
        if let Err(e) = self.open_for_request(session_id) {
            return (Reply::error(route, &e), None);
        }
        let parsed = match route {
            Route::ChatCompletions => {
                openai::parse_request(body).map(|(r, o)| (r, Shape::OpenAi(o)))
            }
            Route::Messages => {
                anthropic::parse_request(body).map(|(r, stream)| (r, Shape::Anthropic { stream }))
            }
            Route::Responses => match responses::parse_request(body) {
                Ok(parsed) => self
                    .previous_response(session_id, parsed.options.previous_response_id.as_deref())
                    .await
                    .map(|history| {
                        let (req, conversation, options) = parsed.into_turn(&history);
                        (req, Shape::Responses(options, conversation))
                    }),
                Err(e) => Err(e),
            },
        };
        let (req, shape) = match parsed {
            Ok(p) => p,
            Err(e) => {
                let reply = Reply::error(route, &e);
                self.record_rejected(session_id, route, body, &reply).await;
                return (reply, None);
            }
        };
        let model = self.config().model_name.clone();
        // The answered conversation a Responses answer is stored as.
        let mut answered = None;
        let (reply, placed) = self
            .complete_recorded(session_id, route, body, req, |answer| {
                let stamp = stamp.unwrap_or_else(|| self.fresh_stamp(route, session_id));
                let body = match &shape {
                    Shape::OpenAi(o) if o.stream => ReplyBody::Events(
                        openai::chunks(answer, &stamp.id, &model, stamp.created, o)
                            .into_iter()
                            .map(|data| SseEvent { event: None, data })
                            .collect(),
                    ),
                    Shape::OpenAi(o) => ReplyBody::Json(openai::response(
                        answer,
                        &stamp.id,
                        &model,
                        stamp.created,
                        o.logprobs,
                    )),
                    Shape::Anthropic { stream: true } => ReplyBody::Events(
                        anthropic::events(answer, &stamp.id, &model)
                            .into_iter()
                            .map(|(name, data)| SseEvent {
                                event: Some(name.to_owned()),
                                data: data.to_string(),
                            })
                            .collect(),
                    ),
                    Shape::Anthropic { stream: false } => {
                        ReplyBody::Json(anthropic::response(answer, &stamp.id, &model))
                    }
                    Shape::Responses(o, conversation) => {
                        if o.store {
                            let mut conversation = conversation.clone();
                            conversation.push(answer.message.clone());
                            answered = Some((stamp.id.clone(), conversation));
                        }
                        if o.stream {
                            ReplyBody::Events(
                                responses::events(answer, &stamp.id, &model, stamp.created, o)
                                    .into_iter()
                                    .map(|(name, data)| SseEvent {
                                        event: Some(name),
                                        data: data.to_string(),
                                    })
                                    .collect(),
                            )
                        } else {
                            ReplyBody::Json(responses::response(
                                answer,
                                &stamp.id,
                                &model,
                                stamp.created,
                                o,
                            ))
                        }
                    }
                };
                Reply {
                    status: StatusCode::OK,
                    body,
                    stamp: Some(stamp),
                }
            })
            .await;
        if let Some((id, conversation)) = answered {
            self.store_response(session_id, id, conversation).await;
        }
        (reply, placed)
    }
}

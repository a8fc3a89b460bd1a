//! [`Gateway`]: sessions of token chains over one codec and one token generator.

use std::borrow::Cow;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use uniagent_core::agent::ExitReason;
use uniagent_core::codec::{Codec, SampledTurn};
use uniagent_core::{
    Error as CoreError, GenerateOutput, GenerateRequest, LengthLimitKind, Message, RewardOutcome,
    Role, RolloutCache, TokenGenerator,
};

use uniagent_core::cassette::{Step, CASSETTE_VERSION};

use crate::cassette::{Action, Exchange, GatewayCassette, Placed, GATEWAY_KIND};
use crate::chain::{Chain, FormatError, TurnRecord};
use crate::config::GatewayConfig;
use crate::error::{GatewayError, Result};
use crate::exchange::{Reply, Route, Stamp};
use crate::journal::{
    recover, shared_messages, CacheChange, Journal, JournalLine, JournalTurn, Recovery, JOURNAL,
};
use crate::record::Recorder;
use crate::session::Session;
use crate::table::{SessionHandle, SessionTable};
use crate::telemetry;
use crate::turn::{Finish, ToolChoice, TurnAnswer, TurnRequest};

/// The gateway: a codec (tokenizer + chat template), a token generator, and the sessions.
///
/// Requests of one session run one at a time (a harness waits for each answer); sessions run
/// concurrently and share the generator, which may batch them.
#[derive(Debug)]
pub struct Gateway {
    codec: Arc<Codec>,
    generator: Arc<dyn TokenGenerator>,
    config: GatewayConfig,
    sessions: Mutex<SessionTable>,
    recorder: Option<Recorder>,
    cassettes: Option<Cassettes>,
    journal: Option<Journal>,
    stamps: AtomicU64,
}

/// Where ended sessions' cassettes go, and the context each carries.
#[derive(Debug)]
struct Cassettes {
    recorder: Recorder,
    context: Value,
}

impl Gateway {
    /// A gateway serving `generator` with `codec`'s tokenizer and chat template. The codec's
    /// tool parser is replaced by `config.tool_parser`.
    pub fn new(codec: Codec, generator: Arc<dyn TokenGenerator>, config: GatewayConfig) -> Self {
        let codec = match config.tool_parser {
            Some(format) => codec.with_tool_parser(format),
            None => codec,
        };
        Self::over(Arc::new(codec), generator, config)
    }

    /// A gateway over a codec shared with others (the training pipeline's), whose own tool
    /// parser is used: `config.tool_parser` must be unset or name the same format.
    pub fn with_shared_codec(
        codec: Arc<Codec>,
        generator: Arc<dyn TokenGenerator>,
        config: GatewayConfig,
    ) -> Result<Self> {
        if config.tool_parser.is_some() && config.tool_parser != codec.tool_parser() {
            return Err(GatewayError::invalid(format!(
                "gateway config: tool_parser {:?} differs from the policy codec's {:?}",
                config.tool_parser,
                codec.tool_parser()
            )));
        }
        Ok(Self::over(codec, generator, config))
    }

    fn over(codec: Arc<Codec>, generator: Arc<dyn TokenGenerator>, config: GatewayConfig) -> Self {
        Self {
            codec,
            generator,
            config,
            sessions: Mutex::new(SessionTable::default()),
            recorder: None,
            cassettes: None,
            journal: None,
            stamps: AtomicU64::new(0),
        }
    }

    /// Records every session as a [`GatewayCassette`](crate::cassette::GatewayCassette),
    /// appended to `recorder` (opened on `cassettes.jsonl`) when the session ends. `context`
    /// is kept verbatim in each cassette for the replay's caller (the CLI: the codec
    /// directory).
    pub fn with_cassettes(mut self, recorder: Recorder, context: Value) -> Self {
        self.cassettes = Some(Cassettes { recorder, context });
        self
    }

    /// A fresh answer id (`chatcmpl-<session>-<n>`, `msg-<session>-<n>`) and the time now.
    pub(crate) fn fresh_stamp(&self, route: Route, session: &str) -> Stamp {
        let n = self.stamps.fetch_add(1, Ordering::Relaxed);
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Stamp {
            id: format!("{}-{session}-{n}", route.id_prefix()),
            created,
        }
    }

    /// Appends each ended session's trajectories to `recorder`.
    pub fn with_recorder(mut self, recorder: Recorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Journals the open sessions in `dir` (see [`journal`](crate::journal)), after
    /// recovering the sessions a previous gateway left open there: their trajectories, what
    /// `end` would have returned marked `extra_fields.gateway.recovered: "unclean_exit"`, are
    /// appended to the recorder (set it first, with [`with_recorder`](Self::with_recorder))
    /// and returned. The old journal is then replaced by a fresh one. One gateway per
    /// directory: a second would take the first's open sessions for abandoned ones.
    ///
    /// Errors: [`GatewayError::Journal`] when the old journal holds a malformed line (other
    /// than a torn last one, left out), [`GatewayError::Recording`] when a file cannot be read
    /// or written. Nothing is recovered or replaced then.
    pub fn with_journal(mut self, dir: &Path) -> Result<(Self, Recovery)> {
        std::fs::create_dir_all(dir).map_err(|e| GatewayError::Recording {
            message: format!("cannot create {}: {e}", dir.display()),
        })?;
        let recovery = recover(&dir.join(JOURNAL), &self.codec)?;
        if let Some(recorder) = &self.recorder {
            recorder.append(&recovery.trajectories)?;
        }
        if !recovery.sessions.is_empty() {
            tracing::warn!(
                sessions = recovery.sessions.len(),
                trajectories = recovery.trajectories.len(),
                "recovered sessions a killed gateway left open in {}",
                dir.display()
            );
        }
        self.journal = Some(Journal::create(dir)?);
        Ok((self, recovery))
    }

    /// The configuration.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// The codec.
    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    fn table(&self) -> Result<std::sync::MutexGuard<'_, SessionTable>> {
        self.sessions.lock().map_err(|_| GatewayError::Internal {
            message: "session table lock poisoned".into(),
        })
    }

    /// The open session `id`, opened by this request if new; an ended id is refused (409).
    fn session(&self, id: &str) -> Result<SessionHandle> {
        self.table()?.get_or_open(id)
    }

    /// The session a model request names, opened by it if new (see [`Self::session`]).
    pub(crate) fn open_for_request(&self, id: &str) -> Result<()> {
        self.session(id).map(drop)
    }

    /// Opens session `id` before its harness starts, so that a reward it posts without ever
    /// asking the model is kept. An ended id may be opened again (a task sampled again in a
    /// later step); its earlier record stays as written.
    ///
    /// Errors: [`GatewayError::InvalidSession`] for an empty, over-long or control-character id.
    pub fn open(&self, id: &str) -> Result<()> {
        self.table()?.reopen(id).map(drop)
    }

    /// Answers one request of session `session_id` (opened if new; an ended session is
    /// refused), recording the sampled turn in the chain the request continues (see the crate
    /// docs).
    pub async fn complete(&self, session_id: &str, req: TurnRequest) -> Result<TurnAnswer> {
        check(&req)?;
        let handle = self.session(session_id)?;
        let mut session = handle.lock().await;
        let mut generation = None;
        self.complete_in(&mut session, session_id, req, &mut generation)
            .await
            .map(|(answer, _)| answer)
    }

    /// Answers `req` as [`complete`](Self::complete) and builds the reply with `build`
    /// (errors get the route's error body); with cassettes on, the exchange (`body`, the
    /// placement, the generator call, the reply) joins the session's record, in the order
    /// the session's requests are answered.
    pub(crate) async fn complete_recorded(
        &self,
        session_id: &str,
        route: Route,
        body: &[u8],
        req: TurnRequest,
        build: impl FnOnce(&TurnAnswer) -> Reply,
    ) -> (Reply, Option<Placed>) {
        if let Err(e) = check(&req) {
            let reply = Reply::error(route, &e);
            self.record_rejected(session_id, route, body, &reply).await;
            return (reply, None);
        }
        let handle = match self.session(session_id) {
            Ok(h) => h,
            Err(e) => return (Reply::error(route, &e), None),
        };
        let mut session = handle.lock().await;
        let mut generation = None;
        let (reply, placed) = match self
            .complete_in(&mut session, session_id, req, &mut generation)
            .await
        {
            Ok((answer, placed)) => (build(&answer), Some(placed)),
            Err(e) => (Reply::error(route, &e), None),
        };
        if self.cassettes.is_some() {
            if let Ok(body) = std::str::from_utf8(body) {
                session.exchanges.push(Exchange {
                    route,
                    body: body.to_owned(),
                    placement: placed.clone(),
                    generation,
                    status: reply.status.as_u16(),
                    reply: reply.body.clone(),
                    stamp: reply.stamp.clone(),
                });
            }
        }
        (reply, placed)
    }

    /// The stored conversation of Responses API answer `id` in session `session_id` (none
    /// asked: empty).
    pub(crate) async fn previous_response(
        &self,
        session_id: &str,
        id: Option<&str>,
    ) -> Result<Arc<Vec<Message>>> {
        let Some(id) = id else {
            return Ok(Arc::default());
        };
        let handle = self.session(session_id)?;
        let session = handle.lock().await;
        session
            .responses
            .get(id)
            .ok_or_else(|| GatewayError::PreviousResponseNotFound { id: id.to_owned() })
    }

    /// Keeps `conversation` as Responses API answer `id` of session `session_id`.
    pub(crate) async fn store_response(
        &self,
        session_id: &str,
        id: String,
        conversation: Vec<Message>,
    ) {
        if let Ok(handle) = self.session(session_id) {
            handle.lock().await.responses.insert(id, conversation);
        }
    }

    /// Records a request rejected before it reached a chain (with cassettes on, and a UTF-8
    /// body): a replay must reject it the same way.
    pub(crate) async fn record_rejected(
        &self,
        session_id: &str,
        route: Route,
        body: &[u8],
        reply: &Reply,
    ) {
        if self.cassettes.is_none() {
            return;
        }
        let Ok(body) = std::str::from_utf8(body) else {
            return;
        };
        let Ok(handle) = self.session(session_id) else {
            return;
        };
        handle.lock().await.exchanges.push(Exchange {
            route,
            body: body.to_owned(),
            placement: None,
            generation: None,
            status: reply.status.as_u16(),
            reply: reply.body.clone(),
            stamp: None,
        });
    }

    /// The work of [`complete`](Self::complete) on the locked session; the generator call is
    /// left in `generation` (for the cassette), and the placement returned with the answer.
    async fn complete_in(
        &self,
        session: &mut Session,
        session_id: &str,
        mut req: TurnRequest,
        generation: &mut Option<Step>,
    ) -> Result<(TurnAnswer, Placed)> {
        if session.ended {
            return Err(GatewayError::SessionEnded {
                session: session_id.into(),
            });
        }
        let index = session.chains.len();
        let id = format!("{session_id}:{index}");
        let placement = session.place(
            &self.codec,
            &id,
            self.config.limits(),
            &self.config.template_kwargs,
            &req,
        )?;
        let mut landing = placement.land(index);
        let chain_index = landing.placed.chain;
        let placed = landing.placed.clone();
        // Where the journal line starts: the cache point the turn continues, and the client
        // messages the chain keeps.
        let journal_from = self.journal.is_some().then(|| {
            let client_from = match placed.action {
                Action::New => 0,
                _ => shared_messages(&session.chains[chain_index].client, &req.messages),
            };
            (landing.continues_from(), client_from)
        });
        // Until committed, an in-place extension is undone when this scope is left early
        // (an error, or the request's future dropped while the generator runs).
        let mut work = session.work(&mut landing);
        if work
            .messages()
            .last()
            .is_some_and(|m| m.role == Role::Assistant)
        {
            // The request ends with an assistant turn: a new turn follows it, so the prompt
            // gets the glue and the generation prompt first.
            self.codec
                .append_messages(&mut work, &[])
                .map_err(GatewayError::from_codec)?;
        }
        let requested = self.config.requested_tokens(req.max_tokens);
        let budget = work
            .generation_budget(Some(requested))
            .map_err(GatewayError::from_codec)?;
        let (out, prompt_tokens, seconds) = self
            .sample(&work, &req, session_id, budget, generation)
            .await?;
        let logprobs_given = out.logprobs.is_some();
        // A stop string ends the answer at the token that completes it, as a server that
        // checked stop strings while decoding would have stopped there.
        let (kept, stop_hit) = self.cut_at_stop(&out.token_ids, &req.stop)?;
        let ids = &out.token_ids[..kept];
        let lps: Vec<f32> = match &out.logprobs {
            Some(l) => l[..kept].to_vec(),
            None => vec![0.0; kept],
        };
        let turn = self
            .codec
            .append_sampled(&mut work, ids, &lps, out.weight_version)
            .map_err(GatewayError::from_codec)?;
        if !logprobs_given {
            // The placeholder zeros above are never exported: the cache drops them all.
            work.mark_logprobs_missing();
        }
        let turn_index = work.assistant_turns().saturating_sub(1);
        let (message, format_error, finish) =
            self.answer_message(&req, &turn, ids, stop_hit, chain_index, turn_index)?;
        let limit = (finish == Finish::Length && kept == budget && budget < requested)
            .then(|| limit_reason(&work));
        let token_texts = ids
            .iter()
            .map(|&id| self.codec.decode(&[id], false))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(GatewayError::from_codec)?;
        let record = TurnRecord {
            format_error: format_error.as_ref().map(|m| FormatError {
                turn: turn_index,
                message: m.clone(),
            }),
            limit,
            sampled_tokens: kept as u64,
            model_seconds: seconds,
        };
        if let (Some(journal), Some((from, client_from))) = (&self.journal, journal_from) {
            // Before the commit: a failed write leaves the chain as it was, so the journal
            // and the chain never disagree.
            let cache = match from {
                Some(at) => CacheChange::Delta(work.delta_since(at).map_err(|e| {
                    GatewayError::Internal {
                        message: format!("journaling a turn: {e}"),
                    }
                })?),
                None => CacheChange::Full(Cow::Borrowed(&*work)),
            };
            let mut client = req.messages[client_from..].to_vec();
            client.push(message.clone());
            journal.append(&JournalLine::Turn(Box::new(JournalTurn {
                session: session_id.into(),
                chain: chain_index,
                action: placed.action,
                origin: placed.origin,
                cache,
                client_from,
                client,
                record: record.clone(),
            })))?;
        }
        // Nothing below fails: the turn is the chain's.
        work.commit();
        // The request's messages become the chain's view (moved: at turn 500 a copy was a
        // measurable share of the request).
        let mut client = std::mem::take(&mut req.messages);
        client.push(message.clone());
        session.keep_turn(landing, client, std::mem::take(&mut req.tools), record);
        let answer = TurnAnswer {
            message,
            finish,
            token_ids: ids.to_vec(),
            token_texts,
            logprobs: logprobs_given.then_some(lps),
            prompt_tokens,
            format_error,
            chain: chain_index,
        };
        Ok((answer, placed))
    }

    /// Samples a turn after `work`'s tokens (at most `budget`), recording the generator call
    /// in `generation` when cassettes are on. Returns the output (its logprobs, if any, one
    /// per token), the prompt's length and the seconds the generator took.
    async fn sample(
        &self,
        work: &RolloutCache,
        req: &TurnRequest,
        session_id: &str,
        budget: usize,
        generation: &mut Option<Step>,
    ) -> Result<(GenerateOutput, usize, f64)> {
        let prompt = work
            .tokens()
            .map(|t| t.all_ids())
            .ok_or_else(|| GatewayError::Internal {
                message: "a chain has no token trace".into(),
            })?;
        let prompt_tokens = prompt.len();
        let mut sampling = req.sampling.clone();
        sampling.max_tokens = None;
        let request = GenerateRequest::new(prompt, sampling, budget)
            .with_stop_token_ids(self.codec.stop_token_ids().to_vec())
            .with_session_id(session_id);
        let started = Instant::now();
        let result = self.generator.generate(request.clone()).await;
        telemetry::generated(started);
        if self.cassettes.is_some() {
            *generation = Some(match &result {
                Ok(output) => Step::Generate {
                    request,
                    output: output.clone(),
                },
                Err(e) => Step::GenerateError {
                    request,
                    kind: e.kind(),
                    message: e.to_string(),
                },
            });
        }
        let out = result.map_err(GatewayError::from_model)?;
        let seconds = started.elapsed().as_secs_f64();
        if let Some(l) = &out.logprobs {
            if l.len() != out.token_ids.len() {
                return Err(GatewayError::from_model(CoreError::Protocol {
                    message: format!(
                        "the generator returned {} tokens with {} logprobs",
                        out.token_ids.len(),
                        l.len()
                    ),
                }));
            }
        }
        Ok((out, prompt_tokens, seconds))
    }

    /// The assistant message the harness gets for a sampled turn, the format error it carries
    /// (a malformed tool call is answered as its raw text) and how the turn finished. Tool
    /// calls get ids unique in the session's chain and turn; a hit stop string is cut off.
    fn answer_message(
        &self,
        req: &TurnRequest,
        turn: &SampledTurn,
        ids: &[u32],
        stop_hit: Option<String>,
        chain_index: usize,
        turn_index: u32,
    ) -> Result<(Message, Option<String>, Finish)> {
        let (mut message, format_error) = match (&req.tool_choice, &turn.tool_call_error) {
            (ToolChoice::None, _) => (Message::assistant(raw_body(&self.codec, ids)?), None),
            (_, Some(err)) => (
                Message::assistant(raw_body(&self.codec, ids)?),
                Some(err.message().to_owned()),
            ),
            _ => {
                // The content as sampled, not as the tool parser trims it: a harness echoes it
                // back, and the template's render of the echo must be the sampled tokens. Text
                // alone is returned whole (leading and trailing whitespace included, as vLLM
                // does); before tool calls, the one newline the Hermes-family templates write
                // between content and `<tool_call>` is theirs, not the content's.
                let mut message = turn.message.clone();
                message.content = if message.tool_calls.is_empty() {
                    Some(turn.content_as_sampled.clone())
                } else {
                    let before = turn
                        .content_as_sampled
                        .split_once(TOOL_CALL_OPEN)
                        .map_or(turn.content_as_sampled.as_str(), |(before, _)| before);
                    let before = before.strip_suffix('\n').unwrap_or(before);
                    Some(before.to_owned()).filter(|c| !c.is_empty())
                };
                (message, None)
            }
        };
        for (i, call) in message.tool_calls.iter_mut().enumerate() {
            call.id = format!("call_{chain_index}_{turn_index}_{i}");
        }
        let mut finish = if !message.tool_calls.is_empty() {
            Finish::ToolCalls
        } else if turn.stopped {
            Finish::Stop
        } else {
            Finish::Length
        };
        if let Some(stop) = stop_hit {
            if let Some(content) = &mut message.content {
                if let Some(pos) = content.find(&stop) {
                    content.truncate(pos);
                }
            }
            finish = Finish::StopSequence(stop);
        }
        if message.tool_calls.is_empty() && message.content.is_none() {
            message.content = Some(String::new());
        }
        Ok((message, format_error, finish))
    }

    /// The smallest prefix of `ids` whose text contains one of `stops`, and that stop string.
    fn cut_at_stop(&self, ids: &[u32], stops: &[String]) -> Result<(usize, Option<String>)> {
        let stops: Vec<&String> = stops.iter().filter(|s| !s.is_empty()).collect();
        if stops.is_empty() {
            return Ok((ids.len(), None));
        }
        let decode = |n: usize| {
            self.codec
                .decode(&ids[..n], false)
                .map_err(GatewayError::from_codec)
        };
        let full = decode(ids.len())?;
        let Some(first) = stops
            .iter()
            .filter_map(|s| full.find(s.as_str()).map(|p| (p, (*s).clone())))
            .min_by_key(|(p, _)| *p)
            .map(|(_, s)| s)
        else {
            return Ok((ids.len(), None));
        };
        // Containment grows with the prefix: binary search for the first prefix holding it.
        let (mut lo, mut hi) = (1, ids.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if decode(mid)?.contains(first.as_str()) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Ok((hi, Some(first)))
    }

    /// Records the reward of an open session; every chain of the session carries it.
    ///
    /// Errors: [`GatewayError::SessionNotFound`] for a session never opened,
    /// [`GatewayError::SessionEnded`] for one already ended (its record is written: the reward
    /// would be lost), [`GatewayError::InvalidRequest`] for a score that is not finite.
    pub async fn reward(&self, session_id: &str, reward: RewardOutcome) -> Result<()> {
        if !reward.score.is_finite() {
            return Err(GatewayError::invalid("`score` must be a finite number"));
        }
        let handle = self.table()?.existing(session_id)?;
        let mut session = handle.lock().await;
        if session.ended {
            return Err(GatewayError::SessionEnded {
                session: session_id.into(),
            });
        }
        if let Some(journal) = &self.journal {
            journal.append(&JournalLine::Reward {
                session: session_id.into(),
                reward: Cow::Borrowed(&reward),
            })?;
        }
        session.reward = Some(reward);
        Ok(())
    }

    /// The reward recorded on an open session, if any.
    pub async fn session_reward(&self, session_id: &str) -> Option<RewardOutcome> {
        let handle = self.sessions.lock().ok()?.get(session_id)?;
        let session = handle.lock().await;
        session.reward.clone()
    }

    /// Ends a session: removes it, appends its trajectories to the recorder, and returns them
    /// (one per chain; an unknown or already ended session has none: ending is idempotent).
    pub async fn end(&self, session_id: &str) -> Result<Vec<Value>> {
        let handle = self.table()?.end(session_id);
        let Some(handle) = handle else {
            return Ok(Vec::new());
        };
        let mut session = handle.lock().await;
        session.ended = true;
        let records: Vec<Value> = session
            .chains
            .iter()
            .enumerate()
            .map(|(i, c)| c.trajectory(&self.codec, session_id, i as u32, session.reward.as_ref()))
            .collect();
        if let Some(recorder) = &self.recorder {
            recorder.append(&records)?;
        }
        if let Some(cassettes) = &self.cassettes {
            if !session.exchanges.is_empty() {
                let cassette = GatewayCassette {
                    cassette: CASSETTE_VERSION,
                    kind: GATEWAY_KIND.into(),
                    id: session_id.to_owned(),
                    uniagent_version: env!("CARGO_PKG_VERSION").to_owned(),
                    generator: self.generator.name().to_owned(),
                    config: self.config.clone(),
                    tool_parser: self.codec.tool_parser(),
                    exchanges: std::mem::take(&mut session.exchanges),
                    reward: session.reward.clone(),
                    trajectories: records.clone(),
                    context: cassettes.context.clone(),
                };
                cassettes.recorder.append_bytes(&cassette.to_line()?)?;
            }
        }
        if let Some(journal) = &self.journal {
            // After the records: a kill between the two writes records the session twice
            // (the second copy marked recovered), never not at all.
            journal.append(&JournalLine::End {
                session: session_id.into(),
            })?;
            let table = self.table()?;
            // Held while the journal is emptied: no session can open meanwhile.
            if table.is_empty() {
                journal.reset()?;
            }
        }
        Ok(records)
    }

    /// Ends every open session (server shutdown), so that nothing recorded is lost.
    pub async fn end_all(&self) -> Result<usize> {
        let ids = self.table()?.open_ids();
        for id in &ids {
            self.end(id).await?;
        }
        Ok(ids.len())
    }

    /// A snapshot of a session's chains (tests, inspection); `None` for an unknown session.
    pub async fn chains(&self, session_id: &str) -> Option<Vec<Chain>> {
        let handle = self.sessions.lock().ok()?.get(session_id)?;
        let session = handle.lock().await;
        Some(session.chains.clone())
    }
}

/// Where a tool call starts in the text of both tool-call formats.
const TOOL_CALL_OPEN: &str = "<tool_call>";

/// The sampled text without its end-of-turn token (tool-call text included).
fn raw_body(codec: &Codec, ids: &[u32]) -> Result<String> {
    let body = match ids.last() {
        Some(last) if codec.stop_token_ids().contains(last) => &ids[..ids.len() - 1],
        _ => ids,
    };
    codec.decode(body, false).map_err(GatewayError::from_codec)
}

/// Why a chain stopped short of the requested tokens.
fn limit_reason(cache: &uniagent_core::RolloutCache) -> ExitReason {
    match cache.generation_budget(None) {
        Err(CoreError::LengthLimit {
            limit: LengthLimitKind::MaxResponseLen,
            ..
        }) => ExitReason::TokenLimit,
        _ => ExitReason::ContextOverflow,
    }
}

/// The checks of a request that need no session.
fn check(req: &TurnRequest) -> Result<()> {
    if req.messages.is_empty() {
        return Err(GatewayError::invalid("`messages` must not be empty"));
    }
    if let ToolChoice::Function(name) = &req.tool_choice {
        if !req.tools.iter().any(|t| t.name() == name) {
            return Err(GatewayError::invalid(format!(
                "tool_choice names `{name}`, which is not among the declared tools"
            )));
        }
    }
    Ok(())
}

//! The journal of open sessions (`--out DIR/open-sessions.jsonl`): what a killed gateway had
//! not yet written to `trajectories.jsonl`.
//!
//! Ending a session writes its trajectories; until then they live only in memory. With a
//! journal on ([`Gateway::with_journal`](crate::Gateway::with_journal)), every completed turn
//! appends one line holding what the turn changed in its chain (the new tokens, masks,
//! logprobs and messages: a [`CacheDelta`], or the whole cache of a new chain), every reward
//! and every end one line each. A line is written with one `write` call before the answer is
//! returned, so a `SIGKILL` or an OOM kill loses at most the turn in flight (its answer never
//! reached the harness). Lines are not `fsync`ed: an operating-system crash or power loss may
//! also lose what the page cache had not yet written.
//!
//! A gateway started on a directory whose journal holds sessions that never ended first
//! writes their trajectories to `trajectories.jsonl`, exactly as `end` would have, marked
//! `extra_fields.gateway.recovered: "unclean_exit"`, then starts a fresh journal. The journal
//! is also emptied whenever the last open session ends, so it holds only the sessions open
//! since then.
//!
//! The lines are described in `docs/formats.md`.
//!
//! ```
//! use uniagent_gateway::journal::{JOURNAL, RECOVERED_UNCLEAN_EXIT};
//! assert_eq!(JOURNAL, "open-sessions.jsonl");
//! assert_eq!(RECOVERED_UNCLEAN_EXIT, "unclean_exit");
//! ```

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uniagent_core::codec::Codec;
use uniagent_core::{CacheDelta, Message, RewardOutcome, RolloutCache, ToolSpec};

use crate::cassette::Action;
use crate::chain::{Base, Chain, ChainOrigin, TurnRecord};
use crate::error::{GatewayError, Result};

/// The journal's file name inside the output directory.
pub const JOURNAL: &str = "open-sessions.jsonl";

/// The format version, in the journal's first line.
pub const JOURNAL_VERSION: u32 = 1;

/// The value of `extra_fields.gateway.recovered` on a trajectory written by recovery.
pub const RECOVERED_UNCLEAN_EXIT: &str = "unclean_exit";

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(crate) enum JournalLine<'a> {
    /// The first line: the format version.
    Start {
        /// [`JOURNAL_VERSION`].
        journal: u32,
    },
    /// A completed turn of a session.
    Turn(Box<JournalTurn<'a>>),
    /// A reward posted for a session (the last one counts).
    Reward {
        /// The session id.
        session: Cow<'a, str>,
        /// The reward.
        reward: Cow<'a, RewardOutcome>,
    },
    /// A session ended: its trajectories are in `trajectories.jsonl`.
    End {
        /// The session id.
        session: Cow<'a, str>,
    },
}

/// What one completed turn changed in its chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JournalTurn<'a> {
    /// The session id.
    pub(crate) session: Cow<'a, str>,
    /// The chain's index in the session.
    pub(crate) chain: usize,
    /// What the turn did to the chain.
    pub(crate) action: Action,
    /// Why a new chain was started (`action: new` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) origin: Option<ChainOrigin>,
    /// The chain's token state: the whole cache of a new (or rebuilt) chain, else what the
    /// turn appended.
    pub(crate) cache: CacheChange<'a>,
    /// Messages of the chain's client view kept before `client`.
    pub(crate) client_from: usize,
    /// The client view's messages from `client_from` on (the request's new messages and the
    /// answer).
    pub(crate) client: Vec<Message>,
    /// The turn's bookkeeping (format error, length limit, sampled tokens, model seconds).
    pub(crate) record: TurnRecord,
}

/// A chain's token state after a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CacheChange<'a> {
    /// The whole cache (a new chain, or a rollback rebuilt from the template's render).
    Full(Cow<'a, RolloutCache>),
    /// What the turn appended to the chain's cache (an extension, or a rollback to an
    /// earlier point of the chain).
    Delta(CacheDelta),
}

/// Appends journal lines; shared by the gateway's sessions.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    file: Mutex<Appender>,
}

#[derive(Debug)]
struct Appender {
    file: File,
    /// The file's length after the last complete line: a failed write is cut back to it.
    len: u64,
    /// A failed write could not be cut back: the journal no longer matches the sessions.
    broken: bool,
}

impl Journal {
    /// Starts a fresh journal at `dir/JOURNAL` (what was there is replaced).
    pub(crate) fn create(dir: &Path) -> Result<Self> {
        let path = dir.join(JOURNAL);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)
            .map_err(|e| write_error(&path, &e))?;
        let journal = Self {
            path,
            file: Mutex::new(Appender {
                file,
                len: 0,
                broken: false,
            }),
        };
        journal.reset()?;
        Ok(journal)
    }

    /// Appends `line` with one write (a kill leaves it whole or torn, never interleaved).
    pub(crate) fn append(&self, line: &JournalLine<'_>) -> Result<()> {
        let bytes = encode(line)?;
        let mut a = self.lock()?;
        if a.broken {
            return Err(GatewayError::Recording {
                message: format!(
                    "{}: an earlier write failed and could not be undone; open sessions are no longer journaled",
                    self.path.display()
                ),
            });
        }
        if let Err(e) = a.file.write_all(&bytes) {
            // A partial line followed by later ones would make the journal unreadable.
            let len = a.len;
            if a.file.set_len(len).is_err() {
                a.broken = true;
            }
            return Err(write_error(&self.path, &e));
        }
        a.len += bytes.len() as u64;
        Ok(())
    }

    /// Empties the journal to its first line (no session is open).
    pub(crate) fn reset(&self) -> Result<()> {
        let mut a = self.lock()?;
        let header = encode(&JournalLine::Start {
            journal: JOURNAL_VERSION,
        })?;
        let written = a
            .file
            .set_len(0)
            .and_then(|()| std::io::Seek::rewind(&mut a.file))
            .and_then(|()| a.file.write_all(&header));
        match written {
            Ok(()) => {
                a.len = header.len() as u64;
                a.broken = false;
                Ok(())
            }
            Err(e) => {
                a.broken = true;
                Err(write_error(&self.path, &e))
            }
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Appender>> {
        self.file.lock().map_err(|_| GatewayError::Internal {
            message: "journal lock poisoned".into(),
        })
    }
}

/// `line` as JSON, `\n` included.
fn encode(line: &JournalLine<'_>) -> Result<Vec<u8>> {
    let mut bytes = serde_json::to_vec(line).map_err(|e| GatewayError::Recording {
        message: format!("encoding a journal line: {e}"),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

fn write_error(path: &Path, e: &std::io::Error) -> GatewayError {
    GatewayError::Recording {
        message: format!("writing {}: {e}", path.display()),
    }
}

/// What recovery found in a journal left by a gateway that did not end its sessions.
#[derive(Debug, Default)]
pub struct Recovery {
    /// The sessions recovered (those with at least one chain), in the order they started.
    pub sessions: Vec<String>,
    /// Their trajectories, as appended to `trajectories.jsonl`.
    pub trajectories: Vec<Value>,
    /// Whether the journal ended in a torn line (the write in flight at the kill), which was
    /// left out.
    pub torn_tail: bool,
}

/// A session as the journal rebuilds it.
#[derive(Debug, Default)]
struct Rebuilt {
    chains: Vec<Chain>,
    reward: Option<RewardOutcome>,
}

/// Reads the journal at `path` (absent: nothing to recover) and returns the trajectories of
/// the sessions it holds that never ended, each one what `end` would have returned, marked
/// [`RECOVERED_UNCLEAN_EXIT`]. `codec` renders the full conversation of chains that are not
/// append-only, as `end` does: it must be the codec the journal was written with.
///
/// Errors: [`GatewayError::Journal`] naming the line for anything malformed except a torn last
/// line (no final newline), which is left out.
pub(crate) fn recover(path: &Path, codec: &Codec) -> Result<Recovery> {
    let text = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Recovery::default()),
        Err(e) => {
            return Err(GatewayError::Recording {
                message: format!("reading {}: {e}", path.display()),
            })
        }
    };
    let mut recovery = Recovery::default();
    let mut body: &[u8] = &text;
    if !body.is_empty() && !body.ends_with(b"\n") {
        // The line being written when the process was killed.
        let cut = body.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        body = &body[..cut];
        recovery.torn_tail = true;
        tracing::warn!(
            "{}: the last line is torn (a kill during its write): left out",
            path.display()
        );
    }
    let mut sessions: HashMap<String, Rebuilt> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for (i, raw) in body.split_inclusive(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        let bad = |message: String| GatewayError::Journal {
            path: path.to_owned(),
            line: n,
            message,
        };
        let line: JournalLine<'_> =
            serde_json::from_slice(raw).map_err(|e| bad(format!("not a journal line: {e}")))?;
        match line {
            JournalLine::Start { journal } if n == 1 => {
                if journal != JOURNAL_VERSION {
                    return Err(bad(format!(
                        "journal format version {journal} is not supported (this build reads version {JOURNAL_VERSION})"
                    )));
                }
            }
            _ if n == 1 => {
                return Err(bad("the first line is not `{\"event\": \"start\"}`".into()))
            }
            JournalLine::Start { .. } => return Err(bad("a second `start` line".into())),
            JournalLine::Turn(turn) => {
                let id = turn.session.clone().into_owned();
                let session = sessions.entry(id.clone()).or_insert_with(|| {
                    order.push(id);
                    Rebuilt::default()
                });
                apply_turn(session, *turn).map_err(bad)?;
            }
            JournalLine::Reward { session, reward } => {
                let id = session.into_owned();
                let session = sessions.entry(id.clone()).or_insert_with(|| {
                    order.push(id);
                    Rebuilt::default()
                });
                session.reward = Some(reward.into_owned());
            }
            JournalLine::End { session } => {
                sessions.remove(session.as_ref());
                order.retain(|s| s != session.as_ref());
            }
        }
    }
    for id in order {
        let Some(session) = sessions.remove(&id) else {
            continue;
        };
        if session.chains.is_empty() {
            continue;
        }
        for (i, chain) in session.chains.iter().enumerate() {
            let mut t = chain.trajectory(codec, &id, i as u32, session.reward.as_ref());
            if let Some(g) = t
                .pointer_mut("/extra_fields/gateway")
                .and_then(Value::as_object_mut)
            {
                g.insert("recovered".into(), RECOVERED_UNCLEAN_EXIT.into());
            }
            recovery.trajectories.push(t);
        }
        recovery.sessions.push(id);
    }
    Ok(recovery)
}

/// Replays one turn line on the rebuilt session, as `Session::keep_turn` kept it.
fn apply_turn(session: &mut Rebuilt, turn: JournalTurn<'_>) -> std::result::Result<(), String> {
    let JournalTurn {
        chain: index,
        action,
        origin,
        cache,
        client_from,
        client: appended,
        record,
        ..
    } = turn;
    // Recovered chains are only recorded, never extended or rolled back: the base that a
    // rollback rebuilds from is not journaled.
    let base = || Base::Start(Vec::new());
    if action == Action::New {
        if index != session.chains.len() {
            return Err(format!(
                "a new chain {index} where the session has {} chains",
                session.chains.len()
            ));
        }
        let (CacheChange::Full(cache), Some(origin), 0) = (cache, origin, client_from) else {
            return Err("a new chain needs its whole cache, its origin and client_from 0".into());
        };
        let cache = cache.into_owned();
        // Chains are matched by their tools only while they are served.
        let tools: Vec<ToolSpec> = cache.tools().to_vec();
        session
            .chains
            .push(Chain::new(cache, appended, base(), tools, origin, record));
        return Ok(());
    }
    let chains = session.chains.len();
    let chain = session
        .chains
        .get_mut(index)
        .ok_or_else(|| format!("a turn of chain {index}, but the session has {chains} chains"))?;
    let mut client = chain.client.clone();
    if client_from > client.len() {
        return Err(format!(
            "client_from {client_from} is past the chain's {} messages",
            client.len()
        ));
    }
    client.truncate(client_from);
    client.extend(appended);
    let replaced = match (action, cache) {
        (Action::Extend, CacheChange::Delta(delta)) => {
            chain.cache.apply_delta(&delta).map_err(|e| e.to_string())?;
            None
        }
        (_, CacheChange::Delta(delta)) => {
            let mut rebuilt = chain.cache.clone();
            rebuilt.apply_delta(&delta).map_err(|e| e.to_string())?;
            Some(rebuilt)
        }
        (Action::Extend, CacheChange::Full(_)) => {
            return Err("an extension carries a delta, not a whole cache".into())
        }
        (_, CacheChange::Full(cache)) => Some(cache.into_owned()),
    };
    chain.advance(replaced, base(), client, record);
    Ok(())
}

/// How many leading messages `a` and `b` share, exactly (the journal must rebuild the client
/// view as the client sent it, reasoning and unknown fields included).
pub(crate) fn shared_messages(a: &[Message], b: &[Message]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

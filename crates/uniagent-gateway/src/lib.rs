#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]

pub mod cassette;
pub mod chain;
mod config;
mod context;
mod error;
mod exchange;
mod gateway;
#[cfg(feature = "harness")]
pub mod harness;
pub mod journal;
#[cfg(feature = "tch")]
mod model_dir;
mod record;
mod server;
mod session;
mod table;
pub mod telemetry;
mod turn;
pub mod wire;

pub use config::{GatewayConfig, DEFAULT_MAX_TOKENS_CAP};
pub use context::model_context_len;
pub use error::{GatewayError, Result};
pub use exchange::{Reply, ReplyBody, Route, SseEvent, Stamp};
pub use gateway::Gateway;
#[cfg(feature = "tch")]
pub use model_dir::load_model_dir;
pub use record::{Recorder, TRAJECTORIES};
pub use server::{router, serve, SHUTDOWN_GRACE};
pub use session::Session;
pub use table::MAX_SESSION_ID_BYTES;
pub use turn::{Finish, ToolChoice, TurnAnswer, TurnRequest};

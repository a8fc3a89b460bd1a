#![doc = include_str!("../README.md")]
#![warn(unreachable_pub)]

mod guard;
mod metered;
mod serve;
mod site;

pub use guard::{detail_body, error_body, ErrorBody, Hardening, MAX_URI_BYTES};
pub use metered::RequestMetrics;
pub use serve::{serve, ServeLimits};
pub use site::{is_json_content_type, is_local_host, SitePolicy, SiteRefusal};

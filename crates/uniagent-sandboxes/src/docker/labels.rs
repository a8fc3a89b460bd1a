//! The labels every container carries, and who owns it: a run id for `cleanup --run-id`, and
//! the owning process (host, pid, start time) and a deadline for the reaper of crashed runs.

use std::collections::HashMap;

/// Present (value `true`) on every container and network this backend creates.
pub const LABEL_MANAGED: &str = "dev.uniagent.managed";
/// The run id ([`run_id`]).
pub const LABEL_RUN_ID: &str = "dev.uniagent.run-id";
/// `host:pid:start-ticks` of the process that started the container.
pub const LABEL_OWNER: &str = "dev.uniagent.owner";
/// Unix time (seconds) after which the container has outlived its lifetime limit.
pub const LABEL_DEADLINE: &str = "dev.uniagent.deadline";
pub(crate) use crate::owner::random_hex;
pub use crate::owner::{run_id, Owner, RUN_ID_ENV};

/// The labels of a new container.
///
/// Without a deadline the label is still set, empty (no deadline to a sweep): a container
/// inherits its image's labels, and a committed payload image carries the deadline of the
/// short-lived container it was built in, which would make a live sandbox without a lifetime
/// look stale ten minutes after that build.
pub(crate) fn container_labels(
    run_id: &str,
    deadline_unix: Option<u64>,
) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_MANAGED.to_owned(), "true".to_owned()),
        (LABEL_RUN_ID.to_owned(), run_id.to_owned()),
        (LABEL_OWNER.to_owned(), Owner::current().label()),
        (
            LABEL_DEADLINE.to_owned(),
            deadline_unix.map(|d| d.to_string()).unwrap_or_default(),
        ),
    ])
}

//! Fuzzes what a sandbox pool reads from the network (`uniagent_sandboxes::pool`,
//! `uniagent_sandboxes::leases`): lease and renewal bodies decoded and admitted against a pool's
//! configuration, and the pool's answers as a `faas` client decodes them. No input may panic;
//! an admitted request never gets more than the pool allows.

#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use uniagent_sandboxes::leases::{
    AcquireRequest, ApiError, Capacity, Lease, LeaseList, RenewRequest,
};
use uniagent_sandboxes::pool::{admit, PoolConfig};

fn config() -> &'static PoolConfig {
    static CONFIG: OnceLock<PoolConfig> = OnceLock::new();
    CONFIG.get_or_init(|| {
        uniagent_core::config::parse(
            "name: fuzz\ncapacity: 4\nlease_ttl: 30\nmax_ttl: 600\nimages:\n  - warm: 1\n    docker: {image: 'img:1', memory_bytes: 268435456, cpus: 1.0, pids_limit: 256}\n  - docker: {image: 'open:1'}\n",
            uniagent_core::config::ConfigFormat::Yaml,
        )
        .expect("the fuzz pool config parses")
    })
}

/// Decodes `body` as `T`; when it decodes, its JSON must decode again to the same value.
fn round_trip<T>(body: &[u8])
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    if let Ok(value) = serde_json::from_slice::<T>(body) {
        let again: T = serde_json::from_slice(&serde_json::to_vec(&value).expect("encodes"))
            .expect("its own JSON decodes");
        // NaN never equals itself: compare the re-encoded text instead.
        assert_eq!(
            serde_json::to_string(&again).expect("encodes"),
            serde_json::to_string(&value).expect("encodes")
        );
    }
}

fn check_admitted(request: &AcquireRequest) {
    let config = config();
    let Ok(admitted) = admit(config, request) else {
        return;
    };
    assert_eq!(admitted.template.docker.image, request.image);
    assert!(admitted.ttl > Duration::ZERO && admitted.ttl <= config.max_ttl);
    if let Some(limits) = &admitted.limits {
        let template = &admitted.template.docker;
        if let (Some(asked), Some(max)) = (limits.memory_bytes, template.memory_bytes) {
            assert!(asked <= max);
        }
        if let (Some(asked), Some(max)) = (limits.cpus, template.cpus) {
            assert!(asked.is_finite() && asked > 0.0 && asked <= max);
        }
        if let (Some(asked), Some(max)) = (limits.pids_limit, template.pids_limit) {
            assert!(asked >= 1 && asked <= max);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 6 {
        0 => {
            if let Ok(request) = serde_json::from_slice::<AcquireRequest>(body) {
                check_admitted(&request);
            }
        }
        // A renewal's TTL goes through the same check as a lease's.
        1 => {
            if let Ok(renewal) = serde_json::from_slice::<RenewRequest>(body) {
                check_admitted(&AcquireRequest {
                    image: "img:1".into(),
                    ttl_secs: renewal.ttl_secs,
                    limits: None,
                    client: None,
                });
            }
        }
        2 => round_trip::<Lease>(body),
        3 => round_trip::<LeaseList>(body),
        4 => round_trip::<Capacity>(body),
        _ => round_trip::<ApiError>(body),
    }
});

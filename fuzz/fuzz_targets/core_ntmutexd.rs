//! ntmutexd's core (`NtNode`) fed arbitrary inputs through `sim::bytes`:
//! peer messages and client requests decoded as its real types, clients
//! leaving, links lost, peers unreachable, time passing.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use lockservice::LocksConfig;
use ntmutexd::{NtConfig, NtNode};

fuzz_target!(|data: &[u8]| {
    let config = NtConfig {
        k: 2,
        t_msg: Duration::from_millis(20),
        heartbeat: Duration::from_millis(50),
        suspect_after: Duration::from_millis(250),
        lease: Duration::from_millis(100),
        drift_ppm: 1_000,
        locks: LocksConfig { max_queue: 8, max_hold: Some(Duration::from_millis(500)), try_window: Duration::ZERO },
        liveness_every: Some(Duration::from_millis(100)),
        rules: Default::default(),
    };
    sim::bytes::drive(config, data, &sim::wire_decoders!(NtNode));
});

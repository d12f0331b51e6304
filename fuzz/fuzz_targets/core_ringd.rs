//! ringd's core (`RdNode`) fed arbitrary inputs through `sim::bytes`: peer
//! messages and client requests decoded as its real types, clients
//! leaving, links lost, peers unreachable, time passing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringd::{RdConfig, RdNode};

fuzz_target!(|data: &[u8]| {
    sim::bytes::drive(RdConfig::default(), data, &sim::wire_decoders!(RdNode));
});

//! electd's core (`ElNode`, both algorithms) fed arbitrary inputs through
//! `sim::bytes`: peer messages and client requests decoded as its real
//! types, clients leaving, links lost, peers unreachable, time passing.
#![no_main]

use electd::{Algorithm, ElConfig, ElNode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let algorithm = if data.first().is_some_and(|b| b & 0x80 != 0) { Algorithm::Ring } else { Algorithm::Relay };
    sim::bytes::drive(ElConfig { algorithm, ..ElConfig::default() }, data, &sim::wire_decoders!(ElNode));
});

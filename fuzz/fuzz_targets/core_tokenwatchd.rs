//! tokenwatchd's core (`TwNode`) fed arbitrary inputs through
//! `sim::bytes`: peer messages and client requests decoded as its real
//! types, clients leaving, links lost, peers unreachable, time passing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenwatchd::{TwConfig, TwNode};

fuzz_target!(|data: &[u8]| {
    sim::bytes::drive(TwConfig::default(), data, &sim::wire_decoders!(TwNode));
});

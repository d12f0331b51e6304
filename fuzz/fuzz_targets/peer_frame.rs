//! PeerCodec::decode on arbitrary bytes, without and with a cluster key.
//! With a key, the input is also given a valid MAC so that the checks and
//! the payload decoder behind authentication get explored too.
#![no_main]

mod msg;

use libfuzzer_sys::fuzz_target;
use membership::{Membership, NodeId};
use msg::FuzzMsg;
use wire::{header::HEADER_LEN, ClusterKey, PeerCodec};

const CLUSTER: u32 = 7;
const CHALLENGE: [u8; 16] = [3; 16];

fuzz_target!(|data: &[u8]| {
    let key = ClusterKey::from_bytes([1; 32]);
    let plain = PeerCodec::<FuzzMsg>::new(CLUSTER, NodeId(1), Membership::of_size(3), None);
    let keyed = PeerCodec::<FuzzMsg>::new(CLUSTER, NodeId(1), Membership::of_size(3), Some(key.clone()));

    let _ = plain.decode(data, &CHALLENGE);
    let _ = keyed.decode(data, &CHALLENGE);

    if data.len() >= HEADER_LEN {
        let mut signed = data.to_vec();
        signed[5] |= 1; // MAC flag
        let (header, payload) = signed.split_at(HEADER_LEN);
        let tag = key.tag(&CHALLENGE, header, payload);
        signed.extend_from_slice(&tag);
        let _ = keyed.decode(&signed, &CHALLENGE);
    }
});

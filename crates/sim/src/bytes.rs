//! Drives one protocol core with arbitrary bytes (the fuzz targets in
//! `fuzz/`, and each daemon's in-tree smoke test of them): what a peer, a
//! client or the clock could do to one node, in any order, with messages
//! decoded from the bytes as the daemon's real message and request types.
//! The core must take all of it without panicking, and its outputs and
//! deadlines must stay sane.
//!
//! The bytes are read as: a seed byte and a flags byte (bit 0: the node
//! restarts from a stored state decoded from the next record, bit 1: a new
//! cluster), then records `[op, len, payload…]`. `op & 7` says what
//! happens: a peer message (0, 1), a client request (2), a client leaving
//! (3), a link lost (4), a peer found unreachable (5), time passing by
//! `payload[0]` ms (6, 7). The sender (node 2 or 3 of 3) and its life (one
//! of four) come from the high bits of `op`; a payload that does not
//! decode is skipped. Due timers fire after every step.

use std::time::Duration;

use ftcore::{ClientId, Context, Incarnation, NodeId, Protocol};
use membership::Membership;
use timer::Instant;

/// How the bytes become the core's inputs: the daemon's decoders (its
/// wire codec, for the real types).
#[allow(missing_debug_implementations)]
pub struct Decoders<P: Protocol> {
    /// A peer message.
    pub msg: fn(&[u8]) -> Option<P::Msg>,
    /// A local client's request.
    pub request: fn(&[u8]) -> Option<P::Request>,
    /// A stored state.
    pub durable: fn(&[u8]) -> Option<P::Durable>,
}

/// The [`Decoders`] of core `$node` through its wire codec,
/// `wire::codec::decode_prefix` (the calling crate must depend on `wire`).
#[macro_export]
macro_rules! wire_decoders {
    ($node:ty) => {
        $crate::bytes::Decoders::<$node> {
            msg: |b| wire::codec::decode_prefix(b).ok(),
            request: |b| wire::codec::decode_prefix(b).ok(),
            durable: |b| wire::codec::decode_prefix(b).ok(),
        }
    };
}

/// Runs `data` against node 1 of a 3-node cluster with `config`; returns
/// how many inputs were handled. Panics (what the fuzzer reports) when the
/// core does, or when it asks to be woken before a time already past
/// after handling that time.
pub fn drive<P: Protocol>(config: P::Config, data: &[u8], d: &Decoders<P>) -> usize {
    let [seed, flags, rest @ ..] = data else { return 0 };
    let mut rest = rest;
    let stored = if flags & 1 == 1 {
        let (payload, next) = record(rest);
        rest = next;
        payload.and_then(|(_, p)| (d.durable)(p))
    } else {
        None
    };
    let mut now = Instant::from_millis(1_000);
    let mut ctx = Context::new(NodeId(1), Incarnation(1_000), Membership::of_size(3), now, config);
    ctx.seed = u64::from(*seed);
    ctx.stored = stored;
    ctx.new_cluster = flags & 2 == 2;
    let Ok(mut core) = P::start(ctx) else { return 0 };
    drain(&mut core);
    let mut handled = 0;
    while let (Some((op, payload)), next) = record(rest) {
        rest = next;
        let from = NodeId(2 + u32::from(op >> 7));
        let inc = Incarnation(1_000 + u64::from((op >> 5) & 3));
        let client = ClientId(1 + u64::from((op >> 3) & 3));
        match op & 7 {
            0 | 1 => match (d.msg)(payload) {
                Some(msg) => core.handle_message(now, from, inc, msg),
                None => continue,
            },
            2 => match (d.request)(payload) {
                Some(req) => core.handle_request(now, client, req),
                None => continue,
            },
            3 => core.handle_client_gone(now, client),
            4 => core.handle_link_lost(now, from),
            5 => core.handle_peer_unreachable(now, from),
            _ => now = now + Duration::from_millis(u64::from(payload.first().copied().unwrap_or(1))),
        }
        handled += 1;
        drain(&mut core);
        // Due timers fire, as a driver would fire them.
        for _ in 0..64 {
            match core.poll_timeout() {
                Some(t) if t <= now => {
                    core.handle_timeout(now);
                    drain(&mut core);
                }
                _ => break,
            }
        }
        if let Some(t) = core.poll_timeout() {
            assert!(t > now, "the core keeps asking to be woken at {t}, not after {now}: a busy loop");
        }
    }
    handled
}

/// The next record `[op, len, payload]` (the payload cut to what is left),
/// and the rest.
fn record(bytes: &[u8]) -> (Option<(u8, &[u8])>, &[u8]) {
    match bytes {
        [op, len, tail @ ..] => {
            let (payload, rest) = tail.split_at(usize::from(*len).min(tail.len()));
            (Some((*op, payload)), rest)
        }
        _ => (None, &[]),
    }
}

fn drain<P: Protocol>(core: &mut P) {
    while core.poll_output().is_some() {}
}

/// [`drive`] over `inputs` random byte strings drawn from `seed` (the
/// in-tree stand-in for the fuzz targets: records of random ops with
/// short random payloads); returns how many inputs the core handled.
pub fn smoke<P: Protocol>(config: impl Fn() -> P::Config, d: &Decoders<P>, inputs: usize, seed: u64) -> usize {
    let mut rng = timer::SeededRng::new(seed);
    let mut handled = 0;
    for _ in 0..inputs {
        let mut data = vec![rng.next_u64() as u8, rng.next_u64() as u8];
        for _ in 0..rng.range_inclusive(1, 40) {
            let len = rng.range_inclusive(0, 24) as u8;
            data.extend([rng.next_u64() as u8, len]);
            data.extend((0..len).map(|_| rng.next_u64() as u8));
        }
        handled += drive(config(), &data, d);
    }
    handled
}

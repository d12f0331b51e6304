//! `cargo bench -p ntmutexd --bench handler`: the core's handlers on the
//! token path, one input each, through the public sans-IO API
//! (`Protocol::handle_*`, then every output drained, as the unit tests do).
//!
//! - `token_grant`: a queued site (n2, position 1, its local client
//!   waiting) receives the token from its predecessor and grants its
//!   client (reply `Granted`, the grant's events).
//! - `release_pass`: the holder's client (n1) releases; the holder passes
//!   the token to its `next` (n2).
//!
//! The state is reached by simulation, not built by hand: the quiet queue
//! of the message-count bench (n1 holds, n2 and n3 queue behind it) run to
//! 600 ms, then n1 and n2 are cloned out of the simulator. Each iteration
//! handles the input on a fresh clone (cloning is not timed).

#[path = "../tests/workload/mod.rs"]
mod workload;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ftcore::{testing, ClientId, NodeId, Output, OutputOf, Protocol};
use lockservice::{LockReply, LockRequest};
use ntmutexd::{Body, Msg, NtNode};
use timer::Instant;

const HOLDER: NodeId = NodeId(1);
const NEXT: NodeId = NodeId(2);

fn token_path(c: &mut Criterion) {
    let mut sim = workload::quiet_queue(1, 3, 2);
    sim.run_until(Instant::from_millis(600)).expect("queue forms");
    let now = sim.now();
    let core = |id| sim.world().core(id).cloned().expect("running");
    let (holder, next) = (core(HOLDER), core(NEXT));
    assert!(holder.holder().is_some() && holder.next() == Some(NEXT), "n1 holds with n2 queued behind it");
    assert!(!next.has_token() && next.position().is_some(), "n2 waits for the token with a position");

    // What the holder sends when its client releases: the token, to n2.
    let out = testing::request(&mut holder.clone(), now, ClientId(1), LockRequest::Release);
    let token: Msg = out
        .into_iter()
        .find_map(|o| match o {
            Output::Send { to, msg: msg @ Msg { body: Body::Token { .. }, .. } } if to == NEXT => Some(msg),
            _ => None,
        })
        .expect("releasing at the holder passes the token to n2");
    let inc = holder.incarnation();

    let granted = |out: &[OutputOf<NtNode>]| {
        out.iter().any(|o| matches!(o, Output::Reply { client: ClientId(2), reply: LockReply::Granted { .. } }))
    };
    let out = testing::deliver(&mut next.clone(), now, HOLDER, inc, token.clone());
    assert!(granted(&out), "the token's arrival grants n2's waiting client: {out:?}");

    let mut g = c.benchmark_group("ntmutexd");
    g.bench_function("token_grant", |b| {
        b.iter_batched(
            || (next.clone(), token.clone()),
            |(mut node, msg)| {
                let out = testing::deliver(&mut node, now, HOLDER, inc, msg);
                (node, out)
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("release_pass", |b| {
        b.iter_batched(
            || holder.clone(),
            |mut node| {
                let out = testing::request(&mut node, now, ClientId(1), LockRequest::Release);
                (node, out)
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, token_path);
criterion_main!(benches);

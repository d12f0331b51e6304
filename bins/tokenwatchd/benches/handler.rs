//! `cargo bench -p tokenwatchd --bench handler`: the core's handlers on the
//! token path, one input each, through the public sans-IO API
//! (`Protocol::handle_*`, then every output drained, as the unit tests do).
//!
//! - `token_grant`: n2, its local client waiting under a live lease (its
//!   waiting renewal acked by n1 and n3, as under contention), receives
//!   `Token(m)` from its predecessor n1: it accepts it (`tpc = m + 1`),
//!   sends `Ack` on to its successor and grants its client (reply
//!   `Granted`) at once.
//! - `token_ack`: the same arrival at an idle n2: accepted and acked, kept
//!   for `token_min_hold`.
//! - `token_pass`: that idle visit's end: the timeout that hands `Token`
//!   on to n3.
//!
//! The state is reached by simulation, not built by hand: three processes
//! on loss-free datagram links (the simulation tests' settings), run until
//! the token circulates and n1 holds it; then n1 and n2 are cloned out of
//! the simulator and n1's clone is run to the timeout that passes the
//! token, which gives the message n2 receives. Each iteration handles the
//! input on a fresh clone (cloning is not timed).

#[path = "../tests/workload/mod.rs"]
mod workload;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ftcore::{testing, ClientId, NodeId, Output, OutputOf, Protocol};
use lockservice::{LockReply, LockRequest};
use sim::{NetConfig, Sim};
use timer::Instant;
use tokenwatchd::{Msg, TwNode};

const PRED: NodeId = NodeId(1);
const ME: NodeId = NodeId(2);
const SUCC: NodeId = NodeId(3);

/// `testing::until_output`, which must find one.
fn until_output(node: &TwNode, want: impl Fn(&OutputOf<TwNode>) -> bool) -> (TwNode, Instant, Vec<OutputOf<TwNode>>) {
    testing::until_output(node, want).expect("the output within 1000 timeouts")
}

fn is_token_to(to: NodeId) -> impl Fn(&OutputOf<TwNode>) -> bool {
    move |o| matches!(o, Output::Send { to: t, msg: Msg::Token { .. } } if *t == to)
}

fn token_path(c: &mut Criterion) {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(2), 0.0, 0.0);
    let mut sim: Sim<TwNode> = Sim::new(1, 3, net, workload::cfg());
    sim.run_until(Instant::from_millis(1_000)).expect("runs");
    for _ in 0..10_000 {
        if sim.world().core(PRED).is_some_and(|n| n.has_token()) {
            break;
        }
        sim.run_for(Duration::from_micros(100)).expect("runs");
    }
    let core = |id| sim.world().core(id).cloned().expect("running");
    let (pred, idle) = (core(PRED), core(ME));
    assert!(pred.has_token() && !idle.has_token(), "n1 holds the token, n2 does not");

    // The hand-off n2 receives: n1's visit ends, it passes the token.
    let (_, now, out) = until_output(&pred, is_token_to(ME));
    let token = out
        .into_iter()
        .find_map(|o| match o {
            Output::Send { to, msg } if to == ME => Some(msg),
            _ => None,
        })
        .expect("matched above");
    let inc = pred.incarnation();

    let mut waiting = idle.clone();
    let out = testing::request(&mut waiting, now, ClientId(2), LockRequest::Acquire { timeout_ms: 60_000 });
    // Under contention a waiting process already has a lease when the
    // token comes: its waiting renewal acked by both peers.
    let round = out
        .iter()
        .find_map(|o| match o {
            Output::Send { msg: Msg::LeaseRenew { round, .. }, .. } => Some(*round),
            _ => None,
        })
        .expect("the waiting client's first request renews the lease");
    for peer in [PRED, SUCC] {
        let inc = sim.world().core(peer).map(|p| p.incarnation()).expect("running");
        testing::deliver(&mut waiting, now, peer, inc, Msg::LeaseAck { round });
    }

    let acks = |out: &[OutputOf<TwNode>]| {
        out.iter().any(|o| matches!(o, Output::Send { to, msg: Msg::Ack { .. } } if *to == SUCC))
    };
    let granted = |out: &[OutputOf<TwNode>]| {
        out.iter().any(|o| matches!(o, Output::Reply { client: ClientId(2), reply: LockReply::Granted { .. } }))
    };
    let out = testing::deliver(&mut waiting.clone(), now, PRED, inc, token.clone());
    assert!(acks(&out) && granted(&out), "the token is acked and grants the waiting client: {out:?}");
    let mut holding = idle.clone();
    let out = testing::deliver(&mut holding, now, PRED, inc, token.clone());
    assert!(acks(&out) && holding.has_token(), "the token is acked and kept: {out:?}");
    let (holding, pass_at, out) = until_output(&holding, is_token_to(SUCC));
    assert!(out.iter().any(is_token_to(SUCC)));

    let mut g = c.benchmark_group("tokenwatchd");
    for (name, node) in [("token_grant", &waiting), ("token_ack", &idle)] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || (node.clone(), token.clone()),
                |(mut node, msg)| {
                    let out = testing::deliver(&mut node, now, PRED, inc, msg);
                    (node, out)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.bench_function("token_pass", |b| {
        b.iter_batched(
            || holding.clone(),
            |mut node| {
                let out = testing::timeout(&mut node, pass_at);
                (node, out)
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, token_path);
criterion_main!(benches);

//! `cargo bench -p ringd --bench handler`: a replica's handlers on the
//! token path, one input each, through the public sans-IO API
//! (`Protocol::handle_*`, then every output drained, as the unit tests do).
//!
//! - `token_accept`: n2 receives the token from its predecessor n1: it
//!   checks the epoch, acks it (`TokenAck`) and installs it as owned.
//! - `token_pass`: the end of that idle visit (`token_min_hold`): the
//!   timeout that passes the token (seq + 1) on to n3.
//!
//! The state is reached by simulation, not built by hand: three replicas
//! with the simulation tests' settings, a few `counter.incr` requests run
//! first so that the token carries state and results as in use; then,
//! once n1 owns the token, n1 and n2 are cloned out of the simulator and
//! n1's clone is run to the timeout that passes the token, which gives the
//! message n2 receives. Each iteration handles the input on a fresh clone
//! (cloning is not timed).

#[path = "../tests/kit/mod.rs"]
mod kit;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ftcore::{testing, ClientId, NodeId, Output, OutputOf, Protocol};
use ringd::{Msg, RdNode};
use sim::Sim;
use timer::Instant;

const PRED: NodeId = NodeId(1);
const ME: NodeId = NodeId(2);
const SUCC: NodeId = NodeId(3);

/// `testing::until_output`, which must find one.
fn until_output(node: &RdNode, want: impl Fn(&OutputOf<RdNode>) -> bool) -> (RdNode, Instant, Vec<OutputOf<RdNode>>) {
    testing::until_output(node, want).expect("the output within 1000 timeouts")
}

fn is_token_to(to: NodeId) -> impl Fn(&OutputOf<RdNode>) -> bool {
    move |o| matches!(o, Output::Send { to: t, msg: Msg::Token(_) } if *t == to)
}

fn token_path(c: &mut Criterion) {
    let mut sim: Sim<RdNode> = Sim::new(1, 3, kit::net(), kit::config(3));
    for k in 1..=5u64 {
        let at = Instant::from_millis(300 + 20 * k);
        sim.at(at, kit::incr(NodeId(3), ClientId(3), (3 << 32) + k));
    }
    sim.run_until(Instant::from_millis(1_000)).expect("runs");
    for _ in 0..10_000 {
        if sim.world().core(PRED).is_some_and(|n| n.owns_token()) {
            break;
        }
        sim.run_for(Duration::from_micros(100)).expect("runs");
    }
    let core = |id| sim.world().core(id).cloned().expect("running");
    let (pred, next) = (core(PRED), core(ME));
    assert!(pred.owns_token() && !next.owns_token(), "n1 owns the token, n2 does not");
    let t = pred.token().expect("owned");
    assert!(!t.state.is_empty() && !t.results.is_empty(), "the token carries the counter and its results");

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

    let mut owning = next.clone();
    let out = testing::deliver(&mut owning, now, PRED, inc, token.clone());
    assert!(
        out.iter().any(|o| matches!(o, Output::Send { to: PRED, msg: Msg::TokenAck { .. } })) && owning.owns_token(),
        "the token is acked and owned: {out:?}"
    );
    let (owning, pass_at, _) = until_output(&owning, is_token_to(SUCC));

    let mut g = c.benchmark_group("ringd");
    g.bench_function("token_accept", |b| {
        b.iter_batched(
            || (next.clone(), token.clone()),
            |(mut node, msg)| {
                let out = testing::deliver(&mut node, now, PRED, inc, msg);
                (node, out)
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("token_pass", |b| {
        b.iter_batched(
            || owning.clone(),
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

//! `cargo bench -p electd --bench handler`: the coordinator's handlers on
//! the lock path, one input each, through the public sans-IO API
//! (`Protocol::handle_message`, then every output drained, as the unit
//! tests do).
//!
//! - `request`: an idle coordinator in office receives a consumer's
//!   `Request`: it queues it (`Queued`) and grants it at once (`Granted`
//!   with a fresh fence).
//! - `release`: the coordinator receives the holder's `Release` while
//!   another consumer waits in its queue: it grants the next one.
//!
//! The state is reached by simulation, not built by hand: three processes
//! with the simulation tests' settings (relay election), run until one is
//! in office; consumers' clients then acquire in the simulator. The
//! messages are what the consumers' own cores send (a clone's client
//! acquires or releases). Each iteration handles the input on a fresh
//! clone of the coordinator (cloning is not timed).

#[path = "../tests/kit/mod.rs"]
mod kit;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use electd::{Algorithm, ElNode, Msg};
use ftcore::{testing, ClientId, NodeId, Output, OutputOf, Protocol};
use lockservice::{LockName, LockRequest};
use sim::{NetConfig, Sim};
use timer::Instant;

/// What `node`'s client asking `req` at `now` makes it send to `to`.
fn sent_by_client(node: &ElNode, now: Instant, req: LockRequest, to: NodeId) -> Msg {
    let out = testing::request(&mut node.clone(), now, ClientId(1), req);
    out.into_iter()
        .find_map(|o| match o {
            Output::Send { to: t, msg } if t == to => Some(msg),
            _ => None,
        })
        .expect("the consumer sends to the coordinator")
}

fn sends(out: &[OutputOf<ElNode>], to: NodeId, kind: fn(&Msg) -> bool) -> bool {
    out.iter().any(|o| matches!(o, Output::Send { to: t, msg } if *t == to && kind(msg)))
}

fn lock_path(c: &mut Criterion) {
    let net = NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(2));
    let mut sim: Sim<ElNode> = Sim::new(1, 3, net, kit::config(Algorithm::Relay, 3));
    sim.run_until(Instant::from_millis(1_000)).expect("runs");
    let coord = sim.world().live().find(|(_, n)| n.in_office()).map(|(id, _)| id).expect("a coordinator in office");
    let consumers: Vec<NodeId> = sim.world().live().map(|(id, _)| id).filter(|id| *id != coord).collect();
    let (a, b) = (consumers[0], consumers[1]);

    // An idle coordinator; consumer a's request for its client.
    let now0 = sim.now();
    let idle = sim.world().core(coord).cloned().unwrap();
    assert!(idle.current_grant(&LockName::unnamed()).is_none(), "nothing granted yet");
    let acquire = LockRequest::Acquire { timeout_ms: 60_000 };
    let request = sent_by_client(sim.world().core(a).unwrap(), now0, acquire, coord);
    assert!(matches!(request, Msg::Request { .. }), "{request:?}");
    let inc_a = sim.world().core(a).unwrap().incarnation();
    let out = testing::deliver(&mut idle.clone(), now0, a, inc_a, request.clone());
    assert!(
        sends(&out, a, |m| matches!(m, Msg::Queued { .. })) && sends(&out, a, |m| matches!(m, Msg::Granted { .. })),
        "the request is queued and granted at once: {out:?}"
    );

    // a holds the grant, b waits in the coordinator's queue; a's client
    // releases.
    sim.after(Duration::ZERO, kit::acquire(a, ClientId(1)));
    sim.run_for(Duration::from_millis(50)).expect("runs");
    sim.after(Duration::ZERO, kit::acquire(b, ClientId(1)));
    sim.run_for(Duration::from_millis(50)).expect("runs");
    let now1 = sim.now();
    let busy = sim.world().core(coord).cloned().unwrap();
    assert_eq!(busy.current_grant(&LockName::unnamed()).map(|(n, _)| n), Some(a), "a holds the grant");
    assert!(sim.world().core(a).unwrap().holder(&LockName::unnamed()).is_some(), "a's client holds the lock");
    let release = sent_by_client(sim.world().core(a).unwrap(), now1, LockRequest::Release, coord);
    assert!(matches!(release, Msg::Release { .. }), "{release:?}");
    let out = testing::deliver(&mut busy.clone(), now1, a, inc_a, release.clone());
    assert!(sends(&out, b, |m| matches!(m, Msg::Granted { .. })), "the release grants b: {out:?}");

    let mut g = c.benchmark_group("electd");
    for (name, node, now, msg) in [("request", &idle, now0, &request), ("release", &busy, now1, &release)] {
        g.bench_function(name, |bench| {
            bench.iter_batched(
                || (node.clone(), msg.clone()),
                |(mut node, msg)| {
                    let out = testing::deliver(&mut node, now, a, inc_a, msg);
                    (node, out)
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, lock_path);
criterion_main!(benches);

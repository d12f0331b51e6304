//! ringd's (safety) rules, each defended by a simulated scenario that
//! passes with the rule and fails with it switched off ([`RdRule`]: only a
//! build with `ftcore/mutations` can switch one off). Judged from outside
//! by `kit::safety`: token services run one at a time under strictly rising
//! fences (epoch, seq), no epoch is regenerated twice, a retried request id
//! gets one result, and (where the scenario loses no replica's copy) no two
//! acknowledged increments return the same value.
//!
//! Per rule, `<rule>_is_needed` runs its scenario for seeds 1–3 with the
//! rule off and needs a failure, and `every_scenario_holds` runs every
//! scenario with every rule on. docs/safety-rules.md lists them.

mod kit;

use std::time::Duration;

use ftcore::rules::{Rules, TestStart};
use ftcore::{ClientId, NodeId};
use kit::{cluster, config, job, safety, with_job};
use ringd::{RdConfig, RdEvent, RdNode, RdRule};
use sim::{Action, Sim, SimError};
use timer::Instant;

/// A scenario: a seed, the rules switched off.
type Scenario = fn(u64, Rules<RdRule>) -> Result<(), SimError>;

const SEEDS: [u64; 3] = [1, 2, 3];

fn with(n: u32, m: Rules<RdRule>) -> RdConfig {
    RdConfig { rules: m, ..config(n) }
}

/// Five replicas with renewals every `heartbeat_ms` and a lease of
/// `lease_ms` (token_lost_after derived), the rules in `m` off.
fn timed(m: Rules<RdRule>, heartbeat_ms: u64, lease_ms: u64) -> RdConfig {
    let mut cfg = with(5, m);
    cfg.heartbeat = Duration::from_millis(heartbeat_ms);
    cfg.lease = Duration::from_millis(lease_ms);
    cfg.token_lost_after = cfg.derived_token_lost_after(5);
    cfg
}

/// A client of `o` asks for the token service `job`; runs until its
/// command runs.
fn start_job(sim: &mut Sim<RdNode>, o: NodeId) -> Result<NodeId, SimError> {
    sim.after(Duration::ZERO, job(o, ClientId(99), 99));
    until(sim, |s| s.world().jobs.iter().any(|j| j.node == o && j.ended.is_none()).then_some(o))
}

/// The replica that owns the token now.
fn owner(sim: &Sim<RdNode>) -> Option<NodeId> {
    sim.world().live().find(|(_, c)| c.owns_token()).map(|(id, _)| id)
}

/// Runs in 0.1 ms steps until `pick` names a replica (at most 2 s).
fn until(sim: &mut Sim<RdNode>, mut pick: impl FnMut(&Sim<RdNode>) -> Option<NodeId>) -> Result<NodeId, SimError> {
    let end = sim.now() + Duration::from_secs(2);
    while sim.now() < end {
        if let Some(n) = pick(sim) {
            return Ok(n);
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    Err(sim.error("the awaited state never came"))
}

/// Majority lease (ringd.md): the owner's successor is paused (SIGSTOP)
/// with its client's token service queued, just before the token reaches
/// it; the others regenerate and run. When it resumes, the old token
/// arrives (its sender never learnt of the new epoch) — it must run
/// nothing under it.
fn paused_successor(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, with(5, m));
    sim.check(safety(false));
    sim.run_for(Duration::from_millis(300))?;
    let o = until(&mut sim, owner)?;
    let s = sim.world().core(o).and_then(|c| c.ring().view().successor()).expect("a successor");
    sim.pause(s);
    sim.run_for(Duration::from_millis(600))?;
    sim.resume(s);
    sim.run_for(Duration::from_millis(500))
}

/// Regeneration only by a census a majority promised: {1, 2} are cut off
/// while the token (and its last two holders) are on the majority's side;
/// the minority loses the token and censuses. After the heal, no
/// acknowledged increment may be lost (strict checker).
fn minority_census(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, with(5, m));
    sim.check(safety(true));
    sim.run_for(Duration::from_millis(300))?;
    // The owner is 4: 3 held it before (both on the majority's side).
    until(&mut sim, |s| owner(s).filter(|o| *o == NodeId(4)))?;
    sim.after(Duration::ZERO, Action::Partition(vec![NodeId(1), NodeId(2)]));
    sim.run_for(Duration::from_millis(1_000))?;
    sim.after(Duration::ZERO, Action::Heal);
    sim.run_for(Duration::from_millis(1_000))
}

/// Durable epochs: a cold restart of every replica (twice); epochs must
/// not be proposed again (no epoch regenerated twice, fences rise).
fn cold_restart(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 3, with(3, m));
    sim.check(safety(false));
    for _ in 0..2 {
        sim.run_for(Duration::from_millis(600))?;
        for i in 1..=3 {
            sim.after(Duration::ZERO, Action::Crash(NodeId(i)));
        }
        sim.run_for(Duration::from_millis(50))?;
        for i in 1..=3 {
            sim.after(Duration::ZERO, Action::Restart(NodeId(i)));
        }
    }
    sim.run_for(Duration::from_millis(800))
}

/// Seq overflow (ringd.md, Fence): tokens start near u64::MAX; an owner
/// whose next seq would pass it censuses instead of wrapping.
fn seq_overflow(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let cfg = RdConfig { first_seq: TestStart::at(u64::MAX - 40), ..with(3, m) };
    let mut sim = cluster(seed, 3, cfg);
    sim.check(safety(false));
    sim.run_for(Duration::from_millis(1_500))
}

/// Seq overflow within one visit (ringd.md, Fence): every regenerated
/// token starts at seq u64::MAX − 1 and every replica has five clients
/// waiting, so the first owner runs several token services in one visit;
/// the third would need seq u64::MAX + 1. It must run nothing more (keep
/// the token as a copy and census: the next token is (e', ·)).
fn seq_overflow_in_a_visit(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let cfg = RdConfig { first_seq: TestStart::at(u64::MAX - 1), ..with(3, m) };
    let mut sim = cluster(seed, 3, cfg);
    sim.check(safety(false));
    for i in 1..=3u32 {
        for k in 1..=4u64 {
            let c = ClientId(100 * u64::from(i) + k);
            sim.at(Instant::from_millis(40 + k), kit::incr(NodeId(i), c, c.0 << 32));
        }
    }
    sim.run_for(Duration::from_millis(1_500))
}

/// Acknowledged results survive one crash: the token an owner passes on
/// after running its clients' increments is lost on the link and the
/// owner crashes before resending it. A result answered before the
/// successor's TokenAck is then lost with it (the census regenerates from
/// an older copy and a later increment returns the same value).
fn owner_crash(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, with(5, m));
    sim.check(safety(true));
    for round in 0..3u64 {
        sim.run_for(Duration::from_millis(300 + 37 * round))?;
        let p = until(&mut sim, owner)?;
        let succ = |sim: &Sim<RdNode>, n: NodeId| sim.world().core(n).and_then(|c| c.ring().view().successor());
        let o = succ(&sim, p).expect("a successor");
        let next = succ(&sim, o).expect("a successor");
        sim.drop_kind(o, next, "token", 1);
        until(&mut sim, |s| s.world().core(o).filter(|c| c.is_passing()).map(|_| o))?;
        sim.after(Duration::ZERO, Action::Crash(o));
        sim.run_for(Duration::from_millis(400))?;
        sim.after(Duration::ZERO, Action::Restart(o));
    }
    sim.run_for(Duration::from_millis(500))
}

/// Majority lease with a command service (ringd.md, Invariants 3, the
/// partition {1,2} | {3,4,5} while 1 owns): the owner runs a 300 ms token
/// service when it and its successor are cut off from the other three;
/// its lease cannot be renewed, so its supervisor kills the command at
/// the lease's end — before the three (after token_lost_after and the
/// acked leases) regenerate and run.
fn cut_off_command(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    cut_off_command_with(seed, m, true)
}

/// `cut_off_command`, judged by `kit::safety` (`all`) or by
/// `kit::superseded_kill_unreachable` alone.
fn cut_off_command_with(seed: u64, m: Rules<RdRule>, all: bool) -> Result<(), SimError> {
    let cfg = with_job(with(5, m), 300, Duration::from_millis(1_000));
    let mut sim = cluster(seed, 5, cfg);
    if all {
        sim.check(safety(false));
    } else {
        sim.check(kit::superseded_kill_checker());
    }
    sim.run_for(Duration::from_millis(300))?;
    let o = until(&mut sim, owner)?;
    start_job(&mut sim, o)?;
    let next = sim.world().core(o).and_then(|c| c.ring().view().successor()).expect("a successor");
    sim.after(Duration::from_millis(5), Action::Partition(vec![o, next]));
    sim.run_for(Duration::from_millis(800))?;
    sim.after(Duration::ZERO, Action::Heal);
    sim.run_for(Duration::from_millis(500))
}

/// The supervisor (ringd.md, Invariants 3): ringd is paused (SIGSTOP)
/// while its 300 ms token service runs; the supervisor kills the command
/// at the lease's end although ringd cannot ask it to, before the next
/// owner executes.
fn paused_ringd_command(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let cfg = with_job(with(5, m), 300, Duration::from_millis(1_000));
    let mut sim = cluster(seed, 5, cfg);
    sim.check(safety(false));
    sim.run_for(Duration::from_millis(300))?;
    let o = until(&mut sim, owner)?;
    start_job(&mut sim, o)?;
    sim.pause(o);
    sim.run_for(Duration::from_millis(800))?;
    sim.resume(o);
    sim.run_for(Duration::from_millis(500))
}

/// No regeneration beside an owner (ringd.md, design review): the owner
/// runs a token service longer than token_lost_after while the
/// HolderAlives to two replicas are lost, so those two start censuses,
/// and what reaches the owner is slow (it would hear of a new token late).
/// The owner and the replicas that acked its HolderAlive answer Busy.
fn long_command_while_censuses(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    // Renewals 15 ms apart: an owner hears of a census it was not asked
    // to block only at its next renewal.
    let cfg = with_job(timed(m, 15, 45), 600, Duration::from_millis(2_000));
    let mut sim = cluster(seed, 5, cfg);
    sim.check(safety(false));
    sim.run_for(Duration::from_millis(300))?;
    let o = until(&mut sim, owner)?;
    for other in (1..=5).map(NodeId).filter(|n| *n != o).take(2) {
        sim.drop_kind(o, other, "holder_alive", 1_000);
        sim.drop_kind(o, other, "token", 1_000);
    }
    sim.after(Duration::ZERO, job(o, ClientId(99), 99));
    // What reaches the owner is slow: it hears of a new owner late.
    let to_owner: Vec<(NodeId, NodeId)> = (1..=5).map(NodeId).filter(|n| *n != o).map(|n| (n, o)).collect();
    sim.after(Duration::from_millis(1), Action::Slow(to_owner, Duration::from_millis(20)));
    sim.run_for(Duration::from_millis(1_200))
}

/// The copy only supplies state to a census (ringd.md, At D): the owner is
/// paused (SIGSTOP) with a 300 ms token command running under a lease
/// longer than suspect_after (80 ms > 40 ms); its successor D suspects it
/// and gets the owner's predecessor's frozen copy through IAmNewNext. A
/// census is answered Busy by the replicas that acked the owner's lease
/// until it has run out (the supervisor kills the command at its end); a
/// token D made itself from the copy would run beside it.
fn paused_owner_copy(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let cfg = with_job(timed(m, 15, 80), 300, Duration::from_millis(1_000));
    let mut sim = cluster(seed, 5, cfg);
    sim.check(safety(false));
    sim.run_for(Duration::from_millis(300))?;
    // An owner that received the token from its predecessor (which keeps
    // a frozen copy of it).
    let o = until(&mut sim, |s| s.world().live().find(|(_, c)| c.owns_token() && c.seen().1 >= 10).map(|(i, _)| i))?;
    start_job(&mut sim, o)?;
    sim.pause(o);
    sim.run_for(Duration::from_millis(600))?;
    sim.resume(o);
    sim.run_for(Duration::from_millis(500))
}

/// `seen` compared as the pair (epoch, seq) (ringd.md, IAmNewNext): three
/// crashes one at a time (the token holder among them) and restarts, then
/// the liveness phase (`kit::converged`). Compared by seq alone, a
/// regenerated token (e', 0) looks older than what a replica saw of the
/// old epoch and is discarded, and the ring regenerates over and over.
fn crashes_then_converge(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let n = 3 + (seed % 3) as u32;
    let mut sim = cluster(seed, n, with(n, m));
    sim.check(safety(true));
    sim.random_faults(&kit::crash_plan());
    sim.run_for(Duration::from_millis(3_500))?;
    kit::converged(&mut sim, n, Duration::from_millis(1_500))
}

/// The life of `p` in `at`'s view.
fn life(sim: &Sim<RdNode>, at: NodeId, p: NodeId) -> Option<u64> {
    sim.world().core(at).and_then(|c| c.ring().view().liveness(p)).map(|l| l.incarnation.0)
}

/// A stale IAmNewNext arriving after the failed replica rejoined (ringd.md,
/// IAmNewNext; the design review's case): the owner P (which got the
/// token from its predecessor Q, so Q keeps a frozen copy sent to P's
/// life) crashes; its successor D detects it and sends IAmNewNext round
/// the ring; the last hop into Q is held until P has restarted and Q's
/// view holds P's new life. Then Q receives it: by the spec's rule it
/// splices nothing (the heartbeat ring's view stays the topology) and by
/// ringd's deviation it hands D its copy, which D uses only while that
/// recovery is pending, for a census (seed 42 of `crashes_and_restarts`:
/// that copy can be the only holder of an acknowledged result). The
/// strict checker judges it. Returns the run, (P, Q, D) and when Q's view
/// first held P's new life.
fn stale_new_next(seed: u64, m: Rules<RdRule>) -> Result<(Sim<RdNode>, [NodeId; 3], Instant), SimError> {
    let mut cfg = with(5, m);
    // Room for P's restart and rejoin while a link into Q is held.
    cfg.suspect_after = Duration::from_millis(100);
    cfg.token_lost_after = cfg.derived_token_lost_after(5);
    let mut sim = cluster(seed, 5, cfg);
    sim.check(safety(true));
    sim.run_for(Duration::from_millis(300))?;
    let p = until(&mut sim, |s| s.world().live().find(|(_, c)| c.owns_token() && c.seen().1 >= 10).map(|(i, _)| i))?;
    let view = |sim: &Sim<RdNode>, n: NodeId| sim.world().core(n).map(|c| c.ring().view().clone()).expect("up");
    let (d, q) = (view(&sim, p).successor().expect("a successor"), view(&sim, p).predecessor().expect("a predecessor"));
    let into_q = view(&sim, q).predecessor().expect("a predecessor");
    let old = life(&sim, q, p).expect("Q knows P");
    let from = sim.world().events.len();
    sim.after(Duration::ZERO, Action::Crash(p));
    // D detects P; the IAmNewNext leaves D at once.
    until(&mut sim, |s| {
        s.world().events[from..]
            .iter()
            .any(|(_, n, e)| *n == d && matches!(e, RdEvent::RecoveryStarted { failed } if *failed == p))
            .then_some(d)
    })?;
    sim.hold(into_q, q);
    sim.after(Duration::ZERO, Action::Restart(p));
    until(&mut sim, |s| life(s, q, p).filter(|l| *l != old).map(|_| q))?;
    let rejoined = sim.now();
    sim.release(into_q, q);
    sim.run_for(Duration::from_millis(1_000))?;
    Ok((sim, [p, q, d], rejoined))
}

/// A token held in the network from a life its receiver suspected (a
/// review's trace, 2026-11-27): the link from the next owner O to its
/// successor D is held before the token reaches O, so O's pass, carrying
/// an increment answered only at D's TokenAck, waits on it. D is paused
/// (nothing reaches it) and O cut off from the other three, who
/// regenerate from an older copy. D resumes: its overdue watch suspects
/// O, the three exclude D and it rejoins; then the held link is released.
/// The rejoined D has forgotten its suspicion of O (as a restart would);
/// the token names D's old life and must be dropped (ringd.md: from the
/// moment D suspects P, D ignores P) — a replica that acked it would let
/// O answer the increment, and the three's epoch hand out the same
/// counter value again.
fn held_token_after_a_rejoin(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    held_token_after_a_rejoin_with(seed, m, true)
}

/// The same with D cut off from the three instead of paused.
fn held_token_after_a_cut_and_a_rejoin(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    held_token_after_a_rejoin_with(seed, m, false)
}

fn held_token_after_a_rejoin_with(seed: u64, m: Rules<RdRule>, pause: bool) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, with(5, m));
    sim.check(safety(true));
    sim.run_for(Duration::from_millis(300))?;
    let x = until(&mut sim, |s| s.world().live().find(|(_, c)| c.owns_token() && c.seen().1 >= 10).map(|(i, _)| i))?;
    let succ = |sim: &Sim<RdNode>, n: NodeId| sim.world().core(n).and_then(|c| c.ring().view().successor());
    let o = succ(&sim, x).expect("a successor");
    let d = succ(&sim, o).expect("a successor");
    let rest: Vec<NodeId> = (1..=5).map(NodeId).filter(|n| *n != o && *n != d).collect();
    sim.hold(o, d);
    let mark = sim.world().events.len();
    until(&mut sim, |s| {
        s.world().events[mark..].iter().any(|(_, n, e)| *n == o && matches!(e, RdEvent::Passed { .. })).then_some(o)
    })?;
    if pause {
        sim.after(Duration::ZERO, Action::Pause(d));
    }
    for &r in &rest {
        for (a, b) in [(o, r), (r, o), (r, d), (d, r)] {
            sim.cut(a, b);
        }
    }
    let from = sim.world().events.len();
    let regenerated = |s: &Sim<RdNode>| {
        s.world().events[from..].iter().any(|(_, n, e)| rest.contains(n) && matches!(e, RdEvent::Regenerated { .. }))
    };
    for _ in 0..3 {
        if until(&mut sim, |s| regenerated(s).then_some(o)).is_ok() {
            break;
        }
    }
    if !regenerated(&sim) {
        return Err(sim.error("the three never regenerated"));
    }
    let d_life = sim.world().core(d).map(|c| c.ring().incarnation()).expect("up");
    for &r in &rest {
        sim.uncut(r, d);
        sim.uncut(d, r);
    }
    if pause {
        sim.after(Duration::ZERO, Action::Resume(d));
    }
    until(&mut sim, |s| s.world().core(d).filter(|c| c.ring().incarnation() != d_life).map(|_| d))?;
    let at = sim.world().events.len();
    sim.release(o, d);
    sim.run_for(Duration::from_millis(500))?;
    // The rejoined D has forgotten its suspicion (as a restart would): the
    // held token must reach its core — dropped as addressed to its old
    // life, or with the rule off answered Stale or accepted — or the run
    // shows nothing.
    let reached = sim.world().events[at..].iter().any(|(_, n, e)| {
        *n == d
            && matches!(
                e,
                RdEvent::StaleAnswered | RdEvent::Accepted { .. } | RdEvent::Refused { reason: "other_life", .. }
            )
    });
    if !reached {
        return Err(sim.error("the held token never reached the rejoined replica's core"));
    }
    for &r in &rest {
        sim.uncut(o, r);
        sim.uncut(r, o);
    }
    sim.run_for(Duration::from_millis(1_500))
}

/// An owner told `Stale` in the middle of its lease (ringd.md,
/// Superseded). Renewals every 10 ms, a lease of 80 ms, a 600 ms token
/// command, no other clients. The owner O starts the command; its
/// `HolderAlive`s to two replicas X and Y are lost (a frame kind dropped
/// on a live link, as in `long_command_while_censuses`: an idealisation —
/// TCP would resend — of X and Y hearing O's heartbeats but not its
/// renewals), so X and Y lose sight of the token and census. X's and Y's
/// clients have asked for the command as well. The census regenerates at
/// R (X or Y); from then on what R sends O is held (a stalled
/// connection: O does not hear R's renewals of the newer epoch, which
/// would end its ownership too), and what the others send R is held
/// 25 ms, so R's first renewal is acked and its command starts 25 ms
/// later. O's next renewal meets the replicas that promised the census,
/// which answer `Stale`: O must stop at once, not at its lease's end
/// (70–80 ms after the census), or the two commands overlap.
fn owner_told_stale(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let cfg = with_job(timed(m, 10, 80), 600, Duration::from_millis(2_000));
    let mut sim = Sim::new(seed, 5, kit::net(), cfg);
    owner_told_stale_in(&mut sim).map(|_| ())
}

/// `owner_told_stale` on `sim` (five replicas, not started): O, and R if
/// a census completed.
fn owner_told_stale_in(sim: &mut Sim<RdNode>) -> Result<(NodeId, Option<NodeId>), SimError> {
    sim.check(safety(false));
    sim.run_for(Duration::from_millis(300))?;
    let o = until(sim, owner)?;
    let others: Vec<NodeId> = (1..=5).map(NodeId).filter(|n| *n != o).collect();
    let (x, y) = (others[0], others[1]);
    for c in [x, y] {
        sim.drop_kind(o, c, "holder_alive", 1_000);
    }
    start_job(sim, o)?;
    sim.after(Duration::ZERO, job(x, ClientId(97), 97));
    sim.after(Duration::ZERO, job(y, ClientId(98), 98));
    let from = sim.world().events.len();
    let Ok(r) = until(sim, |s| {
        s.world().events[from..].iter().find_map(|(_, n, e)| matches!(e, RdEvent::Regenerated { .. }).then_some(*n))
    }) else {
        // No census completed beside the owner (its `Busy` held): nothing
        // to show either way.
        sim.run_for(Duration::from_millis(500))?;
        return Ok((o, None));
    };
    sim.hold(r, o);
    let into_r: Vec<NodeId> = (1..=5).map(NodeId).filter(|n| *n != r).collect();
    for &n in &into_r {
        sim.hold(n, r);
    }
    sim.run_for(Duration::from_millis(25))?;
    for &n in &into_r {
        sim.release(n, r);
    }
    sim.run_for(Duration::from_millis(200))?;
    sim.release(r, o);
    sim.run_for(Duration::from_millis(800))?;
    Ok((o, Some(r)))
}

/// The successor of `n` in its own view.
fn succ_of(sim: &Sim<RdNode>, n: NodeId) -> NodeId {
    sim.world().core(n).and_then(|c| c.ring().view().successor()).expect("a successor")
}

/// The released copy is kept for censuses (ringd.md, Token: "it keeps
/// its last owned copy after releasing it"). Five replicas in ring order
/// n1 → n2 → … → n5, a looping client at n1 only, so the other replicas'
/// visits acknowledge nothing. Once n1 owns the token, the next token n3
/// sends n4 is lost on the link; when n3 is passing it (so n2 has its
/// TokenAck and has released n1's copy, which holds every acknowledged
/// increment), n2 and n3 crash together (a holder crashing with its
/// successor loses its own visit's results, ringd.md; here those are
/// none). The survivors' census must find n1's released copy: regenerated
/// from an older copy, or from none, the counter hands out a value again
/// (strict checker). n2 and n3 restart 800 ms later.
fn released_copy_after_two_crashes(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let mut sim = kit::cluster_with_clients(seed, 5, with(5, m), &[1]);
    sim.check(safety(true));
    sim.run_for(Duration::from_millis(300))?;
    let (x, y, z) = (NodeId(1), NodeId(2), NodeId(3));
    assert_eq!((succ_of(&sim, x), succ_of(&sim, y)), (y, z), "ring order");
    until(&mut sim, |s| owner(s).filter(|o| *o == x))?;
    let next = succ_of(&sim, z);
    sim.drop_kind(z, next, "token", 1);
    until(&mut sim, |s| s.world().core(z).filter(|c| c.is_passing()).map(|_| z))?;
    // n3's TokenAck reaches n2, n2's TokenRelease reaches n1.
    sim.run_for(Duration::from_millis(5))?;
    sim.after(Duration::ZERO, Action::Crash(y));
    sim.after(Duration::ZERO, Action::Crash(z));
    sim.run_for(Duration::from_millis(800))?;
    sim.after(Duration::ZERO, Action::Restart(y));
    sim.after(Duration::ZERO, Action::Restart(z));
    sim.run_for(Duration::from_millis(600))
}

/// A census waits for every member of its origin's ring view (ringd.md,
/// Regeneration), not just a majority's promises. Seven replicas, a
/// looping client at each. When the owner Z got the token from Y and the
/// last service that ran anywhere ran at Y (its results are answered at
/// Z's TokenAck, and are then in Y's frozen copy and Z's token only), Z's
/// next pass is lost on the link to its successor W; once Z is passing,
/// Z and W crash together (nobody is left to detect Z, and nobody points
/// at W alive, so no copy reaches a detector) and what Y sends is up to
/// 20 ms slower from then on (within the census wait W = suspect_after·
/// (1−ρ) = 40 ms). The survivors' token-lost census must wait for Y's
/// promise, the only one carrying Y's results: four of the five
/// (a majority of seven) answer first, with older copies.
fn late_newest_copy(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 7, with(7, m));
    sim.check(safety(true));
    sim.run_for(Duration::from_millis(300))?;
    let pred = |s: &Sim<RdNode>, n: NodeId| s.world().core(n).and_then(|c| c.ring().view().predecessor());
    let z = until(&mut sim, |s| {
        let z = owner(s)?;
        let y = pred(s, z)?;
        let last_ran =
            s.world().events.iter().rev().find_map(|(_, n, e)| matches!(e, RdEvent::Ran { .. }).then_some(*n));
        let from_y = s.world().core(z).is_some_and(|c| c.seen().1 >= 10);
        (last_ran == Some(y) && from_y).then_some(z)
    })?;
    let y = pred(&sim, z).expect("a predecessor");
    let w = succ_of(&sim, z);
    sim.drop_kind(z, w, "token", 1);
    until(&mut sim, |s| s.world().core(z).filter(|c| c.is_passing()).map(|_| z))?;
    // Z's TokenAck has reached Y: Y answered its results.
    sim.run_for(Duration::from_millis(3))?;
    let from_y: Vec<(NodeId, NodeId)> = (1..=7).map(NodeId).filter(|n| *n != y).map(|n| (y, n)).collect();
    sim.after(Duration::ZERO, Action::Slow(from_y, Duration::from_millis(20)));
    sim.after(Duration::ZERO, Action::Crash(z));
    sim.after(Duration::ZERO, Action::Crash(w));
    sim.run_for(Duration::from_millis(1_000))?;
    sim.after(Duration::ZERO, Action::Restart(z));
    sim.after(Duration::ZERO, Action::Restart(w));
    sim.run_for(Duration::from_millis(600))
}

/// D acts on an `IAmNewPrevious` or a `Copy` only for its pending
/// recovery `r` (ringd.md, At D). Five replicas in ring order n1 → … →
/// n5, suspect_after 100 ms, a looping client at n1, n3 and n5: R = n1, P
/// = n2, D = n3. While n4 or n5 owns the token and runs a 300 ms token
/// command (so no copy is stuck on its way to P), P crashes; when D
/// starts recovery r1 the link R → D is held and P restarts at once (its
/// new life is D's predecessor again within milliseconds, so R's held
/// heartbeats are not missed). R answers r1 (`IAmNewPrevious`, no copy:
/// its last one was released) into the held link. Once R owns the token
/// again, P's next pass to D is dropped: R's results, answered at P's
/// TokenAck, are in R's frozen copy and P's token only. P crashes while
/// passing; D starts recovery r2, and R answers it (`Copy`,
/// `IAmNewPrevious`) behind r1's answer. The link is released: r1's
/// `IAmNewPrevious` must not end r2, whose copy makes D census (once the
/// renewals of R that the link held have run out). P restarts 30 ms
/// later, R crashes 40 ms later: a token-lost census without R's copy
/// hands R's acknowledged values out again (strict checker). R restarts
/// 800 ms later.
fn stale_new_previous(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    let mut cfg = with_job(with(5, m), 300, Duration::from_millis(1_000));
    cfg.suspect_after = Duration::from_millis(100);
    cfg.token_lost_after = cfg.derived_token_lost_after(5);
    let mut sim = kit::cluster_with_clients(seed, 5, cfg, &[1, 3, 5]);
    sim.check(safety(true));
    sim.run_for(Duration::from_millis(300))?;
    let (r, p, d) = (NodeId(1), NodeId(2), NodeId(3));
    assert_eq!((succ_of(&sim, r), succ_of(&sim, p)), (p, d), "ring order");
    let o = until(&mut sim, |s| owner(s).filter(|o| o.0 >= 4))?;
    start_job(&mut sim, o)?;
    let started = |sim: &Sim<RdNode>, from: usize| {
        sim.world().events[from..]
            .iter()
            .any(|(_, n, e)| *n == d && matches!(e, RdEvent::RecoveryStarted { failed } if *failed == p))
    };
    let from = sim.world().events.len();
    sim.after(Duration::ZERO, Action::Crash(p));
    until(&mut sim, |s| started(s, from).then_some(d))?;
    sim.hold(r, d);
    sim.after(Duration::ZERO, Action::Restart(p));
    // R owns the token again, P's new life its successor.
    sim.run_for(Duration::from_millis(10))?;
    until(&mut sim, |s| owner(s).filter(|x| *x == r && succ_of(s, r) == p))?;
    sim.drop_kind(p, d, "token", 1);
    until(&mut sim, |s| s.world().core(p).filter(|c| c.is_passing()).map(|_| p))?;
    let from = sim.world().events.len();
    sim.after(Duration::ZERO, Action::Crash(p));
    until(&mut sim, |s| started(s, from).then_some(d))?;
    // The IAmNewNext of r2 reaches R (two hops) and R answers.
    sim.run_for(Duration::from_millis(10))?;
    sim.release(r, d);
    sim.run_for(Duration::from_millis(30))?;
    sim.after(Duration::ZERO, Action::Restart(p));
    sim.run_for(Duration::from_millis(10))?;
    sim.after(Duration::ZERO, Action::Crash(r));
    sim.run_for(Duration::from_millis(800))?;
    sim.after(Duration::ZERO, Action::Restart(r));
    sim.run_for(Duration::from_millis(600))
}

/// The census deadline W·(1−ρ) (foundation.md: a proposal not complete
/// by then is abandoned, even if its answers come back). The first census
/// of a fresh cluster, by X, is answered at once, but X is paused (SIGSTOP)
/// the moment it sends it: the answers wait, held in its connections. The
/// others exclude X; their own census (above X's epoch: they promised it)
/// makes a token, and their clients' increments run under it for 300 ms.
/// X resumes: its overdue timers fire first (its census's deadline has
/// passed; it suspects its two neighbours), then the held answers arrive,
/// the promises of the two other replicas among them, then its client's
/// increment.
fn late_census_answers(seed: u64, m: Rules<RdRule>) -> Result<(), SimError> {
    late_census_answers_in(seed, m).map(|_| ())
}

/// `late_census_answers`: the run, X, and when X resumed.
fn late_census_answers_in(seed: u64, m: Rules<RdRule>) -> Result<(Sim<RdNode>, NodeId, Instant), SimError> {
    let mut sim = cluster(seed, 5, with(5, m));
    sim.check(safety(false));
    let x = until(&mut sim, |s| {
        s.world().events.iter().find_map(|(_, n, e)| matches!(e, RdEvent::CensusStarted { .. }).then_some(*n))
    })?;
    sim.pause(x);
    let from = sim.world().events.len();
    until(&mut sim, |s| {
        s.world().events[from..].iter().find_map(|(_, n, e)| matches!(e, RdEvent::Regenerated { .. }).then_some(*n))
    })?;
    sim.run_for(Duration::from_millis(300))?;
    let resumed = sim.now();
    sim.resume(x);
    sim.run_for(Duration::from_millis(800))?;
    Ok((sim, x, resumed))
}

const SCENARIOS: [(&str, Scenario); 17] = [
    ("stale_new_previous", stale_new_previous),
    ("late_census_answers", late_census_answers),
    ("released_copy_after_two_crashes", released_copy_after_two_crashes),
    ("late_newest_copy", late_newest_copy),
    ("held_token_after_a_rejoin", held_token_after_a_rejoin),
    ("held_token_after_a_cut_and_a_rejoin", held_token_after_a_cut_and_a_rejoin),
    ("seq_overflow_in_a_visit", seq_overflow_in_a_visit),
    ("paused_owner_copy", paused_owner_copy),
    ("cut_off_command", cut_off_command),
    ("paused_ringd_command", paused_ringd_command),
    ("long_command_while_censuses", long_command_while_censuses),
    ("paused_successor", paused_successor),
    ("minority_census", minority_census),
    ("cold_restart", cold_restart),
    ("seq_overflow", seq_overflow),
    ("owner_crash", owner_crash),
    ("owner_told_stale", owner_told_stale),
];

#[test]
fn every_scenario_holds() {
    for (name, s) in SCENARIOS {
        holds_in(&SEEDS, name, s);
    }
}

/// Runs `scenario` with every rule on for each seed; panics at a failure.
fn holds_in(seeds: &[u64], name: &str, scenario: Scenario) {
    for &seed in seeds {
        if let Err(e) = scenario(seed, Rules::ALL_ON) {
            panic!("{name} seed {seed} fails with every rule on: {e}");
        }
    }
}

/// Runs `scenario` with `m` for each seed; panics unless one fails with
/// a message containing `expect`. Returns how many failed.
fn needed(name: &str, scenario: Scenario, m: Rules<RdRule>, expect: &str) -> usize {
    needed_in(&SEEDS, name, scenario, m, expect)
}

/// [`needed`] over `seeds`.
fn needed_in(seeds: &[u64], name: &str, scenario: Scenario, m: Rules<RdRule>, expect: &str) -> usize {
    let mut failed = 0;
    let mut other = Vec::new();
    for &seed in seeds {
        match scenario(seed, m) {
            Err(e) if e.to_string().contains(expect) => failed += 1,
            Err(e) => other.push(format!("seed {seed}: {e}")),
            Ok(()) => {}
        }
    }
    assert!(failed > 0, "{name} passes with the rule off ({m:?}); other failures: {other:?}");
    failed
}

#[test]
fn majority_lease_is_needed() {
    let m = Rules::all_but(&[RdRule::MajorityLease]);
    needed("cut_off_command", cut_off_command, m, "still runs");
    // With instant built-ins too, since 2026-11-27: the paused successor
    // no longer suspects its predecessor on resume (its own stall), so it
    // takes the old token and runs under it below the new epoch's fences.
    needed("paused_successor", paused_successor, m, "ran under fence");
}

#[test]
fn supervisor_deadline_at_lease_end_is_needed() {
    // Without the lease, the supervisor's deadline is the timeout, not the
    // lease's end: the paused replica's command outlives its lease.
    let m = Rules::all_but(&[RdRule::MajorityLease]);
    needed("paused_ringd_command", paused_ringd_command, m, "still runs");
}

#[test]
fn census_busy_beside_an_owner_is_needed() {
    let m = Rules::all_but(&[RdRule::CensusBusyBesideAnOwner]);
    needed("long_command_while_censuses", long_command_while_censuses, m, "still runs");
}

#[test]
fn copy_only_supplies_state_to_a_census_is_needed() {
    let m = Rules::all_but(&[RdRule::CopyOnlySuppliesACensus]);
    needed("paused_owner_copy", paused_owner_copy, m, "still runs");
}

#[test]
fn seq_overflow_census_is_needed() {
    let m = Rules::all_but(&[RdRule::SeqNeverWraps]);
    needed("seq_overflow_in_a_visit", seq_overflow_in_a_visit, m, "after");
}

#[test]
fn tokens_for_the_receivers_life_only_is_needed() {
    // D cut off (not paused): its ring is a minority, so it proposes no
    // census and its floor stays at the held token's epoch; rejoined, it
    // has forgotten its suspicion of O. Taking the token addressed to its
    // old life, it acks it, O answers the increment, and the three's
    // epoch hands the same counter value out again. Which seeds line this
    // up moves with the runs' timing (seed 4 of 1–6 until 2026-11-27;
    // since the heartbeat ring's digest exchange with new neighbours, 12,
    // 16, 23 and 25 of 1–30), so a range: every run passes with the rule,
    // and some fail without it.
    let seeds: Vec<u64> = (1..=30).collect();
    holds_in(&seeds, "held_token_after_a_cut_and_a_rejoin", held_token_after_a_cut_and_a_rejoin);
    let m = Rules::all_but(&[RdRule::TokensForTheReceiversLifeOnly]);
    needed_in(
        &seeds,
        "tokens_for_the_receivers_life_only",
        held_token_after_a_cut_and_a_rejoin,
        m,
        "an acknowledged increment was lost",
    );
}

#[test]
fn seen_as_a_pair_is_needed() {
    // Seeds where the random crashes regenerate while an old epoch's
    // higher seq is still what some replica saw last. Which seeds do moves
    // with the runs' timing (5 and 17, then 5 and 13, then 1 and 5), so a
    // range: every run passes with the rule, and some fail without it (8
    // and 14 of 1–15, and 10 of 1–60, on 2026-11-27, after the heartbeat
    // ring's digest exchange with new neighbours).
    let seeds: Vec<u64> = (1..=15).collect();
    holds_in(&seeds, "crashes_then_converge", crashes_then_converge);
    let m = Rules::all_but(&[RdRule::SeenAsAPair]);
    needed_in(&seeds, "crashes_then_converge", crashes_then_converge, m, "regenerations after the faults stopped");
}

#[test]
fn census_majority_is_needed() {
    // Seeds where the rule matters (4 and 7 fail without it, 2026-11-27;
    // 1–3 did before `Wanted` moved the runs' timing).
    let m = Rules::all_but(&[RdRule::CensusNeedsAMajority]);
    needed_in(&[4, 7, 9], "minority_census", minority_census, m, "acknowledged increment was lost");
}

#[test]
fn released_copy_kept_is_needed() {
    let m = Rules::all_but(&[RdRule::ReleasedCopyKept]);
    needed("released_copy_after_two_crashes", released_copy_after_two_crashes, m, "acknowledged increment was lost");
}

#[test]
fn census_waits_for_every_member_is_needed() {
    let m = Rules::all_but(&[RdRule::CensusWaitsForEveryMember]);
    needed("late_newest_copy", late_newest_copy, m, "acknowledged increment was lost");
}

#[test]
fn acts_only_for_pending_recovery_is_needed() {
    let m = Rules::all_but(&[RdRule::ActsOnlyForPendingRecovery]);
    needed("stale_new_previous", stale_new_previous, m, "acknowledged increment was lost");
}

#[test]
fn stored_epochs_are_needed() {
    let m = Rules::all_but(&[RdRule::StoredEpochs]);
    needed("cold_restart", cold_restart, m, "");
}

#[test]
fn answer_after_ack_is_needed() {
    let m = Rules::all_but(&[RdRule::AnswerAfterAck]);
    needed("owner_crash", owner_crash, m, "acknowledged increment was lost");
}

/// A sender told `Stale` stops owning (`ignore_stale`), masked by the
/// census's `Busy` beside an owner (`census_ignores_owner`): in
/// `owner_told_stale`, with the `Busy` rule on no census completes while
/// O renews (O and the replicas that acked it answer `Busy`), so no
/// second token exists; with it off alone, the census completes, O hears
/// `Stale` at its next renewal and kills its command before R's starts.
/// With both off O runs on until its lease's end, and R's command starts
/// beside it.
#[test]
fn stale_rule_masked_by_census_busy() {
    let busy_off = Rules::all_but(&[RdRule::CensusBusyBesideAnOwner]);
    let both = busy_off.without(RdRule::StaleStopsOwning);
    for seed in SEEDS {
        if let Err(e) = owner_told_stale(seed, Rules::all_but(&[RdRule::StaleStopsOwning])) {
            panic!("seed {seed}, with ignore_stale alone, the run should pass: {e}");
        }
        let mut sim =
            Sim::new(seed, 5, kit::net(), with_job(timed(busy_off, 10, 80), 600, Duration::from_millis(2_000)));
        let (o, r) = match owner_told_stale_in(&mut sim) {
            Ok((o, Some(r))) => (o, r),
            Ok((_, None)) => panic!("seed {seed}, with census_ignores_owner alone: no census completed"),
            Err(e) => panic!("seed {seed}, with census_ignores_owner alone, the run should pass: {e}"),
        };
        // There the rule is what stopped O: told Stale while owning, it
        // stopped owning (and killed its command) at that instant, before
        // R's command started.
        let events = &sim.world().events;
        let r_ran = events.iter().find_map(|(t, n, e)| (*n == r && matches!(e, RdEvent::Ran { .. })).then_some(*t));
        let heeded = events.iter().enumerate().any(|(i, (t, n, e))| {
            *n == o
                && *e == RdEvent::StaleHeeded { owned: true }
                && r_ran.is_some_and(|ran| *t < ran)
                && events[i + 1..].iter().any(|(t2, n2, e2)| t2 == t && *n2 == o && *e2 == RdEvent::Superseded)
        });
        assert!(heeded, "seed {seed}: the owner {o} was not told Stale and stopped owning before {r} ran");
        let e = owner_told_stale(seed, both).expect_err("with both off the run should fail");
        assert!(e.message.contains("still runs"), "seed {seed}: {e}");
    }
}

/// Lower epochs answered `Stale` (`accept_lower_epochs`: a token or a
/// `HolderAlive` below the threshold is accepted and acked), masked twice
/// over. In `held_token_after_a_rejoin` (seeds 1 and 7), by the rule that
/// a token names its receiver's life: the rejoined D's overdue census put
/// its threshold above the held token's epoch, so with either rule on the
/// held token is refused; with both off D takes it and it runs beside the
/// three's newer token. In `owner_told_stale` (seeds 1–3), by the census's
/// `Busy` beside an owner: with both off the replicas that promised the
/// census go on acking O's renewals, and O's command runs beside R's.
#[test]
fn lower_epochs_refused_masked_by_life_rule_and_census_busy() {
    let life = Rules::all_but(&[RdRule::TokensForTheReceiversLifeOnly]);
    let busy = Rules::all_but(&[RdRule::CensusBusyBesideAnOwner]);
    mask_shown(
        "held_token_after_a_rejoin",
        held_token_after_a_rejoin,
        &[1, 7],
        life,
        &["ran under fence", "acknowledged increment was lost"],
    );
    mask_shown("owner_told_stale", owner_told_stale, &SEEDS, busy, &["still runs"]);
}

/// `scenario` passes for each seed with `accept_lower_epochs` alone and
/// with `other` alone, and fails with both (a message containing one of
/// `expect`).
fn mask_shown(name: &str, scenario: Scenario, seeds: &[u64], other: Rules<RdRule>, expect: &[&str]) {
    let lower = Rules::all_but(&[RdRule::LowerEpochsRefused]);
    for &seed in seeds {
        for one in [lower, other] {
            if let Err(e) = scenario(seed, one) {
                panic!("{name} seed {seed}, with {one:?} alone, the run should pass: {e}");
            }
        }
        let Err(e) = scenario(seed, other.without(RdRule::LowerEpochsRefused)) else {
            panic!("{name} seed {seed}: with both off the run should fail");
        };
        assert!(expect.iter().any(|x| e.message.contains(x)), "{name} seed {seed}: {e}");
    }
}

/// The census deadline W·(1−ρ) (`census_past_deadline`: a census past
/// its deadline still counts late answers and regenerates), masked by the
/// majority lease (`no_lease`), as foundation.md expects of ringd (no
/// promise window: "their majority token and quorum leases already stop a
/// late lower proposal from acting"). In `late_census_answers` (seeds 2,
/// 3, 4, 6; 1 and 5 pass even with both off): with every rule on X's
/// census lapses and X makes no token; with the deadline rule off alone
/// X does make a second token from the two promises, of an epoch below
/// the one in use (seed 2: epoch 2 beside 3), but runs nothing under it:
/// it needs a majority to ack its first `HolderAlive`, and before any can,
/// the held traffic of the higher epoch (a `HolderAlive` of epoch 3)
/// ends its ownership, and the others answer it `Excluded` or `Stale`;
/// with the lease off alone the census lapses; with both off X runs its
/// client's increment under the lower epoch at once, after the others
/// ran under the higher one.
#[test]
fn census_deadline_masked_by_majority_lease() {
    let late = Rules::all_but(&[RdRule::CensusDeadline]);
    let lease = Rules::all_but(&[RdRule::MajorityLease]);
    // X's regenerations after it resumed, and the highest epoch
    // regenerated before.
    let tokens = |seed: u64, m: Rules<RdRule>| -> (Vec<u64>, u64) {
        let (sim, x, resumed) =
            late_census_answers_in(seed, m).unwrap_or_else(|e| panic!("seed {seed}, with {m:?}, should pass: {e}"));
        let regenerated = |(t, n, e): &(Instant, NodeId, RdEvent)| match e {
            RdEvent::Regenerated { epoch } => Some((*t, *n, *epoch)),
            _ => None,
        };
        let events = &sim.world().events;
        let top = events.iter().filter_map(regenerated).filter(|(t, _, _)| *t < resumed).map(|(.., e)| e).max();
        let after = events.iter().filter_map(regenerated).filter(|(t, n, _)| *t >= resumed && *n == x);
        (after.map(|(.., e)| e).collect(), top.expect("the others made a token"))
    };
    for seed in [2, 3, 4, 6] {
        let (on, top) = tokens(seed, Rules::ALL_ON);
        assert!(on.iter().all(|e| *e > top), "seed {seed}: with every rule on X made epoch(s) {on:?} below {top}");
        let (off, top) = tokens(seed, late);
        assert!(
            off.iter().any(|e| *e < top),
            "seed {seed}: with census_past_deadline alone X made no token below {top} ({off:?}): nothing shown"
        );
        if let Err(e) = late_census_answers(seed, lease) {
            panic!("seed {seed}, with no_lease alone, the run should pass: {e}");
        }
        let e = late_census_answers(seed, late.without(RdRule::MajorityLease)).expect_err("both off must fail");
        assert!(e.message.contains("ran under fence"), "seed {seed}: {e}");
    }
}

/// The design review's stale IAmNewNext: it reaches Q after Q's view held
/// P's new life (the trace shows it), the strict checker holds, and then
/// the ring holds all five, P's new life included, and serves every
/// client (`kit::converged`). No rule is switched: the topology is the
/// heartbeat ring's view, which no IAmNewNext changes, and the copy it
/// fetches is used only by a census (the rules above).
#[test]
fn a_stale_new_next_after_a_rejoin_changes_nothing() {
    for seed in SEEDS {
        let run = || -> Result<(), SimError> {
            let (mut sim, [p, q, _], rejoined) = stale_new_next(seed, Rules::ALL_ON)?;
            let to_q = format!("->{q} ");
            let failed = format!("failed: {p:?}");
            let late = sim.trace().iter().any(|l| {
                let at = l.split('s').next().and_then(|x| x.parse::<f64>().ok()).unwrap_or_default();
                l.contains(&to_q)
                    && l.contains("IAmNewNext")
                    && l.contains(&failed)
                    && at * 1e6 >= rejoined.as_micros() as f64
            });
            if !late {
                return Err(sim.error(format!("no IAmNewNext for {p} reached {q} after it saw {p} rejoin")));
            }
            kit::converged(&mut sim, 5, Duration::from_millis(500))
        };
        run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

/// A visit longer than token_lost_after (found with a scripted `Stale`
/// race): the owner runs four 300 ms token commands in one visit, renewing
/// its lease, then passes the token on. Its own token-lost deadline must
/// start at the pass: dated from the token's arrival, it had run out, and
/// the owner started a census the moment it stopped owning — a needless
/// regeneration that ended the token it had just passed.
#[test]
fn a_long_visit_ends_in_a_pass_not_a_census() {
    for seed in SEEDS {
        let cfg = with_job(with(5, Rules::ALL_ON), 300, Duration::from_millis(1_000));
        assert!(cfg.token_lost_after < Duration::from_millis(1_200));
        let mut sim = cluster(seed, 5, cfg);
        sim.check(safety(false));
        sim.run_for(Duration::from_millis(300)).unwrap();
        let o = until(&mut sim, owner).unwrap();
        let from = sim.world().events.len();
        for k in 0..3 {
            sim.after(Duration::ZERO, job(o, ClientId(990 + k), 990 + k));
        }
        start_job(&mut sim, o).unwrap();
        sim.run_for(Duration::from_millis(1_500)).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let w = sim.world();
        let visit = w.events[from..].iter().filter(|(_, n, e)| *n == o && matches!(e, RdEvent::Ran { .. })).count();
        assert!(visit >= 4, "seed {seed}: {o} ran {visit} token services");
        let censuses: Vec<_> =
            w.events[from..].iter().filter(|(_, _, e)| matches!(e, RdEvent::CensusStarted { .. })).collect();
        assert!(censuses.is_empty(), "seed {seed}: censuses beside a live token: {censuses:?}");
    }
}

/// A copy handed to the detector only if newer than its `seen` (ringd.md,
/// IAmNewNext; `copy_regardless_of_seen`) breaks no scenario switched off:
/// the detector applies the same comparison on receipt (`on_copy` drops a
/// copy not newer than its own `seen`), and even past that the copy only
/// supplies state to a census, which takes the newest copy of every
/// member of its ring, the detector's own token included — an older copy
/// never wins; at worst a needless census. The case arises in
/// `owner_told_stale` seed 3 (a recovery after the cut-off owner is
/// suspected: its predecessor's frozen copy of epoch 2 goes to a detector
/// that has seen the regenerated epoch): with the switch on one more Copy
/// is sent there than with every rule on, and the run holds.
#[test]
fn masked_rules_copy_newer_than_seen_breaks_no_scenario() {
    let copies = |m: Rules<RdRule>| -> usize {
        let mut sim = Sim::new(3, 5, kit::net(), with_job(timed(m, 10, 80), 600, Duration::from_millis(2_000)));
        if let Err(e) = owner_told_stale_in(&mut sim) {
            panic!("owner_told_stale seed 3 with {m:?}: {e}");
        }
        sim.trace().iter().filter(|l| l.contains(" Copy {") && !l.contains(" lost ")).count()
    };
    let on = copies(Rules::ALL_ON);
    let off = copies(Rules::all_but(&[RdRule::CopyNewerThanSeen]));
    assert!(off > on, "the switch sent no copy the rule withholds ({on} copies with it, {off} without)");
}

/// The newer-token kill (ringd.md, Superseded: a replica that accepts a
/// newer token while owning one kills its running token services;
/// `keep_job_when_superseded` leaves them running) is never reached with
/// every rule on: a newer token comes from a census that every member of
/// its origin's view answered without `Busy`, and a replica that acked
/// the owner's lease answers `Busy` until it ends, so the owner's lease,
/// and with it its command's supervisor deadline, ended first.
/// `kit::superseded_kill_unreachable` checks that after every step of
/// every ringd simulation (`kit::safety`; the model judges it too), so
/// with the rules on the switch changes nothing. Here the check holds in
/// `cut_off_command` (the owner and its successor cut off from the three
/// while a 300 ms command runs; seeds 1–3) with the switch, with the
/// lease off alone and with the census's `Busy` off alone, and fires with
/// both off (the three regenerate while the command runs on with no lease
/// deadline, and their token reaches a replica whose command still runs),
/// so the check is not vacuous. Those runs break the two-executor check
/// first, with the kill or without it: no run shows the kill needed.
#[test]
fn superseded_kill_unreachable_while_leases_and_census_busy_hold() {
    let keep = Rules::all_but(&[RdRule::SupersededKillsItsJob]);
    let no_lease = Rules::all_but(&[RdRule::MajorityLease]);
    let busy_off = Rules::all_but(&[RdRule::CensusBusyBesideAnOwner]);
    for seed in SEEDS {
        if let Err(e) = cut_off_command(seed, keep) {
            panic!("seed {seed}, with keep_job_when_superseded alone, the run should pass: {e}");
        }
        for m in [Rules::ALL_ON, keep, no_lease, busy_off] {
            if let Err(e) = cut_off_command_with(seed, m, false) {
                panic!("seed {seed}, with {m:?}, the newer-token kill was reached: {e}");
            }
        }
        let both = Rules::all_but(&[RdRule::MajorityLease, RdRule::CensusBusyBesideAnOwner]);
        for (name, m) in [("both", both), ("both and the switch", both.without(RdRule::SupersededKillsItsJob))] {
            let e = cut_off_command_with(seed, m, false).expect_err("with both off the kill's branch should run");
            eprintln!("seed {seed}, {name} off: {}", e.message);
            assert!(
                e.message.contains(" accepted a newer token (") && e.message.ends_with(") still ran"),
                "seed {seed}: {e}"
            );
        }
    }
}

/// The rule table (`RdRule`) agrees with its scenarios, with
/// docs/safety-rules.md and with the design sections it cites
/// (`ftcore::rules::audit`).
#[test]
fn the_rule_table_matches_the_scenarios_and_the_docs() {
    let wrong = ftcore::rules::audit::<RdRule>(
        &[include_str!("safety.rs"), include_str!("sim.rs")],
        include_str!("../../../docs/safety-rules.md"),
        "ringd",
        &[("docs/ringd.md", include_str!("../../../docs/ringd.md"))],
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

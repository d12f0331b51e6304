//! electd's (safety) rules, each defended by a simulated scenario that
//! passes with the rule and fails with it switched off
//! ([`ElRule`], all on in production). Judged from outside by the
//! checker the sweeps use (`kit::safety`: the clients' own replies never
//! show two holders, fences rise, one coordinator per term, no lower-term
//! grant after a higher term's), or by who takes office (late joiners,
//! per-hop acks), or by the coordinator staying in office (pre-vote).
//!
//! Per rule, `<rule>_holds` runs the scenario with every rule on and
//! `<rule>_is_needed` with that one off, and expects the failure the rule
//! prevents; `masked_rules_break_no_scenario` checks the rules another
//! covers. docs/safety-rules.md lists them.

mod kit;

use std::time::Duration;

use electd::{Algorithm, ElConfig, ElEvent, ElNode, ElRule};
use ftcore::rules::{Rule, Rules, TestStart};
use ftcore::{ClientId, NodeId};
use kit::{acquire, cluster_with, config};
use lockservice::LockReply;
use sim::{Action, Sim, SimError};
use timer::Instant;

const ALGS: [Algorithm; 2] = [Algorithm::Relay, Algorithm::Ring];

/// A scenario: a seed, an algorithm, the rules switched off.
type Scenario = fn(u64, Algorithm, Rules<ElRule>) -> Result<(), SimError>;

/// The checker's words for two clients holding the lock at once.
const AT_ONCE: &str = "clients hold the lock at once";
/// The same overlap, seen by the lease check (`LeaseChecker`): a grant
/// inside another client's live lease.
const LEASE_OVERLAP: &str = "holds until";

/// `n` processes; each local client that is granted holds for `hold`, then
/// releases; nobody asks but the scenario.
fn cluster(seed: u64, n: u32, alg: Algorithm, m: Rules<ElRule>, hold: Duration) -> Sim<ElNode> {
    cluster_with(seed, n, ElConfig { rules: m, ..config(alg, n) }, hold)
}

/// Runs until `n` is in office (it is the highest id).
fn elect(sim: &mut Sim<ElNode>, n: u32) -> Result<(), SimError> {
    sim.run_until(Instant::from_millis(1_500))?;
    if !sim.world().core(NodeId(n)).is_some_and(|c| c.in_office()) {
        return Err(sim.error(format!("{n} is not in office")));
    }
    Ok(())
}

/// Runs in 1 ms steps until `node`'s client is granted (at most `limit`).
fn until_granted(sim: &mut Sim<ElNode>, node: u32, limit: Duration) -> Result<(), SimError> {
    let from = sim.world().replies.len();
    let end = sim.now() + limit;
    while sim.now() < end {
        sim.run_for(Duration::from_millis(1))?;
        if sim.world().replies[from..]
            .iter()
            .any(|(_, n, _, r)| *n == NodeId(node) && matches!(r, LockReply::Granted { .. }))
        {
            return Ok(());
        }
    }
    Err(sim.error(format!("{node}'s client was not granted within {limit:?}")))
}

/// `node`'s client asks `times` times in turn, each granted within
/// `limit` (it releases after the cluster's hold), 20 ms apart.
fn granted_in_turn(sim: &mut Sim<ElNode>, node: u32, times: u32, limit: Duration) -> Result<(), SimError> {
    for _ in 0..times {
        sim.after(Duration::ZERO, acquire(NodeId(node), client(node)));
        until_granted(sim, node, limit)?;
        sim.run_for(Duration::from_millis(20))?;
    }
    Ok(())
}

fn client(n: u32) -> ClientId {
    ClientId(u64::from(n))
}

/// Runs `scenario` for both algorithms and a few seeds: with every rule
/// on it must pass; with `off` it must fail, with a message containing
/// one of `failures`, for at least one run.
fn defended(off: Rules<ElRule>, failures: &[&str], scenario: Scenario) {
    let mut failed = Vec::new();
    for alg in ALGS {
        for seed in 1..=3 {
            if let Err(e) = scenario(seed, alg, Rules::ALL_ON) {
                panic!("{alg:?} seed {seed} fails with every rule on: {e}");
            }
            match scenario(seed, alg, off) {
                Err(e) if failures.iter().any(|f| e.to_string().contains(f)) => failed.push((alg, seed)),
                Err(e) => panic!("{alg:?} seed {seed} without the rule fails otherwise: {e}"),
                Ok(()) => {}
            }
        }
    }
    assert!(!failed.is_empty(), "no run failed with {off:?}: the scenario does not show the rule");
    eprintln!("{off:?}: {failed:?} fail with one of {failures:?}");
}

/// `scenario` passes for both algorithms with every rule on (seed 7; the
/// `_is_needed` tests run seeds 1–3 with every rule on too).
fn holds(scenario: Scenario) {
    for alg in ALGS {
        scenario(7, alg, Rules::ALL_ON).unwrap();
    }
}

// ------------------------------------------------------------ failover gap

/// (safety) Failover gap. 1 holds a grant from 5 (its client holds 400
/// ms); 5 is cut off, and 1's link to 4 is broken so that 1 cannot
/// re-register its grant; 2 asks. 4 takes office: it must not grant
/// before 1's lease (from its last acked renewal) has surely ended.
fn failover_gap(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(400));
    elect(&mut sim, 5)?;
    sim.after(Duration::ZERO, acquire(NodeId(1), client(1)));
    until_granted(&mut sim, 1, Duration::from_millis(500))?;
    sim.after(Duration::ZERO, Action::Partition(vec![NodeId(5)]));
    sim.after(Duration::ZERO, Action::Cut(NodeId(1), NodeId(4)));
    sim.after(Duration::from_millis(1), acquire(NodeId(2), client(2)));
    until_granted(&mut sim, 2, Duration::from_millis(2_000))?;
    sim.run_for(Duration::from_millis(500))
}

#[test]
fn failover_gap_holds() {
    holds(failover_gap);
}

#[test]
fn failover_gap_is_needed() {
    defended(Rules::all_but(&[ElRule::FailoverGap]), &[AT_ONCE, LEASE_OVERLAP], failover_gap);
}

// ------------------------------------------------------ office-wide counter

/// (safety) One grant counter per office (named-locks.md). 1's client
/// takes lock `a` and releases it: the coordinator forgets `a` (nothing
/// waits for or holds it); 2's client takes `b`; 1's client asks for `a`
/// again in the same office. Its fence must be above the first (a counter
/// per name would count from the start again and repeat it).
fn office_wide_counter(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(20));
    elect(&mut sim, 5)?;
    let named = |node: u32, name: &str| {
        let name = lockservice::LockName::parse(name).expect("a valid name");
        Action::Request(NodeId(node), client(node), lockservice::LockRequest::AcquireNamed { name, timeout_ms: 60_000 })
    };
    for (node, name) in [(1, "a"), (2, "b"), (1, "a")] {
        sim.after(Duration::ZERO, named(node, name));
        until_granted(&mut sim, node, Duration::from_millis(500))?;
        sim.run_for(Duration::from_millis(50))?;
    }
    sim.run_for(Duration::from_millis(100))
}

#[test]
fn office_wide_counter_holds() {
    holds(office_wide_counter);
}

#[test]
fn office_wide_counter_is_needed() {
    defended(Rules::all_but(&[ElRule::OfficeWideCounter]), &["after"], office_wide_counter);
}

// ------------------------------------------------------------ quorum lease

/// (safety) Quorum lease. 1 holds a grant from 5 (its client holds 1.5
/// s); 5 and 1 are cut off together from 2, 3, 4; 2 asks. 5 must stop
/// renewing once no majority acks its heartbeats, so 1's lease ends
/// before 4 (elected by the majority) grants to 2.
fn quorum_lease(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(1_500));
    elect(&mut sim, 5)?;
    sim.after(Duration::ZERO, acquire(NodeId(1), client(1)));
    until_granted(&mut sim, 1, Duration::from_millis(500))?;
    sim.after(Duration::ZERO, Action::Partition(vec![NodeId(5), NodeId(1)]));
    sim.after(Duration::from_millis(1), acquire(NodeId(2), client(2)));
    until_granted(&mut sim, 2, Duration::from_millis(2_000))?;
    sim.run_for(Duration::from_millis(500))
}

#[test]
fn quorum_lease_holds() {
    holds(quorum_lease);
}

#[test]
fn quorum_lease_is_needed() {
    defended(Rules::all_but(&[ElRule::QuorumLease]), &[AT_ONCE, LEASE_OVERLAP], quorum_lease);
}

/// Office and the quorum lease come from a majority's heartbeat acks, not
/// from heartbeats sent: in the same scenario, 5 cut off with 1 would go
/// on renewing 1's grant on its own heartbeats.
#[test]
fn heartbeat_quorum_is_needed() {
    defended(Rules::all_but(&[ElRule::HeartbeatQuorum]), &[AT_ONCE, LEASE_OVERLAP], quorum_lease);
}

// ---------------------------------------------- holder lease from a renewal

/// (safety) On `Granted` the holder starts only once a renewal is acked.
/// 3 is coordinator; what 3 sends 1 is held back while 1 asks, then 2:
/// 3 grants 1, hears no renewal, lets the grant lapse and grants 2 (who
/// holds 300 ms). Then the held `Granted` reaches 1: it must not start
/// on a grant its coordinator no longer honours.
fn lease_from_renewal(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 3, alg, m, Duration::from_millis(300));
    elect(&mut sim, 3)?;
    sim.after(Duration::ZERO, Action::Hold(NodeId(3), NodeId(1)));
    sim.after(Duration::from_millis(1), acquire(NodeId(1), client(1)));
    sim.after(Duration::from_millis(5), acquire(NodeId(2), client(2)));
    until_granted(&mut sim, 2, Duration::from_millis(1_000))?;
    sim.after(Duration::ZERO, Action::Release(NodeId(3), NodeId(1)));
    sim.run_for(Duration::from_millis(600))
}

#[test]
fn lease_from_renewal_holds() {
    holds(lease_from_renewal);
}

#[test]
fn lease_from_renewal_is_needed() {
    defended(
        Rules::all_but(&[ElRule::LeaseFromAckedRenewal]),
        // The stale grant is used: two holders, or its fence below the one after it.
        &[AT_ONCE, "granted fence"],
        lease_from_renewal,
    );
}

// ------------------------------- an unconfirmed grant is not re-registered

/// (safety) A grant no acked renewal has confirmed is not re-registered
/// with a new coordinator. N = 5, 5 in office; what 5 sends 1 is held
/// back while 1, then 2, asks: 5 grants 1 (t, 1), hears no renewal, lets
/// the grant lapse and grants 2 (t, 2), who holds 5 ms. 20 ms later 5
/// crashes and the held link is released: the `Granted` (t, 1) reaches 1,
/// an unexpired grant on its side that nothing confirms (its renewal is
/// lost: 5 is down). 1 is cut off at once and rejoins only once 4, elected
/// by 2, 3 and 4, is in office (a re-registration that reaches an elected
/// coordinator before it takes office is denied, and not sent again). 1
/// must not re-register (t, 1) with 4: adopted, its next renewal acked,
/// it would start 1's client under a fence below 2's. With the rule 1
/// gives it back and asks 4 afresh, and is granted after 4's failover gap.
fn unconfirmed_grant_at_failover(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(5));
    elect(&mut sim, 5)?;
    sim.after(Duration::ZERO, Action::Hold(NodeId(5), NodeId(1)));
    sim.after(Duration::from_millis(1), acquire(NodeId(1), client(1)));
    sim.after(Duration::from_millis(5), acquire(NodeId(2), client(2)));
    until_granted(&mut sim, 2, Duration::from_millis(1_000))?;
    sim.run_for(Duration::from_millis(20))?;
    sim.after(Duration::ZERO, Action::Crash(NodeId(5)));
    sim.after(Duration::ZERO, Action::Release(NodeId(5), NodeId(1)));
    sim.after(Duration::from_millis(1), Action::Partition(vec![NodeId(1)]));
    sim.run_for(Duration::from_millis(1))?;
    let end = sim.now() + Duration::from_millis(200);
    while !sim.world().core(NodeId(4)).is_some_and(|c| c.in_office()) {
        if sim.now() > end {
            return Err(sim.error("4 was not in office within 200 ms of 5's crash"));
        }
        sim.run_for(Duration::from_millis(1))?;
    }
    sim.after(Duration::ZERO, Action::Heal);
    sim.run_for(Duration::from_millis(1_000))?;
    // With the rule, 1's client is served by 4 after its failover gap.
    if !sim.world().replies.iter().any(|(_, n, _, r)| *n == NodeId(1) && matches!(r, LockReply::Granted { .. })) {
        return Err(sim.error("1's client was not granted by the new coordinator"));
    }
    Ok(())
}

#[test]
fn unconfirmed_grant_at_failover_holds() {
    holds(unconfirmed_grant_at_failover);
}

#[test]
fn unconfirmed_grants_not_reregistered_is_needed() {
    defended(Rules::all_but(&[ElRule::ConfirmedGrantsReregistered]), &["granted fence"], unconfirmed_grant_at_failover);
}

// ------------------------------------- an adopted grant renewed late

/// The timings of `adopted_grant_at_failover`: the kit's, with a quorum
/// lease of 200 ms (`suspect_after` 212 ms: `lease·(1+ρ) + heartbeat ≤
/// suspect_after·(1−ρ)`) and `grant_ttl` the least `validate` accepts,
/// `3·(lease + suspect_after)` = 1,236 ms; with `short_grant_ttl`, 240 ms
/// (renewals every 80 ms), which the bound forbids.
fn long_lease(alg: Algorithm, m: Rules<ElRule>) -> ElConfig {
    let mut c = ElConfig {
        lease: Duration::from_millis(200),
        suspect_after: Duration::from_millis(212),
        rules: m,
        ..config(alg, 5)
    };
    c.election_timeout = c.derived_election_timeout(5);
    c.grant_ttl = if m.off(ElRule::GrantTtlBound) { Duration::from_millis(240) } else { c.min_grant_ttl() };
    c
}

/// (safety) Failover gap, its exception: a new coordinator renews an
/// adopted grant only once `lease·(1+ρ)` has passed since it took office.
/// N = 5, 5 in office ([`long_lease`] timings); 1's client is granted
/// (holds two `grant_ttl`); from then on 1's renewals to 5 are lost, as
/// are 1's, 2's and 3's `StaleTerm` answers to 5, and 5's client asks
/// (queued behind 1). 70 ms later 4 is cut off from 5 both ways and from 1
/// (4→1), and 2 starts the next term: 2, 3 and 4 elect 4, skipping 5 and 1
/// (`relay`: after aborted terms). 5, told nothing, stays in office, its
/// quorum lease running from the last heartbeat 2 or 3 acked before
/// joining the new term (1 acks on). Once 4 is in office 4→1 is mended:
/// 1 hears 4's heartbeat and re-registers its grant, which 4 adopts. 5
/// frees 1's grant once it stops honouring it (the receipt of 1's last
/// renewal to it + `grant_ttl·(1+ρ)`) and, under its quorum lease if that
/// is still running, grants its own client: 1's lease must have ended by
/// then, so 4 must not have acked 1's renewals meanwhile.
fn adopted_grant_at_failover(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let c = long_lease(alg, m);
    let ttl = c.grant_ttl;
    let mut sim = cluster_with(seed, 5, c, ttl * 2);
    elect(&mut sim, 5)?;
    let term = sim.world().core(NodeId(5)).map_or(0, |c| c.term());
    sim.after(Duration::ZERO, acquire(NodeId(1), client(1)));
    // After 5's failover gap, (lease + grant_ttl)·(1+ρ) + hop_timeout.
    until_granted(&mut sim, 1, ttl * 2)?;
    let granted_at = sim.now();
    let Some((_, fence)) = sim.world().core(NodeId(1)).and_then(|c| c.holder(&lockservice::LockName::unnamed())) else {
        return Err(sim.error("1's client holds nothing"));
    };
    sim.drop_kind(NodeId(1), NodeId(5), "renew", u32::MAX);
    for x in 1..=3 {
        sim.drop_kind(NodeId(x), NodeId(5), "stale_term", u32::MAX);
    }
    sim.after(Duration::ZERO, acquire(NodeId(5), client(5)));
    sim.run_for(Duration::from_millis(70))?;
    for (from, to) in [(4, 5), (5, 4), (4, 1)] {
        sim.cut(NodeId(from), NodeId(to));
    }
    let now = sim.now();
    sim.with_core(NodeId(2), |c| c.start_election_now(now));
    let end = now + Duration::from_millis(300);
    while !sim.world().core(NodeId(4)).is_some_and(|c| c.in_office()) {
        if sim.now() > end {
            return Err(sim.error("4 was not in office within 300 ms of the new term"));
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    sim.uncut(NodeId(4), NodeId(1));
    let end = sim.now() + Duration::from_millis(50);
    while sim.world().core(NodeId(4)).and_then(|c| c.current_grant(&lockservice::LockName::unnamed()))
        != Some((NodeId(1), fence))
    {
        if sim.now() > end {
            return Err(sim.error("4 did not adopt 1's grant within 50 ms of office"));
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    if !sim.world().core(NodeId(5)).is_some_and(|c| c.in_office() && c.term() == term) {
        return Err(sim.error(format!("5 left office in term {term} before 4 adopted 1's grant")));
    }
    sim.run_until(granted_at + ttl + Duration::from_millis(100))
}

#[test]
fn adopted_grant_at_failover_holds() {
    holds(adopted_grant_at_failover);
}

/// The wait before renewing an adopted grant, masked by the `grant_ttl`
/// bound (`grant_ttl ≥ 3·(lease + suspect_after)`): in
/// `adopted_grant_at_failover`, 5 can free 1's grant and grant again only
/// under a quorum lease from a heartbeat acked before 4's voters joined
/// its term, so before 1 re-registered; 1 renews every `grant_ttl/3`, so
/// its first renewal acked by 4 early comes at most `2·grant_ttl/3` after
/// its last one to 5, and 5 frees it `grant_ttl·(1+ρ)` after that: the
/// hazard needs `lease > grant_ttl/3 + ρ·grant_ttl`, which the bound
/// rules out. With the valid `grant_ttl` (1,236 ms) and adopted grants
/// renewed at once, 5's quorum lease has long lapsed when it frees 1's
/// grant (it steps down); with the 240 ms `grant_ttl` and every rule on, 1's
/// lease ends unrenewed just before 5 grants its own client; with both,
/// 4 acks 1's renewal 160 ms after its last one to 5, and 5 grants its
/// client 240 ms after that while 1's lease runs. (Of seeds 1–40, all 40
/// `relay` and all 40 `ring` runs fail so with both; the two other
/// combinations and every rule on pass all 80.)
#[test]
fn adopted_renewal_wait_masked_by_grant_ttl_bound() {
    let at_once = Rules::all_but(&[ElRule::AdoptedRenewalWaits]);
    let short = Rules::all_but(&[ElRule::GrantTtlBound]);
    let both = at_once.without(ElRule::GrantTtlBound);
    masked(adopted_grant_at_failover, &ALGS, &[Rules::ALL_ON, at_once, short], both, &[LEASE_OVERLAP]);
}

// ---------------------------------------------------------------- pre-vote

/// (+) Pre-vote. 1 can send but hears nothing (every link into it is
/// cut): it suspects the coordinator and tries to elect, again and again.
/// 5 must stay in office in its term, and 2's client must be served.
fn prevote(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(5));
    elect(&mut sim, 5)?;
    let term = sim.world().core(NodeId(5)).map(|c| c.term()).unwrap_or_default();
    let cut_at = sim.now();
    for i in 2..=5 {
        sim.after(Duration::ZERO, Action::Cut(NodeId(i), NodeId(1)));
    }
    sim.run_for(Duration::from_millis(2_000))?;
    let w = sim.world();
    let deposed: Vec<String> = w
        .events
        .iter()
        .filter(|(t, id, e)| *t >= cut_at && *id == NodeId(5) && matches!(e, ElEvent::SteppedDown { .. }))
        .map(|(t, _, e)| format!("{t:?} {e:?}"))
        .collect();
    if !deposed.is_empty() || w.core(NodeId(5)).map(|c| c.term()) != Some(term) {
        return Err(sim.error(format!("a one-way process deposed the coordinator of term {term}: {deposed:?}")));
    }
    sim.after(Duration::ZERO, acquire(NodeId(2), client(2)));
    until_granted(&mut sim, 2, Duration::from_millis(500))
}

#[test]
fn prevote_holds() {
    holds(prevote);
}

#[test]
fn prevote_is_needed() {
    defended(Rules::all_but(&[ElRule::PreVote]), &["deposed the coordinator"], prevote);
}

// ------------------------------------------------------------ stored terms

/// (safety) Terms and votes are stored. 1's client is granted by 3 and
/// releases; all three processes crash and restart (a cold restart of the
/// cluster); 1's client asks again. Its fence must be above the first: the
/// new term must be above every term of the first lives.
fn cold_restart(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 3, alg, m, Duration::from_millis(5));
    elect(&mut sim, 3)?;
    granted_in_turn(&mut sim, 1, 2, Duration::from_millis(500))?;
    for i in 1..=3 {
        sim.after(Duration::ZERO, Action::Crash(NodeId(i)));
        sim.after(Duration::from_millis(1), Action::Restart(NodeId(i)));
    }
    sim.run_for(Duration::from_millis(5))?;
    sim.after(Duration::ZERO, acquire(NodeId(1), client(1)));
    until_granted(&mut sim, 1, Duration::from_millis(3_000))?;
    sim.run_for(Duration::from_millis(100))
}

#[test]
fn cold_restart_holds() {
    holds(cold_restart);
}

#[test]
fn stored_terms_are_needed() {
    defended(
        Rules::all_but(&[ElRule::StoredTerms]),
        // Fences fall: seen by the clients, or as a lower-term grant.
        &["granted fence", "granted in term"],
        cold_restart,
    );
}

// ------------------------------------------------------ one vote per term

/// electd.md, Invariants 2: 1 and 5 both start the same term (t + 1, t
/// the term 5 leads) and 5 stalls 150 ms, with the default timings
/// (`hop_timeout` 100 ms). 4 skips the stalled 5, so 1's election names
/// 4; 5's own election comes back to it after the stall. It must not
/// collect the votes of 1–4 a second time: never two coordinators in one
/// term.
fn same_term_elections(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut c = ElConfig { algorithm: alg, rules: m, ..Default::default() };
    c.election_timeout = c.derived_election_timeout(5);
    let mut sim = cluster_with(seed, 5, c, Duration::from_millis(5));
    sim.run_until(Instant::from_millis(10_000))?;
    if !sim.world().core(NodeId(5)).is_some_and(|c| c.in_office()) {
        return Err(sim.error("5 is not in office"));
    }
    let now = sim.now();
    for i in [1, 5] {
        sim.with_core(NodeId(i), |c| c.start_election_now(now));
    }
    sim.after(Duration::ZERO, Action::Pause(NodeId(5)));
    sim.after(Duration::from_millis(150), Action::Resume(NodeId(5)));
    sim.run_for(Duration::from_millis(5_000))
}

#[test]
fn same_term_elections_hold() {
    holds(same_term_elections);
}

#[test]
fn one_vote_per_term_is_needed() {
    defended(Rules::all_but(&[ElRule::OneVotePerTerm]), &["two coordinators in term"], same_term_elections);
}

// ------------------------------------------- StaleTerm, not a lower ack

/// electd.md, Invariants 3: coordinator 4 (5 is down) is cut off from 3
/// and 5 but still reaches 1 and 2 while 5, restarted, is elected by 1,
/// 2, 3. 4's own client holds the lock (1.5 s). Once 1 and 2 are in 5's
/// term they must stop acking 4's heartbeats (and tell it `StaleTerm`):
/// else 4 keeps its quorum lease and renews its client while 5, after its
/// failover gap, grants 3.
fn cut_off_coordinator(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(1_500));
    elect(&mut sim, 5)?;
    sim.after(Duration::ZERO, Action::Crash(NodeId(5)));
    sim.run_for(Duration::from_millis(1_000))?;
    if !sim.world().core(NodeId(4)).is_some_and(|c| c.in_office()) {
        return Err(sim.error("4 is not in office"));
    }
    sim.after(Duration::ZERO, acquire(NodeId(4), client(4)));
    until_granted(&mut sim, 4, Duration::from_millis(500))?;
    for other in [3, 5] {
        sim.after(Duration::ZERO, Action::Cut(NodeId(4), NodeId(other)));
        sim.after(Duration::ZERO, Action::Cut(NodeId(other), NodeId(4)));
    }
    sim.after(Duration::from_millis(1), Action::Restart(NodeId(5)));
    sim.after(Duration::from_millis(2), acquire(NodeId(3), client(3)));
    until_granted(&mut sim, 3, Duration::from_millis(3_000))?;
    sim.run_for(Duration::from_millis(500))
}

#[test]
fn cut_off_coordinator_holds() {
    holds(cut_off_coordinator);
}

#[test]
fn stale_term_is_needed() {
    defended(Rules::all_but(&[ElRule::StaleTermAnswered]), &[AT_ONCE, LEASE_OVERLAP], cut_off_coordinator);
}

// ------------------------------------------------- late joiners active

/// (safety) `relay`: late joiners join as active. 5 leads; 1 alone
/// starts the next term (as after a won pre-vote: its timer fired first).
/// The others hear of the term from 1's first message: they must join the
/// run with their own ids, so that 5, the highest id among the term's
/// voters, is its coordinator, not 1, the only initiator.
fn late_joiners(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(5));
    elect(&mut sim, 5)?;
    let from = sim.world().events.len();
    let now = sim.now();
    sim.with_core(NodeId(1), |c| c.start_election_now(now));
    sim.run_for(Duration::from_millis(1_000))?;
    let first = sim.world().events[from..].iter().find_map(|(_, id, e)| match e {
        ElEvent::TookOffice { term } => Some((*id, *term)),
        _ => None,
    });
    match first {
        Some((NodeId(5), _)) => Ok(()),
        Some((id, term)) => Err(sim.error(format!("{id} took office in term {term}, not 5, the highest id (live)"))),
        None => Err(sim.error("nobody took office after 1 started a term")),
    }
}

#[test]
fn late_joiners_hold() {
    holds(late_joiners);
}

/// A coordinator that sees a higher term steps down at once: without it,
/// 5 (in `ring`) ignores 1's Election of the new term, is skipped, and 4
/// is elected while 5 is live.
#[test]
fn step_down_is_needed() {
    defended(Rules::all_but(&[ElRule::StepDownAtAHigherTerm]), &["not 5, the highest id"], late_joiners);
}

/// Without the rule the cluster's first election may already elect the
/// highest *initiator* rather than 5; since a healthy coordinator keeps
/// office (5 no longer challenges it), `elect` then finds 5 not in office.
#[test]
fn late_joiners_active_is_needed() {
    defended(
        Rules::all_but(&[ElRule::LateJoinersActive]),
        &["not 5, the highest id", "5 is not in office"],
        late_joiners,
    );
}

// ---------------------------------------------------------- per-hop acks

/// (safety) Per-hop acks. Process 4 hangs (paused: its connections stay
/// open, so nothing reports it gone), then coordinator 5 crashes (its
/// connections break: everyone suspects it). Every lap of {1, 2, 3}
/// passes 3 → 4: the survivors must still elect 3, by noticing the
/// unacked hop. (Until 2026-11-29 the hung process was the coordinator
/// itself; the election a consumer starts now skips a coordinator silent
/// for `suspect_after`, without any hop timing out.)
fn hung_successor(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(5));
    elect(&mut sim, 5)?;
    sim.after(Duration::ZERO, Action::Pause(NodeId(4)));
    sim.after(Duration::from_millis(1), Action::Crash(NodeId(5)));
    sim.run_for(Duration::from_millis(2_000))?;
    if !sim.world().core(NodeId(3)).is_some_and(|c| c.in_office()) {
        return Err(sim.error("no coordinator 2 s after 4 hung and 5 crashed"));
    }
    Ok(())
}

#[test]
fn hung_successor_holds() {
    holds(hung_successor);
}

#[test]
fn hop_acks_are_needed() {
    defended(Rules::all_but(&[ElRule::HopAcks]), &["no coordinator"], hung_successor);
}

// ------------------------------------------ never office at a loaded term

/// (safety) A process never takes office at or below the term it loaded
/// (its grant counter is not stored). Coordinator 3 grants its own client
/// twice, crashes and restarts at once; its client asks again: the fence
/// must be above both.
fn restarted_coordinator(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 3, alg, m, Duration::from_millis(5));
    elect(&mut sim, 3)?;
    granted_in_turn(&mut sim, 3, 2, Duration::from_millis(500))?;
    sim.after(Duration::ZERO, Action::Crash(NodeId(3)));
    sim.after(Duration::from_millis(1), Action::Restart(NodeId(3)));
    sim.after(Duration::from_millis(2), acquire(NodeId(3), client(3)));
    until_granted(&mut sim, 3, Duration::from_millis(3_000))?;
    sim.run_for(Duration::from_millis(100))
}

#[test]
fn restarted_coordinator_holds() {
    holds(restarted_coordinator);
}

#[test]
fn no_office_at_the_loaded_term_is_needed() {
    defended(Rules::all_but(&[ElRule::NoOfficeAtTheLoadedTerm]), &["granted fence"], restarted_coordinator);
}

// ------------------------------------------------------- counter overflow

/// (safety) Counter overflow. Every term's grant counter starts two below
/// `u64::MAX`; 1's client is granted five times in a row. The fences must
/// keep rising: past `u64::MAX` the coordinator starts a new term.
fn counter_overflow(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let c = ElConfig { rules: m, first_counter: TestStart::at(u64::MAX - 2), ..config(alg, 3) };
    let mut sim = cluster_with(seed, 3, c, Duration::from_millis(5));
    elect(&mut sim, 3)?;
    granted_in_turn(&mut sim, 1, 5, Duration::from_millis(3_000))?;
    Ok(())
}

#[test]
fn counter_overflow_holds() {
    holds(counter_overflow);
}

#[test]
fn counter_overflow_rule_is_needed() {
    defended(Rules::all_but(&[ElRule::CounterNeverWraps]), &["granted fence"], counter_overflow);
}

// ------------------------------------------------- a minority without office

/// A minority cut off while the majority's coordinator grants. N = 5,
/// `ring`; 5 in office; 3's client is granted and holds 1.5 s; {1, 2} are
/// cut off from {3, 4, 5}; 1's client asks. The minority must never name a
/// coordinator that grants: its pre-vote finds no majority; an election it
/// runs anyway comes back with two voters, not a majority; a coordinator
/// it names anyway never hears a majority's heartbeat acks, so it neither
/// takes office nor holds a quorum lease.
fn minority_cut_off(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 5, alg, m, Duration::from_millis(1_500));
    elect(&mut sim, 5)?;
    sim.after(Duration::ZERO, acquire(NodeId(3), client(3)));
    until_granted(&mut sim, 3, Duration::from_millis(500))?;
    sim.after(Duration::ZERO, Action::Partition(vec![NodeId(1), NodeId(2)]));
    sim.after(Duration::from_millis(1), acquire(NodeId(1), client(1)));
    sim.run_for(Duration::from_millis(1_400))
}

/// A quorum that comes after the election deadline. N = 7, 7 (the
/// highest id) in office; 1 starts a new term, which elects 7 again. As
/// 7 learns it is elected, 2–5 (every process but its ring neighbours)
/// are paused, so only 1 and 6 ack its heartbeats: 3 of 7, no majority.
/// They resume 400 ms later (past the deadline, `election_timeout·(1−ρ)`
/// from 7 joining the term) and ack the heartbeats queued for them (the
/// latest, sent within a lease, count): 7 hears a majority late. 3 ms
/// after the resume 7 is cut off both ways; 7's client and 3's ask (each
/// holds 1.5 s); the others, hearing nothing from 7, elect 6 in a higher
/// term, which grants 3. An office 7 took now would outlive its majority
/// unless its quorum lease ends it: the hazard is the lease's, and the
/// deadline, by refusing the late quorum, happens to prevent it too
/// (docs/safety-rules.md: with the quorum before the deadline the run
/// fails with the quorum lease off alone).
fn late_quorum(seed: u64, alg: Algorithm, m: Rules<ElRule>) -> Result<(), SimError> {
    let mut sim = cluster(seed, 7, alg, m, Duration::from_millis(1_500));
    late_quorum_in(&mut sim)
}

/// `late_quorum` on `sim` (7 processes, not started).
fn late_quorum_in(sim: &mut Sim<ElNode>) -> Result<(), SimError> {
    elect(sim, 7)?;
    let old = sim.world().core(NodeId(7)).map_or(0, |c| c.term());
    let now = sim.now();
    sim.with_core(NodeId(1), |c| c.start_election_now(now));
    let end = now + Duration::from_millis(500);
    while !sim.world().core(NodeId(7)).is_some_and(|c| c.term() > old && c.is_coordinator()) {
        if sim.now() > end {
            return Err(sim.error("7 was not elected again within 500 ms"));
        }
        sim.run_for(Duration::from_micros(20))?;
    }
    for x in 2..=5 {
        sim.after(Duration::ZERO, Action::Pause(NodeId(x)));
        sim.after(Duration::from_millis(400), Action::Resume(NodeId(x)));
    }
    for x in 1..=6 {
        sim.after(Duration::from_millis(403), Action::Cut(NodeId(7), NodeId(x)));
        sim.after(Duration::from_millis(403), Action::Cut(NodeId(x), NodeId(7)));
    }
    sim.after(Duration::from_millis(404), acquire(NodeId(7), client(7)));
    sim.after(Duration::from_millis(404), acquire(NodeId(3), client(3)));
    sim.run_for(Duration::from_millis(404))?;
    until_granted(sim, 3, Duration::from_millis(2_000))?;
    sim.run_for(Duration::from_millis(300))
}

#[test]
fn late_quorum_holds() {
    holds(late_quorum);
}

/// The election deadline, masked by the quorum lease: in `late_quorum`,
/// with the deadline off alone 7 steps down at its first check 40 ms or
/// more after its election (`suspect_after`) for want of a quorum, long
/// before the late acks; with
/// the quorum lease off alone 7 waits for them, and the deadline refuses
/// the late quorum (`PastDeadline`; then term + 1, which 7, cut off,
/// cannot win). With both off 7 takes office in its old term, grants its
/// own client after its failover gap, and 6, elected meanwhile by the
/// others in a higher term, grants 3 while 7's client holds. (Seeds 1–6
/// of each algorithm, at least 4 failing with both off: relay seed 5
/// does not; of seeds 1–40, 38 `relay` and 40 `ring` runs fail
/// so: in the others a pre-vote in flight starts a term before the
/// pause, and 7 is not the coordinator waiting for its quorum.)
#[test]
fn election_deadline_masked_by_quorum_lease() {
    let lease_off = Rules::all_but(&[ElRule::QuorumLease]);
    let both = lease_off.without(ElRule::ElectionDeadline);
    for alg in ALGS {
        let mut shown = Vec::new();
        for seed in 1..=6 {
            if let Err(e) = late_quorum(seed, alg, Rules::all_but(&[ElRule::ElectionDeadline])) {
                panic!("{alg:?} seed {seed}, with the deadline off alone, the run should pass: {e}");
            }
            let mut sim = cluster(seed, 7, alg, lease_off, Duration::from_millis(1_500));
            if let Err(e) = late_quorum_in(&mut sim) {
                panic!("{alg:?} seed {seed}, with the quorum lease off alone, the run should pass: {e}");
            }
            let Err(e) = late_quorum(seed, alg, both) else { continue };
            let text = e.to_string();
            assert!(text.contains(AT_ONCE) || text.contains(LEASE_OVERLAP), "{alg:?} seed {seed}: {text}");
            // Where the pair breaks, the deadline is what held with the
            // lease off: 7 heard its quorum past it and took no office.
            let events = &sim.world().events;
            let past = events.iter().find_map(|(_, id, e)| match e {
                ElEvent::PastDeadline { term } if *id == NodeId(7) => Some(*term),
                _ => None,
            });
            let Some(term) = past else { panic!("{alg:?} seed {seed}: no quorum past the deadline at 7") };
            assert!(
                !events.iter().any(|(_, id, e)| *id == NodeId(7) && *e == ElEvent::TookOffice { term }),
                "{alg:?} seed {seed}: 7 took office in term {term} past its deadline"
            );
            shown.push(seed);
        }
        assert!(shown.len() >= 4, "{alg:?}: only seeds {shown:?} of 1-6 fail with both off");
    }
}

/// The majority of voters (`ring`), masked by the pre-vote and by the
/// quorum of heartbeat acks that office and the quorum lease need: in
/// `minority_cut_off`, any one of the three keeps the minority from
/// granting; with all three off, 2 is named by an election of {1, 2},
/// counts itself a quorum, takes office and grants 1's client while 3's
/// holds.
#[test]
fn majority_of_voters_masked_by_prevote_and_heartbeat_quorum() {
    let all = Rules::all_but(&[ElRule::PreVote, ElRule::MajorityOfVoters, ElRule::HeartbeatQuorum]);
    let one_on = [
        Rules::ALL_ON,
        all.with(ElRule::PreVote),
        all.with(ElRule::MajorityOfVoters),
        all.with(ElRule::HeartbeatQuorum),
    ];
    masked(minority_cut_off, &[Algorithm::Ring], &one_on, all, &[AT_ONCE, LEASE_OVERLAP]);
}

/// A mask, for each of `algs` and seeds 1–3: `scenario` passes with each
/// of `passing` (rule sets with a masking rule on) and fails with `all`
/// off, with a message containing one of `failures`.
fn masked(scenario: Scenario, algs: &[Algorithm], passing: &[Rules<ElRule>], all: Rules<ElRule>, failures: &[&str]) {
    masked_in(&[1, 2, 3], scenario, algs, passing, all, failures);
}

/// [`masked`] for the seeds `seeds`.
fn masked_in(
    seeds: &[u64],
    scenario: Scenario,
    algs: &[Algorithm],
    passing: &[Rules<ElRule>],
    all: Rules<ElRule>,
    failures: &[&str],
) {
    for &alg in algs {
        for &seed in seeds {
            for m in passing {
                if let Err(e) = scenario(seed, alg, *m) {
                    panic!("{alg:?} seed {seed}, with {m:?}, the run should pass: {e}");
                }
            }
            let e = scenario(seed, alg, all).expect_err("with the rules all off the run should fail");
            assert!(failures.iter().any(|f| e.message.contains(f)), "{alg:?} seed {seed}: {e}");
        }
    }
}

/// The majority of voters is also masked by the heartbeat quorum alone,
/// in `same_term_elections` (`ring`, seeds 1–3): 1 and 5 both start the
/// next term and 5 stalls, so 1's election names 4 and 5's own comes back
/// with 5's vote alone (the others voted in the term already). Without
/// the majority rule alone 5 is named but never takes office (only 4's
/// followers ack, and they follow 4); without the heartbeat quorum alone
/// 5's result names nobody; with both off 5 takes office on its own
/// heartbeats beside 4.
#[test]
fn majority_of_voters_masked_by_heartbeat_quorum() {
    let alone = [Rules::all_but(&[ElRule::MajorityOfVoters]), Rules::all_but(&[ElRule::HeartbeatQuorum])];
    let both = Rules::all_but(&[ElRule::MajorityOfVoters, ElRule::HeartbeatQuorum]);
    masked(same_term_elections, &[Algorithm::Ring], &alone, both, &["two coordinators in term"]);
}

/// The step-down's safety half (no grant after a higher term's), masked
/// by the quorum lease: in `cut_off_coordinator` (seeds 1–3, both
/// algorithms) 4, cut off from 3 and 5 but still reaching 1 and 2, is told
/// of 5's higher term. With the step-down off alone, 1 and 2, once in 5's
/// term, stop acking 4 and its quorum lease ends its client's renewals;
/// with the quorum lease off alone, 4 steps down at the higher term; with
/// both off 4 renews its client on beside 5's grant to 3.
#[test]
fn step_down_masked_by_quorum_lease() {
    let alone = [Rules::all_but(&[ElRule::StepDownAtAHigherTerm]), Rules::all_but(&[ElRule::QuorumLease])];
    let both = Rules::all_but(&[ElRule::StepDownAtAHigherTerm, ElRule::QuorumLease]);
    masked(cut_off_coordinator, &ALGS, &alone, both, &[AT_ONCE, LEASE_OVERLAP]);
}

/// The guard against a second result of the term (`reelect_in_office`:
/// `office.rs` `become_elected` makes a new office when a second
/// `Elected` lap of its term reaches the coordinator in office), masked
/// by the failover gap. Paused seed 295 of the random-fault sweep
/// (`kit::paused_run_without`, relay: crashes, a wiped disk, pauses, slow
/// links, partitions) is a run with such a lap: with the guard off alone,
/// or the gap off alone, the run passes; with both off a second office of
/// term 15 counts fences from the start again, and `n1 granted fence
/// 0xf0000000000000001 after 0xf0000000000000001`. (Of paused seeds 0–399
/// with both off, 295 and 387 fail so and pass with either rule on. Seeds
/// 2, 11, then 69 showed it until changes moved the sweep's timings: a
/// coordinator's own client granted within its request, a pre-vote that
/// ends once the term's coordinator is known, then an election that skips
/// the silent coordinator.)
#[test]
fn second_elected_lap_guard_masked_by_failover_gap() {
    let guard_off = Rules::all_but(&[ElRule::OneOfficePerTerm]);
    let gap_off = Rules::all_but(&[ElRule::FailoverGap]);
    masked_in(
        &[295],
        kit::paused_run_without,
        &[Algorithm::Relay],
        &[Rules::ALL_ON, guard_off, gap_off],
        guard_off.without(ElRule::FailoverGap),
        &["n1 granted fence 0xf0000000000000001 after 0xf0000000000000001"],
    );
}

/// The same guard keeps a new coordinator serving (liveness): in
/// `failover_gap` (relay, seed 1) further `Elected` laps of term 5 reach
/// 4 in office once the consumers' elections skip the silent coordinator 5; with
/// the guard off each makes a new office, whose election deadline passes
/// without a quorum, and 2 is not granted within 2 s. (The one run
/// `masked_rules_break_no_scenario` leaves out for this switch.)
#[test]
fn second_elected_lap_guard_keeps_the_office_serving() {
    failover_gap(1, Algorithm::Relay, Rules::ALL_ON).unwrap();
    let e = failover_gap(1, Algorithm::Relay, Rules::all_but(&[ElRule::OneOfficePerTerm]))
        .expect_err("without the guard the run should fail");
    assert!(e.message.contains("was not granted within"), "{e}");
}

/// Every scenario above, by name.
const SCENARIOS: [(&str, Scenario); 14] = [
    ("failover_gap", failover_gap),
    ("quorum_lease", quorum_lease),
    ("lease_from_renewal", lease_from_renewal),
    ("unconfirmed_grant_at_failover", unconfirmed_grant_at_failover),
    ("adopted_grant_at_failover", adopted_grant_at_failover),
    ("prevote", prevote),
    ("cold_restart", cold_restart),
    ("same_term_elections", same_term_elections),
    ("cut_off_coordinator", cut_off_coordinator),
    ("late_joiners", late_joiners),
    ("hung_successor", hung_successor),
    ("restarted_coordinator", restarted_coordinator),
    ("counter_overflow", counter_overflow),
    ("late_quorum", late_quorum),
];

/// The rules docs/safety-rules.md lists as masked: switched off, no
/// scenario above breaks (each is covered by another rule). If one ever
/// does, it shows the rule: move it to "shown" there.
#[test]
fn masked_rules_break_no_scenario() {
    let mut broke = Vec::new();
    for m in [
        Rules::all_but(&[ElRule::MajorityOfVoters]),
        Rules::all_but(&[ElRule::ElectionDeadline]),
        Rules::all_but(&[ElRule::AdoptedRenewalWaits]),
        Rules::all_but(&[ElRule::OneOfficePerTerm]),
    ] {
        for (name, scenario) in SCENARIOS {
            for alg in ALGS {
                for seed in 1..=3 {
                    if m == Rules::all_but(&[ElRule::OneOfficePerTerm])
                        && (name, alg, seed) == ("failover_gap", Algorithm::Relay, 1)
                    {
                        continue; // a liveness break: second_elected_lap_guard_keeps_the_office_serving
                    }
                    if let Err(e) = scenario(seed, alg, m) {
                        broke.push(format!("{m:?} {name} {alg:?} {seed}: {e}"));
                    }
                }
            }
        }
    }
    assert!(broke.is_empty(), "{broke:#?}");
}

/// A survey for the masked rules: each masked switch paired with every
/// other switch, over every scenario above (both algorithms, seeds 1–3);
/// prints the runs that fail with the pair but pass with each switch alone
/// (a mask), and how many runs fail with the pair at all.
#[test]
#[ignore = "survey (seconds in release)"]
fn masked_rules_survey() {
    let others = kit::other_switches();
    let fails = |m: Rules<ElRule>, s: Scenario, alg, seed| s(seed, alg, m).err().map(|e| e.message);
    for rule in
        [ElRule::MajorityOfVoters, ElRule::ElectionDeadline, ElRule::AdoptedRenewalWaits, ElRule::OneOfficePerTerm]
    {
        let (mname, masked) = (rule.switch(), Rules::all_but(&[rule]));
        for (oname, other) in &others {
            let both = other.without(rule);
            let (mut total, mut masks) = (0, Vec::new());
            for (sname, s) in SCENARIOS {
                for alg in ALGS {
                    for seed in 1..=3 {
                        if let Some(e) = fails(both, s, alg, seed) {
                            total += 1;
                            if fails(masked, s, alg, seed).is_none() && fails(*other, s, alg, seed).is_none() {
                                masks.push(format!("{sname} {alg:?} {seed}: {}", e.lines().next().unwrap_or("")));
                            }
                        }
                    }
                }
            }
            eprintln!("{mname} + {oname}: {total} runs fail; masks: {masks:#?}");
        }
    }
}

// ------------------------------------------------------------- the table

/// The rule table (`ElRule`) agrees with its scenarios, with
/// docs/safety-rules.md and with the design sections it cites
/// (`ftcore::rules::audit`).
#[test]
fn the_rule_table_matches_the_scenarios_and_the_docs() {
    let wrong = ftcore::rules::audit::<ElRule>(
        &[include_str!("safety.rs")],
        include_str!("../../../docs/safety-rules.md"),
        "electd",
        &[("docs/electd.md", include_str!("../../../docs/electd.md"))],
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

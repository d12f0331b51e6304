//! Every (safety) rule of ntmutexd defended by a scenario that fails
//! without it (reliability.md: "Every (safety) rule has a simulated or
//! real-process scenario … that fails when the rule is disabled").
//!
//! Each rule is an [`NtRule`] (its switch can be turned off only with
//! `ftcore/mutations`, never in production) and has a scenario
//! `fn(Rules<NtRule>) -> Result<(), SimError>` judged from outside:
//! the clients' grants, fences and replies (`staged_safety`,
//! `client_exclusion`) and liveness (every live client served again). Per
//! rule, `<rule>_holds` runs the scenario with every rule on and
//! `<rule>_is_needed` with that one rule off, and expects it to fail. The
//! table is docs/safety-rules.md; scripts/safety-audit.sh reruns it.

mod workload;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::rules::{Rule, Rules};
use ftcore::{ClientId, NodeId};
use lockservice::{LockReply, LockRequest};
use ntmutexd::{Mech, NtEvent, NtNode, NtRule};
use sim::{Action, FaultPlan, NetConfig, Sim, SimError, World};
use timer::Instant;
use workload::*;

// ---------------------------------------------------------------- harness

const NONE: Rules<NtRule> = Rules::ALL_ON;

/// Mutual exclusion as the clients see it, from their replies alone: a
/// client holds from `Granted` until `Released` or `LockLost` (or its
/// site crashes). Checked while the detector is accurate (`grace` after
/// the last fault), as reliability.md's stage before leases says.
fn client_exclusion(grace: Duration) -> impl FnMut(&World<NtNode>) -> Result<(), String> {
    let mut seen = 0usize;
    let mut holding: BTreeMap<(NodeId, ClientId), u128> = BTreeMap::new();
    move |w| {
        for (_, node, client, reply) in &w.replies[seen..] {
            match reply {
                LockReply::Granted { fence, .. } => {
                    holding.insert((*node, *client), *fence);
                }
                LockReply::Released | LockReply::LockLost { .. } => {
                    holding.remove(&(*node, *client));
                }
                _ => {}
            }
        }
        seen = w.replies.len();
        holding.retain(|(node, _), _| w.is_up(*node));
        if w.timely_for(grace) && holding.len() > 1 {
            return Err(format!("clients hold the lock at once (detector accurate): {holding:x?}"));
        }
        Ok(())
    }
}

/// Runs `run` for each seed; the first failure.
fn seeds(
    seeds: impl IntoIterator<Item = u64>,
    mut run: impl FnMut(u64) -> Result<(), SimError>,
) -> Result<(), SimError> {
    for s in seeds {
        run(s)?;
    }
    Ok(())
}

fn holds(r: Result<(), SimError>) {
    if let Err(e) = r {
        panic!("the scenario fails with every rule on:\n{e}");
    }
}

fn is_needed(r: Result<(), SimError>) {
    match r {
        Ok(()) => panic!("the scenario passes with the rule switched off: it does not defend the rule"),
        Err(e) => eprintln!("without the rule: {}", e.message.lines().next().unwrap_or("")),
    }
}

/// `is_needed`, and the failure is the checker's `what` (not a scenario
/// that stopped short for another reason).
fn is_needed_by(r: Result<(), SimError>, what: &str) {
    match r {
        Ok(()) => panic!("the scenario passes with the rule switched off: it does not defend the rule"),
        Err(e) if e.message.contains(what) => {
            eprintln!("without the rule: {}", e.message.lines().next().unwrap_or(""))
        }
        Err(e) => panic!("the scenario fails with the rule switched off, but not with {what:?}:\n{e}"),
    }
}

/// Every rule on but leases: the stage before leases (reliability.md,
/// "Invariants by stage"). Leases are a second line for many rules (a
/// stale token's grants end with its lease, a renewal stores the epoch in
/// use at a majority): such a rule is shown needed with leases off, and its
/// scenario holds both with and without them.
fn no_leases() -> Rules<NtRule> {
    Rules::all_but(&[NtRule::GrantsUnderLeases])
}

// ---------------------------------------------------------- exploration

/// Which generic scenarios each mutation breaks (a survey, printed; used
/// to choose the scenarios below). `SAFETY_SURVEY_SEEDS` widens it,
/// `SAFETY_SURVEY_FROM` moves its first seed.
#[test]
#[ignore = "survey: runs every mutation against the random scenarios (minutes)"]
fn survey() {
    let count = sim::model::setting("SAFETY_SURVEY_SEEDS", 20);
    // SAFETY_SURVEY_FROM: the first seed (0).
    let from = sim::model::setting("SAFETY_SURVEY_FROM", 0);
    let only = std::env::var("SAFETY_SURVEY_ONLY").ok();
    // SAFETY_SURVEY_NO_LEASES=1: each mutation with leases off too (the
    // rules leases mask).
    let no_leases = std::env::var("SAFETY_SURVEY_NO_LEASES").is_ok_and(|v| v == "1");
    for (name, m) in all_single() {
        let m = if no_leases { m.without(NtRule::GrantsUnderLeases) } else { m };
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let mut found = Vec::new();
        let r = seeds(from..from + count, |s| {
            let n = 3 + (s % 6) as u32;
            run_faulty_with(s, n, 2, FaultPlan { majority_downs: 0, ..everything(n) }, m).map(|_| ())
        });
        if let Err(e) = r {
            found.push(format!("every_fault seed {}: {}", e.seed, e.message.lines().next().unwrap_or("")));
        }
        let r = seeds(from..from + count, |s| {
            let n = 3 + (s % 6) as u32;
            run_faulty_with(s, n, 2, everything(n), m).map(|_| ())
        });
        if let Err(e) = r {
            found.push(format!("majority_down seed {}: {}", e.seed, e.message.lines().next().unwrap_or("")));
        }
        let r = seeds(from..from + count, |s| regen_race(s, m));
        if let Err(e) = r {
            found.push(format!("regen_race seed {}: {}", e.seed, e.message.lines().next().unwrap_or("")));
        }
        let r = seeds(from..from + count / 2, |s| contention(s, m));
        if let Err(e) = r {
            found.push(format!("contention seed {}: {}", e.seed, e.message.lines().next().unwrap_or("")));
        }
        eprintln!("SURVEY {name}: {}", if found.is_empty() { "nothing".to_string() } else { found.join(" | ") });
    }
}

/// Delays uniform up to `2·t_msg` with crashes (sim.rs's regeneration-race
/// sweep): only the invariants that hold always are checked.
fn regen_race(seed: u64, m: Rules<NtRule>) -> Result<(), SimError> {
    let n = 4;
    let net = NetConfig::reliable(Duration::from_micros(200), 2 * T_MSG);
    let mut sim = cluster_with(seed, n, 2, HEAVY, net, m);
    sim.check(staged_safety(None));
    sim.random_faults(&FaultPlan::default());
    keep_clients_coming(&mut sim, n, Instant::from_millis(500), Instant::from_millis(4_000));
    sim.run_until(Instant::from_millis(4_000))
}

/// Failure-free contention: the staged invariants, no recovery ever
/// started (invariant 6), everyone served.
fn contention(seed: u64, m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = cluster_with(seed, 5, 3, HEAVY, net(), m);
    sim.check(staged_safety(Some(Duration::ZERO)));
    sim.run_until(Instant::from_millis(2_000))?;
    let w = sim.world();
    if let Some(e) = w.events.iter().find(|(_, _, e)| matches!(e, NtEvent::RecoveryStarted { .. })) {
        return Err(sim.error(format!("a failure-free run started a recovery: {e:?}")));
    }
    everyone_served_since(w, Instant::from_millis(1_500)).map_err(|m| sim.error(m))
}

// ------------------------------------------------------------- scenarios

/// Clients that hold until told `LockLost` (their first grant) at the sites
/// in `forever`, and loop acquire → hold → release elsewhere.
fn stubborn(seed: u64, n: u32, forever: &'static [u32], m: Rules<NtRule>) -> Sim<NtNode> {
    stubborn_on(seed, n, net(), forever, m)
}

/// `stubborn` on another network.
fn stubborn_on(seed: u64, n: u32, net: NetConfig, forever: &'static [u32], m: Rules<NtRule>) -> Sim<NtNode> {
    let mut sim = sites_with(seed, n, 2, net, m);
    // Sites whose client was told LockLost: it releases its later grants.
    let mut told: BTreeSet<NodeId> = BTreeSet::new();
    sim.clients(Box::new(move |_, node, client, reply, rng| {
        let ms = |rng: &mut timer::SeededRng, lo, hi| Duration::from_millis(rng.range_inclusive(lo, hi));
        if matches!(reply, LockReply::LockLost { .. }) {
            told.insert(node);
        }
        match reply {
            LockReply::Granted { .. } if forever.contains(&node.0) && !told.contains(&node) => vec![],
            LockReply::Granted { .. } => vec![(ms(rng, 1, 8), Action::Request(node, client, LockRequest::Release))],
            LockReply::Released | LockReply::TimedOut | LockReply::LockLost { .. } => {
                vec![(ms(rng, 0, 5), acquire(node, client))]
            }
            LockReply::Refused { .. }
            | LockReply::Renewed { .. }
            | LockReply::Locks { .. }
            | LockReply::Leader { .. } => {
                vec![]
            }
        }
    }));
    sim
}

/// False suspicion of a holder whose client holds on: the holder is cut
/// off, the others regenerate and are served; after the heal the stale
/// holder must tell its client `LockLost` before the detector counts as
/// accurate again, or two clients hold at once by their own replies.
fn stale_holder_told_lock_lost(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = stubborn(1, 3, &[1], m);
    sim.check(client_exclusion(accurate_after()));
    sim.check(staged_safety(Some(accurate_after())));
    sim.at(Instant::from_millis(300), acquire(NodeId(1), ClientId(1)));
    sim.run_until(Instant::from_millis(400))?;
    if sim.world().core(NodeId(1)).and_then(|c| c.holder()).is_none() {
        return Err(sim.error("site 1's client was not granted"));
    }
    sim.after(Duration::ZERO, Action::Partition(vec![NodeId(1)]));
    sim.after(Duration::from_millis(10), acquire(NodeId(2), ClientId(2)));
    sim.after(Duration::from_millis(10), acquire(NodeId(3), ClientId(3)));
    sim.after(Duration::from_millis(600), Action::Heal);
    sim.run_until(Instant::from_millis(2_500))?;
    let told =
        sim.world().replies.iter().any(|(_, n, _, r)| *n == NodeId(1) && matches!(r, LockReply::LockLost { .. }));
    if !told {
        return Err(sim.error("the stale holder's client was never told LockLost"));
    }
    everyone_served_since(sim.world(), Instant::from_millis(1_500)).map_err(|m| sim.error(m))
}

#[test]
fn lock_lost_holds() {
    holds(stale_holder_told_lock_lost(NONE));
    holds(stale_holder_told_lock_lost(no_leases()));
}

#[test]
fn lock_lost_is_needed() {
    is_needed(stale_holder_told_lock_lost(no_leases().without(NtRule::HolderToldLockLost)));
}

/// Runs until `site` has sent one more message of `kind` than `before`
/// counts (the whole cluster's count of that kind).
fn run_until_sent(sim: &mut Sim<NtNode>, kind: &str, before: u64, limit: Instant) -> Result<(), SimError> {
    while sim.world().sent_by_kind.get(kind).copied().unwrap_or(0) <= before {
        if sim.now() >= limit {
            return Err(sim.error(format!("no {kind} sent by {limit}")));
        }
        sim.run_for(Duration::from_micros(50))?;
    }
    Ok(())
}

/// A promise acked and then forgotten by a crash: N = 3, the holder, site
/// one, crashes; site three regenerates epoch (round 2, slot 2) with the
/// ack of site two, which crashes right after acking (and acking site
/// three's lease renewal); site three grants,
/// then crashes. Sites one and two come back and site one proposes (round
/// 2, slot 0), below site three's epoch. A site two that stored its
/// promise refuses it (site one jumps above); one that forgot it acks, and
/// the new token's first fence is below fences granted before it was
/// created.
fn promise_survives_a_crash(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = stubborn(2, 3, &[], m);
    sim.check(staged_safety(Some(accurate_after())));
    sim.run_until(Instant::from_millis(400))?;
    let holder = find_holder(&mut sim, 2000)?;
    if holder != NodeId(1) {
        return Err(sim.error(format!("expected the root to hold the first token, {holder} does")));
    }
    sim.after(Duration::ZERO, Action::Crash(NodeId(1)));
    sim.after(Duration::ZERO, acquire(NodeId(3), ClientId(3)));
    let acks = sim.world().sent_by_kind.get("regenerate_ack").copied().unwrap_or(0);
    run_until_sent(&mut sim, "regenerate_ack", acks, Instant::from_millis(1_000))?;
    // Site 3 grants only under a lease: site 2 also acks its renewal
    // (which stores nothing) before it crashes.
    if m.on(NtRule::GrantsUnderLeases) {
        let lease_acks = sim.world().sent_by_kind.get("lease_ack").copied().unwrap_or(0);
        run_until_sent(&mut sim, "lease_ack", lease_acks, Instant::from_millis(1_000))?;
    }
    sim.after(Duration::ZERO, Action::Crash(NodeId(2)));
    // Site 3's client is granted with the new epoch.
    let t = sim.now() + Duration::from_millis(300);
    while !grants(sim.world()).iter().any(|(_, n, _)| *n == NodeId(3)) {
        if sim.now() >= t {
            return Err(sim.error("site 3 was not granted after regenerating"));
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    sim.after(Duration::from_millis(5), Action::Crash(NodeId(3)));
    sim.after(Duration::from_millis(20), Action::Restart(NodeId(2)));
    sim.after(Duration::from_millis(20), Action::Restart(NodeId(1)));
    sim.after(Duration::from_millis(300), acquire(NodeId(1), ClientId(1)));
    sim.after(Duration::from_millis(300), acquire(NodeId(2), ClientId(2)));
    let since = sim.now() + Duration::from_millis(300);
    sim.run_for(Duration::from_millis(1_500))?;
    everyone_served_since(sim.world(), since).map_err(|m| sim.error(m))
}

#[test]
fn promise_stored_before_ack_holds() {
    holds(promise_survives_a_crash(NONE));
    holds(promise_survives_a_crash(no_leases()));
}

#[test]
fn promise_stored_before_ack_is_needed() {
    is_needed(promise_survives_a_crash(no_leases().without(NtRule::PromiseStoredBeforeAck)));
}

/// The every-fault sweep of sim.rs (no majority down) for one seed.
fn every_fault(seed: u64, m: Rules<NtRule>) -> Result<(), SimError> {
    let n = 3 + (seed % 6) as u32;
    run_faulty_with(seed, n, 2, FaultPlan { majority_downs: 0, ..everything(n) }, m).map(|_| ())
}

/// The every-fault sweep of sim.rs, a majority-down episode included.
fn every_fault_majority_down(seed: u64, m: Rules<NtRule>) -> Result<(), SimError> {
    let n = 3 + (seed % 6) as u32;
    run_faulty_with(seed, n, 2, everything(n), m).map(|_| ())
}

/// sim.rs's regression seeds of the stale-token bug (210, 258, 450) and
/// seeds the survey found (0, 16 and majority-down 12 before Commits
/// stopped cascading unchanged positions; 12 and majority-down 18 since).
fn behind_sender_answered(m: Rules<NtRule>) -> Result<(), SimError> {
    seeds([0, 12, 16, 210, 258, 450], |s| every_fault(s, m))?;
    every_fault_majority_down(12, m)?;
    every_fault_majority_down(18, m)
}

#[test]
fn sender_behind_answered_holds() {
    holds(behind_sender_answered(NONE));
    holds(behind_sender_answered(no_leases()));
}

#[test]
fn sender_behind_answered_is_needed() {
    // (Seed 0 failed too until stalled holders asked for the epoch.)
    is_needed(every_fault(12, no_leases().without(NtRule::SenderBehindAnswered)));
    is_needed(every_fault_majority_down(18, no_leases().without(NtRule::SenderBehindAnswered)));
}

/// Every-fault seed 2862 (found in a 3,000-seed run) showed the rule until
/// Commits stopped cascading unchanged positions: the holder is paused,
/// the others regenerate and one of them crashes; resumed, the holder's
/// queued answers go to the crashed site only, nobody with the new epoch
/// ever writes to it, and it grants beside the new token. No seed of
/// 12,000 shows it now, so the trace is scripted (N = 3): site 1 holds the
/// token, its client asking again and again; it is paused, and sites 2
/// and 3, whose messages to 1 are cut, regenerate (2, with 3's ack); the
/// new token goes to 3 and stays there, and 2 crashes. Resumed, site 1
/// grants with its old token, and goes on: 3 has no reason to write to it
/// (2, which suspected 1, would have probed it). The
/// stall check (1's `HolderCheck` wake-up came late) asks every peer, and
/// their answers carry the newer epoch.
fn stalled_holder(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = sites_with(7, 3, 2, net(), m);
    sim.check(staged_safety(Some(accurate_after())));
    sim.clients(Box::new(|_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(2), Action::Request(node, client, LockRequest::Release))]
        }
        // Site 1's client asks again; the others ask once.
        LockReply::Released | LockReply::LockLost { .. } | LockReply::TimedOut if node == NodeId(1) => {
            vec![(Duration::from_millis(5), acquire(node, client))]
        }
        _ => vec![],
    }));
    let ms = Instant::from_millis;
    sim.at(ms(300), acquire(NodeId(1), ClientId(1)));
    sim.at(ms(400), Action::Pause(NodeId(1)));
    sim.at(ms(400), Action::Cut(NodeId(2), NodeId(1)));
    sim.at(ms(400), Action::Cut(NodeId(3), NodeId(1)));
    sim.at(ms(402), acquire(NodeId(2), ClientId(2)));
    sim.at(ms(460), acquire(NodeId(3), ClientId(3)));
    // 2 suspected 1 in its search: its probes would tell 1 the newer epoch.
    sim.at(ms(480), Action::Crash(NodeId(2)));
    sim.at(ms(510), Action::Resume(NodeId(1)));
    sim.at(ms(510), Action::Uncut(NodeId(2), NodeId(1)));
    sim.at(ms(510), Action::Uncut(NodeId(3), NodeId(1)));
    sim.run_until(ms(509))?;
    if !sim.world().core(NodeId(3)).is_some_and(|c| c.has_token()) {
        return Err(sim.error("the new token is not at site 3 when site 1 resumes"));
    }
    sim.run_until(ms(1_500))
}

#[test]
fn holder_stall_check_holds() {
    holds(every_fault(2862, NONE));
    holds(every_fault(2862, no_leases()));
    holds(stalled_holder(NONE));
    holds(stalled_holder(no_leases()));
}

#[test]
fn holder_stall_check_is_needed() {
    is_needed(stalled_holder(no_leases().without(NtRule::HolderStallCheck)));
}

/// Every-fault seeds 36 (no majority down) and 1 (majority down), found by
/// the survey.
fn regen_towards_live_sites(m: Rules<NtRule>) -> Result<(), SimError> {
    seeds([36, 48, 60], |s| every_fault(s, m))?;
    seeds([1, 198, 258], |s| every_fault_majority_down(s, m))
}

#[test]
fn regen_acks_from_every_live_site_holds() {
    holds(regen_towards_live_sites(NONE));
    holds(regen_towards_live_sites(no_leases()));
}

#[test]
fn regen_acks_from_every_live_site_is_needed() {
    let m = no_leases().without(NtRule::RegenAcksFromEveryLiveSite);
    // The seeds move as other rules tighten (1, 36, 237 failed with earlier
    // versions of the "sender is behind" answer); a search of 400 seeds of
    // each family finds the current ones (60 and 258 until Commits stopped
    // cascading unchanged positions).
    is_needed(every_fault(48, m));
    is_needed(every_fault_majority_down(198, m));
}

/// Failure-free contention (seeds 0..3): no recovery ever starts.
fn provisional_commits(m: Rules<NtRule>) -> Result<(), SimError> {
    seeds(0..3, |s| contention(s, m))
}

#[test]
fn provisional_commit_holds() {
    holds(provisional_commits(NONE));
    holds(provisional_commits(no_leases()));
}

#[test]
fn provisional_commit_is_needed() {
    is_needed(provisional_commits(no_leases().without(NtRule::ProvisionalCommit)));
}

/// Failure-free contention, seed 30 (found by the survey): without the
/// restart window the first proposals of the starting cluster are not
/// spread out and a site starts an M3 recovery in a failure-free run
/// (invariant 6). Liveness-level only: no safety checker failed.
fn restart_window_scenario(m: Rules<NtRule>) -> Result<(), SimError> {
    contention(30, m)
}

/// Both halves: the liveness one (`restart_window_scenario`) and the
/// safety one, a promise window forgotten in a crash
/// (`late_lower_epoch_after_restarts`, seeds 1–20, shown at the stage
/// before leases; leases mask it: `restart_window_after_a_crash_masked_by_leases`).
#[test]
fn restart_window_holds() {
    holds(restart_window_scenario(NONE));
    holds(restarts_seeds(NONE));
    holds(restarts_seeds(no_leases()));
}

#[test]
fn restart_window_is_needed() {
    is_needed(restart_window_scenario(Rules::all_but(&[NtRule::RestartWindow])));
    for seed in 1..=20 {
        is_needed_by(
            late_lower_epoch_after_restarts(seed, no_leases().without(NtRule::RestartWindow)),
            "granted before it was created",
        );
    }
}

/// Seeds of the every-fault families that fail without probes of
/// suspected peers (found by a search of 800 seeds of each family for each
/// rule not shown necessary; only this rule turned up): a falsely suspected
/// site that nobody writes to again otherwise never learns what changed.
#[test]
fn probes_of_suspected_peers_holds() {
    for m in [NONE, no_leases()] {
        holds(seeds([24, 121, 130, 432], |s| every_fault_majority_down(s, m)));
        holds(seeds([240, 474], |s| every_fault(s, m)));
    }
}

#[test]
fn probes_of_suspected_peers_is_needed() {
    let m = no_leases().without(NtRule::ProbesOfSuspectedPeers);
    // 121 until promise windows ended once their value was in use
    // (2026-11-29).
    is_needed(every_fault_majority_down(24, m));
    // 474 until Commits stopped cascading unchanged positions.
    is_needed(every_fault(240, m));
}

/// A lower epoch completing after a higher one. N = 5 on a fast network
/// (delays ≤ 1 ms, `t_msg` 5 ms); site 5 holds the token (its client holds
/// on) and crashes; the links 1 ↔ 4 are held both ways, so sites 1 and 4
/// each search (M3) without hearing the other and propose: 1 the lower
/// epoch e1 (slot 0), 4 ms later 4 the higher e4 (slot 3). Sites 2 and 3
/// promise e1 first; their acks to 1 are held. With the promise window
/// they refuse e4 (`Busy`: they promised 1 less than `W·(1+ρ)` ago); 1
/// completes e1 when its acks are released 8 ms after its proposal (inside
/// its `2·t_msg` regeneration window). Without it they promise e4 too, 4
/// regenerates and grants, and then 1 completes e1 below e4's fences.
fn late_lower_epoch(m: Rules<NtRule>) -> Result<(), SimError> {
    late_lower_epoch_with(1, false, m)
}

/// `late_lower_epoch` with the promise window forgotten in a crash: once
/// sites 2 and 3 have promised e1 (stored, their acks to 1 held), both
/// crash and restart 0.2 ms later with their disks, about 3 ms before site
/// 4 proposes e4. The acks of their old lives stay on the held links and
/// still reach 1 when released (the simulator delivers what a crashed
/// site sent; only what was on its way to it is lost), ahead of the new
/// lives' `Hello`. The new lives have only their disks: threshold e1 and
/// no promise window. With the restart window they refuse e4
/// (`Restarting`) and 1 completes e1. Without it they promise e4, which is
/// above what they stored; 4 regenerates and grants, then 1 completes e1
/// below e4's fences.
fn late_lower_epoch_after_restarts(seed: u64, m: Rules<NtRule>) -> Result<(), SimError> {
    late_lower_epoch_with(seed, true, m)
}

/// `late_lower_epoch` (seed 1, `restart` false) and
/// `late_lower_epoch_after_restarts`.
fn late_lower_epoch_with(seed: u64, restart: bool, m: Rules<NtRule>) -> Result<(), SimError> {
    late_lower_epoch_sim(seed, restart, m).map(|_| ())
}

/// [`late_lower_epoch_with`], returning the simulation at its end.
fn late_lower_epoch_sim(seed: u64, restart: bool, m: Rules<NtRule>) -> Result<Sim<NtNode>, SimError> {
    let fast = NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(1));
    let mut sim = stubborn_on(seed, 5, fast, &[5], m);
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    sim.at(Instant::from_millis(300), acquire(NodeId(5), ClientId(5)));
    sim.run_until(Instant::from_millis(400))?;
    let holder = find_holder(&mut sim, 2000)?;
    if holder != NodeId(5) {
        return Err(sim.error(format!("expected site 5 to hold the token, {holder} does")));
    }
    sim.after(Duration::ZERO, Action::Crash(NodeId(5)));
    sim.hold(NodeId(1), NodeId(4));
    sim.hold(NodeId(4), NodeId(1));
    sim.after(Duration::from_millis(10), acquire(NodeId(1), ClientId(1)));
    sim.after(Duration::from_millis(14), acquire(NodeId(4), ClientId(4)));
    let limit = sim.now() + Duration::from_millis(200);
    let proposing = |w: &World<NtNode>| w.core(NodeId(1)).is_some_and(|c| c.stored().own().is_some());
    sim.run_until_true(limit, "site 1 did not propose", proposing)?;
    // 1's Regenerate is on its way to 2 and 3: hold their answers.
    let proposed = sim.now();
    sim.hold(NodeId(2), NodeId(1));
    sim.hold(NodeId(3), NodeId(1));
    if restart {
        restart_promisers(&mut sim, proposed)?;
    }
    sim.run_until(proposed + Duration::from_millis(8))?;
    sim.release(NodeId(2), NodeId(1));
    sim.release(NodeId(3), NodeId(1));
    sim.run_for(Duration::from_millis(10))?;
    sim.release(NodeId(1), NodeId(4));
    sim.release(NodeId(4), NodeId(1));
    // Site 5 stays down (its client would hold on for ever).
    let end = sim.now() + Duration::from_millis(2_000);
    let from = sim.now() + Duration::from_millis(500);
    keep_clients_coming(&mut sim, 5, from, end);
    let since = sim.now() + Duration::from_millis(1_000);
    sim.run_until(end)?;
    everyone_served_since(sim.world(), since).map_err(|m| sim.error(m))?;
    Ok(sim)
}

#[test]
fn promise_window_holds() {
    holds(late_lower_epoch(NONE));
    holds(late_lower_epoch(no_leases()));
}

#[test]
fn promise_window_is_needed() {
    is_needed_by(late_lower_epoch(no_leases().without(NtRule::PromiseWindow)), "granted before it was created");
}

/// Sites 2 and 3, once they have promised site 1's epoch e1 (`proposed`:
/// when 1 proposed it), crash and restart with their disks, before site 4
/// proposes.
fn restart_promisers(sim: &mut Sim<NtNode>, proposed: Instant) -> Result<(), SimError> {
    let e1 = sim.world().core(NodeId(1)).and_then(|c| c.stored().own()).unwrap_or(u64::MAX);
    let promised = move |w: &World<NtNode>| {
        [2, 3].iter().all(|i| w.core(NodeId(*i)).is_some_and(|c| c.stored().threshold() >= e1))
    };
    sim.run_until_true(proposed + Duration::from_millis(3), "sites 2 and 3 did not promise e1", promised)?;
    if sim.world().core(NodeId(4)).is_some_and(|c| c.stored().own().is_some()) {
        return Err(sim.error("site 4 proposed before sites 2 and 3 crashed"));
    }
    for i in [2, 3] {
        sim.after(Duration::ZERO, Action::Crash(NodeId(i)));
        sim.after(Duration::from_micros(200), Action::Restart(NodeId(i)));
    }
    Ok(())
}

/// Seeds 1..=20 of `late_lower_epoch_after_restarts` (`restart_window_holds`
/// and `_is_needed` run them).
fn restarts_seeds(m: Rules<NtRule>) -> Result<(), SimError> {
    seeds(1..=20, |s| late_lower_epoch_after_restarts(s, m))
}

/// With leases on, the restart window is masked here: without it 2 and 3
/// promise e4 and 4 grants, and 1 still regenerates e1 from the late acks,
/// but it never grants with it: 2 and 3, which now use e4, refuse its
/// lease renewal (`LeaseRefused`), and e4 reaches 1 and ends e1's token.
/// (`late_lower_epoch` without the promise window likewise holds with
/// leases on: `epoch_slot_masked_by_tie_refusal_and_promise_window`.)
#[test]
fn restart_window_after_a_crash_masked_by_leases() {
    holds(restarts_seeds(Rules::all_but(&[NtRule::RestartWindow])));
    // The hazard does arise: 4 regenerates e4 and 1 still completes the
    // lower e1 (the leases keep 1 from granting with it).
    for seed in 1..=20 {
        let sim = late_lower_epoch_sim(seed, true, Rules::all_but(&[NtRule::RestartWindow]))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let made = |site: u32| -> Vec<(Instant, u64)> {
            let w = sim.world();
            w.events
                .iter()
                .filter_map(|(t, n, e)| match e {
                    NtEvent::Regenerated { epoch } if *n == NodeId(site) => Some((*t, *epoch)),
                    _ => None,
                })
                .collect()
        };
        let (e1, e4) = (made(1), made(4));
        assert!(
            e1.iter().any(|(ta, a)| e4.iter().any(|(tb, b)| tb <= ta && a < b)),
            "seed {seed}: 1 made {e1:?}, 4 made {e4:?}: no lower epoch completed after a higher one"
        );
    }
}

/// A provisional chain behind a long critical section, failure-free, every
/// one-way delay 2 ms (< `t_msg`): N = 4; site 3 takes the token (position
/// 1), then holds the lock for 400 ms. Site 2 asks (2 → 1 → 3: 3 commits it
/// at position 2, 6 ms later); site 4 asks 1 ms after 2 (4 → 1 → 2, since 1
/// now points at 2), reaching 2 before 3's Commit does: 2 links 4 with a
/// provisional Commit (no position). When 3's Commit gives 2 its position,
/// 2 cascades position 3 to 4. Without the cascade 4 stays without a
/// position until its provisional timer (`2·(N+1)·t_msg + 3·lease` =
/// 200 ms) fires while 3 still holds: it starts M3 in a failure-free run
/// (invariant 6). A liveness-level consequence: no safety checker fails.
fn provisional_chain_behind_a_long_hold(m: Rules<NtRule>) -> Result<(), SimError> {
    let net = NetConfig::reliable(Duration::from_micros(200), T_MSG).every_delay(Duration::from_millis(2));
    let mut sim = sites_with(1, 4, 2, net, m);
    // Site 3 holds 400 ms the second time it is granted; the others 1 ms.
    let mut grants_at_3 = 0;
    sim.clients(Box::new(move |_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => {
            let hold = if node == NodeId(3) {
                grants_at_3 += 1;
                if grants_at_3 == 2 {
                    400
                } else {
                    1
                }
            } else {
                1
            };
            vec![(Duration::from_millis(hold), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim.check(staged_safety(Some(Duration::ZERO)));
    sim.at(Instant::from_millis(300), acquire(NodeId(3), ClientId(3)));
    sim.at(Instant::from_millis(400), acquire(NodeId(3), ClientId(3)));
    sim.at(Instant::from_millis(410), acquire(NodeId(2), ClientId(2)));
    sim.at(Instant::from_millis(411), acquire(NodeId(4), ClientId(4)));
    sim.run_until(Instant::from_millis(1_200))?;
    let w = sim.world();
    if let Some(e) = w.events.iter().find(|(_, _, e)| matches!(e, NtEvent::RecoveryStarted { .. })) {
        return Err(sim.error(format!("a failure-free run started a recovery: {e:?}")));
    }
    for site in [2, 4] {
        if !grants(w).iter().any(|(t, n, _)| *n == NodeId(site) && *t >= Instant::from_millis(410)) {
            return Err(sim.error(format!("site {site} was never served")));
        }
    }
    Ok(())
}

#[test]
fn commit_cascade_holds() {
    holds(provisional_chain_behind_a_long_hold(NONE));
}

#[test]
fn commit_cascade_is_needed() {
    is_needed_by(
        provisional_chain_behind_a_long_hold(Rules::all_but(&[NtRule::CommitCascade])),
        "a failure-free run started a recovery",
    );
}

/// The Token frame site 2 would send when passing the token it holds
/// (its epoch and grant counter, the position after 2's), with 2's life:
/// for scenarios that hand a core a frame no transport delivers.
fn token_frame_of_2(sim: &Sim<NtNode>) -> (ftcore::Incarnation, ntmutexd::Msg) {
    let w = sim.world();
    let c = w.core(NodeId(2)).expect("site 2 runs");
    let (epoch, counter) = lockservice::fence_parts(c.holder().expect("site 2 holds").1);
    let pos = c.position().unwrap_or(0) + 1;
    let msg = ntmutexd::Msg { epoch: c.max_epoch(), body: ntmutexd::Body::Token { epoch, counter, pos } };
    (ftcore::Protocol::incarnation(c), msg)
}

/// Hands `frame` from site 2 to site 3's core now (`Sim::with_core`).
fn hand_to_3(sim: &mut Sim<NtNode>, (inc, msg): (ftcore::Incarnation, ntmutexd::Msg)) {
    let now = sim.now();
    sim.with_core(NodeId(3), |c| ftcore::Protocol::handle_message(c, now, NodeId(2), inc, msg));
}

/// N = 3 under load: site 2 holds the token (its client holds on until the
/// scenario releases it), site 3 is queued behind it (committed), so the
/// token goes from 2 to 3 when 2's client releases.
fn token_from_2_to_3(m: Rules<NtRule>) -> Result<Sim<NtNode>, SimError> {
    let mut sim = sites_with(3, 3, 2, net(), m);
    // Clients loop acquire → hold → release; site 2's first grant is held
    // until the scenario releases it.
    let mut first_at_2 = true;
    sim.clients(Box::new(move |_, node, client, reply, rng| {
        let ms = |rng: &mut timer::SeededRng, lo, hi| Duration::from_millis(rng.range_inclusive(lo, hi));
        match reply {
            LockReply::Granted { .. } if node == NodeId(2) && std::mem::take(&mut first_at_2) => vec![],
            LockReply::Granted { .. } => vec![(ms(rng, 1, 8), Action::Request(node, client, LockRequest::Release))],
            LockReply::Released | LockReply::TimedOut | LockReply::LockLost { .. } => {
                vec![(ms(rng, 0, 5), acquire(node, client))]
            }
            LockReply::Refused { .. }
            | LockReply::Renewed { .. }
            | LockReply::Locks { .. }
            | LockReply::Leader { .. } => {
                vec![]
            }
        }
    }));
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    sim.at(Instant::from_millis(300), acquire(NodeId(2), ClientId(2)));
    sim.at(Instant::from_millis(330), acquire(NodeId(3), ClientId(3)));
    sim.run_until(Instant::from_millis(400))?;
    let w = sim.world();
    let holds = w.core(NodeId(2)).is_some_and(|c| c.holder().is_some());
    let queued = w.core(NodeId(3)).is_some_and(|c| c.position().is_some() && !c.has_token());
    if !holds || !queued {
        return Err(sim.error("expected site 2 to hold with site 3 committed behind it"));
    }
    Ok(sim)
}

/// The brief's race for the incarnation check: the link 2 → 3 is held;
/// site 2 passes the token to 3, crashes at once and restarts; the link is
/// released 10 ms later. The simulator's links are FIFO per pair of sites
/// across lives, so the held token reaches 3 *before* the new life's
/// `Hello`, and 3 rightly takes it: no older-life message ever arrives
/// after its successor's, and the check is never reached (3 is granted
/// with the epoch in use, nothing is regenerated, with the check on or off).
fn old_life_token_after_restart(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = token_from_2_to_3(m)?;
    let epoch = sim.world().core(NodeId(2)).and_then(|c| c.token_epoch());
    sim.hold(NodeId(2), NodeId(3));
    sim.after(Duration::ZERO, Action::Request(NodeId(2), ClientId(2), LockRequest::Release));
    sim.after(Duration::from_millis(1), Action::Crash(NodeId(2)));
    sim.after(Duration::from_millis(2), Action::Restart(NodeId(2)));
    sim.run_for(Duration::from_millis(10))?;
    sim.release(NodeId(2), NodeId(3));
    sim.run_for(Duration::from_millis(20))?;
    let w = sim.world();
    let taken = grants(w).iter().any(|(t, n, f)| {
        *n == NodeId(3) && *t >= Instant::from_millis(400) && Some(lockservice::fence_parts(*f).0) == epoch
    });
    let regenerated =
        w.events.iter().any(|(t, _, e)| *t >= Instant::from_millis(400) && matches!(e, NtEvent::Regenerated { .. }));
    if !taken || regenerated {
        return Err(sim.error("site 3 did not take the token site 2's old life passed it"));
    }
    let end = sim.now() + Duration::from_millis(1_500);
    let from = sim.now() + Duration::from_millis(100);
    keep_clients_coming(&mut sim, 3, from, end);
    let since = sim.now() + Duration::from_millis(500);
    sim.run_until(end)?;
    everyone_served_since(sim.world(), since).map_err(|m| sim.error(m))
}

/// An older life's token read after its successor's first message, as a
/// real transport can deliver it (each life has its own connection: the old
/// one's buffered frame may be read after the new one's `Hello`). The
/// simulator's links are FIFO across lives, so the frame is emulated: the
/// token site 2 passes to 3 is dropped on the link and handed to 3's core
/// later, with 2's old life, through `Sim::with_core`.
///
/// N = 3: 2 holds, 3 is queued behind it; 2 passes the token (dropped),
/// crashes and restarts; 3 hears the new life (and starts recovering), then
/// is partitioned off; 1 and 2's new life regenerate without it (2
/// proposes after its restart window, 1 promises); 5 ms later the old
/// frame reaches 3, still cut off; heal 20 ms later. With the check, 3
/// ignores the frame (and answers `Behind`). Without it, 3 takes a token of
/// the old epoch and grants with it beside the new one; the probes of
/// suspected peers tell 3 of the newer epoch within `4·suspect_after` of
/// the heal, before the detector counts as accurate again: the stale token
/// is the false-suspicion case, retired in time. Without the probes too,
/// nobody writes to 3 again and two clients hold at once. (The grant made
/// inside `with_core` is not among any step's events; the checkers see the
/// token and holder it leaves, and every later grant.)
fn old_life_token_read_late(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = token_from_2_to_3(m)?;
    let frame = token_frame_of_2(&sim);
    sim.drop_kind(NodeId(2), NodeId(3), "token", 1);
    sim.after(Duration::ZERO, Action::Request(NodeId(2), ClientId(2), LockRequest::Release));
    sim.after(Duration::from_millis(1), Action::Crash(NodeId(2)));
    sim.after(Duration::from_millis(2), Action::Restart(NodeId(2)));
    sim.after(Duration::from_millis(8), Action::Partition(vec![NodeId(3)]));
    sim.after(Duration::from_millis(10), acquire(NodeId(1), ClientId(1)));
    let limit = sim.now() + Duration::from_millis(1_000);
    sim.run_until_true(limit, "sites 1 and 2 did not regenerate", |w| {
        w.events.iter().any(|(t, n, e)| {
            *n != NodeId(3) && matches!(e, NtEvent::Regenerated { .. }) && *t > Instant::from_millis(400)
        })
    })?;
    sim.run_for(Duration::from_millis(5))?;
    hand_to_3(&mut sim, frame);
    sim.run_for(Duration::from_millis(20))?;
    sim.after(Duration::ZERO, Action::Heal);
    let end = sim.now() + Duration::from_millis(2_000);
    let from = sim.now() + Duration::from_millis(100);
    keep_clients_coming(&mut sim, 3, from, end);
    let since = sim.now() + Duration::from_millis(1_000);
    sim.run_until(end)?;
    everyone_served_since(sim.world(), since).map_err(|m| sim.error(m))
}

#[test]
fn incarnation_check_holds() {
    holds(old_life_token_after_restart(NONE));
    holds(old_life_token_read_late(NONE));
}

#[test]
#[ignore = "not shown: masked (docs/safety-rules.md); see incarnation_check_masked_by_probes"]
fn incarnation_check_is_needed() {
    let m = Rules::all_but(&[NtRule::IncarnationCheck]);
    is_needed(old_life_token_after_restart(m));
    is_needed(old_life_token_read_late(m));
}

/// The mask: the late old-life token breaks mutual exclusion only when the
/// probes of suspected peers are switched off too; each switch alone passes.
#[test]
fn incarnation_check_masked_by_probes() {
    holds(old_life_token_read_late(Rules::all_but(&[NtRule::IncarnationCheck])));
    holds(old_life_token_read_late(Rules::all_but(&[NtRule::ProbesOfSuspectedPeers])));
    holds(old_life_token_read_late(no_leases().without(NtRule::IncarnationCheck)));
    is_needed_by(
        old_life_token_read_late(no_leases().without(NtRule::IncarnationCheck).without(NtRule::ProbesOfSuspectedPeers)),
        "(detector accurate)",
    );
}

// ----------------------------------------------------------------- leases

/// reliability.md's pause scenario (issue 14): site 1's client holds on
/// (it lets go only when told `LockLost`); site 1's daemon is paused for
/// 1 s (SIGSTOP), or cut off by a partition, while the others want the
/// lock. The others regenerate and grant — correct: that is recovery. With
/// leases the paused holder's grant ends with its lease, before the new
/// token can exist; without, two clients hold at once (`lease_safety`,
/// judged from the grants, renewals and releases alone). Seeds 0..4.
fn holder_cut_off(m: Rules<NtRule>, pause: bool) -> Result<(), SimError> {
    seeds(0..4, |seed| {
        let mut sim = stubborn(seed, 3, &[1], m);
        sim.check(lease_safety());
        sim.check(staged_safety(Some(accurate_after())));
        sim.at(Instant::from_millis(300), acquire(NodeId(1), ClientId(1)));
        sim.run_until(Instant::from_millis(400))?;
        if sim.world().core(NodeId(1)).and_then(|c| c.holder()).is_none() {
            return Err(sim.error("site 1's client was not granted"));
        }
        let cut_at = sim.now();
        if pause {
            sim.pause(NodeId(1));
        } else {
            sim.after(Duration::ZERO, Action::Partition(vec![NodeId(1)]));
        }
        sim.after(Duration::from_millis(10), acquire(NodeId(2), ClientId(2)));
        sim.after(Duration::from_millis(10), acquire(NodeId(3), ClientId(3)));
        sim.run_for(Duration::from_millis(1_000))?;
        if pause {
            sim.resume(NodeId(1));
        } else {
            sim.after(Duration::ZERO, Action::Heal);
        }
        sim.run_for(Duration::from_millis(1_500))?;
        // Recovery happened: the others were served meanwhile.
        let served = grants(sim.world()).iter().any(|(t, n, _)| *t > cut_at && *n != NodeId(1));
        if !served {
            return Err(sim.error("nobody else was served while the holder was cut off"));
        }
        Ok(())
    })
}

#[test]
fn grant_leases_holds() {
    holds(holder_cut_off(NONE, true));
    holds(holder_cut_off(NONE, false));
}

#[test]
fn grant_leases_is_needed() {
    is_needed_by(holder_cut_off(no_leases(), true), "holds until");
    is_needed_by(holder_cut_off(no_leases(), false), "holds until");
}

/// A falsely suspected holder whose renewals still reach a majority: N =
/// 3, site 1's client holds on, sites 2 and 3 queue behind it, and the
/// link between sites 1 and 2 is cut both ways (site 3 hears both). Site 2
/// suspects site 1 and regenerates. Site 3 has acked site 1's renewals (and
/// site 2 itself acked them before the cut): those acks refuse site 2's
/// proposal while site 1's lease lives, so no second token. Without the
/// window site 3 promises, site 2's token grants, and two clients hold.
/// Seeds 0..4.
fn suspected_holder_still_renewing(m: Rules<NtRule>) -> Result<(), SimError> {
    seeds(0..4, |seed| {
        let mut sim = stubborn(seed, 3, &[1], m);
        sim.check(lease_safety());
        sim.at(Instant::from_millis(300), acquire(NodeId(1), ClientId(1)));
        sim.run_until(Instant::from_millis(350))?;
        if sim.world().core(NodeId(1)).and_then(|c| c.holder()).is_none() {
            return Err(sim.error("site 1's client was not granted"));
        }
        sim.after(Duration::ZERO, acquire(NodeId(2), ClientId(2)));
        sim.after(Duration::ZERO, acquire(NodeId(3), ClientId(3)));
        sim.run_for(Duration::from_millis(30))?;
        sim.cut(NodeId(1), NodeId(2));
        sim.cut(NodeId(2), NodeId(1));
        sim.run_for(Duration::from_millis(1_500))
    })
}

#[test]
fn lease_window_holds() {
    holds(suspected_holder_still_renewing(NONE));
}

#[test]
fn lease_window_is_needed() {
    is_needed_by(suspected_holder_still_renewing(Rules::all_but(&[NtRule::LeaseAckBinds])), "holds until");
}

/// Every-fault seed 1 (found by the survey; seed 0 until Commits stopped
/// cascading unchanged positions). Liveness: waiting sites' renewals are
/// acked only behind a live holder's; acked always, the waiters of a lost
/// token hold off its regeneration for ever.
#[test]
fn waiter_acks_behind_a_holder_holds() {
    holds(every_fault(0, NONE));
    holds(every_fault(1, NONE));
}

#[test]
fn waiter_acks_behind_a_holder_is_needed() {
    is_needed_by(every_fault(1, Rules::all_but(&[NtRule::WaiterAckedBehindAHolder])), "never served");
}

// ------------------------------------------- rules not shown necessary yet

/// The scenarios the survey ran for a rule that none of them made fail:
/// one seed of each random family (every fault kind, with a majority down,
/// the regeneration race with delays up to `2·t_msg`, failure-free
/// contention). The `_holds` test runs it; the `_is_needed` test is
/// ignored: it does NOT fail (docs/safety-rules.md says what was tried).
fn random_families(m: Rules<NtRule>) -> Result<(), SimError> {
    every_fault(3, m)?;
    every_fault_majority_down(4, m)?;
    regen_race(0, m)?;
    contention(0, m)
}

macro_rules! not_shown {
    ($($holds:ident, $needed:ident, $field:ident;)*) => {$(
        #[test]
        fn $holds() {
            holds(random_families(NONE));
        }

        #[test]
        #[ignore = "not shown: no scenario fails with this rule off (docs/safety-rules.md)"]
        fn $needed() {
            is_needed(random_families(Rules::all_but(&[NtRule::by_switch(stringify!($field)).expect("a switch")])));
        }
    )*};
}

not_shown! {
    epoch_slot_holds, epoch_slot_is_needed, no_epoch_slot;
    tie_refusal_holds, tie_refusal_is_needed, accept_ties;
}

// ------------------------------------------ rules of the queue's repair

/// Clients that release 1 ms after each grant and do not ask again; site
/// `holder`'s first grant is held until the scenario releases it.
fn one_each_with_holder(seed: u64, n: u32, holder: u32, m: Rules<NtRule>) -> Sim<NtNode> {
    let mut sim = sites_with(seed, n, 2, net(), m);
    let mut first = true;
    sim.clients(Box::new(move |_, node, client, reply, _| match reply {
        LockReply::Granted { .. } if node == NodeId(holder) && std::mem::take(&mut first) => vec![],
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(1), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim
}

/// The token is never lost by a live holder: N = 4, 2 holds (its client
/// holds on), 3 is committed behind it and 4 behind 3; 3 crashes, and 2
/// suspects it before its client releases. With the rule 2 keeps the
/// token, clears `next`, and 4 reconnects to it by M1: 4 is served with
/// the epoch in use and nothing is regenerated. Without it 2 sends the
/// token to the crashed 3, where it is lost: 4 finds no predecessor (M2)
/// and the queue regenerates a new epoch. A latency and availability
/// rule (a lost token costs a search and a promise round); no safety
/// checker fails.
fn token_kept_from_a_crashed_next(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = one_each_with_holder(4, 4, 2, m);
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    sim.at(Instant::from_millis(300), acquire(NodeId(2), ClientId(2)));
    sim.at(Instant::from_millis(330), acquire(NodeId(3), ClientId(3)));
    sim.at(Instant::from_millis(360), acquire(NodeId(4), ClientId(4)));
    sim.run_until(Instant::from_millis(400))?;
    let (epoch, queued) = {
        let w = sim.world();
        let epoch = w.core(NodeId(2)).and_then(|c| c.token_epoch());
        let queued = [3, 4].iter().all(|i| w.core(NodeId(*i)).is_some_and(|c| c.position().is_some()));
        (epoch, queued)
    };
    if epoch.is_none() || !queued {
        return Err(sim.error("expected site 2 to hold with sites 3 and 4 committed behind it"));
    }
    // A killed process: its peers' connections break (the failure hint).
    sim.after(Duration::ZERO, Action::Kill(NodeId(3)));
    // 4's reconnection (M1) reaches 2 only after 2's client released.
    sim.hold(NodeId(4), NodeId(2));
    let limit = sim.now() + Duration::from_millis(500);
    sim.run_until_true(limit, "site 2 never suspected site 3", |w| {
        w.events
            .iter()
            .any(|(_, n, e)| *n == NodeId(2) && matches!(e, NtEvent::Suspected { node } if *node == NodeId(3)))
    })?;
    sim.after(Duration::ZERO, Action::Request(NodeId(2), ClientId(2), LockRequest::Release));
    let since = sim.now();
    sim.run_for(Duration::from_millis(10))?;
    sim.release(NodeId(4), NodeId(2));
    sim.run_for(Duration::from_millis(1_000))?;
    let w = sim.world();
    if let Some(e) = w.events.iter().find(|(t, _, e)| *t >= since && matches!(e, NtEvent::Regenerated { .. })) {
        return Err(sim.error(format!("a token held by a live site was lost and regenerated: {e:?}")));
    }
    let served = grants(w)
        .iter()
        .any(|(t, n, f)| *n == NodeId(4) && *t >= since && Some(lockservice::fence_parts(*f).0) == epoch);
    if !served {
        return Err(sim.error("site 4 was not served with the epoch in use"));
    }
    Ok(())
}

#[test]
fn no_token_to_suspected_next_holds() {
    holds(token_kept_from_a_crashed_next(NONE));
    holds(token_kept_from_a_crashed_next(no_leases()));
}

#[test]
fn no_token_to_suspected_next_is_needed() {
    is_needed_by(
        token_kept_from_a_crashed_next(Rules::all_but(&[NtRule::NoTokenToSuspectedNext])),
        "a token held by a live site was lost",
    );
}

/// performance.md: "SIGKILL of the critical daemon, host up: ntmutexd
/// kill → next grant ≤ 50 ms with no client lease … at the crashed node".
/// N = 5 at the daemon's default settings (t_msg 20 ms: the COMMIT timer
/// is `(N + 1)·t_msg` = 120 ms) on a LAN (one-way delays 0.2–1 ms). Site 3
/// takes the token from the root, 1 (so `1.last = 3`), its client
/// releases, and 3 keeps the idle token. 3's process is killed at 400 ms
/// (its peers' connections break: the hint). `then` scripts what follows;
/// the next grant anywhere must come within 50 ms of the kill.
fn kill_idle_holder(m: Rules<NtRule>, then: impl FnOnce(&mut Sim<NtNode>)) -> Result<(), SimError> {
    kill_idle_holder_on(NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(1)), m, then)
}

/// `kill_idle_holder` on another network.
fn kill_idle_holder_on(net: NetConfig, m: Rules<NtRule>, then: impl FnOnce(&mut Sim<NtNode>)) -> Result<(), SimError> {
    let mut sim = Sim::new(5, 5, net, defaults_with(m));
    sim.clients(Box::new(|_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(1), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim.check(staged_safety(Some(Duration::ZERO)));
    sim.at(Instant::from_millis(300), acquire(NodeId(3), ClientId(3)));
    sim.run_until(Instant::from_millis(400))?;
    if !sim.world().core(NodeId(3)).is_some_and(|c| c.has_token()) {
        return Err(sim.error("expected site 3 to keep the idle token"));
    }
    let killed = sim.now();
    sim.after(Duration::ZERO, Action::Kill(NodeId(3)));
    then(&mut sim);
    sim.run_for(Duration::from_millis(1_000))?;
    let w = sim.world();
    let Some((at, who, _)) = grants(w).into_iter().find(|(t, _, _)| *t > killed) else {
        return Err(sim.error("nobody was granted after the kill"));
    };
    let took = at.saturating_since(killed);
    if took > Duration::from_millis(50) {
        return Err(sim.error(format!("kill → next grant took {took:?} (performance.md: ≤ 50 ms), at {who}")));
    }
    Ok(())
}

/// A request forwarded towards the killed site: 4 asks 5 ms after the
/// kill, along its `last` (the root, 1), whose `last` is 3. 1 has heard
/// the hint and suspects 3: with the rule it answers 4 `DeadEnd` and 4
/// searches (M3) at once, finds no token, regenerates and is granted.
/// Without it 1 forwards the request to the dead 3, where it is lost, and
/// 4 waits for its COMMIT timer (120 ms) before it searches.
fn request_towards_a_killed_site(m: Rules<NtRule>) -> Result<(), SimError> {
    kill_idle_holder(m, |sim| sim.after(Duration::from_millis(5), acquire(NodeId(4), ClientId(4))))
}

#[test]
fn no_forward_to_suspected_last_holds() {
    holds(request_towards_a_killed_site(NONE));
}

#[test]
fn no_forward_to_suspected_last_is_needed() {
    is_needed_by(
        request_towards_a_killed_site(Rules::all_but(&[NtRule::NoForwardToSuspectedLast])),
        "kill → next grant took",
    );
}

/// A restarted site's first request. N = 5 at the daemon's defaults on a
/// LAN. 2 holds (its client holds on); 3 asks, along 3 → 1 → 2 (so
/// `1.last = 3`), and is queued behind 2; 3's process is killed before
/// the token reaches it. 2's client releases: 2 suspects 3 and keeps the
/// idle token. 3 is restarted (systemd) and its client asks again. With
/// the rule the new life's `last` is unknown: it searches (M3) at once,
/// finds 2's idle token and asks for it directly. Without it the new life
/// assumes the configured root and sends its request to 1, whose `last`
/// is 3 (the old life's request): the request comes back to its
/// requester, which drops it, and 3 waits for its COMMIT timer
/// (`(N + 1)·t_msg` = 120 ms) before it searches. The check: a request is
/// served before its COMMIT timer would fire when no message was lost.
fn first_request_of_a_restarted_site(m: Rules<NtRule>) -> Result<(), SimError> {
    restarted_site_asks(m, false)
}

/// `first_request_of_a_restarted_site`, 3 restarting cut off from every
/// peer for 80 ms (twice its join timer, `2·t_msg`), then asking 20 ms
/// after the heal. With the minority rule 3 keeps asking (`Hello`) until a
/// majority answers, hears that the cluster runs and joins as a new life of
/// it (`last` unknown). Without it, hearing nobody, 3 takes the silence for
/// a cluster's first start: it joins with `last` = the configured root, 1,
/// and its first request comes back to it, as without the restart rule.
fn restarted_site_alone_at_first(m: Rules<NtRule>) -> Result<(), SimError> {
    restarted_site_asks(m, true)
}

fn restarted_site_asks(m: Rules<NtRule>, alone: bool) -> Result<(), SimError> {
    let net = NetConfig::reliable(Duration::from_micros(200), Duration::from_millis(1));
    let config = defaults_with(m);
    let commit_timer = config.t_msg * 6;
    let mut sim = Sim::new(5, 5, net, config);
    let mut first_at_2 = true;
    sim.clients(Box::new(move |_, node, client, reply, _| match reply {
        LockReply::Granted { .. } if node == NodeId(2) && std::mem::take(&mut first_at_2) => vec![],
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(1), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim.check(staged_safety(Some(Duration::ZERO)));
    sim.at(Instant::from_millis(300), acquire(NodeId(2), ClientId(2)));
    sim.at(Instant::from_millis(350), acquire(NodeId(3), ClientId(3)));
    sim.run_until(Instant::from_millis(400))?;
    let queued = sim.world().core(NodeId(3)).is_some_and(|c| c.position().is_some());
    let holds = sim.world().core(NodeId(2)).is_some_and(|c| c.holder().is_some());
    if !holds || !queued {
        return Err(sim.error("expected site 2 to hold with site 3 committed behind it"));
    }
    sim.after(Duration::ZERO, Action::Kill(NodeId(3)));
    sim.after(Duration::from_millis(5), Action::Request(NodeId(2), ClientId(2), LockRequest::Release));
    sim.after(Duration::from_millis(10), Action::Restart(NodeId(3)));
    let mut asked = sim.now() + Duration::from_millis(20);
    if alone {
        sim.after(Duration::from_millis(10), Action::Partition(vec![NodeId(3)]));
        sim.after(Duration::from_millis(90), Action::Heal);
        asked = sim.now() + Duration::from_millis(110);
    }
    sim.at(asked, acquire(NodeId(3), ClientId(3)));
    sim.run_for(Duration::from_millis(1_000))?;
    let Some((at, _, _)) = grants(sim.world()).into_iter().find(|(t, n, _)| *n == NodeId(3) && *t > asked) else {
        return Err(sim.error("the restarted site was never served"));
    };
    let took = at.saturating_since(asked);
    if took >= commit_timer {
        return Err(sim.error(format!(
            "the restarted site's request waited {took:?}: it was lost on the way and waited for the COMMIT timer ({commit_timer:?})"
        )));
    }
    Ok(())
}

#[test]
fn minority_no_bootstrap_holds() {
    holds(restarted_site_alone_at_first(NONE));
}

#[test]
fn minority_no_bootstrap_is_needed() {
    is_needed_by(
        restarted_site_alone_at_first(Rules::all_but(&[NtRule::NoMinorityBootstrap])),
        "waited for the COMMIT timer",
    );
}

#[test]
fn restarted_site_last_unknown_holds() {
    holds(first_request_of_a_restarted_site(NONE));
}

#[test]
fn restarted_site_last_unknown_is_needed() {
    is_needed_by(
        first_request_of_a_restarted_site(Rules::all_but(&[NtRule::RestartedLastUnknown])),
        "waited for the COMMIT timer",
    );
}

/// A duplicated Token frame. Neither transport delivers one (TCP frames
/// carry a sequence number that must grow by exactly one; UDP has a replay
/// window): the rule is the core's own defence if a transport ever did.
/// The duplicate is emulated as in `old_life_token_read_late`: 2 passes
/// the token to 3, and the same frame is handed to 3's core again, through
/// `Sim::with_core`, while 3 still holds the token. With the rule 3 keeps
/// the token it has. Without it 3 installs the copy, whose grant counter
/// is the one 2 passed, and grants a fence it has granted before.
fn duplicated_token(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = token_from_2_to_3(m)?;
    let frame = token_frame_of_2(&sim);
    sim.after(Duration::ZERO, Action::Request(NodeId(2), ClientId(2), LockRequest::Release));
    let limit = sim.now() + Duration::from_millis(100);
    sim.run_until_true(limit, "site 3 never got the token", |w| w.core(NodeId(3)).is_some_and(|c| c.has_token()))?;
    hand_to_3(&mut sim, frame);
    sim.run_for(Duration::from_millis(500))
}

#[test]
fn refuse_second_token_holds() {
    holds(duplicated_token(NONE));
    holds(duplicated_token(no_leases()));
}

#[test]
fn refuse_second_token_is_needed() {
    is_needed_by(duplicated_token(Rules::all_but(&[NtRule::SecondTokenRefused])), "a second time");
}

/// Concurrent searches for a lost token (M3.b). The idle holder, 3, is
/// killed (`kill_idle_holder`); 4 and 5 ask 5 ms later, both along their
/// `last`, the root 1, which answers both `DeadEnd`: both search at once.
/// With the election 5 wins (as many accesses as 4, the higher id), 4
/// sends it its request, and 5 alone regenerates. Without it both
/// regenerate: each proposal takes promises from part of the sites, which
/// then refuse the other (below the threshold, or inside the promise
/// window): neither completes, and the next round waits for the windows.
fn concurrent_searches(m: Rules<NtRule>) -> Result<(), SimError> {
    let net = NetConfig::reliable(Duration::from_micros(200), T_MSG).every_delay(Duration::from_millis(1));
    kill_idle_holder_on(net, m, |sim| {
        sim.after(Duration::from_millis(5), acquire(NodeId(4), ClientId(4)));
        sim.after(Duration::from_millis(5), acquire(NodeId(5), ClientId(5)));
    })
}

#[test]
fn m3b_election_holds() {
    holds(concurrent_searches(NONE));
}

#[test]
fn m3b_election_is_needed() {
    is_needed_by(concurrent_searches(Rules::all_but(&[NtRule::M3bElection])), "kill → next grant took");
}

/// A token reaching a wiped node before it has recovered. No transport
/// delivers one (a frame meant for the old process dies with its
/// connections, and an unrecovered node stays out of the queue, so nobody
/// sends it a token): like `duplicated_token`, the frame is emulated. N =
/// 3: 2 holds (its client holds on) with 3 queued behind it; 3's host
/// loses its disk and 3 restarts as a fresh node, its client asking again;
/// 5 ms later, still inside 3's restart window (unrecovered), a copy of
/// the token 2 holds is handed to 3's core. With the rule 3 refuses it
/// (it knows no threshold to judge it by). Without it 3 takes a second
/// token of the epoch in use, its renewals are acked, and it grants
/// beside 2's client.
fn token_copy_at_a_wiped_node(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = token_from_2_to_3(m)?;
    let frame = token_frame_of_2(&sim);
    sim.after(Duration::ZERO, Action::Crash(NodeId(3)));
    sim.after(Duration::ZERO, Action::WipeDisk(NodeId(3)));
    sim.after(Duration::from_millis(1), Action::Restart(NodeId(3)));
    sim.after(Duration::from_millis(2), acquire(NodeId(3), ClientId(3)));
    sim.run_for(Duration::from_millis(6))?;
    if sim.world().core(NodeId(3)).is_none_or(|c| c.stored().recovered()) {
        return Err(sim.error("site 3 is not an unrecovered fresh node"));
    }
    hand_to_3(&mut sim, frame);
    sim.run_for(Duration::from_millis(300))
}

#[test]
fn unrecovered_no_token_holds() {
    holds(token_copy_at_a_wiped_node(NONE));
}

#[test]
fn unrecovered_no_token_is_needed() {
    is_needed_by(token_copy_at_a_wiped_node(Rules::all_but(&[NtRule::UnrecoveredTakesNoToken])), "(detector accurate)");
}

/// The epoch slot is masked three times over: two proposers that do not
/// hear each other (`late_lower_epoch`: 1 and 4, the links 1 ↔ 4 held)
/// propose in the same round. With slots their epochs differ. Without
/// them the epochs are equal, and a site that promised one refuses the
/// other twice: the tie refusal (a site acks only an epoch above its
/// threshold) and the promise window (`Busy` to any other proposer for
/// `W·(1+ρ)`). Only with all three off do 2 and 3 promise both, and both
/// proposers complete the same epoch: two tokens. Each of the three alone
/// keeps the run safe (the other two off), so each is masked by the other
/// two: the tie refusal and the promise window as much as the slot.
#[test]
fn epoch_slot_masked_by_tie_refusal_and_promise_window() {
    holds(late_lower_epoch(Rules::all_but(&[NtRule::EpochSlot])));
    holds(late_lower_epoch(Rules::all_but(&[NtRule::TiesRefused])));
    holds(late_lower_epoch(Rules::all_but(&[NtRule::PromiseWindow])));
    // One of the three on, the other two off.
    holds(late_lower_epoch(Rules::all_but(&[NtRule::EpochSlot, NtRule::TiesRefused])));
    holds(late_lower_epoch(Rules::all_but(&[NtRule::EpochSlot, NtRule::PromiseWindow])));
    holds(late_lower_epoch(Rules::all_but(&[NtRule::TiesRefused, NtRule::PromiseWindow])));
    is_needed_by(
        late_lower_epoch(Rules::all_but(&[NtRule::EpochSlot, NtRule::TiesRefused, NtRule::PromiseWindow])),
        "created a token",
    );
}

// ------------------------------------------------ cycles of waiting sites

/// The slow-queue family: a run meant to make stale Commits and long
/// request paths. Twelve slow periods of up to 60 ms extra per message
/// (twelve times `t_msg`), six pauses of up to 80 ms, three crashes of
/// which two are kills, N = 4..7 (`4 + seed % 4`), heavy load, then
/// `converge`; the staged and lease invariants after every step, and every
/// live site served again after converging.
fn slow_queue(seed: u64, m: Rules<NtRule>) -> Result<Sim<NtNode>, SimError> {
    let n = 4 + (seed % 4) as u32;
    let plan = FaultPlan {
        crashes: 3,
        kills: 2,
        wipes: 0,
        partitions: 0,
        majority_downs: 0,
        pauses: 6,
        pause_len: (Duration::from_millis(5), Duration::from_millis(80)),
        slow_periods: 12,
        slow_len: (Duration::from_millis(20), Duration::from_millis(200)),
        slow_extra: Duration::from_millis(60),
        ..everything(n)
    };
    run_faulty_with(seed, n, 2, plan, m)
}

/// The cycle checks (queue.rs: a waiting site refuses to link its own
/// closest predecessor behind it, and refuses a Commit from its own
/// `next` or one whose origin is its own (id, seq)). Seed 11 of the
/// slow-queue family (N = 7): without them a cycle of waiting sites forms
/// while the queue is slow and six live sites are never served again.
fn cycle_checks_scenario(m: Rules<NtRule>) -> Result<(), SimError> {
    slow_queue(11, m).map(drop)
}

#[test]
fn cycle_checks_holds() {
    holds(cycle_checks_scenario(NONE));
}

#[test]
fn cycle_checks_is_needed() {
    is_needed_by(cycle_checks_scenario(Rules::all_but(&[NtRule::CycleChecks])), "never served");
}

/// The fresh seq on every M3, masked by the cycle checks, on a slow-queue
/// seed (4, 7, 8, 10, … of 0–39 on 2026-11-27; seed 4: N = 4). With the
/// fresh seq alone off every seed passes; with the cycle checks alone off
/// that seed passes (2 of 40 others fail: the cycle checks are shown on
/// their own, above). With both, a late Commit of a chain that an M3 abandoned is
/// accepted (the seq it names is still the request's), so the site is
/// linked twice, and 2 and 3 end up each other's `next` without a
/// position: a cycle of two waiting sites that no check breaks; neither is
/// served again (`n2: waiting … next=3`, `n3: waiting … next=2`).
#[test]
fn fresh_seq_on_m3_holds() {
    slow_queue_mask_seeds_hold();
}

#[test]
#[ignore = "not shown: masked (docs/safety-rules.md); see fresh_seq_on_m3_masked_by_cycle_checks"]
fn fresh_seq_on_m3_is_needed() {
    is_needed(first_slow_queue_failure(Rules::all_but(&[NtRule::FreshSeqOnM3])));
}

#[test]
fn fresh_seq_on_m3_masked_by_cycle_checks() {
    let keep_seq = Rules::all_but(&[NtRule::FreshSeqOnM3]);
    let no_cycle = Rules::all_but(&[NtRule::CycleChecks]);
    mask_shown(Rules::all_but(&[NtRule::FreshSeqOnM3, NtRule::CycleChecks]), &[keep_seq], &[no_cycle]);
}

/// Seeds 0–23 of the slow-queue family: the masks below are shown on
/// whichever of them shows them, so a change of the runs' timing does
/// not lose them (seeds 4 and 22 were pinned before, 2026-11-27).
const SLOW_QUEUE_MASK_SEEDS: std::ops::Range<u64> = 0..24;

/// Every rule on, every seed of `SLOW_QUEUE_MASK_SEEDS` passes.
fn slow_queue_mask_seeds_hold() {
    for seed in SLOW_QUEUE_MASK_SEEDS {
        holds(slow_queue(seed, NONE).map(drop));
    }
}

/// The first failure among `SLOW_QUEUE_MASK_SEEDS` with `m`, or Ok.
fn first_slow_queue_failure(m: Rules<NtRule>) -> Result<(), SimError> {
    SLOW_QUEUE_MASK_SEEDS.map(|seed| slow_queue(seed, m).map(drop)).find(Result::is_err).unwrap_or(Ok(()))
}

/// A mask over `SLOW_QUEUE_MASK_SEEDS`: with each of `safe` every seed
/// passes; and some seed fails "never served" with `masked` while it
/// passes with each of `partial` (switch sets that may fail on other
/// seeds of their own).
fn mask_shown(masked: Rules<NtRule>, safe: &[Rules<NtRule>], partial: &[Rules<NtRule>]) {
    for m in safe {
        for seed in SLOW_QUEUE_MASK_SEEDS {
            if let Err(e) = slow_queue(seed, *m) {
                panic!("with {m:?} seed {seed} should pass:\n{e}");
            }
        }
    }
    let witness = SLOW_QUEUE_MASK_SEEDS.into_iter().find_map(|seed| {
        let e = slow_queue(seed, masked).err().filter(|e| e.message.contains("never served"))?;
        partial.iter().all(|m| slow_queue(seed, *m).is_ok()).then_some((seed, e))
    });
    let Some((seed, e)) = witness else { panic!("no seed shows the mask of {masked:?}") };
    eprintln!("without the rules: seed {seed}: {}", e.message.lines().next().unwrap_or(""));
}

/// The hop limit, masked by the cycle checks and the provisional timer,
/// on a slow-queue seed (22 and 23 of 0–39 on 2026-11-27; N = 6 for 22).
/// With the cycle checks off, cycles of waiting sites form, and requests
/// forwarded into one go round it: the hop limit answers them `DeadEnd`
/// at 2N + 1 hops, so their requesters search again. With the
/// provisional timer on, a waiting site without a position searches on
/// its own after its timer and the run passes even without the hop limit
/// (requests went round for 190 hops first). With all three off,
/// requests circle (seed 22: 6 → 2 → 4 → 1 → 5) for ever and sites are
/// never served again.
#[test]
fn hop_limit_holds() {
    slow_queue_mask_seeds_hold();
}

#[test]
#[ignore = "not shown: masked (docs/safety-rules.md); see hop_limit_masked_by_cycle_checks_and_provisional_timer"]
fn hop_limit_is_needed() {
    is_needed(first_slow_queue_failure(Rules::all_but(&[NtRule::HopLimit])));
}

#[test]
fn hop_limit_masked_by_cycle_checks_and_provisional_timer() {
    mask_shown(
        Rules::all_but(&[NtRule::HopLimit, NtRule::CycleChecks, NtRule::ProvisionalTimer]),
        &[Rules::all_but(&[NtRule::HopLimit])],
        &[
            Rules::all_but(&[NtRule::HopLimit, NtRule::CycleChecks]),
            Rules::all_but(&[NtRule::CycleChecks, NtRule::ProvisionalTimer]),
        ],
    );
}

/// A survey of the request-path rules over the slow-queue family, each
/// switch (or set of switches) off in turn. It prints, per switch, the
/// seeds that failed (and the first one's error) and how many Unlink,
/// DeadEnd and Request messages were sent (how often the rule's path was
/// taken); with every rule on no seed may fail. `SAFETY_SURVEY_SEEDS` (40).
#[test]
#[ignore = "survey (a minute in release for 100 seeds)"]
fn slow_queue_survey() {
    let seeds = sim::model::setting("SAFETY_SURVEY_SEEDS", 40);
    let family = |seed: u64, m: Rules<NtRule>| {
        slow_queue(seed, m).map(|sim| {
            let k = |kind: &str| sim.world().sent_by_kind.get(kind).copied().unwrap_or(0);
            (k("unlink"), k("dead_end"), k("request"))
        })
    };
    for (name, m) in [
        ("none", NONE),
        ("no_hop_limit", Rules::all_but(&[NtRule::HopLimit])),
        ("keep_seq_on_m3", Rules::all_but(&[NtRule::FreshSeqOnM3])),
        ("minority_bootstrap", Rules::all_but(&[NtRule::NoMinorityBootstrap])),
        ("keep_seq+no_hop", Rules::all_but(&[NtRule::FreshSeqOnM3, NtRule::HopLimit])),
        ("no_cycle_checks", Rules::all_but(&[NtRule::CycleChecks])),
        ("no_provisional_timer", Rules::all_but(&[NtRule::ProvisionalTimer])),
        ("keep_seq+no_cycle", Rules::all_but(&[NtRule::FreshSeqOnM3, NtRule::CycleChecks])),
        ("no_cycle+no_prov", Rules::all_but(&[NtRule::CycleChecks, NtRule::ProvisionalTimer])),
        ("no_hop+no_cycle+no_prov", Rules::all_but(&[NtRule::HopLimit, NtRule::CycleChecks, NtRule::ProvisionalTimer])),
    ] {
        let mut failed = Vec::new();
        let mut sent = (0, 0, 0);
        for s in 0..seeds {
            match family(s, m) {
                Ok((u, d, r)) => sent = (sent.0 + u, sent.1 + d, sent.2 + r),
                Err(e) => {
                    if failed.is_empty() {
                        eprintln!("{name}: seed {s}: {}", e.to_string().lines().next().unwrap_or(""));
                    }
                    failed.push(s)
                }
            }
        }
        eprintln!("{name}: {} of {seeds} failed: {failed:?}; sent (unlink, dead_end, request): {sent:?}", failed.len());
        assert!(name != "none" || failed.is_empty(), "with every rule on, seeds {failed:?} failed");
    }
}

/// A stale holder's renewal meets a wiped node. N = 3: 1 holds (its
/// client holds on) with a second client waiting there, and is paused
/// (SIGSTOP) with the links into it cut; 2 and 3 regenerate and 3 grants
/// (its client holds on). Then 2 loses its disk and restarts, hearing
/// only from 1 (3 → 2 is cut too: else 2 learns the newer epoch and 1
/// learns it from 2's envelope). 1 resumes inside 2's restart window and
/// renews its old token's lease to grant its waiting client; 2, a fresh
/// node that knows no threshold, cannot tell the renewal is stale. With
/// the rule it does not ack; without it, 1 counts itself and 2, a
/// majority, and grants while 3's client holds.
fn stale_renewal_meets_a_wiped_node(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = stubborn(7, 3, &[1, 3], m);
    sim.check(lease_safety());
    sim.at(Instant::from_millis(300), acquire(NodeId(1), ClientId(1)));
    sim.at(Instant::from_millis(310), acquire(NodeId(1), ClientId(11)));
    sim.run_until(Instant::from_millis(400))?;
    if sim.world().core(NodeId(1)).and_then(|c| c.holder()).is_none() {
        return Err(sim.error("site 1's client was not granted"));
    }
    sim.after(Duration::ZERO, Action::Pause(NodeId(1)));
    // Nothing of the newer epoch reaches 1: the links into it are cut (a
    // partition one way); 2's comes back with its new life.
    sim.after(Duration::ZERO, Action::Cut(NodeId(2), NodeId(1)));
    sim.after(Duration::ZERO, Action::Cut(NodeId(3), NodeId(1)));
    sim.after(Duration::from_millis(10), acquire(NodeId(3), ClientId(3)));
    let limit = sim.now() + Duration::from_millis(1_000);
    sim.run_until_true(limit, "site 3 was not granted", |w| {
        grants(w).iter().any(|(t, n, _)| *n == NodeId(3) && *t > Instant::from_millis(400))
    })?;
    sim.after(Duration::ZERO, Action::Crash(NodeId(2)));
    // 2's new life hears nothing from 3 either (else it learns the newer
    // epoch, and 1 learns it from 2's envelope).
    sim.after(Duration::ZERO, Action::Cut(NodeId(3), NodeId(2)));
    sim.after(Duration::ZERO, Action::WipeDisk(NodeId(2)));
    sim.after(Duration::from_millis(1), Action::Restart(NodeId(2)));
    sim.after(Duration::from_millis(1), Action::Uncut(NodeId(2), NodeId(1)));
    sim.after(Duration::from_millis(5), Action::Resume(NodeId(1)));
    sim.run_for(Duration::from_millis(8))?;
    if sim.world().core(NodeId(2)).is_none_or(|c| c.stored().recovered()) {
        return Err(sim.error("site 2 is not an unrecovered fresh node"));
    }
    sim.run_for(Duration::from_millis(300))
}

#[test]
fn unrecovered_no_lease_ack_holds() {
    holds(stale_renewal_meets_a_wiped_node(NONE));
}

#[test]
fn unrecovered_no_lease_ack_is_needed() {
    is_needed_by(stale_renewal_meets_a_wiped_node(Rules::all_but(&[NtRule::UnrecoveredAcksNoRenewal])), "holds until");
}

/// A stale holder's renewal reaches a site that promised the newer epoch
/// but has not yet seen it in use (the window the envelope leaves open:
/// every ack carries the acker's epoch in use). N = 3: 1 holds (its
/// client holds on) with a second client waiting there, and is paused
/// with the link 3 → 1 cut; 3 asks, searches and proposes, and 2
/// promises. Then the link 3 → 2 is held, so the new token's use does not
/// reach 2 yet, and 1 resumes and renews its old token's lease. With the
/// rule 2 refuses the renewal (it promised a higher epoch) and 1 drops the
/// token. Without it 2 acks, its envelope still naming the old epoch, and 1
/// grants its waiting client; when 3 → 2 is released, 2 acks 3's renewal
/// too and 3 grants while 1's client holds.
fn stale_renewal_meets_a_promise(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = stubborn(8, 3, &[1, 3], m);
    sim.check(lease_safety());
    sim.at(Instant::from_millis(300), acquire(NodeId(1), ClientId(1)));
    sim.at(Instant::from_millis(310), acquire(NodeId(1), ClientId(11)));
    sim.run_until(Instant::from_millis(400))?;
    if sim.world().core(NodeId(1)).and_then(|c| c.holder()).is_none() {
        return Err(sim.error("site 1's client was not granted"));
    }
    let old = sim.world().core(NodeId(2)).map_or(0, |c| c.stored().threshold());
    sim.after(Duration::ZERO, Action::Pause(NodeId(1)));
    sim.after(Duration::ZERO, Action::Cut(NodeId(3), NodeId(1)));
    sim.after(Duration::from_millis(10), acquire(NodeId(3), ClientId(3)));
    let limit = sim.now() + Duration::from_millis(1_000);
    sim.run_until_true(limit, "site 2 never promised a newer epoch", |w| {
        w.core(NodeId(2)).is_some_and(|c| c.stored().threshold() > old)
    })?;
    sim.hold(NodeId(3), NodeId(2));
    sim.after(Duration::from_millis(1), Action::Resume(NodeId(1)));
    sim.after(Duration::from_millis(40), Action::Release(NodeId(3), NodeId(2)));
    sim.run_for(Duration::from_millis(300))
}

#[test]
fn stale_renewals_refused_holds() {
    holds(stale_renewal_meets_a_promise(NONE));
}

#[test]
fn stale_renewals_refused_is_needed() {
    is_needed_by(stale_renewal_meets_a_promise(Rules::all_but(&[NtRule::StaleRenewalsRefused])), "holds until");
}

// ------------------------------------------------- the first token, epochs

/// Clients that release 2 ms after each grant and do not ask again.
fn releasing(seed: u64, n: u32, m: Rules<NtRule>) -> Sim<NtNode> {
    let mut sim = sites_with(seed, n, 2, net(), m);
    sim.clients(Box::new(|_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(2), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim
}

/// Runs until `node`'s client is granted (a grant after `since`).
fn run_until_granted(sim: &mut Sim<NtNode>, node: NodeId, since: Instant, limit: Instant) -> Result<(), SimError> {
    sim.run_until_true(limit, &format!("{node} was not granted"), |w| {
        grants(w).iter().any(|(t, n, _)| *n == node && *t > since)
    })
}

/// A cold restart of every site while the root's disk is behind the
/// epoch in use. N = 3: the root, 1, holds the first token (epoch 0x400);
/// it crashes, and 2 asks: it searches, regenerates epoch 0x801 (round 2,
/// its slot) with 3's promise and grants. Then 2 and 3 crash too, and all
/// three restart together with their disks, 1's client asking at once. No
/// site runs: they bootstrap. With the rule the root searches, finds no
/// token and proposes 0x800 (the round above its own floor): 2 and 3
/// refuse it (`Nack{promised: 0x801}`) and it jumps above. Without it the
/// root holds a token at once with "stored + 1" chosen locally, 0x800, and
/// grants fences below those of 0x801 granted before the restart.
fn cold_restart_behind_the_root(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = releasing(3, 3, m);
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    sim.at(Instant::from_millis(300), acquire(NodeId(1), ClientId(1)));
    sim.run_until(Instant::from_millis(400))?;
    if !sim.world().core(NodeId(1)).is_some_and(|c| c.has_token()) {
        return Err(sim.error("expected the root to keep the first token"));
    }
    let root_floor = sim.world().core(NodeId(1)).map_or(0, |c| c.stored().floor());
    sim.after(Duration::ZERO, Action::Crash(NodeId(1)));
    sim.after(Duration::from_millis(5), acquire(NodeId(2), ClientId(2)));
    let since = sim.now();
    let limit = since + Duration::from_millis(1_000);
    run_until_granted(&mut sim, NodeId(2), since, limit)?;
    let in_use = sim.world().core(NodeId(2)).and_then(|c| c.token_epoch()).unwrap_or(0);
    if promise_round(root_floor) + 1 != promise_round(in_use) {
        return Err(
            sim.error(format!("expected 2 to regenerate one round above the root's {root_floor:#x}: {in_use:#x}"))
        );
    }
    sim.run_for(Duration::from_millis(10))?;
    sim.after(Duration::ZERO, Action::Crash(NodeId(2)));
    sim.after(Duration::ZERO, Action::Crash(NodeId(3)));
    for i in 1..=3 {
        sim.after(Duration::from_millis(50), Action::Restart(NodeId(i)));
        sim.after(Duration::from_millis(51), acquire(NodeId(i), ClientId(u64::from(i))));
    }
    let since = sim.now() + Duration::from_millis(50);
    sim.run_for(Duration::from_millis(1_500))?;
    everyone_served_since(sim.world(), since).map_err(|m| sim.error(m))
}

fn promise_round(epoch: u64) -> u64 {
    durable::promise::round_of(epoch)
}

#[test]
fn no_site_starts_with_a_token_holds() {
    holds(cold_restart_behind_the_root(NONE));
    holds(cold_restart_behind_the_root(no_leases()));
}

#[test]
fn no_site_starts_with_a_token_is_needed() {
    is_needed_by(cold_restart_behind_the_root(no_leases().without(NtRule::NoSiteStartsWithToken)), "granted fence");
}

/// Storing the epoch in use before using it (ntmutexd.md, "Epochs survive
/// cold restarts"), in `cold_restart_behind_the_root`: 2 regenerates
/// 0x801 with 3's promise, so two stored values keep the root's 0x800 from
/// completing after the cold restart: 2's epoch in use (its own proposal
/// is abandoned by a restart unless stored as in use: only its floor keeps
/// it) and 3's promise. Either alone refuses 0x800.
#[test]
fn epoch_stored_before_use_holds() {
    holds(cold_restart_behind_the_root(NONE));
    holds(cold_restart_behind_the_root(no_leases()));
}

#[test]
#[ignore = "not shown: masked (docs/safety-rules.md); see epoch_stored_before_use_masked_by_promise_store"]
fn epoch_stored_before_use_is_needed() {
    is_needed(cold_restart_behind_the_root(Rules::all_but(&[NtRule::EpochStoredBeforeUse])));
}

/// The mask: with neither 2's epoch in use nor 3's promise on disk, every
/// site restarts with 0x400 as its threshold; 2 and 3 promise the root's
/// 0x800 and its first fence falls below 0x801's. Each switch alone
/// passes, with leases and without.
#[test]
fn epoch_stored_before_use_masked_by_promise_store() {
    masked_pair(
        cold_restart_behind_the_root,
        |m| m.without(NtRule::EpochStoredBeforeUse),
        |m| m.without(NtRule::PromiseStoredBeforeAck),
        NONE,
        "granted fence",
    );
}

/// A rule masked by one other: `scenario` passes with each switch alone
/// (`a` or `b` applied to every rule on, and to leases off too), and
/// fails with `what` with both applied to `base`.
fn masked_pair(
    scenario: fn(Rules<NtRule>) -> Result<(), SimError>,
    a: fn(Rules<NtRule>) -> Rules<NtRule>,
    b: fn(Rules<NtRule>) -> Rules<NtRule>,
    base: Rules<NtRule>,
    what: &str,
) {
    for m in [NONE, no_leases()] {
        holds(scenario(a(m)));
        holds(scenario(b(m)));
    }
    is_needed_by(scenario(a(b(base))), what);
}

/// A token copy at a recovered wiped node. N = 3: 2 holds (its client
/// holds on) with 3 queued; 2's client releases and the token goes to 3,
/// which grants and keeps it idle. 3's host dies with the token and its
/// disk; 3 restarts as a fresh node and recovers `recovered_max` = the
/// epoch in use from 1's and 2's answers (nobody asks meanwhile: nothing is
/// regenerated). Then the frame 2 sent to 3's previous life is handed to
/// the new life's core (`Sim::with_core`, as in `duplicated_token`: no
/// transport delivers one), and 3's client asks. With the rule 3 discards
/// it (at its `recovered_max`: its previous life may have granted with
/// it), searches and regenerates. Without it 3 takes it, and the grant
/// counter its previous life already used is used again.
fn token_copy_at_a_recovered_node(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = one_each_with_holder(3, 3, 2, m);
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    sim.at(Instant::from_millis(300), acquire(NodeId(2), ClientId(2)));
    sim.at(Instant::from_millis(330), acquire(NodeId(3), ClientId(3)));
    sim.run_until(Instant::from_millis(400))?;
    let queued = sim.world().core(NodeId(3)).is_some_and(|c| c.position().is_some() && !c.has_token());
    if sim.world().core(NodeId(2)).and_then(|c| c.holder()).is_none() || !queued {
        return Err(sim.error("expected site 2 to hold with site 3 committed behind it"));
    }
    let frame = token_frame_of_2(&sim);
    sim.after(Duration::ZERO, Action::Request(NodeId(2), ClientId(2), LockRequest::Release));
    let since = sim.now();
    run_until_granted(&mut sim, NodeId(3), since, since + Duration::from_millis(100))?;
    sim.run_for(Duration::from_millis(5))?;
    if !sim.world().core(NodeId(3)).is_some_and(|c| c.has_token() && c.holder().is_none()) {
        return Err(sim.error("expected site 3 to keep the idle token"));
    }
    sim.after(Duration::ZERO, Action::Crash(NodeId(3)));
    sim.after(Duration::ZERO, Action::WipeDisk(NodeId(3)));
    sim.after(Duration::from_millis(1), Action::Restart(NodeId(3)));
    sim.run_for(Duration::from_millis(2))?;
    let limit = sim.now() + Duration::from_millis(300);
    sim.run_until_true(limit, "site 3 never recovered", |w| w.core(NodeId(3)).is_some_and(|c| c.stored().recovered()))?;
    let epoch = match &frame.1.body {
        ntmutexd::Body::Token { epoch, .. } => *epoch,
        _ => 0,
    };
    if sim.world().core(NodeId(3)).is_none_or(|c| c.stored().recovered_max() != epoch) {
        return Err(sim.error(format!("expected site 3 to recover the epoch in use, {epoch:#x}")));
    }
    hand_to_3(&mut sim, frame);
    sim.after(Duration::from_millis(1), acquire(NodeId(3), ClientId(3)));
    let since = sim.now();
    sim.run_for(Duration::from_millis(500))?;
    if !grants(sim.world()).iter().any(|(t, n, _)| *n == NodeId(3) && *t > since) {
        return Err(sim.error("the restarted site's client was never served"));
    }
    Ok(())
}

#[test]
fn no_token_at_recovered_max_holds() {
    holds(token_copy_at_a_recovered_node(NONE));
    holds(token_copy_at_a_recovered_node(no_leases()));
}

#[test]
fn no_token_at_recovered_max_is_needed() {
    is_needed_by(token_copy_at_a_recovered_node(Rules::all_but(&[NtRule::NoTokenAtRecoveredMax])), "a second time");
}

/// A token below the receiver's `max_epoch` (ntmutexd.md, "Regeneration
/// never creates a second token"). N = 3: the root, 1, holds (its client
/// holds on) with 3 committed behind it. 1 is paused, and the links 2 → 1
/// and 3 → 1 are cut, so nothing of what follows reaches it. 3 suspects
/// 1, regenerates with 2's promise and is served; then 2 asks and takes
/// the new token from 3. 1's client releases during the pause; 1 resumes
/// and passes its old token to its `next`, 3, with its own stale epoch on
/// the envelope. With the rule 3 discards it (below its `max_epoch`).
/// Without it 3 holds a second token, of the old epoch, beside 2's; the
/// links are mended and 3's client asks again.
fn stale_token_from_a_paused_holder(m: Rules<NtRule>) -> Result<(), SimError> {
    let mut sim = one_each_with_holder(4, 3, 1, m);
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    sim.at(Instant::from_millis(300), acquire(NodeId(1), ClientId(1)));
    sim.at(Instant::from_millis(330), acquire(NodeId(3), ClientId(3)));
    sim.run_until(Instant::from_millis(400))?;
    let queued = sim.world().core(NodeId(3)).is_some_and(|c| c.position().is_some() && !c.has_token());
    if sim.world().core(NodeId(1)).and_then(|c| c.holder()).is_none() || !queued {
        return Err(sim.error("expected site 1 to hold with site 3 committed behind it"));
    }
    let old = sim.world().core(NodeId(1)).and_then(|c| c.token_epoch()).unwrap_or(0);
    sim.after(Duration::ZERO, Action::Pause(NodeId(1)));
    sim.after(Duration::ZERO, Action::Cut(NodeId(2), NodeId(1)));
    sim.after(Duration::ZERO, Action::Cut(NodeId(3), NodeId(1)));
    let since = sim.now();
    run_until_granted(&mut sim, NodeId(3), since, since + Duration::from_millis(1_000))?;
    sim.after(Duration::from_millis(5), acquire(NodeId(2), ClientId(2)));
    let since = sim.now();
    run_until_granted(&mut sim, NodeId(2), since, since + Duration::from_millis(1_000))?;
    sim.run_for(Duration::from_millis(5))?;
    let new = sim.world().core(NodeId(2)).and_then(|c| c.token_epoch()).unwrap_or(0);
    if new <= old {
        return Err(sim.error(format!("expected site 2 to hold a newer token than {old:#x}: {new:#x}")));
    }
    let tokens = sim.world().sent_by_kind.get("token").copied().unwrap_or(0);
    sim.after(Duration::ZERO, Action::Request(NodeId(1), ClientId(1), LockRequest::Release));
    sim.after(Duration::from_millis(1), Action::Resume(NodeId(1)));
    sim.after(Duration::from_millis(20), Action::Uncut(NodeId(2), NodeId(1)));
    sim.after(Duration::from_millis(20), Action::Uncut(NodeId(3), NodeId(1)));
    let limit = sim.now() + Duration::from_millis(10);
    run_until_sent(&mut sim, "token", tokens, limit)?;
    let asked = sim.now() + accurate_after() + Duration::from_millis(40);
    sim.at(asked, acquire(NodeId(3), ClientId(3)));
    sim.run_for(Duration::from_millis(500))?;
    if !grants(sim.world()).iter().any(|(t, n, _)| *n == NodeId(3) && *t > asked) {
        return Err(sim.error("site 3's client was not served again"));
    }
    Ok(())
}

#[test]
fn stale_token_discarded_holds() {
    holds(stale_token_from_a_paused_holder(NONE));
    holds(stale_token_from_a_paused_holder(no_leases()));
}

#[test]
fn stale_token_discarded_is_needed() {
    is_needed_by(stale_token_from_a_paused_holder(no_leases().without(NtRule::StaleTokenDiscarded)), "granted fence");
}

/// A token in transit is invisible to a search (ntmutexd.md, "Regeneration
/// never creates a second token": a holder answers `Nack{holder}`). N = 3,
/// every one-way delay 1 ms: 3 restarted long before (a new life: its
/// first request searches, M3). The root, 1, keeps the idle first token;
/// 2 asks and 1 sends the token straight to it, held on the link 1 → 2.
/// 3 asks 2 ms later and searches: 1 has passed the token and 2 has not
/// got it yet, so no answer shows a position or a token, and 3 proposes.
/// The token is released to 2 after 2 answered the search and before the
/// proposal reaches it; 2 grants (its client holds on until the scenario
/// releases it, 200 ms later). With the rule 2 answers `Nack{holder}`, 3
/// aborts and asks 2 for the token. Without it 2 promises, 3 completes
/// the new epoch and takes a second token beside 2's.
fn token_in_transit_during_a_search(m: Rules<NtRule>) -> Result<(), SimError> {
    let net = NetConfig::reliable(Duration::from_micros(200), T_MSG).every_delay(Duration::from_millis(1));
    let mut sim = sites_with(5, 3, 2, net, m);
    let mut first_at_2 = true;
    sim.clients(Box::new(move |_, node, client, reply, _| match reply {
        LockReply::Granted { .. } if node == NodeId(2) && std::mem::take(&mut first_at_2) => vec![],
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(1), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    sim.at(Instant::from_millis(100), Action::Crash(NodeId(3)));
    sim.at(Instant::from_millis(101), Action::Restart(NodeId(3)));
    sim.run_until(Instant::from_millis(300))?;
    if !sim.world().core(NodeId(1)).is_some_and(|c| c.has_token()) {
        return Err(sim.error("expected the root to keep the idle first token"));
    }
    sim.hold(NodeId(1), NodeId(2));
    sim.after(Duration::ZERO, acquire(NodeId(2), ClientId(2)));
    sim.after(Duration::from_millis(2), acquire(NodeId(3), ClientId(3)));
    let acks = sim.world().sent_by_kind.get("search_ack").copied().unwrap_or(0);
    let limit = sim.now() + Duration::from_millis(50);
    run_until_sent(&mut sim, "search_ack", acks + 1, limit)?;
    sim.release(NodeId(1), NodeId(2));
    let since = sim.now();
    let proposals = sim.world().sent_by_kind.get("regenerate").copied().unwrap_or(0);
    sim.run_for(Duration::from_millis(200))?;
    if sim.world().sent_by_kind.get("regenerate").copied().unwrap_or(0) <= proposals {
        return Err(sim.error("site 3 did not propose while the token was in transit"));
    }
    sim.after(Duration::ZERO, Action::Request(NodeId(2), ClientId(2), LockRequest::Release));
    sim.run_for(Duration::from_millis(300))?;
    if !grants(sim.world()).iter().any(|(t, n, _)| *n == NodeId(3) && *t > since) {
        return Err(sim.error("site 3 was not served"));
    }
    Ok(())
}

#[test]
fn holder_nacks_regeneration_holds() {
    holds(token_in_transit_during_a_search(NONE));
    holds(token_in_transit_during_a_search(no_leases()));
}

#[test]
fn holder_nacks_regeneration_is_needed() {
    is_needed_by(
        token_in_transit_during_a_search(no_leases().without(NtRule::HolderNacksRegeneration)),
        "more than one token",
    );
}

/// A search that finds the token: N = 3, every one-way delay 1 ms, 3
/// restarted long before (its first request searches, M3); the root, 1,
/// keeps the idle first token, and 3 asks. 1 answers the search that it
/// holds the token, and 3 asks it directly. Regenerating despite that
/// answer is masked by the holder's `Nack{holder}` (3 aborts and asks 1);
/// with both off 1 promises and 3 makes a second token beside 1's.
fn search_finds_the_holder(m: Rules<NtRule>) -> Result<(), SimError> {
    let net = NetConfig::reliable(Duration::from_micros(200), T_MSG).every_delay(Duration::from_millis(1));
    let mut sim = sites_with(5, 3, 2, net, m);
    sim.clients(Box::new(|_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(1), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    sim.at(Instant::from_millis(100), Action::Crash(NodeId(3)));
    sim.at(Instant::from_millis(101), Action::Restart(NodeId(3)));
    sim.run_until(Instant::from_millis(300))?;
    if !sim.world().core(NodeId(1)).is_some_and(|c| c.has_token()) {
        return Err(sim.error("expected the root to keep the idle first token"));
    }
    sim.after(Duration::ZERO, acquire(NodeId(3), ClientId(3)));
    let since = sim.now();
    sim.run_for(Duration::from_millis(300))?;
    if !grants(sim.world()).iter().any(|(t, n, _)| *n == NodeId(3) && *t > since) {
        return Err(sim.error("site 3 was not served"));
    }
    Ok(())
}

#[test]
fn regen_only_without_position_or_token_holds() {
    holds(search_finds_the_holder(NONE));
    holds(search_finds_the_holder(no_leases()));
}

#[test]
#[ignore = "not shown: masked (docs/safety-rules.md); see regen_only_without_position_or_token_masked_by_holder_nack"]
fn regen_only_without_position_or_token_is_needed() {
    is_needed(search_finds_the_holder(Rules::all_but(&[NtRule::RegenOnlyWithoutPositionOrToken])));
}

/// The mask: each switch alone passes (with leases and without); with
/// both off and leases off, two tokens.
#[test]
fn regen_only_without_position_or_token_masked_by_holder_nack() {
    masked_pair(
        search_finds_the_holder,
        |m| m.without(NtRule::RegenOnlyWithoutPositionOrToken),
        |m| m.without(NtRule::HolderNacksRegeneration),
        no_leases(),
        "(detector accurate)",
    );
}

/// A search whose answers show a position and no token (ntmutexd.md,
/// "Regenerate only if no answer shows a smaller position or a token": the
/// smaller-position half). Every one-way delay 1 ms. The root, 1, holds
/// the first token (its client holds on until the scenario releases it)
/// and 2 is committed behind it at position 1; 1's client releases and 1
/// passes the token to 2, and while it is on its way a search reaches 1
/// (no position, no token) and 2 (position 1, no token). `mech` picks the
/// search:
///
/// - M3: N = 3, 3 restarted long before (a new life: its first request
///   searches) asks. With the rule it sends 2 its request (the tail,
///   M3.a(i)) and is served after it.
/// - M2: N = 4, k = 1, 3 and 4 are committed behind 2 (positions 2 and 3);
///   3's process is killed (the hint: 4 suspects it at once) and 4, its
///   only predecessor gone, searches for a smaller position. With the rule
///   it links behind 2 (a Connection) and is served after it.
///
/// Regenerating instead (`regen_despite_position`) is masked twice over,
/// depending on which reaches 2 first, the token or the proposal:
///
/// - `late` false (the token first: nothing is held, the search starts
///   0.5 ms before 1 passes): 2 holds the token when the proposal comes and
///   answers `Nack{holder}`; without that Nack too, 2 promises, the
///   searcher completes a new epoch and holds a second token beside 2's;
/// - `late` true (the proposal first: the token is held on the link 1 → 2
///   for 10 ms, the search starting 1 ms after 1 passed it, 2 ms for M2):
///   2 promises the new epoch and discards the old token when it comes
///   (below its promise), then searches again and is served; taking it
///   instead, 2 grants with it and keeps it idle beside the new one,
///   nobody writes to 2 again, and when 2's client asks again, once the
///   detector counts as accurate, 2 grants an old-epoch fence after the
///   new token's.
///
/// With leases neither proposal is made: the searcher acked 1's lease
/// renewals, and an ack binds the acker's own proposals too (regen.rs,
/// `lease_busy_for(now, self.me)`), so it waits out the window (28 ms)
/// and searches again when 2 has the token.
fn position_answer_during_a_search(m: Rules<NtRule>, mech: Mech, late: bool) -> Result<(), SimError> {
    let m2 = mech == Mech::M2;
    let net = NetConfig::reliable(Duration::from_micros(200), T_MSG).every_delay(Duration::from_millis(1));
    let (n, k, searcher) = if m2 { (4, 1, NodeId(4)) } else { (3, 2, NodeId(3)) };
    let mut sim = sites_with(5, n, k, net, m);
    let mut first_at_1 = true;
    sim.clients(Box::new(move |_, node, client, reply, _| match reply {
        LockReply::Granted { .. } if node == NodeId(1) && std::mem::take(&mut first_at_1) => vec![],
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(1), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    if !m2 {
        sim.at(Instant::from_millis(100), Action::Crash(NodeId(3)));
        sim.at(Instant::from_millis(101), Action::Restart(NodeId(3)));
    }
    sim.at(Instant::from_millis(300), acquire(NodeId(1), ClientId(1)));
    sim.at(Instant::from_millis(310), acquire(NodeId(2), ClientId(2)));
    if m2 {
        sim.at(Instant::from_millis(315), acquire(NodeId(3), ClientId(3)));
        sim.at(Instant::from_millis(320), acquire(NodeId(4), ClientId(4)));
    }
    sim.run_until(Instant::from_millis(330))?;
    let w = sim.world();
    let queued: &[(u32, u64)] = if m2 { &[(2, 1), (3, 2), (4, 3)] } else { &[(2, 1)] };
    let holds = w.core(NodeId(1)).is_some_and(|c| c.holder().is_some());
    if !holds || !queued.iter().all(|(i, p)| w.core(NodeId(*i)).is_some_and(|c| c.position() == Some(*p))) {
        return Err(sim.error(format!("expected site 1 to hold with {queued:?} (site, position) committed behind it")));
    }
    let since = sim.now();
    let release = Action::Request(NodeId(1), ClientId(1), LockRequest::Release);
    let search = if m2 { Action::Kill(NodeId(3)) } else { acquire(NodeId(3), ClientId(3)) };
    if late {
        sim.hold(NodeId(1), NodeId(2));
        sim.after(Duration::ZERO, release);
        sim.after(Duration::from_millis(1), search);
        sim.run_for(Duration::from_millis(10))?;
        sim.release(NodeId(1), NodeId(2));
    } else {
        // The search starts 0.5 ms before 1 passes (a kill's hint takes
        // 1 ms to reach its peers).
        sim.after(Duration::ZERO, search);
        sim.after(Duration::from_micros(if m2 { 1_500 } else { 500 }), release);
    }
    // Past the detector's grace after the hold, 2's client asks again.
    let asked = since + accurate_after() + Duration::from_millis(40);
    sim.at(asked, acquire(NodeId(2), ClientId(2)));
    sim.run_until(asked + Duration::from_millis(300))?;
    let g = grants(sim.world());
    for (site, after) in [(searcher, since), (NodeId(2), since), (NodeId(2), asked)] {
        if !g.iter().any(|(t, n, _)| *n == site && *t >= after) {
            return Err(sim.error(format!("{site} was not served after {after}")));
        }
    }
    Ok(())
}

/// `position_answer_during_a_search` with the token reaching 2 before
/// the proposal, M3 then M2.
fn position_answer_token_first(m: Rules<NtRule>) -> Result<(), SimError> {
    position_answer_during_a_search(m, Mech::M3, false)?;
    position_answer_during_a_search(m, Mech::M2, false)
}

/// `position_answer_during_a_search` with the proposal reaching 2 before
/// the (held) token, M3 then M2.
fn position_answer_proposal_first(m: Rules<NtRule>) -> Result<(), SimError> {
    position_answer_during_a_search(m, Mech::M3, true)?;
    position_answer_during_a_search(m, Mech::M2, true)
}

#[test]
fn regen_only_without_smaller_position_holds() {
    for m in [NONE, no_leases()] {
        holds(position_answer_token_first(m));
        holds(position_answer_proposal_first(m));
    }
}

#[test]
#[ignore = "not shown: masked (docs/safety-rules.md); see regen_only_without_smaller_position_masked_by_holder_nack \
            and regen_only_without_smaller_position_masked_by_stale_token_discard"]
fn regen_only_without_smaller_position_is_needed() {
    let m = no_leases().without(NtRule::RegenOnlyWithoutSmallerPosition);
    is_needed(position_answer_token_first(m).and(position_answer_proposal_first(m)));
}

/// The token reaches 2 first: each switch alone passes (with leases and
/// without), and with both off and leases off the searcher's new token
/// and 2's old one coexist, for M3 and for M2. Leases mask it too, by
/// their window alone: with leases on the pair passes (the searcher acked
/// 1's renewals, so its own proposal waits out the window, and 2 has the
/// token by then); without the lease window it fails.
#[test]
fn regen_only_without_smaller_position_masked_by_holder_nack() {
    let two = "more than one token (detector accurate)";
    let both = Rules::all_but(&[NtRule::RegenOnlyWithoutSmallerPosition, NtRule::HolderNacksRegeneration]);
    for mech in [Mech::M3, Mech::M2] {
        let scenario = |m| position_answer_during_a_search(m, mech, false);
        for m in [NONE, no_leases()] {
            holds(scenario(m.without(NtRule::RegenOnlyWithoutSmallerPosition)));
            holds(scenario(m.without(NtRule::HolderNacksRegeneration)));
        }
        is_needed_by(scenario(both.without(NtRule::GrantsUnderLeases)), two);
        holds(scenario(both));
        is_needed_by(scenario(both.without(NtRule::LeaseAckBinds)), two);
    }
}

/// The proposal reaches 2 first: each switch alone passes (with leases
/// and without), and with both off and leases off 2 grants with the old
/// token after the new one has granted: `n2 granted fence
/// 0x4000000000000000003 after 0x8020000000000000001` (M3; `0x803…` for
/// M2), the old epoch's third fence after the new epoch's first. With
/// leases on, two lease rules mask it, each alone: the lease window (the
/// searcher does not propose, above) and the refusal of stale renewals
/// (without the window the searcher completes the new epoch and 2 takes
/// the old token, but its own renewal refuses the old epoch and it drops
/// the token before it grants); with both off, two tokens.
#[test]
fn regen_only_without_smaller_position_masked_by_stale_token_discard() {
    let old_after_new = "n2 granted fence 0x4000000000000000003 after";
    masked_pair(
        position_answer_proposal_first,
        |m| m.without(NtRule::RegenOnlyWithoutSmallerPosition),
        |m| m.without(NtRule::StaleTokenDiscarded),
        no_leases(),
        old_after_new,
    );
    let both = Rules::all_but(&[NtRule::RegenOnlyWithoutSmallerPosition, NtRule::StaleTokenDiscarded]);
    // M2 fails the same way (`position_answer_proposal_first` stops at M3).
    is_needed_by(
        position_answer_during_a_search(both.without(NtRule::GrantsUnderLeases), Mech::M2, true),
        old_after_new,
    );
    for mech in [Mech::M3, Mech::M2] {
        let scenario = |m| position_answer_during_a_search(m, mech, true);
        holds(scenario(both));
        holds(scenario(both.without(NtRule::LeaseAckBinds)));
        holds(scenario(both.without(NtRule::StaleRenewalsRefused)));
        is_needed_by(
            scenario(both.without(NtRule::LeaseAckBinds).without(NtRule::StaleRenewalsRefused)),
            "more than one token (detector accurate)",
        );
    }
}

/// A proposer paused between its acks and its use of the new token
/// (ntmutexd.md, "Regeneration never creates a second token": the new
/// token is used only with acks "all within `lease_ms·(1−ρ)` of sending
/// `Regenerate`"). N = 5, every one-way delay 1 ms. The root, 1, keeps the
/// idle first token and crashes; 2's client asks, 2 searches (M3), finds
/// no position and no token, and proposes e1. 3 and 4 promise at once (2,
/// 3 and 4: a majority); 5's ack is held on the link 5 → 2, so 2 waits
/// for it (5 is not suspected). 2 is paused (SIGSTOP) 3 ms after
/// proposing, for 300 ms. Meanwhile 3's client asks; 3's request to 2 goes
/// unanswered, it searches, proposes e2 above the e1 it promised once the
/// promise windows of e1 have ended, and is served with 4's and 5's acks.
/// 2 resumes: its regeneration window is overdue (5 is suspected) and it
/// holds a majority's acks for e1, all read within the deadline, but the
/// deadline passed long ago. With the rule the proposal is abandoned and 2
/// asks again (it is served by the queue of e2). Without it 2 counts the
/// old acks, uses e1 and grants its first fence below the fences e2
/// granted before it.
fn acks_read_after_a_pause(m: Rules<NtRule>) -> Result<(), SimError> {
    let net = NetConfig::reliable(Duration::from_micros(200), T_MSG).every_delay(Duration::from_millis(1));
    let mut sim = sites_with(9, 5, 2, net, m);
    sim.clients(Box::new(|_, node, client, reply, _| match reply {
        LockReply::Granted { .. } => {
            vec![(Duration::from_millis(2), Action::Request(node, client, LockRequest::Release))]
        }
        _ => vec![],
    }));
    sim.check(staged_safety(Some(accurate_after())));
    sim.check(client_exclusion(accurate_after()));
    sim.run_until(Instant::from_millis(300))?;
    if !sim.world().core(NodeId(1)).is_some_and(|c| c.has_token()) {
        return Err(sim.error("expected the root to keep the idle first token"));
    }
    let first = sim.world().core(NodeId(1)).and_then(|c| c.token_epoch()).unwrap_or(0);
    sim.after(Duration::ZERO, Action::Crash(NodeId(1)));
    sim.after(Duration::from_millis(1), acquire(NodeId(2), ClientId(2)));
    let proposals = sim.world().sent_by_kind.get("regenerate").copied().unwrap_or(0);
    let limit = sim.now() + Duration::from_millis(200);
    run_until_sent(&mut sim, "regenerate", proposals, limit)?;
    // 5's ack of e1 stays on the link; 3's and 4's arrive after 2 ms.
    sim.hold(NodeId(5), NodeId(2));
    sim.run_for(Duration::from_millis(3))?;
    let e1 = match sim.world().core(NodeId(2)).and_then(|c| c.stored().own()) {
        Some(e) if e > first => e,
        own => return Err(sim.error(format!("expected site 2 to be proposing above {first:#x}: {own:?}"))),
    };
    let promised = |w: &sim::World<NtNode>, i| w.core(NodeId(i)).is_some_and(|c| c.stored().threshold() == e1);
    if !(promised(sim.world(), 3) && promised(sim.world(), 4))
        || sim.world().core(NodeId(2)).is_some_and(|c| c.has_token())
    {
        return Err(sim.error(format!("expected 3 and 4 to have promised {e1:#x}, 2 still waiting for 5")));
    }
    sim.after(Duration::ZERO, Action::Pause(NodeId(2)));
    sim.after(Duration::from_millis(2), acquire(NodeId(3), ClientId(3)));
    let since = sim.now();
    run_until_granted(&mut sim, NodeId(3), since, since + Duration::from_millis(280))?;
    let e2 = sim.world().core(NodeId(3)).and_then(|c| c.token_epoch()).unwrap_or(0);
    if e2 <= e1 {
        return Err(sim.error(format!("expected site 3 to hold a token above {e1:#x}: {e2:#x}")));
    }
    sim.release(NodeId(5), NodeId(2));
    sim.at(since + Duration::from_millis(300), Action::Resume(NodeId(2)));
    sim.run_until(since + Duration::from_millis(300))?;
    let resumed = sim.now();
    sim.run_for(Duration::from_millis(700))?;
    if !grants(sim.world()).iter().any(|(t, n, _)| *n == NodeId(2) && *t >= resumed) {
        return Err(sim.error("site 2 was not served after it resumed"));
    }
    Ok(())
}

#[test]
fn regen_acks_within_deadline_holds() {
    holds(acks_read_after_a_pause(NONE));
    holds(acks_read_after_a_pause(no_leases()));
}

#[test]
fn regen_acks_within_deadline_is_needed() {
    is_needed_by(acks_read_after_a_pause(no_leases().without(NtRule::RegenAcksWithinDeadline)), "granted fence");
}

// ------------------------------------- predecessors' liveness, linking

/// "A predecessor counts as alive for Si only if … its `next` is Si"
/// (ntmutexd.md, Failure detection): every-fault runs with a majority
/// down, seeds 20 (N = 5) and 58 (N = 7), found by the survey. After the
/// faults a holder keeps granting with `next` unset (it had cleared a
/// suspected `next`: "its successors reconnect by M1/M2"); the site
/// committed behind it is told `next: None` by every `IAmAlive`. With the
/// rule it recovers (M1: a Connection, and the holder links it). Without
/// it it counts the holder alive and waits for ever, and so does the
/// chain behind it (seed 20: 4 holds at position 155 with `next=none`; 2,
/// 3, 5 and 1 wait at 156–159).
fn successor_unlinked_by_its_holder(m: Rules<NtRule>) -> Result<(), SimError> {
    seeds([20, 58], |s| every_fault_majority_down(s, m))
}

#[test]
fn alive_linked_to_us_holds() {
    holds(successor_unlinked_by_its_holder(NONE));
    holds(successor_unlinked_by_its_holder(no_leases()));
}

#[test]
fn alive_linked_to_us_is_needed() {
    is_needed_by(successor_unlinked_by_its_holder(Rules::all_but(&[NtRule::AliveOnlyLinkedToUs])), "never served");
}

/// "… still has a position smaller than Si's" (ntmutexd.md, Failure
/// detection; the same test for M1's answers). Masked by the Commit
/// cascade: a predecessor that gains or changes its position sends its
/// `next` a Commit before any later `IAmAlive` (FIFO), so the successor's
/// own position follows it and an answer never shows a position at or
/// above the successor's. Counting any position alone passes every seed of
/// `SLOW_QUEUE_MASK_SEEDS`; so does the cascade off alone. With both off
/// (seed 8, N = 4) the positions go stale and a cycle of waiting sites
/// forms: 1 (position 10) → 2 (8) → 3 (9) → 1, each counting its
/// predecessor alive because its `next` is right, though 2's predecessor 1
/// is behind it: `live sites never served after 7.5s: [1, 2, 3, 4]`.
#[test]
fn alive_before_us_holds() {
    slow_queue_mask_seeds_hold();
}

#[test]
#[ignore = "not shown: masked (docs/safety-rules.md); see alive_before_us_masked_by_commit_cascade"]
fn alive_before_us_is_needed() {
    is_needed(first_slow_queue_failure(Rules::all_but(&[NtRule::AliveOnlyBeforeUs])));
}

#[test]
fn alive_before_us_masked_by_commit_cascade() {
    mask_shown(
        Rules::all_but(&[NtRule::AliveOnlyBeforeUs, NtRule::CommitCascade]),
        &[Rules::all_but(&[NtRule::AliveOnlyBeforeUs])],
        &[Rules::all_but(&[NtRule::CommitCascade])],
    );
}

/// "(safety) Linking never drops a live successor" (ntmutexd.md):
/// every-fault seed 102 since promise windows end once their value is in
/// use (2026-11-29; a search of seeds 0–399 for a mutual exclusion
/// violation without the rule, with every rule on passing); until then
/// seed 79 (N = 4), found by the survey, whose trace this is. After the faults 4
/// holds with 1 committed behind it (position 172) when 2's M3 Connection
/// reaches 4. With the rule 4 forwards it to 1, which links 2. Without it
/// 4 links 2 in 1's place and 1 is dropped: 4's `IAmAlive` names 2, 1
/// recovers (M1), finds 4 and then 3 no longer before it (4 passed the
/// token on), suspects both, and its M2 search waits for no suspected
/// site, sees no smaller position and no holder, and regenerates while 4
/// holds the token (its `Nack{holder}` is not waited for). Without leases
/// the two tokens grant at once; with leases the old holder's renewals
/// are refused and it stops granting.
fn successor_dropped_by_a_connection(m: Rules<NtRule>) -> Result<(), SimError> {
    // 79 until promise windows ended once their value was in use
    // (2026-11-29).
    every_fault(102, m)
}

#[test]
fn link_keeps_live_successor_holds() {
    holds(successor_dropped_by_a_connection(NONE));
    holds(successor_dropped_by_a_connection(no_leases()));
}

#[test]
fn link_keeps_live_successor_is_needed() {
    is_needed_by(
        successor_dropped_by_a_connection(no_leases().without(NtRule::LinkKeepsLiveSuccessor)),
        "mutual exclusion violated",
    );
}

// ------------------------------------------------------------ the table

/// The rule table (`NtRule`) agrees with its scenarios, with
/// docs/safety-rules.md and with the design sections it cites
/// (`ftcore::rules::audit`).
#[test]
fn the_rule_table_matches_the_scenarios_and_the_docs() {
    let wrong = ftcore::rules::audit::<NtRule>(
        &[include_str!("safety.rs")],
        include_str!("../../../docs/safety-rules.md"),
        "ntmutexd",
        &[
            ("docs/ntmutexd.md", include_str!("../../../docs/ntmutexd.md")),
            ("docs/foundation.md", include_str!("../../../docs/foundation.md")),
            ("docs/reliability.md", include_str!("../../../docs/reliability.md")),
        ],
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

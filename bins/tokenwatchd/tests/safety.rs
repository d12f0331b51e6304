//! The (safety) rules of tokenwatchd.md and of its leases (reliability.md,
//! Pauses and leases), switched off one at a time (`Rules<TwRule>`): each
//! `_is_needed` test shows a simulated run that breaks without the rule —
//! a fence granted twice or out of order, overlapping client leases (both
//! checked always), or service that never returns. A rule whose test is
//! `#[ignore]`d has no scenario yet that fails without it; the reason is
//! written there.

mod workload;

use std::collections::BTreeSet;
use std::time::Duration;

use ftcore::rules::{Rules, TestStart};
use ftcore::{ClientId, NodeId};
use lockservice::LockRequest;
use sim::{Action, NetConfig, Sim, SimError};
use timer::Instant;
use tokenwatchd::{TwConfig, TwEvent, TwNode, TwRule};
use workload::*;

/// Runs `scenario` for seeds 0.. until one fails; returns that failure
/// (and prints its seed, time and message: `--nocapture` shows them).
fn first_failure(seeds: u64, mut scenario: impl FnMut(u64) -> Result<(), SimError>) -> Option<SimError> {
    let e = (0..seeds).find_map(|seed| scenario(seed).err())?;
    eprintln!("without the rule: seed {} failed at {}: {}", e.seed, e.at, e.message);
    Some(e)
}

/// A scripted `scenario` passes on `seeds` seeds with every rule on and
/// fails on one of them with the rules in `m` off; returns that failure.
fn scripted_breaks(
    seeds: u64,
    m: Rules<TwRule>,
    scenario: impl Fn(u64, Rules<TwRule>) -> Result<(), SimError>,
) -> SimError {
    for seed in 0..seeds {
        scenario(seed, Rules::ALL_ON).unwrap();
    }
    first_failure(seeds, |seed| scenario(seed, m)).expect("no seed broke without the rule")
}

/// The every-fault run with `m`: it must fail on some seed.
fn every_fault_breaks(m: Rules<TwRule>, seeds: u64) -> SimError {
    // Every rule on, the same seeds pass (tests/sim.rs sweeps them).
    first_failure(seeds, |seed| every_fault(seed, m).map(|_| ())).expect("no seed broke without the rule")
}

/// The every-fault run with `m`: some seed must break safety (two
/// holders, or a fence below one granted), not only another invariant.
fn every_fault_violates(m: Rules<TwRule>, seeds: u64) -> SimError {
    first_failure(seeds, |seed| {
        every_fault(seed, m).map(|_| ()).or_else(|e| if is_violation(&e) { Err(e) } else { Ok(()) })
    })
    .expect("no seed broke safety without the rule")
}

/// A lossy, fault-free ring with `m`: it must break safety or serve
/// fewer than 400 grants in 15 s. With every rule on, 20 % loss serves
/// about 770 (738–783 over seeds 0–7); without the ACK rule about 235
/// (229–240): since lease renewals are retried on lossy links the ring
/// serves three times more than when this threshold was 100, and no seed
/// of 0–199 fell below that any more.
fn lossy_breaks(m: Rules<TwRule>, seeds: u64) -> SimError {
    first_failure(seeds, |seed| {
        let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.2, 0.05);
        let mut sim = cluster_with(seed, 5, net, m);
        sim.check(safety());
        sim.run_until(Instant::from_millis(15_000))?;
        let g = grants(sim.world());
        if g.len() < 400 {
            return Err(sim.error(format!("only {} grants", g.len())));
        }
        Ok(())
    })
    .expect("no seed broke without the rule")
}

/// Steps until some live process holds the token.
fn holder(sim: &mut Sim<TwNode>) -> Result<NodeId, SimError> {
    for _ in 0..50_000 {
        if let Some(id) = sim.world().live().find(|(_, c)| c.has_token()).map(|(id, _)| id) {
            return Ok(id);
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    Err(sim.error("nobody holds the token"))
}

/// The hand-off to `s` is never confirmed (its predecessor `h` hears
/// nothing from `s`, and the third process's forwarded ACKs do not reach
/// `h` either), `s` accepts and grants under a lease the third process
/// acks, crashes and restarts at once, and `h`'s retransmission of the
/// same hand-off arrives: without the stored tpc it is new to `s`, which
/// grants the same fence again.
fn restart_between_retransmissions(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    restart_between_retransmissions_cfg(seed, TwConfig { rules: m, ..cfg() })
}

/// The same with the counter stored 16 ahead (`tpc_reserve`): the
/// restarted process's last stored block may or may not hold the count of
/// the hand-off it had accepted (about one visit in five starts a block).
fn restart_between_retransmissions_with_a_reserve(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    restart_between_retransmissions_cfg(seed, TwConfig { rules: m, tpc_reserve: 16, ..cfg() })
}

/// Three processes on a fast lossless network, run 3 s: the simulation,
/// the holder `h`, its successor `s` and the third process `q`.
fn three_with_a_holder(seed: u64, config: TwConfig) -> Result<(Sim<TwNode>, NodeId, NodeId, NodeId), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(2), 0.0, 0.0);
    let mut sim = cluster_cfg(seed, 3, net, config);
    sim.check(safety());
    sim.run_until(Instant::from_millis(3_000))?;
    let h = holder(&mut sim)?;
    let s = NodeId(h.0 % 3 + 1);
    Ok((sim, h, s, NodeId(s.0 % 3 + 1)))
}

/// Runs until `s` holds the token (up to 2 s).
fn until_token_at(sim: &mut Sim<TwNode>, s: NodeId) -> Result<(), SimError> {
    for _ in 0..20_000 {
        if sim.world().core(s).is_some_and(|c| c.has_token()) {
            return Ok(());
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    Err(sim.error(format!("{s} never took the token")))
}

fn restart_between_retransmissions_cfg(seed: u64, config: TwConfig) -> Result<(), SimError> {
    let (mut sim, h, s, q) = three_with_a_holder(seed, config)?;
    sim.cut(s, h);
    sim.cut(q, h);
    until_token_at(&mut sim, s)?;
    sim.run_for(Duration::from_millis(3))?;
    sim.after(Duration::ZERO, Action::Crash(s));
    sim.after(Duration::from_millis(1), Action::Restart(s));
    let client = ClientId(100 + seed);
    sim.after(Duration::from_millis(2), Action::Request(s, client, LockRequest::Acquire { timeout_ms: 60_000 }));
    sim.run_for(Duration::from_millis(200))
}

#[test]
fn durable_tpc_is_needed() {
    // Every rule on: the retransmission is stale to the restarted process.
    let m = Rules::all_but(&[TwRule::DurableTpc]);
    let e = scripted_breaks(10, m, restart_between_retransmissions);
    // A fence granted again: out of order, or (seed 1 since `Wanted`) the
    // same fence while its first grant holds.
    assert!(is_violation(&e), "{e}");
}

#[test]
fn a_reserve_resumes_above_its_block_is_needed() {
    // tokenwatchd.md's durable tpc with `tpc_reserve`: a restart resumes
    // from the top of its last stored block (at or above every count
    // used), and answers a token in the block `Stale`. Resuming from the
    // block's start instead takes the retransmission of a hand-off
    // accepted before the crash as new.
    let m = Rules::all_but(&[TwRule::ReserveResumesAboveItsBlock]);
    let e = scripted_breaks(10, m, restart_between_retransmissions_with_a_reserve);
    assert!(is_violation(&e), "{e}");
}

/// Two cold restarts of the whole ring. Five processes on a fast lossless
/// network serve from their first token (run to 2 s); then every process
/// crashes at once and restarts 1 ms later (its client asks again at
/// 2 ms), twice, each time once service is back (a grant within 10 s of
/// the restart, or the run fails) and the ring has served 1 s more. A
/// restarted process resumes from its state file, tpc and epoch, and
/// promises nothing in its restart window; the Claim after it must make a
/// token of an epoch above every one in use before, or its fences fall
/// below the old tokens' (the lease checker: fences strictly rise in grant
/// order, across crashes).
fn cold_restarts(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(2), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.run_until(Instant::from_millis(2_000))?;
    for k in 1..=2 {
        for i in 1..=5 {
            sim.after(Duration::ZERO, Action::Crash(NodeId(i)));
            sim.after(Duration::from_millis(1), Action::Restart(NodeId(i)));
            sim.after(Duration::from_millis(2), acquire(NodeId(i), ClientId(u64::from(i))));
        }
        let restarted = sim.now();
        while !grants(sim.world()).iter().any(|(t, _, _)| *t > restarted) {
            if sim.now() > restarted + Duration::from_secs(10) {
                return Err(sim.error(format!("no grant within 10 s of cold restart {k}")));
            }
            sim.run_for(Duration::from_millis(10))?;
        }
        sim.run_for(Duration::from_secs(1))?;
    }
    Ok(())
}

#[test]
fn durable_epoch_is_needed() {
    // Every rule on: the restarted processes' floors hold the last epoch,
    // and the next Claim goes above it. Without the stored epoch they
    // resume from the epoch recovery stored at the cluster's start (0),
    // a Claim of a lower (or the same) epoch wins, and its first grant's
    // fence is below the last one before the restart.
    let m = Rules::all_but(&[TwRule::DurableEpoch]);
    let e = scripted_breaks(10, m, cold_restarts);
    assert!(e.to_string().contains(" after 0x"), "{e}");
}

/// tpc overflow (tokenwatchd.md, Fence): every regenerated token counts on
/// from at least `u64::MAX − 40` (`TwConfig::first_tpc`), on a ring of five
/// at 10 % loss and 5 % duplication, run to 4 s. The first token's count
/// passes `u64::MAX` within a few laps; fences must still rise in grant
/// order (the lease checker), and service must go on in a later epoch,
/// whose token restarts at tpc 1 (a grant with a low tpc, or the run
/// fails). With `clients` = 1 (one looping client per process) a visit
/// grants once, so the count can pass `u64::MAX` only where a hand-off is
/// accepted (`on_token`: `Token(u64::MAX)`); with 2, a visit may grant
/// twice, and the count may also pass it at a grant (`serve`).
fn tpc_overflow(seed: u64, m: Rules<TwRule>, clients: u64) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.1, 0.05);
    let config = TwConfig { rules: m, first_tpc: TestStart::at(u64::MAX - 40), ..cfg() };
    let mut sim = cluster_cfg(seed, 5, net, config);
    for i in (1..=5).filter(|_| clients > 1) {
        sim.at(Instant::from_millis(20 + u64::from(i)), acquire(NodeId(i), ClientId(100 + u64::from(i))));
    }
    sim.check(safety());
    sim.run_until(Instant::from_millis(4_000))?;
    let g = grants(sim.world());
    // The fence's low 64 bits are the tpc.
    if !g.iter().any(|(_, _, f)| (*f as u64) < u64::MAX / 2) {
        return Err(sim.error(format!("no grant after the tpc overflow ({} grants)", g.len())));
    }
    Ok(())
}

#[test]
fn tpc_never_wraps_is_needed() {
    // Every rule on: the process whose tpc would pass u64::MAX grants
    // nothing, drops the token and claims; the new epoch's token restarts
    // at 1 and its fences are above the old ones. Wrapping, the count goes
    // to 0 in the same epoch: a fence below the one just granted.
    let m = Rules::all_but(&[TwRule::TpcNeverWraps]);
    for clients in [1, 2] {
        let e = scripted_breaks(10, m, |seed, m| tpc_overflow(seed, m, clients));
        // `nX granted fence 0x<epoch>0000000000000000 after 0x<epoch>ffffffffffffffff`.
        assert!(e.message.contains("0000000000000000 after 0x") && e.message.contains("ffffffffffffffff"), "{e}");
    }
}

/// A minority {n1, n2} of five is cut off for 6 s within the bounds
/// (loss, no pauses, delays ≤ δ): at most one hold at a time, cluster-wide.
fn minority_partition(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.05, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.at(Instant::from_millis(3_000), Action::Partition(vec![NodeId(1), NodeId(2)]));
    sim.at(Instant::from_millis(9_000), Action::Heal);
    sim.run_until(Instant::from_millis(12_000))
}

#[test]
fn claims_need_a_majority() {
    let m = Rules::all_but(&[TwRule::ClaimsNeedAMajority]);
    let e = scripted_breaks(10, m, minority_partition);
    // Two tokens at once: an overlapping grant, or (the majority's token of
    // a lower epoch granting after the minority's) a fence below one
    // already granted.
    let e = e.to_string();
    assert!(e.contains("holds until") || e.contains(" after 0x"), "{e}");
}

#[test]
fn acks_never_changing_tpc_is_needed() {
    let e = lossy_breaks(Rules::all_but(&[TwRule::AcksNeverChangeTpc]), 20);
    assert!(e.to_string().contains("grants"), "{e}");
}

#[test]
fn bypass_by_a_claim_is_needed() {
    let e = every_fault_violates(Rules::all_but(&[TwRule::BypassByAClaim]), 60);
    assert!(is_violation(&e), "{e}");
}

/// One process of five cut off alone for 3 s (its Claims reach nobody),
/// checked only for a holder without a successor.
fn one_cut_off(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.05, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(a_holder_always_has_a_successor);
    sim.at(Instant::from_millis(3_000), Action::Partition(vec![NodeId(1)]));
    sim.at(Instant::from_millis(6_000), Action::Heal);
    sim.run_until(Instant::from_millis(9_000))
}

/// The minority holder rule (a process with no successor drops its token)
/// cannot be reached while Claims need a majority of adopters: a token's
/// bypassed list is its Claim's skipped processes, which adopted nothing,
/// so it names a minority. `a_holder_always_has_a_successor` checks that
/// after every step of every tokenwatchd simulation (`safety()`, so every
/// sweep) and the model judges `MinorityDropped`; here it holds for a
/// process cut off alone with the rule off too, and fires as soon as
/// Claims may complete without a majority, so the check is not vacuous.
#[test]
fn minority_holder_unreachable_while_claims_need_a_majority() {
    let d = Rules::<TwRule>::default;
    for seed in 0..3 {
        one_cut_off(seed, d()).unwrap();
        one_cut_off(seed, Rules::all_but(&[TwRule::NoMinorityHolder])).unwrap();
    }
    for m in [
        Rules::all_but(&[TwRule::ClaimsNeedAMajority]),
        Rules::all_but(&[TwRule::ClaimsNeedAMajority, TwRule::NoMinorityHolder]),
    ] {
        let e = first_failure(3, |seed| one_cut_off(seed, m)).expect("no seed reached a holder without a successor");
        assert!(e.to_string().contains("no successor"), "{m:?}: {e}");
    }
}

/// Defended twice since leases: a process that accepts a token of an
/// epoch below its own renews it, and the majority that adopted the newer
/// epoch refuses the renewal, so it grants nothing. Both rules off, the
/// every-fault run breaks; `renewals_below_the_threshold_are_refused_is_needed`
/// shows the renewal rule alone.
#[test]
fn stale_epochs_are_refused_is_needed() {
    let m = Rules::all_but(&[TwRule::StaleEpochsRefused, TwRule::StaleRenewalsRefused]);
    let e = every_fault_breaks(m, 60);
    let e = e.to_string();
    assert!(e.contains(" after 0x") || e.contains(" after 0x") || e.contains("holds until"), "{e}");
}

#[test]
#[ignore = "not shown alone: masked (docs/safety-rules.md); see ties_refused_masked_by_epoch_slot"]
fn ties_refused_is_needed() {
    let e = every_fault_breaks(Rules::all_but(&[TwRule::TiesRefused]), 60);
    eprintln!("{e}");
}

#[test]
#[ignore = "not shown alone: masked (docs/safety-rules.md); see promise_window_masked_by_epoch_slot_and_tie_refusal"]
fn promise_window_is_needed() {
    let e = every_fault_breaks(Rules::all_but(&[TwRule::PromiseWindow]), 60);
    eprintln!("{e}");
}

/// Two Claims of one round (scripted from seed 267 of the
/// pauses-and-partitions run, where a search of 400 seeds first found
/// it). N = 5. Once n3 holds the token, n4 is paused: n3's hand-off to it
/// is bypassed by a Claim of epoch e1, which n5, n1 and n2 adopt and n4
/// never hears of. At n3's first grant in e1, {2, 3} are cut off from
/// {1, 4, 5}, so e1's token never reaches n5 or n1. n4 resumes `resume`
/// after n3's Claim began, its token-lost deadline overdue, and claims
/// from its old floor: with slots off (`no_epoch_slot`) it proposes e1
/// too. n5 and n1 promised e1 to n3: the tie refusal refuses it, and
/// within W·(1+ρ) of their promise the promise window answers `Busy`.
/// Past both, n4's Claim skips 2 and 3 and comes back with 4, 5 and 1: a
/// second token of e1, whose first grant's fence is below n3's.
fn second_claim_of_one_round(seed: u64, m: Rules<TwRule>, resume: Duration) -> Result<(), SimError> {
    second_claim_of_one_round_with(seed, m, resume, false)
}

/// `second_claim_of_one_round`, where n5 and n1 crash at the partition and
/// restart 1 ms later with their disks: e1, promised to n3, is their
/// stored threshold, but the promise window lived in memory and is gone.
/// Their restart window (`max(W, lease)·(1+ρ)`) keeps them from promising
/// n4's Claim, made inside it: they pass it on without adopting it.
fn second_claim_of_one_round_after_restarts(seed: u64, m: Rules<TwRule>, resume: Duration) -> Result<(), SimError> {
    second_claim_of_one_round_with(seed, m, resume, true)
}

fn second_claim_of_one_round_with(
    seed: u64,
    m: Rules<TwRule>,
    resume: Duration,
    restart_promisers: bool,
) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    let (n3, n4) = (NodeId(3), NodeId(4));
    sim.run_until(Instant::from_millis(2_000))?;
    until_token_at(&mut sim, n3)?;
    let e0 = grants(sim.world()).last().map_or(0, |g| g.2 >> 64);
    sim.pause(n4);
    let first_grant = |sim: &Sim<TwNode>| grants(sim.world()).into_iter().find(|g| g.1 == n3 && g.2 >> 64 > e0);
    while first_grant(&sim).is_none() {
        if sim.now() > Instant::from_millis(5_000) {
            return Err(sim.error("n3 never granted in a new epoch"));
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    sim.after(Duration::ZERO, Action::Partition(vec![NodeId(2), n3]));
    for n in [NodeId(5), NodeId(1)].into_iter().filter(|_| restart_promisers) {
        sim.after(Duration::ZERO, Action::Crash(n));
        sim.after(Duration::from_millis(1), Action::Restart(n));
    }
    let claimed = sim.world().events.iter().rev().find_map(|(t, n, e)| match e {
        TwEvent::ClaimStarted { .. } if *n == n3 => Some(*t),
        _ => None,
    });
    let Some(claimed) = claimed else { return Err(sim.error("n3 made the new token without a Claim")) };
    sim.run_until(claimed + resume)?;
    sim.resume(n4);
    sim.run_for(Duration::from_millis(1_500))?;
    sim.after(Duration::ZERO, Action::Heal);
    sim.run_for(Duration::from_millis(1_500))
}

/// Seeds 0–5 of `scenario` (`second_claim_of_one_round` or its variant
/// with restarts): each of `safe` passes every seed, and `unsafe_` breaks
/// at least one with two tokens of one epoch.
fn one_round_twice_breaks_only(
    scenario: fn(u64, Rules<TwRule>, Duration) -> Result<(), SimError>,
    unsafe_: Rules<TwRule>,
    safe: &[Rules<TwRule>],
    resume: Duration,
) {
    for m in safe {
        for seed in 0..6 {
            if let Err(e) = scenario(seed, *m, resume) {
                panic!("with {m:?} seed {seed} should pass: {e}");
            }
        }
    }
    let e = first_failure(6, |seed| scenario(seed, unsafe_, resume))
        .unwrap_or_else(|| panic!("with {unsafe_:?} no seed broke"));
    // `n4 granted fence F after G`: two tokens of one epoch when F and G
    // share their upper 64 bits.
    let fences: Vec<u128> = e
        .message
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("0x").and_then(|h| u128::from_str_radix(h, 16).ok()))
        .collect();
    assert!(
        e.message.contains("granted fence") && fences.len() == 2 && fences[0] >> 64 == fences[1] >> 64,
        "not two tokens of one epoch: {e}"
    );
}

/// The tie refusal, masked by the epoch slot: n4 claims just after the
/// promise window of n5's and n1's promise to n3 ended. With slots, n4's
/// epoch is not n3's, so no tie arises; with the slot alone off, n5 and n1
/// refuse the tie; with both off, `n4 granted fence 0x800…006a after
/// 0x800…`: two tokens of one epoch (5 of the 6 seeds; of seeds 0–39,
/// 33 with both off and none with either on, 2026-11-27).
#[test]
fn ties_refused_masked_by_epoch_slot() {
    let d = Rules::<TwRule>::default;
    let w = cfg().token_lost_after;
    let just_after_the_window = w + w / 1_000 + Duration::from_millis(5);
    one_round_twice_breaks_only(
        second_claim_of_one_round,
        Rules::all_but(&[TwRule::EpochSlot, TwRule::TiesRefused]),
        &[d(), Rules::all_but(&[TwRule::TiesRefused]), Rules::all_but(&[TwRule::EpochSlot])],
        just_after_the_window,
    );
}

/// The promise window, masked by the epoch slot and the tie refusal: n4
/// claims inside the promise window of n5's and n1's promise to n3. Any
/// one of slot, tie refusal and window keeps every seed safe; with all
/// three off, two tokens of one epoch (5 of the 6 seeds; of seeds 0–39,
/// 25 with all three off and none with any one on, 2026-11-27).
#[test]
fn promise_window_masked_by_epoch_slot_and_tie_refusal() {
    let all = Rules::all_but(&[TwRule::EpochSlot, TwRule::TiesRefused, TwRule::PromiseWindow]);
    let w = cfg().token_lost_after;
    one_round_twice_breaks_only(
        second_claim_of_one_round,
        all,
        &[all.with(TwRule::EpochSlot), all.with(TwRule::TiesRefused), all.with(TwRule::PromiseWindow)],
        w * 85 / 100,
    );
}

// ---- leases (reliability.md, Pauses and leases) ----

/// Whether `e` is a safety violation the lease checker reports: an
/// overlap of client leases, or a fence granted twice or out of order.
fn is_violation(e: &SimError) -> bool {
    let e = e.to_string();
    e.contains("holds until") || e.contains(" after 0x") || e.contains(" after 0x")
}

/// Runs until some live process has started a Claim; returns it.
fn until_claiming(sim: &mut Sim<TwNode>, who: NodeId) -> Result<(), SimError> {
    for _ in 0..20_000 {
        if sim.world().core(who).is_some_and(|c| c.promises().proposal().is_some()) {
            return Ok(());
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    Err(sim.error(format!("{who} never claimed")))
}

/// The classic pause: the process `s` the token is handed to is paused
/// (SIGSTOP) before it arrives, for longer than its predecessor `h` takes
/// to bypass it (r retransmissions, `bypass_after`, a Claim lap). The new
/// token serves the others; then `s` resumes and takes the old token from
/// its queue (it never saw the Claim, which skipped it). Granting with it
/// would give a fence below those already granted, beside the new token's
/// holders. With leases, its renewals are refused by the majority that
/// adopted the newer epoch: it drops the token and grants nothing.
fn late_token_after_a_bypass(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.run_until(Instant::from_millis(3_000))?;
    let h = holder(&mut sim)?;
    let s = NodeId(h.0 % 5 + 1);
    sim.pause(s);
    sim.run_for(Duration::from_millis(600))?;
    sim.resume(s);
    sim.run_for(Duration::from_millis(500))
}

#[test]
fn grants_need_the_lease() {
    let m = Rules::all_but(&[TwRule::GrantsUnderLeases]);
    let e = scripted_breaks(20, m, late_token_after_a_bypass);
    assert!(is_violation(&e), "{e}");
}

#[test]
fn grants_need_the_lease_under_random_pauses_and_partitions() {
    // Every rule on, these seeds pass (tests/sim.rs sweeps them).
    let m = Rules::all_but(&[TwRule::GrantsUnderLeases]);
    let e =
        first_failure(10, |seed| pauses_and_partitions(seed, m).map(|_| ())).expect("no seed broke without the rule");
    assert!(is_violation(&e), "{e}");
}

#[test]
fn renewals_below_the_threshold_are_refused_is_needed() {
    let m = Rules::all_but(&[TwRule::StaleRenewalsRefused]);
    let e = scripted_breaks(20, m, late_token_after_a_bypass);
    assert!(is_violation(&e), "{e}");
}

/// A late hand-off races a bypass. The link from the holder `h` to its
/// successor `s` holds every transmission (and `s`'s renewals do not reach
/// `h`) until `h` has bypassed `s`: the moment `h`'s Claim starts, the
/// held token arrives. `s` takes it (nobody has adopted the Claim yet)
/// and renews; the processes the Claim has not reached yet ack, and `s`
/// grants. The lease window makes those acks refuse the Claim until `s`'s
/// lease has ended; without it they adopt it, and its token grants while
/// `s`'s client still holds.
fn late_hand_off_races_a_bypass(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.run_until(Instant::from_millis(3_000))?;
    let h = holder(&mut sim)?;
    let s = NodeId(h.0 % 5 + 1);
    sim.hold(h, s);
    sim.cut(s, h);
    until_claiming(&mut sim, h)?;
    sim.release(h, s);
    sim.run_for(Duration::from_millis(300))
}

#[test]
fn lease_acks_refuse_other_claimants_is_needed() {
    let m = Rules::all_but(&[TwRule::LeaseAckBindsTheAcker]);
    let e = scripted_breaks(20, m, late_hand_off_races_a_bypass);
    assert!(e.to_string().contains("holds until"), "{e}");
}

/// `late_token_after_a_bypass`, and while `s` is paused, once the Claim
/// that bypassed it has made its token, two of the adopters lose their
/// disks and restart as fresh nodes (unrecovered for their restart window).
/// `s` resumes within that window and renews the old token: its own ack
/// and the two fresh nodes' would be a majority.
fn late_token_meets_fresh_nodes(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.run_until(Instant::from_millis(3_000))?;
    let h = holder(&mut sim)?;
    let s = NodeId(h.0 % 5 + 1);
    sim.pause(s);
    let paused = sim.now();
    for _ in 0..10_000 {
        let w = sim.world();
        if w.events.iter().any(|(t, _, e)| *t > paused && matches!(e, TwEvent::Regenerated { .. })) {
            break;
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    let wiped: Vec<NodeId> = (1..=5).map(NodeId).filter(|n| *n != h && *n != s).take(2).collect();
    for n in &wiped {
        sim.after(Duration::ZERO, Action::Crash(*n));
        sim.after(Duration::from_micros(1), Action::WipeDisk(*n));
        sim.after(Duration::from_micros(2), Action::Restart(*n));
    }
    sim.run_for(Duration::from_millis(50))?;
    sim.resume(s);
    sim.run_for(Duration::from_millis(300))
}

#[test]
fn unrecovered_nodes_ack_no_renewal_is_needed() {
    let m = Rules::all_but(&[TwRule::UnrecoveredNodesAckNoRenewal]);
    // The first seed to break moves whenever the runs' timing changes
    // (8 once, 32, now 5): 40 seeds leave room.
    let e = scripted_breaks(40, m, late_token_meets_fresh_nodes);
    assert!(is_violation(&e), "{e}");
}

/// Clients that hold 120–180 ms, past the end of the visit (`max_hold`,
/// 100 ms), on a lossy ring: the token moves on at the visit's end while
/// the client still holds, and the next process grants.
fn clients_outlast_the_visit(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.1, 0.05);
    let mut sim = cluster_holding(seed, 5, net, TwConfig { rules: m, ..cfg() }, (120, 180));
    sim.check(safety());
    sim.run_until(Instant::from_millis(5_000))
}

#[test]
fn client_leases_end_with_the_visit_is_needed() {
    let m = Rules::all_but(&[TwRule::ClientLeasesEndWithTheVisit]);
    let e = scripted_breaks(10, m, clients_outlast_the_visit);
    assert!(e.to_string().contains("holds until"), "{e}");
}

/// The holder crashes and stays down; every other process has a client
/// waiting, so each renews as a waiting process. A lost token must be
/// regenerated and everyone else served within 15 s.
fn crashed_holder_is_replaced(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.run_until(Instant::from_millis(3_000))?;
    let h = holder(&mut sim)?;
    sim.after(Duration::ZERO, Action::Crash(h));
    let killed = sim.now();
    sim.run_for(Duration::from_millis(15_000))?;
    let w = sim.world();
    let regen = w.events.iter().any(|(t, _, e)| *t > killed && matches!(e, TwEvent::Regenerated { .. }));
    let served = grants(w).into_iter().filter(|(t, _, _)| *t > killed).map(|(_, n, _)| n).collect::<BTreeSet<_>>();
    if !regen || served.len() < 4 {
        return Err(sim.error(format!("after killing {h}: regenerated {regen}, served {served:?}")));
    }
    Ok(())
}

#[test]
fn waiting_renewals_acked_only_behind_a_holder_is_needed() {
    // Acked whatever, the waiters' renewals keep every process busy for
    // every claimant but one: the lost token is never regenerated.
    let m = Rules::all_but(&[TwRule::WaitersAckedOnlyBehindAHolder]);
    let e = scripted_breaks(5, m, crashed_holder_is_replaced);
    // At a cold start too, no first token is ever made.
    let e = e.to_string();
    assert!(e.contains("regenerated false") || e.contains("nobody holds the token"), "{e}");
}

/// A survey of the rules not shown alone: the every-fault and the
/// pauses-and-partitions runs with each set of switches off, printing the
/// seeds that failed and the first failure. `SAFETY_SURVEY_SEEDS` (40).
#[test]
#[ignore = "survey (minutes)"]
fn masked_rules_survey() {
    let seeds = sim::model::setting("SAFETY_SURVEY_SEEDS", 40);
    let d = Rules::<TwRule>::default;
    let sets: Vec<(&str, Rules<TwRule>)> = vec![
        ("none", d()),
        ("no_epoch_slot", Rules::all_but(&[TwRule::EpochSlot])),
        ("slot+ties", Rules::all_but(&[TwRule::EpochSlot, TwRule::TiesRefused])),
        ("slot+ties+window", Rules::all_but(&[TwRule::EpochSlot, TwRule::TiesRefused, TwRule::PromiseWindow])),
        (
            "slot+ties+window+lease_window",
            Rules::all_but(&[
                TwRule::EpochSlot,
                TwRule::TiesRefused,
                TwRule::PromiseWindow,
                TwRule::LeaseAckBindsTheAcker,
            ]),
        ),
        ("window+lease_window", Rules::all_but(&[TwRule::PromiseWindow, TwRule::LeaseAckBindsTheAcker])),
        ("lease_window", Rules::all_but(&[TwRule::LeaseAckBindsTheAcker])),
        ("minority_holder+no_leases", Rules::all_but(&[TwRule::NoMinorityHolder, TwRule::GrantsUnderLeases])),
        ("no_leases", Rules::all_but(&[TwRule::GrantsUnderLeases])),
        ("restart", Rules::all_but(&[TwRule::RestartWindow])),
    ];
    for (name, m) in sets {
        for (family, run) in [
            ("every_fault", every_fault as fn(u64, Rules<TwRule>) -> Result<Sim<TwNode>, SimError>),
            ("pauses_and_partitions", pauses_and_partitions),
        ] {
            let mut failed = Vec::new();
            for s in 0..seeds {
                if let Err(e) = run(s, m) {
                    if failed.is_empty() {
                        eprintln!("{name} {family}: seed {s}: {}", e.message.lines().next().unwrap_or(""));
                    }
                    failed.push(s);
                }
            }
            eprintln!("{name} {family}: {} of {seeds} failed: {failed:?}", failed.len());
        }
    }
}

/// Liveness of the reserve's restart (tokenwatchd.md with `tpc_reserve`
/// = 16): the successor `s` accepts a hand-off and crashes before anyone
/// hears from it (its links out are cut until it restarts), and restarts
/// 1 ms later, unsure of its last block; its client asks at once. The
/// sender's next retransmission is answered `Stale` (the sender drops its
/// copy and claims at once) and the restarted process's renewals confirm
/// nothing in the block. Returns how long the client waited for its grant.
fn restart_inside_a_block(seed: u64, m: Rules<TwRule>) -> Result<Duration, SimError> {
    let (mut sim, h, s, q) = three_with_a_holder(seed, TwConfig { rules: m, tpc_reserve: 16, ..cfg() })?;
    sim.cut(s, h);
    sim.cut(s, q);
    until_token_at(&mut sim, s)?;
    sim.after(Duration::ZERO, Action::Crash(s));
    sim.run_for(Duration::from_millis(1))?;
    sim.uncut(s, h);
    sim.uncut(s, q);
    sim.after(Duration::ZERO, Action::Restart(s));
    let client = ClientId(100 + seed);
    let asked = sim.world().now;
    sim.after(Duration::ZERO, Action::Request(s, client, LockRequest::Acquire { timeout_ms: 60_000 }));
    sim.run_for(Duration::from_millis(1_500))?;
    let granted = grants(sim.world()).into_iter().find(|(t, n, _)| *n == s && *t > asked).map(|(t, _, _)| t);
    match granted {
        Some(t) => Ok(t.saturating_since(asked)),
        None => Err(sim.error(format!("{s}'s client was never granted after its restart"))),
    }
}

/// The waits of `restart_inside_a_block` over seeds 0..20 (the runs that
/// set themselves up: in a few the successor never takes the token while
/// its links out are cut), sorted.
fn waits_after_a_restart_inside_a_block(m: Rules<TwRule>) -> Vec<Duration> {
    let mut waits: Vec<Duration> = (0..20)
        .filter_map(|seed| match restart_inside_a_block(seed, m) {
            Ok(d) => Some(d),
            Err(e) if e.message.contains("never took the token") => None,
            Err(e) => panic!("{e}"),
        })
        .collect();
    assert!(waits.len() >= 10, "only {} runs set themselves up", waits.len());
    waits.sort();
    eprintln!("waits (ms): {:?}", waits.iter().map(|d| d.as_millis()).collect::<Vec<_>>());
    waits
}

fn median_wait_after_a_restart_inside_a_block(m: Rules<TwRule>) -> Duration {
    let waits = waits_after_a_restart_inside_a_block(m);
    waits[waits.len() / 2]
}

/// One retransmission period, a Claim and a hop, with margin: 2·r·ring_timeout.
const QUICK: Duration = Duration::from_millis(120);

#[test]
fn a_restart_inside_a_block_is_served_quickly() {
    // Typically within a retransmission period and a Claim; always well
    // before the token would count as lost.
    let waits = waits_after_a_restart_inside_a_block(Rules::ALL_ON);
    let (median, longest) = (waits[waits.len() / 2], waits[waits.len() - 1]);
    assert!(median <= QUICK, "median {median:?}");
    assert!(longest < cfg().token_lost_after, "longest {longest:?}");
}

#[test]
fn failed_claims_retried_after_their_window_is_needed() {
    // A Claim made on a `Stale` and refused `Busy` (every process has a
    // waiting client whose renewals the others ack: each ack binds the
    // acker, the proposer too, for a lease window) is tried again just
    // after the window — not once the token counts as lost.
    let m = Rules::all_but(&[TwRule::FailedClaimsRetriedAfterTheirWindow]);
    let waits = waits_after_a_restart_inside_a_block(m);
    let longest = waits[waits.len() - 1];
    assert!(longest >= cfg().token_lost_after, "longest {longest:?}");
}

#[test]
fn unsure_tokens_answered_stale_is_needed() {
    // Dropped in silence, the hand-off is retransmitted r times and then
    // bypassed: the restarted process waits for the bypass and its Join.
    let m = Rules::all_but(&[TwRule::UnsureTokensAnsweredStale]);
    let median = median_wait_after_a_restart_inside_a_block(m);
    assert!(median > QUICK, "median {median:?}");
}

#[test]
fn renewals_below_the_unsure_block_are_needed() {
    // Renewing with the block's top, the restarted process confirms the
    // hand-off it answers Stale at its sender, which stops retransmitting
    // and drops its copy: the token is lost until `token_lost_after`.
    let m = Rules::all_but(&[TwRule::RenewBelowTheUnsureBlock]);
    let median = median_wait_after_a_restart_inside_a_block(m);
    assert!(median > QUICK, "median {median:?}");
}

// ---- Claims while the token lives; the Claim deadline ----

/// A Claim back late. The holder crashes and stays down; once the first
/// process `c` claims, what its predecessor `p` (the Claim's last hop)
/// sends it is held, its own Claim's return included. The others, which
/// adopted it, claim W after adopting, skip `c` and make a token, which
/// serves them; 300 ms after that token, past `c`'s Claim deadline
/// W·(1−ρ), the link is released and `c`'s Claim comes back with a
/// majority of adopters.
fn claim_back_after_its_deadline(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.run_until(Instant::from_millis(3_000))?;
    let h = holder(&mut sim)?;
    sim.after(Duration::ZERO, Action::Crash(h));
    let crashed = sim.now();
    let claim_after = |sim: &Sim<TwNode>, t: Instant, not: NodeId| {
        sim.world().events.iter().find_map(|(at, n, e)| match e {
            TwEvent::ClaimStarted { .. } if *at > t && *n != not => Some(*n),
            _ => None,
        })
    };
    let c = loop {
        if let Some(c) = claim_after(&sim, crashed, h) {
            break c;
        }
        if sim.now() > crashed + Duration::from_secs(3) {
            return Err(sim.error("nobody claimed"));
        }
        sim.run_for(Duration::from_micros(100))?;
    };
    let before = |n: NodeId| NodeId((n.0 + 3) % 5 + 1);
    let p = if before(c) == h { before(h) } else { before(c) };
    sim.hold(p, c);
    sim.drop_kind(p, c, "token", u32::MAX);
    let held = sim.now();
    let regenerated = |sim: &Sim<TwNode>| {
        sim.world().events.iter().any(|(at, n, e)| *at > held && *n != c && matches!(e, TwEvent::Regenerated { .. }))
    };
    while !regenerated(&sim) {
        if sim.now() > held + Duration::from_secs(5) {
            return Err(sim.error("no token without c"));
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    sim.run_for(Duration::from_millis(300))?;
    sim.release(p, c);
    sim.run_for(Duration::from_millis(500))
}

/// A slow successor: `late_hand_off_races_a_bypass` until the holder `h`
/// claims on bypassing `s` and the held hand-off reaches `s`; what `h`
/// sends `s`'s successor `s1`, its Claim's first hop, is held until the
/// token has gone from `s` to `s1`. The Claim then reaches a process that
/// holds the token, or awaits its confirmation, or has seen a newer token
/// than the claimant.
fn claim_behind_a_late_hand_off(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.run_until(Instant::from_millis(3_000))?;
    let h = holder(&mut sim)?;
    let s = NodeId(h.0 % 5 + 1);
    let s1 = NodeId(s.0 % 5 + 1);
    sim.hold(h, s);
    sim.cut(s, h);
    until_claiming(&mut sim, h)?;
    sim.hold(h, s1);
    sim.release(h, s);
    until_token_at(&mut sim, s1)?;
    sim.release(h, s1);
    sim.run_for(Duration::from_millis(300))
}

/// Seeds `seeds` of `scenario`: each of `safe` passes every seed, and
/// `unsafe_` breaks one; returns that failure.
fn breaks_only(
    seeds: u64,
    scenario: fn(u64, Rules<TwRule>) -> Result<(), SimError>,
    unsafe_: Rules<TwRule>,
    safe: &[Rules<TwRule>],
) -> SimError {
    for m in safe {
        for seed in 0..seeds {
            if let Err(e) = scenario(seed, *m) {
                panic!("with {m:?} seed {seed} should pass: {e}");
            }
        }
    }
    first_failure(seeds, |seed| scenario(seed, unsafe_)).unwrap_or_else(|| panic!("with {unsafe_:?} no seed broke"))
}

#[test]
#[ignore = "not shown alone: masked by the lease window and the newer-token refusal; see claim_busy_while_holding_masked_by_newer_token_and_lease_window"]
fn claim_busy_while_holding_is_needed() {
    let m = Rules::all_but(&[TwRule::ClaimBusyWhileHolding]);
    scripted_breaks(20, m, claim_behind_a_late_hand_off);
}

/// The holder's `Busy`, masked twice: in `claim_behind_a_late_hand_off`
/// the Claim reaches `s1` while it holds the token that `s` handed it, or
/// just after. `s1` acked the renewals of `s` (and its own clients'
/// waits): the lease window refuses; it has seen a newer token than the
/// claimant: the newer-token `Busy` refuses. With the holder's `Busy` off
/// too, it adopts, the claimant's token grants while `s1`'s (or `s`'s)
/// client holds (seeds 6, 8, 9 of 0–9; 15 of 0–59, 2026-11-27). Any one
/// of the three on keeps seeds 0–9 safe (the newer-token and the lease
/// window off without the holder's: seeds 16 and 59 of 0–59 break, see
/// `claim_busy_for_a_newer_token_masked_by_lease_window`).
#[test]
fn claim_busy_while_holding_masked_by_newer_token_and_lease_window() {
    let all = Rules::all_but(&[
        TwRule::ClaimBusyWhileHolding,
        TwRule::ClaimBusyForANewerToken,
        TwRule::LeaseAckBindsTheAcker,
    ]);
    let e = breaks_only(
        10,
        claim_behind_a_late_hand_off,
        all,
        &[
            all.with(TwRule::ClaimBusyWhileHolding),
            all.with(TwRule::ClaimBusyForANewerToken),
            all.with(TwRule::LeaseAckBindsTheAcker),
        ],
    );
    assert!(e.message.contains("holds until"), "{e}");
}

#[test]
#[ignore = "not shown alone: masked by the lease window; see claim_busy_for_a_newer_token_masked_by_lease_window"]
fn claim_busy_for_a_newer_token_is_needed() {
    let m = Rules::all_but(&[TwRule::ClaimBusyForANewerToken]);
    scripted_breaks(20, m, claim_behind_a_late_hand_off);
}

/// The newer-token `Busy`, masked by the lease window: in
/// `claim_behind_a_late_hand_off` every process the Claim reaches after the
/// token acked a renewal of the token's holders. With both off, seed 72
/// of 0–72 breaks (seeds 72, 88, 106, 145 of 0–199; before a promise
/// window ended at its value's use, seed 29; before lease retries, seed
/// 16): the Claim passes the processes the token has left, and the
/// claimant's token grants while a client of the old one holds; with
/// either on, none of those seeds break.
#[test]
fn claim_busy_for_a_newer_token_masked_by_lease_window() {
    let all = Rules::all_but(&[TwRule::ClaimBusyForANewerToken, TwRule::LeaseAckBindsTheAcker]);
    let e = breaks_only(
        73,
        claim_behind_a_late_hand_off,
        all,
        &[all.with(TwRule::ClaimBusyForANewerToken), all.with(TwRule::LeaseAckBindsTheAcker)],
    );
    assert!(e.message.contains("holds until"), "{e}");
}

/// A Claim reaches the sender `q` of an unconfirmed hand-off, and only the
/// awaiting `Busy` can refuse it there. `q` is paused the moment it takes
/// the token, until the others (for whom the token is lost W after they
/// last saw it) claim and `q`'s predecessor has adopted (or made) the first
/// Claim, whose hop to `q` is then on its way. `q` resumes 2 ms later: its
/// overdue visit ends first, and it hands the token to its successor `r` on
/// a link that holds everything (`r` hears nothing from `q`, neither the
/// token nor the Claim's hop), then reads the Claim while it awaits the
/// confirmation. `q` holds no token, and its own token is older than W
/// (the pause), so the newer-token `Busy` does not refuse; it acked no
/// renewal within the lease window. Adopted, the Claim skips `r` after
/// `bypass_after` and makes its token with the others (`bypassed = [r]`);
/// once that token has granted (or, with the rule, 185 ms after the resume:
/// just before `q`, its last transmission at +60 ms, would bypass `r`),
/// the link is released and `r` takes `q`'s old token. Refused `Busy`, the
/// Claim is abandoned and `r` takes the old token while no newer one exists.
fn claim_at_an_awaiting_sender(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.run_until(Instant::from_millis(3_000))?;
    let q = holder(&mut sim)?;
    let r = NodeId(q.0 % 5 + 1);
    let before_q = NodeId((q.0 + 3) % 5 + 1);
    let e0 = sim.world().core(q).map_or(0, |c| c.epoch());
    sim.pause(q);
    let paused = sim.now();
    while sim.world().core(before_q).is_some_and(|c| c.promises().threshold() <= e0) {
        if sim.now() > paused + Duration::from_secs(3) {
            return Err(sim.error("nobody claimed"));
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    sim.run_for(Duration::from_millis(2))?;
    sim.hold(q, r);
    sim.resume(q);
    let resumed = sim.now();
    let granted_anew =
        |sim: &Sim<TwNode>| grants(sim.world()).iter().any(|(t, _, f)| *t > resumed && f >> 64 > u128::from(e0));
    while !granted_anew(&sim) && sim.now() < resumed + Duration::from_millis(185) {
        sim.run_for(Duration::from_micros(100))?;
    }
    sim.release(q, r);
    sim.run_for(Duration::from_millis(500))
}

#[test]
#[ignore = "not shown alone: masked by the refusal of renewals below the threshold; see claim_busy_while_awaiting_masked_by_stale_renewal_refusal"]
fn claim_busy_while_awaiting_is_needed() {
    let m = Rules::all_but(&[TwRule::ClaimBusyWhileAwaiting]);
    scripted_breaks(20, m, claim_at_an_awaiting_sender);
}

/// The awaiting `Busy`, masked by the refusal of renewals below the
/// threshold: in `claim_at_an_awaiting_sender`, adopted by `q`, the Claim
/// makes its token with everyone but `r`, and `r` then takes `q`'s old
/// token; its renewals of the old epoch are refused by the four adopters
/// (their threshold is the new epoch), so it grants nothing. With those
/// renewals acked too, `r` grants a fence below the new token's (seeds 0,
/// 4, 5, 7, 8, 9 of 0–9; 21 of 0–59, 2026-11-27); with either rule on, none
/// of 0–59. (`no_leases` masks it the same way: with the awaiting `Busy`
/// off too, 12 of 0–59 break, none with either alone.) In the other seeds
/// the first claimant is `r` itself (its Claim's way back is the held
/// link), or the Claim reaches `q` before its token is W old.
#[test]
fn claim_busy_while_awaiting_masked_by_stale_renewal_refusal() {
    let all = Rules::all_but(&[TwRule::ClaimBusyWhileAwaiting, TwRule::StaleRenewalsRefused]);
    let e = breaks_only(
        10,
        claim_at_an_awaiting_sender,
        all,
        &[all.with(TwRule::ClaimBusyWhileAwaiting), all.with(TwRule::StaleRenewalsRefused)],
    );
    // Seed 0 until 2026-11-28: `n3 granted fence 0x100000000000000ac after
    // 0x300000000000000ac`; with renewals retried on lossy links, seed 1:
    // `n3 granted fence 0x2…b5 while n4's grant 0x3…b5 … holds until …`.
    assert!(is_violation(&e), "{e}");
}

#[test]
#[ignore = "not shown alone: masked by the refusal of renewals below the threshold; see claim_deadline_masked_by_stale_renewal_refusal"]
fn claim_deadline_is_needed() {
    let m = Rules::all_but(&[TwRule::ClaimDeadline]);
    scripted_breaks(20, m, claim_back_after_its_deadline);
}

/// The Claim deadline W·(1−ρ), masked by the threshold: in
/// `claim_back_after_its_deadline` the Claim's adopters promised a newer
/// epoch (their promise windows, W·(1+ρ), had ended) and made its token
/// before the late Claim came back. Made anyway, the old epoch's token
/// is refused by every process of the newer one: its holder's renewals
/// (so it grants nothing) and its hand-off (`Stale`). With renewals below
/// the threshold acked too, its holder grants a fence below those of the
/// newer token (seeds 0, 1, 2, 4, 5, 7, 8, 9 of 0–9; 41 of 0–59,
/// 2026-11-27); with either rule on, none of 0–59.
#[test]
fn claim_deadline_masked_by_stale_renewal_refusal() {
    let all = Rules::all_but(&[TwRule::ClaimDeadline, TwRule::StaleRenewalsRefused]);
    let e = breaks_only(
        10,
        claim_back_after_its_deadline,
        all,
        &[all.with(TwRule::ClaimDeadline), all.with(TwRule::StaleRenewalsRefused)],
    );
    assert!(e.message.contains(" after 0x"), "{e}");
}

// ---- the restart window (foundation.md, Durable state) ----

/// Lease acks forgotten in a restart. As in `late_hand_off_races_a_bypass`,
/// the holder `h`'s hand-off to `s` is held (and `s→h` cut) until `h`
/// bypasses `s` and claims; `h`'s Claim's first hop, to `s1`, is held, and
/// the old token reaches `s`, which renews. `s1` and the two after it ack
/// (their acks bind them against any other claimant for `lease·(1+ρ)`),
/// and `s` grants. At once `s`'s links to them are cut (its later renewals
/// reach nobody, so no new life acks one again) and the three crash and
/// restart 1 ms later with their disks: the acks' windows lived in memory.
/// Then the Claim is released. In their restart window they pass it on
/// without adopting it, and it comes back to `h` without a majority.
fn claim_after_the_ackers_restart(seed: u64, m: Rules<TwRule>) -> Result<(), SimError> {
    let net = NetConfig::datagram(Duration::from_micros(200), Duration::from_millis(5), 0.0, 0.0);
    let mut sim = cluster_with(seed, 5, net, m);
    sim.check(safety());
    sim.run_until(Instant::from_millis(3_000))?;
    let h = holder(&mut sim)?;
    let s = NodeId(h.0 % 5 + 1);
    let s1 = NodeId(s.0 % 5 + 1);
    let ackers = [s1, NodeId(s1.0 % 5 + 1), NodeId((s1.0 + 1) % 5 + 1)];
    sim.hold(h, s);
    sim.cut(s, h);
    until_claiming(&mut sim, h)?;
    sim.hold(h, s1);
    let released = sim.now();
    sim.release(h, s);
    while !grants(sim.world()).iter().any(|(t, n, _)| *t >= released && *n == s) {
        if sim.now() > released + Duration::from_millis(50) {
            return Err(sim.error(format!("{s} never granted")));
        }
        sim.run_for(Duration::from_micros(100))?;
    }
    for n in ackers {
        sim.cut(s, n);
        sim.after(Duration::ZERO, Action::Crash(n));
        sim.after(Duration::from_millis(1), Action::Restart(n));
    }
    sim.run_for(Duration::from_millis(2))?;
    sim.release(h, s1);
    sim.run_for(Duration::from_millis(300))
}

#[test]
fn restart_window_is_needed() {
    // Without it the restarted ackers adopt the Claim at once: its token
    // grants while `s`'s client still holds under the lease they acked
    // (seeds 3, 4, 8, 9 of 0–9; 22 of 0–59, none with the rule,
    // 2026-11-27; in the others the client has released first).
    let m = Rules::all_but(&[TwRule::RestartWindow]);
    let e = scripted_breaks(10, m, claim_after_the_ackers_restart);
    assert!(e.message.contains("holds until"), "{e}");
}

/// The restart window over a promise, masked by the epoch slot and the
/// tie refusal: `second_claim_of_one_round_after_restarts`, n4 claiming at
/// 0.85·W after n3's Claim began, inside the restart window of n5 and n1
/// (restarted at the partition, having promised e1 to n3). Any one of
/// slot, tie refusal and restart window keeps every seed safe; with all
/// three off, two tokens of one epoch (seeds 2, 4, 5 of 0–5; 16 of 0–39,
/// none of 0–39 with any one on, 2026-11-27). The promise window itself is
/// on throughout: the restart forgot it.
#[test]
fn restart_window_over_a_promise_masked_by_epoch_slot_and_tie_refusal() {
    let all = Rules::all_but(&[TwRule::EpochSlot, TwRule::TiesRefused, TwRule::RestartWindow]);
    let w = cfg().token_lost_after;
    one_round_twice_breaks_only(
        second_claim_of_one_round_after_restarts,
        all,
        &[all.with(TwRule::EpochSlot), all.with(TwRule::TiesRefused), all.with(TwRule::RestartWindow)],
        w * 85 / 100,
    );
}

/// The rule table (`TwRule`) agrees with its scenarios, with
/// docs/safety-rules.md and with the design sections it cites
/// (`ftcore::rules::audit`).
#[test]
fn the_rule_table_matches_the_scenarios_and_the_docs() {
    let wrong = ftcore::rules::audit::<TwRule>(
        &[include_str!("safety.rs")],
        include_str!("../../../docs/safety-rules.md"),
        "tokenwatchd",
        &[
            ("docs/tokenwatchd.md", include_str!("../../../docs/tokenwatchd.md")),
            ("docs/foundation.md", include_str!("../../../docs/foundation.md")),
            ("docs/reliability.md", include_str!("../../../docs/reliability.md")),
        ],
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

//! Regeneration only by a census promised by a majority (ringd.md): the
//! origin proposes an epoch above its floor to every configured replica;
//! an owner or a recent HolderAlive acker answers `Busy`, a replica whose
//! threshold is not below it `Stale`, the others store the promise and
//! answer with their newest copy. The origin regenerates (proposed, 0) with
//! the newest copy's state only if every member of its ring answered, a
//! majority of configured replicas promised, and nobody refused, within
//! `suspect_after·(1−ρ)`.

use std::collections::BTreeSet;
use std::time::Duration;

use durable::promise::{Failure, Refusal, Step, UseError};
use ftcore::NodeId;
use timer::{Instant, Lease};

use super::{RdEvent, RdNode, RdRule};
use crate::msg::{CensusAnswer, Msg, Token};

/// How an own census ended (metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CensusOutcome {
    /// It made a token.
    Regenerated,
    /// A replica owns the token or acked its HolderAlive.
    Busy,
    /// A replica had promised or seen a higher epoch (or another refusal).
    Stale,
    /// Not complete within its deadline.
    Lapsed,
    /// A token showed up meanwhile.
    Aborted,
}

impl CensusOutcome {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            CensusOutcome::Regenerated => "regenerated",
            CensusOutcome::Busy => "busy",
            CensusOutcome::Stale => "stale",
            CensusOutcome::Lapsed => "lapsed",
            CensusOutcome::Aborted => "aborted",
        }
    }
}

/// The own census in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CensusRun {
    value: u64,
    answered: BTreeSet<NodeId>,
    /// The newest copy heard of (own, a recovery's, the answers').
    best: Option<Token>,
}

fn newest(a: Option<Token>, b: Option<Token>) -> Option<Token> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.id() > a.id() { b } else { a }),
        (a, b) => a.or(b),
    }
}

/// The census's state: the own census in flight, whether one is wanted,
/// and when the next may start.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Census {
    run: Option<CensusRun>,
    /// The `census_past_deadline` mutation only (`RdRule::CensusDeadline`
    /// off): the own census that passed its deadline, still counting late
    /// answers. Read only by mutant code (`ftcore/mutations`).
    #[allow(dead_code)]
    late: Option<CensusRun>,
    /// No census starts before this (retry delay, first proposal).
    not_before: Instant,
    /// The `token_seen_at` whose silence already had a stall's wait
    /// (`on_timeout`): one wait per silence, so a replica starved of
    /// CPU, every timer late, still censuses, one heartbeat later.
    stall_waited: Option<Instant>,
    /// A census is wanted (token lost, a recovery's copy, `Stale`,
    /// overflow): retried while no token is seen.
    wanted: bool,
    /// A recovery's copy waiting for the census it supplies.
    copy: Option<Token>,
    /// A new cluster's first census (NC4's turn) is due then, not at the
    /// token-lost deadline: before any census no token exists there to
    /// wait for. Cleared once the token shows itself (a failed census is
    /// retried after its retry delay meanwhile).
    new_cluster_turn: Option<Instant>,
}

impl Census {
    /// NC4: a new cluster's first census at `at`, its rank's turn (not
    /// before, and not later for want of a token-lost deadline).
    pub(super) fn first_at(&mut self, at: Instant) {
        self.not_before = at;
        self.new_cluster_turn = Some(at);
    }

    /// The token (or its owner's `HolderAlive`) showed itself: a new
    /// cluster's turn is over, the token-lost deadline rules.
    pub(super) fn token_seen(&mut self) {
        self.new_cluster_turn = None;
    }

    /// When the token counts as lost: at `lost_at`, or at a new cluster's
    /// turn if that comes first.
    fn lost(&self, lost_at: Instant) -> Instant {
        self.new_cluster_turn.map_or(lost_at, |t| t.min(lost_at))
    }

    /// None in flight nor wanted; the first may start at `first`.
    pub(super) fn new(first: Instant) -> Self {
        Census {
            run: None,
            late: None,
            not_before: first,
            stall_waited: None,
            wanted: false,
            copy: None,
            new_cluster_turn: None,
        }
    }

    /// Whether an own census is in flight.
    pub(super) fn running(&self) -> bool {
        self.run.is_some()
    }

    /// Whether a census is wanted (retried while no token is seen).
    pub(super) fn set_wanted(&mut self, wanted: bool) {
        self.wanted = wanted;
    }

    /// No census starts before `t` (nor before the delay already set).
    pub(super) fn defer_until(&mut self, t: Instant) {
        self.not_before = self.not_before.max(t);
    }

    /// This replica stalled (its timer late) in the silence since
    /// `silent_since`: the first time in that silence, no census starts
    /// for a heartbeat, so that the input queued meanwhile is read first.
    pub(super) fn stalled(&mut self, now: Instant, silent_since: Instant, heartbeat: Duration) {
        if self.stall_waited != Some(silent_since) {
            self.stall_waited = Some(silent_since);
            self.defer_until(now + heartbeat);
        }
    }

    /// When the next census is tried: none while one runs; at once (past
    /// the retry delay) when one is wanted, else once the token counts as
    /// lost at `lost_at`.
    pub(super) fn next_try(&self, lost_at: Instant) -> Option<Instant> {
        if self.run.is_some() {
            None
        } else if self.wanted {
            Some(self.not_before)
        } else {
            Some(self.lost(lost_at).max(self.not_before))
        }
    }

    /// Whether a census is due at `now` (the token lost at `lost_at`), none
    /// running.
    pub(super) fn due(&self, now: Instant, lost_at: Instant) -> bool {
        let due = self.wanted || now >= self.lost(lost_at);
        due && self.run.is_none() && now >= self.not_before
    }

    /// A census is wanted, with `copy` if a recovery supplied one: given
    /// to the census in flight, else kept for the next. Whether one is in
    /// flight.
    fn want(&mut self, copy: Option<Token>) -> bool {
        self.wanted = true;
        if let Some(c) = self.run.as_mut() {
            c.best = newest(c.best.take(), copy);
            return true;
        }
        if copy.is_some() {
            self.copy = newest(self.copy.take(), copy);
        }
        false
    }

    /// Whether the retry delay still runs at `now`.
    fn waiting(&self, now: Instant) -> bool {
        now < self.not_before
    }

    /// The next census may start at `t`.
    fn retry_at(&mut self, t: Instant) {
        self.not_before = t;
    }

    /// The census of `value` starts, its newest copy the newer of `own`
    /// and a recovery's.
    fn begin(&mut self, value: u64, own: Option<Token>) {
        let best = newest(own, self.copy.take());
        self.run = Some(CensusRun { value, answered: BTreeSet::new(), best });
    }

    /// Whether the census in flight is that of `value`.
    fn runs(&self, value: u64) -> bool {
        self.run.as_ref().is_some_and(|c| c.value == value)
    }

    /// `from` promised the census in flight, with its newest `copy`.
    fn promised(&mut self, from: NodeId, copy: Option<Token>) {
        if let Some(c) = self.run.as_mut() {
            c.best = newest(c.best.take(), copy);
            c.answered.insert(from);
        }
    }

    /// Whether every one of `members` answered the census in flight (none
    /// if none is).
    fn heard_from_all(&self, mut members: impl Iterator<Item = NodeId>) -> Option<bool> {
        let c = self.run.as_ref()?;
        Some(members.all(|m| c.answered.contains(&m)))
    }

    /// How many promised the census in flight.
    fn promises(&self) -> usize {
        self.run.as_ref().map_or(0, |c| c.answered.len())
    }

    /// The census in flight ends (won): its newest copy.
    fn finish(&mut self) -> Option<Token> {
        self.run.take().and_then(|c| c.best)
    }

    /// The census in flight failed.
    fn failed(&mut self) {
        self.run = None;
    }

    /// A token showed up: nothing is wanted any more. Whether a census was
    /// in flight (it is dropped).
    fn abandon(&mut self) -> bool {
        self.wanted = false;
        self.copy = None;
        ftcore::mutant! {
            self.late = None;
        }
        self.run.take().is_some()
    }

    /// Whether a token in use at `epoch` makes the own census moot: none
    /// runs, or it is not above `epoch`.
    fn moot_at(&self, epoch: u64) -> bool {
        self.run.as_ref().is_none_or(|c| c.value <= epoch)
    }
}

impl RdNode {
    /// Starts a census now if allowed (not owning, none running, past the
    /// retry delay, recovered, its ring not a minority); otherwise
    /// remembers that one is wanted.
    /// `copy`: a recovery's copy, supplying state.
    pub(super) fn start_census(&mut self, now: Instant, copy: Option<Token>) {
        if self.census.want(copy) {
            return;
        }
        if self.owns_token() || self.census.waiting(now) {
            return;
        }
        if !self.promise.stored().recovered() {
            self.census.retry_at(now + self.cfg.suspect_after);
            return;
        }
        if self.cfg.rules.on(RdRule::NoCensusInAMinority) && self.in_minority() {
            // Cut off (or with a view formed while cut off): a census
            // could not win, and the promise it makes to itself would
            // refuse the majority's token once the partition heals.
            self.census.retry_at(now + self.cfg.heartbeat);
            return;
        }
        if let Some(remaining) = self.census_busy_for(now, self.me) {
            // It acked a holder's renewal: that lease may still run. Retry
            // as after a Busy answer: just past it, with a little jitter,
            // so that replicas that acked the same renewal do not all
            // start side by side.
            let wait = self.promise.retry_after(&Failure::Busy { longest: remaining }, &mut self.rng);
            self.census.retry_at(now + wait);
            return;
        }
        let value = match self.promise.propose(now) {
            Ok(v) => v,
            Err(Refusal::Restarting { remaining }) => {
                self.census.retry_at(now + remaining);
                return;
            }
            Err(r) => {
                let wait = self.promise.retry_after(&Failure::Refused(r), &mut self.rng);
                self.census.retry_at(now + wait);
                return;
            }
        };
        let own = self.held.as_ref().map(|h| h.token.clone());
        self.census.begin(value, own);
        self.out.event(RdEvent::CensusStarted { epoch: value });
        self.send_to_every_peer(Msg::Census { proposed: value });
        self.try_complete(now);
    }

    /// (safety) How long this replica still refuses a census by `from`
    /// (`Busy`): while it owns the token, or for `lease·(1+ρ)` after it
    /// acked another replica's HolderAlive. Its own census counts: a
    /// replica that acked a holder's renewal proposes nothing until that
    /// lease has surely ended (foundation.md: every refusal condition
    /// applies to the proposer too).
    fn census_busy_for(&self, now: Instant, from: NodeId) -> Option<Duration> {
        if self.cfg.rules.off(RdRule::CensusBusyBesideAnOwner) {
            return None;
        }
        if self.owns_token() {
            let honours = Lease::new(now, self.cfg.lease, self.cfg.drift_ppm).grantor_honours_until();
            return Some(honours.saturating_since(now));
        }
        self.lease.grantor_busy_for(now, from, self.cfg.lease, self.cfg.drift_ppm)
    }

    pub(super) fn on_census(&mut self, now: Instant, from: NodeId, proposed: u64) {
        let busy = self.census_busy_for(now, from);
        let answer = match busy {
            Some(remaining) => CensusAnswer::Refused(Refusal::Busy { remaining }),
            None => match self.promise.on_proposal(from, proposed, now) {
                Ok(p) => {
                    // The promised census makes a token within W: the
                    // token-lost deadline starts over, and a census this
                    // replica wanted is that one (a census of its own now
                    // would only outbid it).
                    self.token_activity(now);
                    self.census.set_wanted(false);
                    if p.abandoned_own.is_some() && self.census.running() {
                        // Its own census gave way to a higher one: let that
                        // one finish before trying again (else every
                        // replica keeps outbidding the others).
                        self.census_failed(now, Failure::Vetoed);
                    }
                    CensusAnswer::Promise { copy: self.held.as_ref().map(|h| Box::new(h.token.clone())) }
                }
                Err(r) => CensusAnswer::Refused(r),
            },
        };
        self.out.send(from, Msg::CensusReply { proposed, answer });
    }

    pub(super) fn on_census_reply(&mut self, now: Instant, from: NodeId, proposed: u64, answer: CensusAnswer) {
        ftcore::mutant! {
            if self.cfg.rules.off(RdRule::CensusDeadline) {
                let live = self.census.runs(proposed);
                if live && !self.promise.proposal_live(proposed, now) {
                    // Past its deadline before the timer fired.
                    self.census_timeout(now);
                }
                if !live || !self.census.running() {
                    return self.late_census_reply(now, from, proposed, answer);
                }
            }
        }
        if !self.census.runs(proposed) {
            return;
        }
        let step = match answer {
            CensusAnswer::Promise { copy } => {
                self.census.promised(from, copy.map(|b| *b));
                self.promise.on_answer(from, proposed, Ok(()), now)
            }
            CensusAnswer::Refused(r) => self.promise.on_answer(from, proposed, Err(r), now),
        };
        match step {
            Step::Abandoned(f) => self.census_failed(now, f),
            Step::Ignored => {}
            Step::Pending | Step::Majority => self.try_complete(now),
        }
    }

    /// Regenerates if every ring member answered and a majority promised.
    fn try_complete(&mut self, now: Instant) {
        let ring = self.ring.view().alive_from_me();
        let Some(all) = self.census.heard_from_all(ring.into_iter().filter(|m| *m != self.me)) else { return };
        ftcore::mutant! {
            if self.cfg.rules.off(RdRule::CensusNeedsAMajority) {
                // The mutation: it regenerates at once, promised or not.
                let value = self.census.run.as_ref().map_or(0, |c| c.value);
                self.promise.abandon(now);
                self.promise.raise_floor(value);
                let best = self.census.finish();
                return self.regenerate(now, value, best);
            }
        }
        // (safety) Every member of the ring view answers first: the newest
        // copy may be at any of them, a majority's promises alone may miss
        // it.
        if !all && self.cfg.rules.on(RdRule::CensusWaitsForEveryMember) {
            return;
        }
        let token = match self.promise.use_proposal_with_quorum(now, self.quorum()) {
            Ok(v) => Some(v),
            Err(UseError::NoMajority) => None,
            Err(UseError::Abandoned(f)) => {
                self.census_failed(now, f);
                None
            }
            Err(UseError::NoProposal) => None,
        };
        let Some(epoch) = token else { return };
        // (safety) Every member of the ring view answered, and a quorum
        // (this replica included) promised.
        let promised = self.census.promises() + 1;
        ftcore::invariant!(
            self.cfg.rules,
            all && promised >= self.quorum(),
            "n{}: census {epoch} regenerates with {promised} promises (every member answered: {all})",
            self.me.0
        );
        let best = self.census.finish();
        self.regenerate(now, epoch, best);
    }

    /// The census of `epoch` won: the token (epoch, first seq) with the
    /// newest copy's state is here.
    fn regenerate(&mut self, now: Instant, epoch: u64, best: Option<Token>) {
        let mut t = Token::regenerated(epoch, self.me, best.as_ref());
        t.seq = self.cfg.first_seq.get();
        self.passing.regenerated();
        self.census.set_wanted(false);
        self.out.event(RdEvent::Regenerated { epoch });
        self.out.event(RdEvent::CensusEnded { outcome: CensusOutcome::Regenerated });
        self.install(now, t);
    }

    fn census_failed(&mut self, now: Instant, f: Failure) {
        self.census.failed();
        let outcome = match f {
            Failure::Busy { .. } => CensusOutcome::Busy,
            Failure::Deadline => CensusOutcome::Lapsed,
            Failure::Refused(_) | Failure::Vetoed => CensusOutcome::Stale,
        };
        self.out.event(RdEvent::CensusEnded { outcome });
        let wait = self.promise.retry_after(&f, &mut self.rng);
        self.census.retry_at(now + wait);
    }
}

ftcore::mutant! {
    impl RdNode {
        /// The `census_past_deadline` mutation only (`RdRule::CensusDeadline`
        /// off): an answer to the own census that passed its deadline (the
        /// promise component has dropped it). Once every member of the ring
        /// answered and a majority of configured replicas promised, with no
        /// higher epoch promised or in use here since, it regenerates anyway
        /// — what foundation.md forbids ("an abandoned proposal never
        /// creates anything").
        fn late_census_reply(&mut self, now: Instant, from: NodeId, proposed: u64, answer: CensusAnswer) {
            let Some(mut c) = self.census.late.take().filter(|c| c.value == proposed) else { return };
            match answer {
                CensusAnswer::Promise { copy } => {
                    c.best = newest(c.best.take(), copy.map(|b| *b));
                    c.answered.insert(from);
                }
                // Refused: it is over.
                CensusAnswer::Refused(_) => return,
            }
            let ring = self.ring.view().alive_from_me();
            let all = ring.into_iter().filter(|m| *m != self.me).all(|m| c.answered.contains(&m));
            if !all || c.answered.len() + 1 < self.quorum() {
                self.census.late = Some(c);
                return;
            }
            if self.owns_token()
                || self.promise.threshold() > c.value
                || self.promise.on_in_use(c.value, now).is_err()
            {
                return;
            }
            self.regenerate(now, c.value, c.best);
        }
    }
}

impl RdNode {
    /// A token showed up: the own census is moot.
    pub(super) fn abandon_census(&mut self, now: Instant) {
        if self.census.abandon() {
            self.promise.abandon(now);
            self.out.event(RdEvent::CensusEnded { outcome: CensusOutcome::Aborted });
        }
    }

    /// A HolderAlive of `epoch`: a token is in use; an own census below it is moot.
    pub(super) fn abandon_census_below(&mut self, now: Instant, epoch: u64) {
        if self.census.moot_at(epoch) {
            self.abandon_census(now);
        }
    }

    pub(super) fn census_deadline(&self) -> Option<Instant> {
        if !self.census.running() {
            return None;
        }
        self.promise.proposal().map(|(_, d)| d)
    }

    pub(super) fn census_timeout(&mut self, now: Instant) {
        ftcore::mutant! {
            let past = |c: &CensusRun| !self.promise.proposal_live(c.value, now);
            if self.cfg.rules.off(RdRule::CensusDeadline) && self.census.run.as_ref().is_some_and(past) {
                // The mutation: kept, still counting late answers.
                self.census.late = self.census.run.clone();
                let _ = self.promise.on_deadline(now);
                self.census_failed(now, Failure::Deadline);
                return;
            }
        }
        if self.census.running() && self.promise.proposal().is_some_and(|(_, d)| now >= d) {
            let _ = self.promise.on_deadline(now);
            self.census_failed(now, Failure::Deadline);
        }
    }
}

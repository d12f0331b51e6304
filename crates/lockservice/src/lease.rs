//! The lease a lock-granting site keeps on its lock, both halves
//! (reliability.md, Pauses and leases). Sans-IO; the embedding core
//! (ntmutexd, tokenwatchd) owns the messages, its promises (the threshold
//! a renewal is checked against, whether a fresh node has recovered) and
//! its rule table; [`Acker::judge_renewal`] is the acker's whole decision on
//! a renewal (refuse it with the threshold, ignore it, or ack it), and
//! [`Acker::busy_under`] the promise an ack made, each under the
//! [`LeaseRules`] the core reads from its table.
//!
//! **Renewer** (a site with local clients holding or waiting):
//! - [`Renewer::poll`] says when to send `LeaseRenew{round, epoch, holding}`
//!   to every peer (and to itself, through its own [`Acker`]): every
//!   `renew = lease/3` while active, at once when it has no live lease on
//!   the epoch it holds or waits for (a first request, a token arriving
//!   without one), and, for a holding site whose lease ran out, only after
//!   the backoff `2·lease·(1+ρ)/(1−ρ)` plus a random delay of up to
//!   `renew` (so one peer that still hears a cut-off holder cannot hold
//!   off a regeneration for ever). Waiting sites never back off.
//! - [`Renewer::on_ack`] counts acks per round; once a majority of the
//!   configured sites (itself included) acked a round of the current
//!   epoch, the lease ends `lease·(1−ρ)` after that round's send time, on
//!   this site's clock ([`timer::Lease::holder_valid_until`]).
//! - the site grants only while [`Renewer::live_until`] is `Some`.
//!
//! **Acker** (every site): acks a holding site's renewal, and a waiting
//! site's only while it has acked a holding site's within
//! `lease·(1+ρ)` (so the waiters of a lost token hold off its
//! regeneration by one window at most); each ack promises to join no
//! regeneration of another proposer for `lease·(1+ρ)`
//! ([`Acker::busy_for`]).
//!
//! Why this is safe: a site grants only within `lease·(1−ρ)` of sending a
//! renewal that a majority acked; each acker refuses other proposers until
//! `lease·(1+ρ)` after its ack, later on any clock; a new token needs a
//! majority's promises; majorities intersect. So no new token exists while
//! a lease is live, whatever pauses or partitions do.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::NodeId;
use timer::{Instant, Lease, SeededRng};

/// A lease that never ends: what a grant carries when a mutation test
/// switches leases off (`no_leases`).
pub const FOREVER: Instant = Instant::from_micros(u64::MAX);

/// The lease rules a core enforces, read from its own rule table
/// (`rules.on(…)`, see `ftcore::rules`): in a release build each is the
/// constant `true`, so each guard compiles to the rule alone; only a
/// mutation test switches one off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseRules {
    /// (safety) Grants are leases (the core grants only within
    /// `lease·(1−ρ)` of a renewal a majority acked). Off: no renewals are
    /// sent, and no ack binds ([`Acker::busy_under`]).
    pub leases: bool,
    /// (safety) A lease ack binds the acker: it takes part in no
    /// regeneration (adopts no claim) of another proposer for `lease·(1+ρ)`
    /// after its ack ([`Acker::busy_under`]).
    pub ack_binds: bool,
    /// (safety) A renewal of an epoch below what this site stored or
    /// promised (its own proposal included) is refused with that threshold,
    /// never acked: a holder of an older token may have been replaced.
    pub refuse_stale: bool,
    /// (safety) An unrecovered fresh node acks no renewal: it knows no
    /// threshold to check it against.
    pub unrecovered_ack_none: bool,
    /// (safety) A waiting site's renewal is acked only within `lease·(1+ρ)`
    /// of acking a holding site's (or seeing the token here), so the
    /// waiters of a lost token hold off its regeneration by one window at
    /// most. Off: every renewal is acked as a holder's.
    pub waiters_behind_holder: bool,
}

impl LeaseRules {
    /// Every rule on: what a release build always has.
    pub const ALL_ON: LeaseRules = LeaseRules {
        leases: true,
        ack_binds: true,
        refuse_stale: true,
        unrecovered_ack_none: true,
        waiters_behind_holder: true,
    };
}

/// What a site stored or promised, that a renewal is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Promised {
    /// The lowest epoch it may still ack (the highest it stored or
    /// promised, its own proposal included).
    pub threshold: u64,
    /// Whether it knows that threshold: false for a fresh node (a wiped
    /// disk) that has not recovered it from a majority yet.
    pub recovered: bool,
}

/// The acker's decision on a renewal ([`Acker::judge_renewal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RenewVerdict {
    /// Answer `LeaseRefused { threshold }` (for the site's own renewal:
    /// act on the refusal at once).
    Refuse {
        /// What this site stored or promised.
        threshold: u64,
    },
    /// Not judged: this site is an unrecovered fresh node. Nothing is
    /// sent and nothing is promised.
    Ignore,
    /// Judged and not acked: a waiting site's renewal with no holder acked
    /// (or seen) within the window. Nothing is sent.
    Unacked,
    /// Ack it (`LeaseAck`, or the site's own ack): the ack binds this site
    /// ([`Acker::busy_under`]).
    Ack,
}

impl RenewVerdict {
    /// Whether the renewal passed the threshold and recovery checks and
    /// reached the acker ([`Unacked`](Self::Unacked) or
    /// [`Ack`](Self::Ack)).
    pub fn judged(self) -> bool {
        matches!(self, RenewVerdict::Unacked | RenewVerdict::Ack)
    }
}

/// Lease settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeaseConfig {
    /// `lease_ms`.
    pub lease: Duration,
    /// ρ, in parts per million.
    pub drift_ppm: u32,
    /// Configured sites (the majority is `sites/2 + 1`).
    pub sites: usize,
    /// Lossy links (tokenwatchd's UDP): a round that no majority acked
    /// within [`LeaseConfig::retry_every`] is followed by a new round at
    /// once, so that a lost renewal or ack costs milliseconds, not the
    /// lease. Off on reliable links (ntmutexd's TCP), where a retry only
    /// adds load to a busy host.
    pub lossy: bool,
}

impl LeaseConfig {
    /// `renew_ms = lease_ms/3`.
    pub fn renew_every(&self) -> Duration {
        self.lease / 3
    }

    /// On lossy links, a round not settled this long after it was sent is
    /// followed by a new one: `renew/8` (about 4 ms at the default lease),
    /// so that at least four rounds fit between a renewal's due time and
    /// the earliest end of the client's hold (`renew` later at the
    /// default `kill_grace`); `None` on reliable links.
    pub fn retry_every(&self) -> Option<Duration> {
        self.lossy.then(|| (self.renew_every() / 8).max(Duration::from_micros(500)))
    }

    /// Acks needed: a majority of the configured sites.
    pub fn majority(&self) -> usize {
        self.sites / 2 + 1
    }

    /// How long an acker honours an ack given at `at`.
    pub fn honoured_until(&self, at: Instant) -> Instant {
        Lease::new(at, self.lease, self.drift_ppm).grantor_honours_until()
    }

    /// How long a holding site whose lease ran out stays silent after its
    /// last renewal: `2·lease·(1+ρ)/(1−ρ)`.
    pub fn backoff(&self) -> Duration {
        let rho = u128::from(self.drift_ppm.min(999_999));
        let ns = 2 * self.lease.as_nanos() * (1_000_000 + rho) / (1_000_000 - rho);
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// The bound `lease·(1+ρ) + renew ≤ suspect_after·(1−ρ)`
    /// (reliability.md): a lease (and one renewal period) runs out before
    /// any peer could suspect the site. `Err` says by how much it misses.
    pub fn check_against(&self, suspect_after: Duration) -> Result<(), String> {
        let left = Lease::new(Instant::ZERO, self.lease, self.drift_ppm).grantor_honours_until() + self.renew_every();
        let right = Lease::new(Instant::ZERO, suspect_after, self.drift_ppm).holder_valid_until();
        if left <= right {
            Ok(())
        } else {
            Err(format!(
                "lease_ms·(1+ρ) + lease_ms/3 = {:?} must not exceed suspect_after_ms·(1−ρ) = {:?}",
                left.saturating_since(Instant::ZERO),
                right.saturating_since(Instant::ZERO)
            ))
        }
    }
}

/// A renewal to send to every peer (and to the site's own [`Acker`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Renewal {
    /// Its round: acks name it.
    pub round: u64,
    /// The epoch the lease is on.
    pub epoch: u64,
    /// Whether the site holds the token (else it waits for it).
    pub holding: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Round {
    sent: Instant,
    epoch: u64,
    acks: BTreeSet<NodeId>,
}

/// Most rounds kept waiting for acks (older ones can no longer extend the
/// lease past newer ones anyway): a renewal period's worth of retries.
const ROUNDS_KEPT: usize = 12;

/// The renewing half: one site's lease on its lock.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Renewer {
    cfg: LeaseConfig,
    round: u64,
    rounds: BTreeMap<u64, Round>,
    /// The lease: (epoch, end on this site's clock).
    lease: Option<(u64, Instant)>,
    /// The (epoch, holding) of the latest renewal sent, and when.
    last: Option<(u64, bool, Instant)>,
    /// No renewal before then (a holding site's backoff).
    quiet_until: Option<Instant>,
    /// Whether the site has local clients (renewals are due).
    active: bool,
}

impl Renewer {
    /// No lease, nothing sent.
    pub fn new(cfg: LeaseConfig) -> Self {
        Renewer { cfg, round: 0, rounds: BTreeMap::new(), lease: None, last: None, quiet_until: None, active: false }
    }

    /// The settings.
    pub fn config(&self) -> &LeaseConfig {
        &self.cfg
    }

    /// The end of the lease on `epoch` if it is live at `now`.
    pub fn live_until(&self, now: Instant, epoch: u64) -> Option<Instant> {
        self.lease.filter(|(e, until)| *e == epoch && *until > now).map(|(_, until)| until)
    }

    /// What to do now, for a site that is `active` (a local client holds or
    /// waits) and holds the token of `epoch` (`holding`) or waits with
    /// `epoch` its highest epoch in use: `Some` is a renewal to send now
    /// (it is recorded as sent at `now`). Call after every input; wake at
    /// [`next_due`](Self::next_due).
    pub fn poll(
        &mut self,
        now: Instant,
        active: bool,
        epoch: u64,
        holding: bool,
        rng: &mut SeededRng,
    ) -> Option<Renewal> {
        let was_active = std::mem::replace(&mut self.active, active);
        if !active {
            self.quiet_until = None;
            return None;
        }
        let live = self.live_until(now, epoch).is_some();
        // A new stretch of holding or waiting (new epoch, new role, or
        // clients again after none): a lease that ran out before it is
        // not this stretch's lapse, and earns no backoff.
        let continuing = was_active && self.last.is_some_and(|(e, h, _)| (e, h) == (epoch, holding));
        if !continuing && !live {
            self.lease = None;
            self.quiet_until = None;
        }
        let due = match self.last {
            // No live lease for this epoch and role: at once (a first
            // request; the renewal on receiving the token is never
            // delayed).
            None => true,
            Some(_) if !live && !was_active => true,
            Some((e, h, _)) if (e, h) != (epoch, holding) && !live => true,
            Some((_, _, at)) => now >= at + self.cfg.renew_every() || self.retry_due(now, at),
        };
        if !due {
            return None;
        }
        if holding && self.lease.is_some_and(|(e, until)| e == epoch && until <= now) {
            // A holder whose lease ran out backs off after each renewal.
            if self.quiet_until.is_none() {
                let last = self.last.map_or(now, |(_, _, at)| at);
                let jitter = Duration::from_micros(rng.range_inclusive(0, micros(self.cfg.renew_every())));
                self.quiet_until = Some(last + self.cfg.backoff() + jitter);
            }
            if self.quiet_until.is_some_and(|q| now < q) {
                return None;
            }
        }
        self.quiet_until = None;
        self.round += 1;
        self.rounds.insert(self.round, Round { sent: now, epoch, acks: BTreeSet::new() });
        while self.rounds.len() > ROUNDS_KEPT {
            self.rounds.pop_first();
        }
        self.last = Some((epoch, holding, now));
        Some(Renewal { round: self.round, epoch, holding })
    }

    /// When [`poll`](Self::poll) may next have a renewal to send (while
    /// active), or the backoff ends.
    pub fn next_due(&self) -> Option<Instant> {
        if !self.active {
            return None;
        }
        let (_, _, at) = self.last?;
        let mut due = at + self.cfg.renew_every();
        if let Some(retry) = self.cfg.retry_every() {
            if self.retrying(at + retry).is_some() {
                due = due.min(at + retry);
            }
        }
        Some(self.quiet_until.map_or(due, |q| q.max(due)))
    }

    /// Whether the latest round sent has not reached a majority yet.
    fn unsettled(&self) -> bool {
        self.rounds.contains_key(&self.round)
    }

    /// Lossy links: the latest round, sent at `at`, is unsettled past the
    /// retry interval, by a holding site or by a waiting one whose lease
    /// is still live (the token it waits for is granted at once on that
    /// lease). A waiting site with no live lease does not retry: its
    /// renewals go unacked while no holder is live, and retrying them
    /// would only flood.
    ///
    /// Judged at the retry's own due time, as [`next_due`](Self::next_due)
    /// judges it: judged at `now`, a waiting site polled after its lease
    /// ended found no retry due while `next_due` still named that past
    /// time, and its driver spun on it (a tokenwatchd node in the
    /// simulator: 200,000 timeouts at one instant).
    fn retry_due(&self, now: Instant, at: Instant) -> bool {
        self.cfg.retry_every().is_some_and(|retry| now >= at + retry && self.retrying(at + retry).is_some())
    }

    /// The retry interval if a retry is pending at `now`.
    fn retrying(&self, now: Instant) -> Option<Duration> {
        let (epoch, holding, _) = self.last?;
        let extending = holding || self.live_until(now, epoch).is_some();
        self.cfg.retry_every().filter(|_| extending && self.unsettled())
    }

    /// `from` (this site included) acked `round`. Returns the new end of
    /// the lease when this ack extended it.
    pub fn on_ack(&mut self, from: NodeId, round: u64) -> Option<Instant> {
        let majority = self.cfg.majority();
        let r = self.rounds.get_mut(&round)?;
        if !r.acks.insert(from) || r.acks.len() < majority {
            return None;
        }
        let until = Lease::new(r.sent, self.cfg.lease, self.cfg.drift_ppm).holder_valid_until();
        let epoch = r.epoch;
        // This round and every earlier one are settled.
        self.rounds.retain(|k, _| *k > round);
        match self.lease {
            Some((e, u)) if e == epoch && u >= until => None,
            Some((e, _)) if e > epoch => None,
            _ => {
                self.lease = Some((epoch, until));
                self.quiet_until = None;
                Some(until)
            }
        }
    }

    /// The lease is over (a higher epoch was heard of, the token was
    /// dropped): nothing more is granted under it, and later acks of
    /// earlier rounds are ignored.
    pub fn end(&mut self) {
        self.lease = None;
        self.rounds.clear();
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The acking half: which renewals this site acks, and the promises its
/// acks made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Acker {
    /// Until when each renewer's latest ack is honoured.
    windows: BTreeMap<NodeId, Instant>,
    /// Until when the latest ack of a holding site's renewal is honoured.
    holding_until: Option<Instant>,
}

impl Acker {
    /// No acks given.
    pub fn new() -> Self {
        Self::default()
    }

    /// A renewal from `from` (this site included) that passed the core's
    /// own checks (its epoch is not below what this site stored or
    /// promised). Returns whether to ack it: always for a holding site,
    /// and for a waiting one only within `lease·(1+ρ)` of acking a holding
    /// site's. An ack is a promise, kept from now: no regeneration of
    /// another proposer until `lease·(1+ρ)` from now.
    pub fn on_renew(&mut self, cfg: &LeaseConfig, now: Instant, from: NodeId, holding: bool) -> bool {
        if !holding && self.holding_until.is_none_or(|u| u <= now) {
            return false;
        }
        let until = cfg.honoured_until(now);
        if holding {
            self.holding_until = Some(until);
        }
        let w = self.windows.entry(from).or_insert(until);
        *w = (*w).max(until);
        true
    }

    /// This site holds the token itself at `now` (the core calls it after
    /// every input while it does): like acking its own holding renewal,
    /// it shows the token alive, so waiting sites' renewals are acked for
    /// `lease·(1+ρ)` more. Without it, sites that pass the token back and
    /// forth faster than `renew` would rarely renew *as holders*, their
    /// peers would stop acking their waiting renewals, and each token
    /// would arrive without a lease (one more round trip per hand-off).
    /// The bound the rule is for is kept: once nobody holds the token, the
    /// waiters are acked for one window at most.
    pub fn saw_token(&mut self, cfg: &LeaseConfig, now: Instant) {
        let until = cfg.honoured_until(now);
        self.holding_until = Some(self.holding_until.map_or(until, |u| u.max(until)));
    }

    /// How long this site must still refuse a proposal of `proposer`
    /// because of an ack it gave to another site (`None`: it need not).
    /// The proposer's own renewals do not bind it.
    pub fn busy_for(&self, now: Instant, proposer: NodeId) -> Option<Duration> {
        self.windows
            .iter()
            .filter(|(site, until)| **site != proposer && **until > now)
            .map(|(_, until)| until.saturating_since(now))
            .max()
    }

    /// Drops the windows that have ended.
    pub fn forget_expired(&mut self, now: Instant) {
        self.windows.retain(|_, until| *until > now);
        if self.holding_until.is_some_and(|u| u <= now) {
            self.holding_until = None;
        }
    }

    /// (safety) A `renewal` from `from` (this site included) reaches a
    /// site that stored or promised `promised`. Refused with the threshold
    /// if its epoch is below it; ignored by a fresh node that has not
    /// recovered (it knows no threshold); otherwise the windows that ended
    /// are dropped and the renewal is acked as [`on_renew`](Self::on_renew)
    /// decides (a waiting site's only behind a holder), and the ack binds
    /// this site's promises ([`busy_under`](Self::busy_under)). Each check
    /// applies only while its rule of `rules` is on.
    pub fn judge_renewal(
        &mut self,
        cfg: &LeaseConfig,
        now: Instant,
        from: NodeId,
        renewal: Renewal,
        promised: Promised,
        rules: LeaseRules,
    ) -> RenewVerdict {
        if renewal.epoch < promised.threshold && rules.refuse_stale {
            return RenewVerdict::Refuse { threshold: promised.threshold };
        }
        if !promised.recovered && rules.unrecovered_ack_none {
            return RenewVerdict::Ignore;
        }
        self.forget_expired(now);
        let holding = renewal.holding || !rules.waiters_behind_holder;
        if self.on_renew(cfg, now, from, holding) {
            RenewVerdict::Ack
        } else {
            RenewVerdict::Unacked
        }
    }

    /// (safety) [`busy_for`](Self::busy_for) while acks bind (`rules`'
    /// `ack_binds` and `leases`); `None` when either is off.
    pub fn busy_under(&self, rules: LeaseRules, now: Instant, proposer: NodeId) -> Option<Duration> {
        if !rules.ack_binds || !rules.leases {
            return None;
        }
        self.busy_for(now, proposer)
    }
}

/// Both halves of leasing at one site: its own lease on its grants (the
/// renewals it sends, [`Renewer`]) and the renewals it acked for others
/// ([`Acker`]), under one [`LeaseConfig`]. ntmutexd and tokenwatchd hold
/// one each; their cores add the messages and the rule table.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SiteLeases {
    renewer: Renewer,
    acker: Acker,
}

impl SiteLeases {
    /// No lease, nothing acked.
    pub fn new(cfg: LeaseConfig) -> Self {
        SiteLeases { renewer: Renewer::new(cfg), acker: Acker::new() }
    }

    /// The settings.
    pub fn config(&self) -> &LeaseConfig {
        self.renewer.config()
    }

    /// Until when the own lease on `epoch` lives, if it does
    /// ([`Renewer::live_until`]).
    pub fn live_until(&self, now: Instant, epoch: u64) -> Option<Instant> {
        self.renewer.live_until(now, epoch)
    }

    /// The renewal due now, if any ([`Renewer::poll`]).
    pub fn poll(
        &mut self,
        now: Instant,
        active: bool,
        epoch: u64,
        holding: bool,
        rng: &mut SeededRng,
    ) -> Option<Renewal> {
        self.renewer.poll(now, active, epoch, holding, rng)
    }

    /// When the next renewal is due, or a holder's backoff ends
    /// ([`Renewer::next_due`]).
    pub fn next_due(&self) -> Option<Instant> {
        self.renewer.next_due()
    }

    /// An ack of the own renewal `round` from `from`: the lease's new end
    /// if it grew ([`Renewer::on_ack`]).
    pub fn on_ack(&mut self, from: NodeId, round: u64) -> Option<Instant> {
        self.renewer.on_ack(from, round)
    }

    /// The own lease ends (the token left or was dropped).
    pub fn end(&mut self) {
        self.renewer.end();
    }

    /// The token is alive here: waiting sites' renewals may be acked
    /// ([`Acker::saw_token`]).
    pub fn saw_token(&mut self, now: Instant) {
        self.acker.saw_token(self.renewer.config(), now);
    }

    /// The verdict on a renewal from `from` ([`Acker::judge_renewal`]).
    pub fn judge(
        &mut self,
        now: Instant,
        from: NodeId,
        renewal: Renewal,
        promised: Promised,
        rules: LeaseRules,
    ) -> RenewVerdict {
        self.acker.judge_renewal(self.renewer.config(), now, from, renewal, promised, rules)
    }

    /// (safety) Whether an ack given here still forbids taking part in
    /// `proposer`'s proposal, and for how long ([`Acker::busy_under`]).
    pub fn busy_under(&self, rules: LeaseRules, now: Instant, proposer: NodeId) -> Option<Duration> {
        self.acker.busy_under(rules, now, proposer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn n(i: u32) -> NodeId {
        NodeId(i)
    }

    /// lease 90 ms, ρ = 1 % (to make the drift visible), 5 sites.
    const CFG: LeaseConfig =
        LeaseConfig { lease: Duration::from_millis(90), drift_ppm: 10_000, sites: 5, lossy: false };

    #[test]
    fn settings_arithmetic() {
        assert_eq!(CFG.renew_every(), Duration::from_millis(30));
        assert_eq!(CFG.majority(), 3);
        assert_eq!(CFG.honoured_until(at(0)), Instant::from_micros(90_900));
        // 2 · 90 · 1.01 / 0.99 = 183.636… ms.
        assert_eq!(CFG.backoff(), Duration::from_nanos(183_636_363));
        // 90·1.01 + 30 = 120.9 ≤ 122·0.99 = 120.78? No: 122 is too short, 123 is enough.
        assert!(CFG.check_against(Duration::from_millis(122)).is_err());
        assert!(CFG.check_against(Duration::from_millis(123)).is_ok());
        // The defaults (lease 100, ρ = 0.1 %) against suspect_after 250.
        let d = LeaseConfig { lease: Duration::from_millis(100), drift_ppm: 1_000, sites: 3, lossy: false };
        assert!(d.check_against(Duration::from_millis(250)).is_ok());
        // 100.1 + 33.33 = 133.43 ms against 133·0.999 = 132.87 ms.
        assert!(d.check_against(Duration::from_millis(134)).is_ok());
        let e = d.check_against(Duration::from_millis(133)).unwrap_err();
        assert!(e.contains("must not exceed"), "{e}");
    }

    #[test]
    fn a_majority_of_acks_gives_a_lease_from_the_send_time() {
        let mut r = Renewer::new(CFG);
        let mut rng = SeededRng::new(1);
        let first = r.poll(at(10), true, 7, true, &mut rng).unwrap();
        assert_eq!(first, Renewal { round: 1, epoch: 7, holding: true });
        assert_eq!(r.poll(at(11), true, 7, true, &mut rng), None, "not due yet");
        assert_eq!(r.on_ack(n(1), 1), None);
        assert_eq!(r.on_ack(n(1), 1), None, "a duplicate ack counts once");
        assert_eq!(r.on_ack(n(2), 1), None);
        assert_eq!(r.live_until(at(20), 7), None);
        // The third ack: 10 ms + 90·0.99 ms.
        assert_eq!(r.on_ack(n(4), 1), Some(Instant::from_micros(99_100)));
        assert_eq!(r.live_until(at(20), 7), Some(Instant::from_micros(99_100)));
        assert_eq!(r.live_until(at(20), 8), None, "a lease is on one epoch");
        // Just in time and just late.
        assert!(r.live_until(Instant::from_micros(99_099), 7).is_some());
        assert_eq!(r.live_until(Instant::from_micros(99_100), 7), None);
        assert_eq!(r.on_ack(n(5), 1), None, "settled rounds are forgotten");
    }

    #[test]
    fn renewals_come_every_third_of_the_lease_and_extend_it() {
        let mut r = Renewer::new(CFG);
        let mut rng = SeededRng::new(1);
        r.poll(at(0), true, 7, true, &mut rng).unwrap();
        assert_eq!(r.next_due(), Some(at(30)));
        assert_eq!(r.poll(at(29), true, 7, true, &mut rng), None);
        let second = r.poll(at(30), true, 7, true, &mut rng).unwrap();
        assert_eq!(second.round, 2);
        for i in 1..=3 {
            r.on_ack(n(i), 2);
        }
        assert_eq!(r.live_until(at(31), 7), Some(Instant::from_micros(30_000 + 89_100)));
        // A late majority for round 1 cannot shorten it (round 1 was settled).
        for i in 1..=3 {
            assert_eq!(r.on_ack(n(i), 1), None);
        }
    }

    /// On lossy links a holder's round that no majority acked within
    /// `renew/8` is followed by a new round, whose acks give the lease
    /// from its own send time; a settled round is not retried.
    #[test]
    fn on_lossy_links_a_holders_unsettled_round_is_retried_at_once() {
        let cfg = LeaseConfig { lossy: true, ..CFG };
        let retry = cfg.retry_every().expect("lossy");
        assert_eq!(retry, Duration::from_micros(3_750));
        let mut r = Renewer::new(cfg);
        let mut rng = SeededRng::new(1);
        assert_eq!(r.poll(at(0), true, 7, true, &mut rng).map(|x| x.round), Some(1));
        r.on_ack(n(1), 1);
        assert_eq!(r.next_due(), Some(Instant::ZERO + retry));
        assert_eq!(r.poll(Instant::from_micros(3_749), true, 7, true, &mut rng), None);
        let again = r.poll(Instant::ZERO + retry, true, 7, true, &mut rng).expect("retried");
        assert_eq!(again.round, 2);
        for i in 1..=3 {
            r.on_ack(n(i), 2);
        }
        assert_eq!(r.live_until(at(5), 7), Some(Instant::from_micros(3_750 + 89_100)));
        // Settled: the next round comes a renewal period later.
        assert_eq!(r.next_due(), Some(Instant::from_micros(3_750 + 30_000)));
        // A late majority of round 1 changes nothing.
        for i in 2..=3 {
            assert_eq!(r.on_ack(n(i), 1), None);
        }
    }

    /// No retries on reliable links, nor for a waiting site without a live
    /// lease (its renewals go unacked while no holder is live); a waiting
    /// site whose lease lives retries (the token is granted at once on it).
    #[test]
    fn reliable_links_and_waiters_without_a_lease_do_not_retry() {
        let mut rng = SeededRng::new(1);
        let mut r = Renewer::new(CFG);
        r.poll(at(0), true, 7, true, &mut rng).expect("first");
        assert_eq!(r.next_due(), Some(at(30)));
        assert_eq!(r.poll(at(29), true, 7, true, &mut rng), None);
        let mut w = Renewer::new(LeaseConfig { lossy: true, ..CFG });
        w.poll(at(0), true, 7, false, &mut rng).expect("first");
        assert_eq!(w.next_due(), Some(at(30)));
        assert_eq!(w.poll(at(29), true, 7, false, &mut rng), None);
        // Round 2 settles: a live lease; round 3 does not: retried.
        assert_eq!(w.poll(at(30), true, 7, false, &mut rng).map(|x| x.round), Some(2));
        for i in 1..=3 {
            w.on_ack(n(i), 2);
        }
        assert_eq!(w.poll(at(60), true, 7, false, &mut rng).map(|x| x.round), Some(3));
        assert_eq!(w.next_due(), Some(Instant::from_micros(63_750)));
        assert_eq!(w.poll(Instant::from_micros(63_750), true, 7, false, &mut rng).map(|x| x.round), Some(4));
    }

    /// Whatever the time a site is polled at, it either sends or its next
    /// due time is later: a waiting site whose unsettled round's retry
    /// fell due while its lease lived, polled only after the lease ended,
    /// sends that retry (it once sent nothing and stayed due in the past).
    #[test]
    fn a_retry_due_while_the_lease_lived_is_sent_when_polled_late() {
        let mut rng = SeededRng::new(1);
        let mut w = Renewer::new(LeaseConfig { lossy: true, ..CFG });
        w.poll(at(0), true, 7, false, &mut rng).expect("first");
        for i in 1..=3 {
            w.on_ack(n(i), 1);
        }
        let end = w.live_until(at(1), 7).expect("a live lease");
        // Round 2, unsettled, sent so that its retry falls due before the
        // lease ends.
        let retry = LeaseConfig { lossy: true, ..CFG }.retry_every().expect("lossy");
        let sent = Instant::from_micros(end.as_micros() - (retry + Duration::from_millis(1)).as_micros() as u64);
        assert_eq!(w.poll(sent, true, 7, false, &mut rng).map(|x| x.round), Some(2));
        let due = w.next_due().expect("due");
        assert_eq!(due, sent + retry);
        // Polled only after the lease ended.
        let late = end + Duration::from_millis(1);
        match w.poll(late, true, 7, false, &mut rng) {
            Some(r) => assert_eq!(r.round, 3),
            None => assert!(w.next_due().is_some_and(|d| d > late), "due {:?} at {late:?}", w.next_due()),
        }
    }

    #[test]
    fn a_new_epoch_or_the_token_arriving_renews_at_once() {
        let mut r = Renewer::new(CFG);
        let mut rng = SeededRng::new(1);
        assert!(!r.poll(at(0), true, 7, false, &mut rng).unwrap().holding);
        // The token arrives 1 ms later, without a lease: at once.
        let h = r.poll(at(1), true, 7, true, &mut rng).unwrap();
        assert_eq!(h, Renewal { round: 2, epoch: 7, holding: true });
        for i in 1..=3 {
            r.on_ack(n(i), 2);
        }
        // With a live lease a change of role waits for the period.
        assert_eq!(r.poll(at(2), true, 7, false, &mut rng), None);
        // A new epoch has no lease yet: at once.
        assert_eq!(r.poll(at(3), true, 9, true, &mut rng).map(|x| x.epoch), Some(9));
        // Inactive: nothing, and the next activity without a lease starts
        // at once.
        assert_eq!(r.poll(at(4), false, 9, true, &mut rng), None);
        assert_eq!(r.next_due(), None);
        assert!(r.poll(at(5), true, 9, true, &mut rng).is_some());
        // With a live lease, activity resumes on the period.
        for i in 1..=3 {
            r.on_ack(n(i), 4);
        }
        assert_eq!(r.poll(at(6), false, 9, true, &mut rng), None);
        assert_eq!(r.poll(at(7), true, 9, true, &mut rng), None);
        assert_eq!(r.next_due(), Some(at(35)));
    }

    #[test]
    fn a_holder_whose_lease_lapsed_backs_off_a_waiter_never() {
        let mut r = Renewer::new(CFG);
        let mut rng = SeededRng::new(3);
        r.poll(at(0), true, 7, true, &mut rng).unwrap();
        for i in 1..=3 {
            r.on_ack(n(i), 1);
        }
        // Renewals at 30 and 60 get no majority; the lease ends at 89.1.
        assert!(r.poll(at(30), true, 7, true, &mut rng).is_some());
        assert!(r.poll(at(60), true, 7, true, &mut rng).is_some());
        assert_eq!(r.poll(at(90), true, 7, true, &mut rng), None, "backing off");
        let quiet = r.next_due().unwrap();
        // 60 ms + 183.6 ms + up to 30 ms of jitter.
        assert!(quiet >= Instant::from_micros(243_636) && quiet <= Instant::from_micros(273_637), "{quiet}");
        assert_eq!(r.poll(quiet.saturating_add(Duration::ZERO), true, 7, true, &mut rng).map(|x| x.round), Some(4));
        // A waiting site (the token was dropped) renews at once.
        let mut w = Renewer::new(CFG);
        w.poll(at(0), true, 7, true, &mut rng).unwrap();
        for i in 1..=3 {
            w.on_ack(n(i), 1);
        }
        w.end();
        assert!(w.poll(at(95), true, 8, false, &mut rng).is_some());
    }

    #[test]
    fn a_token_back_long_after_an_earlier_lease_renews_at_once() {
        let mut r = Renewer::new(CFG);
        let mut rng = SeededRng::new(1);
        r.poll(at(0), true, 7, true, &mut rng).unwrap();
        for i in 1..=3 {
            r.on_ack(n(i), 1);
        }
        // The token leaves (waiting for it again), then comes back long
        // after that lease ended: no backoff, a renewal at once.
        assert!(r.poll(at(5), true, 7, false, &mut rng).is_none(), "the lease is live: on the period");
        assert!(r.poll(at(35), true, 7, false, &mut rng).is_some());
        assert_eq!(r.poll(at(400), true, 7, true, &mut rng).map(|x| x.holding), Some(true));
        // Likewise after a spell with no clients.
        let mut r = Renewer::new(CFG);
        r.poll(at(0), true, 7, true, &mut rng).unwrap();
        for i in 1..=3 {
            r.on_ack(n(i), 1);
        }
        assert!(r.poll(at(10), false, 7, true, &mut rng).is_none());
        assert!(r.poll(at(500), true, 7, true, &mut rng).is_some());
    }

    #[test]
    fn an_ended_lease_ignores_late_acks() {
        let mut r = Renewer::new(CFG);
        let mut rng = SeededRng::new(1);
        r.poll(at(0), true, 7, true, &mut rng).unwrap();
        r.on_ack(n(1), 1);
        r.on_ack(n(2), 1);
        r.end();
        assert_eq!(r.on_ack(n(3), 1), None);
        assert_eq!(r.live_until(at(1), 7), None);
    }

    #[test]
    fn acks_holders_always_waiters_only_behind_a_live_holder() {
        let mut a = Acker::new();
        assert!(!a.on_renew(&CFG, at(0), n(2), false), "no holder acked: a waiter gets no ack");
        assert_eq!(a.busy_for(at(0), n(3)), None);
        assert!(a.on_renew(&CFG, at(10), n(1), true));
        assert!(a.on_renew(&CFG, at(20), n(2), false));
        // Acked the holder at 10: waiters are acked until 10 + 90.9 ms.
        assert!(a.on_renew(&CFG, Instant::from_micros(100_899), n(2), false));
        assert!(!a.on_renew(&CFG, Instant::from_micros(100_900), n(2), false));
    }

    #[test]
    fn an_ack_refuses_other_proposers_for_the_stretched_lease() {
        let mut a = Acker::new();
        assert!(a.on_renew(&CFG, at(10), n(1), true));
        // Node 1's own proposal is not bound by its own renewal.
        assert_eq!(a.busy_for(at(50), n(1)), None);
        // Anyone else's is, until 10 + 90.9 ms: just before, and at the end.
        assert_eq!(a.busy_for(at(50), n(2)), Some(Duration::from_micros(50_900)));
        assert_eq!(a.busy_for(Instant::from_micros(100_899), n(2)), Some(Duration::from_micros(1)));
        assert_eq!(a.busy_for(Instant::from_micros(100_900), n(2)), None);
        // Two renewers: the longest window counts, minus the proposer's.
        assert!(a.on_renew(&CFG, at(40), n(3), false));
        assert_eq!(a.busy_for(at(50), n(3)), Some(Duration::from_micros(50_900)));
        assert_eq!(a.busy_for(at(50), n(1)), Some(Duration::from_micros(80_900)));
        a.forget_expired(at(200));
        assert_eq!(a, Acker::new());
    }

    #[test]
    fn holding_the_token_itself_lets_waiters_be_acked_for_a_window() {
        let mut a = Acker::new();
        a.saw_token(&CFG, at(10));
        assert!(a.on_renew(&CFG, at(20), n(2), false));
        // It binds nobody by itself: only the ack does (to node 2).
        assert_eq!(a.busy_for(at(20), n(2)), None);
        assert_eq!(a.busy_for(at(20), n(3)), Some(Duration::from_micros(90_900)));
        assert!(!a.on_renew(&CFG, Instant::from_micros(100_900), n(3), false));
    }

    const ON: LeaseRules = LeaseRules::ALL_ON;
    const KNOWS_7: Promised = Promised { threshold: 7, recovered: true };

    fn renewal(epoch: u64, holding: bool) -> Renewal {
        Renewal { round: 1, epoch, holding }
    }

    #[test]
    fn a_renewal_below_the_threshold_is_refused_with_it_and_binds_nothing() {
        let mut a = Acker::new();
        assert!(a.on_renew(&CFG, at(0), n(1), true));
        let before = a.clone();
        // Refused even when the site has not recovered (the threshold comes
        // first), and the expired window of node 1 is not even dropped.
        for promised in [KNOWS_7, Promised { threshold: 7, recovered: false }] {
            let v = a.judge_renewal(&CFG, at(200), n(2), renewal(6, true), promised, ON);
            assert_eq!(v, RenewVerdict::Refuse { threshold: 7 });
            assert!(!v.judged());
        }
        assert_eq!(a, before);
        // At the threshold: acked.
        assert_eq!(a.judge_renewal(&CFG, at(200), n(2), renewal(7, true), KNOWS_7, ON), RenewVerdict::Ack);
        // The rule off: a stale holder's renewal is acked, and binds.
        let mut a = Acker::new();
        let off = LeaseRules { refuse_stale: false, ..ON };
        assert_eq!(a.judge_renewal(&CFG, at(10), n(2), renewal(6, true), KNOWS_7, off), RenewVerdict::Ack);
        assert_eq!(a.busy_for(at(10), n(3)), Some(Duration::from_micros(90_900)));
    }

    #[test]
    fn an_unrecovered_node_ignores_renewals_and_binds_nothing() {
        let fresh = Promised { threshold: 0, recovered: false };
        let mut a = Acker::new();
        assert!(a.on_renew(&CFG, at(0), n(1), true));
        let before = a.clone();
        let v = a.judge_renewal(&CFG, at(200), n(2), renewal(7, true), fresh, ON);
        assert_eq!(v, RenewVerdict::Ignore);
        assert!(!v.judged());
        assert_eq!(a, before, "not even the expired windows are dropped");
        // The rule off: acked, and it binds.
        let off = LeaseRules { unrecovered_ack_none: false, ..ON };
        assert_eq!(a.judge_renewal(&CFG, at(200), n(2), renewal(7, true), fresh, off), RenewVerdict::Ack);
        assert_eq!(a.busy_for(at(200), n(3)), Some(Duration::from_micros(90_900)));
        assert_eq!(a.busy_for(at(200), n(2)), None, "node 1's window was dropped, node 2 binds only others");
    }

    #[test]
    fn a_waiting_renewal_is_acked_only_behind_a_holder() {
        let mut a = Acker::new();
        let v = a.judge_renewal(&CFG, at(0), n(2), renewal(7, false), KNOWS_7, ON);
        assert_eq!(v, RenewVerdict::Unacked);
        assert!(v.judged());
        assert_eq!(a, Acker::new(), "an unacked renewal binds nothing");
        assert_eq!(a.judge_renewal(&CFG, at(10), n(1), renewal(7, true), KNOWS_7, ON), RenewVerdict::Ack);
        assert!(RenewVerdict::Ack.judged());
        assert_eq!(a.judge_renewal(&CFG, at(20), n(2), renewal(7, false), KNOWS_7, ON), RenewVerdict::Ack);
        // One window after the holder's ack (10 + 90.9 ms): unacked again,
        // and the ended windows are dropped first.
        let end = Instant::from_micros(100_900);
        assert_eq!(a.judge_renewal(&CFG, end, n(3), renewal(7, false), KNOWS_7, ON), RenewVerdict::Unacked);
        assert_eq!(a.busy_for(end, n(4)), Some(Duration::from_millis(10)), "node 2's ack at 20 still binds");
        let mut b = a.clone();
        b.forget_expired(end);
        assert_eq!(a, b);
        // The rule off: a waiter's renewal is acked as a holder's, and opens
        // the window for the next waiter.
        let off = LeaseRules { waiters_behind_holder: false, ..ON };
        let mut a = Acker::new();
        assert_eq!(a.judge_renewal(&CFG, at(0), n(2), renewal(7, false), KNOWS_7, off), RenewVerdict::Ack);
        assert_eq!(a.judge_renewal(&CFG, at(1), n(3), renewal(7, false), KNOWS_7, ON), RenewVerdict::Ack);
    }

    #[test]
    fn an_ack_binds_only_while_its_rules_are_on() {
        let mut a = Acker::new();
        assert_eq!(a.judge_renewal(&CFG, at(10), n(1), renewal(7, true), KNOWS_7, ON), RenewVerdict::Ack);
        assert_eq!(a.busy_under(ON, at(50), n(2)), Some(Duration::from_micros(50_900)));
        assert_eq!(a.busy_under(ON, at(50), n(1)), None, "the renewer itself is not bound");
        assert_eq!(a.busy_under(LeaseRules { ack_binds: false, ..ON }, at(50), n(2)), None);
        assert_eq!(a.busy_under(LeaseRules { leases: false, ..ON }, at(50), n(2)), None);
        assert_eq!(a.busy_under(ON, Instant::from_micros(100_900), n(2)), None);
        assert_eq!(FOREVER, Instant::from_micros(u64::MAX));
    }
}

//! The promise component every daemon core embeds (foundation.md, Durable
//! state): threshold and floor, the promiser and proposer halves, promise
//! windows, the restart window and fresh-node recovery.
//!
//! Sans-IO: time comes in as [`Instant`] arguments, randomness as a
//! [`SeededRng`] argument. The daemon supplies its own messages and its own
//! extra refusal conditions (a held token, a lease ack), which it checks
//! before handing a proposal to [`PromiseNode::on_proposal`].
//!
//! **Persist before acting.** Every method that changes the stored part
//! marks it dirty. After each input the core calls
//! [`PromiseNode::take_dirty`] and, if it returns a snapshot, writes it to the
//! state file *before* sending any ack, `HelloAck`, token or proposal that
//! the input produced, and before using a won proposal. A promise that is
//! acked but not stored is forgotten by a crash and given twice.

mod config;
mod recovery;
mod stored;
mod value;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::time::Duration;

use membership::NodeId;
use timer::{Instant, SeededRng};

pub use config::{Config, ConfigError, PromiseRule};
pub use recovery::{AckStep, RoundStep};
pub use stored::{Promises, Values};
pub use value::{encode, is_sane, next_above, round_of, slot_of, MAX_ROUND, SLOTS, SLOT_BITS};

use recovery::Recovery;

/// Why a proposal (or traffic, or a token) is refused. Carried back to the
/// proposer so that it can jump past or wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Refusal {
    /// At or below the threshold (ties refused): go above `value`.
    Promised {
        /// The refuser's threshold.
        value: u64,
    },
    /// Promised another proposer within its promise window.
    Busy {
        /// Until the window ends.
        remaining: Duration,
    },
    /// In its restart window: promises nothing yet.
    Restarting {
        /// Until the window ends.
        remaining: Duration,
    },
    /// A fresh node that has not recovered: promises nothing.
    Unrecovered,
    /// A token at or below what a recovered fresh node recovered.
    Stale {
        /// The refuser's `recovered_max`.
        recovered_max: u64,
    },
    /// A value that would overflow, or a proposer that is not a member.
    Invalid,
}

/// A promise was given: persist ([`PromiseNode::take_dirty`]) before acking.
#[must_use = "the promise must be persisted and then acked"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Promise {
    /// The value promised.
    pub value: u64,
    /// This node's own live proposal, abandoned for the higher one.
    pub abandoned_own: Option<u64>,
}

/// Traffic of a value in use was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InUse {
    /// The stored values rose (persist before acting on the traffic).
    pub raised: bool,
    /// This node's own live proposal, abandoned because a higher value is in use.
    pub abandoned_own: Option<u64>,
}

/// Why an own proposal was abandoned. Only [`Failure::Busy`] retries soon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// Refused only by windows: retry just after `longest`.
    Busy {
        /// The longest remaining window among the `Busy` answers.
        longest: Duration,
    },
    /// Refused for another reason.
    Refused(Refusal),
    /// Not complete within `W·(1−ρ)` of sending.
    Deadline,
    /// The core gave it up (its own rule, e.g. a holder answered).
    Vetoed,
}

/// What an answer did to the live proposal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Not for the live proposal (late, duplicate, abandoned, earlier life).
    Ignored,
    /// Counted; no majority yet.
    Pending,
    /// A majority of configured nodes promised in time and nobody refused:
    /// the core may call [`PromiseNode::use_proposal`] (now, or once its
    /// own extra answers are in, while still before the deadline).
    Majority,
    /// The proposal is abandoned; see [`PromiseNode::retry_after`].
    Abandoned(Failure),
}

/// Why [`PromiseNode::use_proposal`] did not hand out a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UseError {
    /// There is no live proposal.
    NoProposal,
    /// Not yet a majority; the proposal stays live.
    NoMajority,
    /// Too late: the proposal is now abandoned.
    Abandoned(Failure),
}

/// The promise a node gave another proposer, kept in memory for its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Given {
    to: NodeId,
    value: u64,
    until: Instant,
}

/// This node's own live proposal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Proposal {
    value: u64,
    deadline: Instant,
    promisers: BTreeSet<NodeId>,
}

/// The promise component: stored part plus the windows and proposal that
/// live in memory only (a restart loses them; the restart window covers that).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PromiseNode {
    cfg: Config,
    slot: u16,
    stored: Promises,
    dirty: bool,
    restart_until: Instant,
    /// NC1: a fresh node started with `--new-cluster` waives its restart
    /// window provisionally; this is where the window ends if NC3 revokes
    /// the waiver.
    waived: Option<Instant>,
    /// NC4: recovered by NC2 (the cluster is new): the first proposal goes
    /// by rank, not after a random delay.
    new_cluster_start: bool,
    /// NC3: the waiver was revoked by an answer with a value: this life
    /// recovers as if started without `--new-cluster`.
    flag_void: bool,
    given: Option<Given>,
    proposal: Option<Proposal>,
    recovery: Recovery,
}

/// What a core chooses about its promise component
/// ([`PromiseNode::for_core`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// W: the promise window and the proposal deadline ([`Config::window`]).
    pub window: Duration,
    /// The daemon's lease: the restart window, `max(W, lease)·(1+ρ)`,
    /// outlasts the previous life's lease acks too.
    pub lease: Duration,
    /// ρ, the clock drift allowed, in parts per million.
    pub drift_ppm: u32,
    /// Whether a promise refuses other proposals for W
    /// ([`Config::promise_window`]).
    pub promise_window: bool,
    /// The component's rules: all on, except in a mutation test.
    pub rules: ftcore::rules::Rules<PromiseRule>,
}

/// The component's rules as a core's own rule table switches them: `map`
/// names the component rule each of the core's rules stands for. Every
/// rule is on unless a mutation test switched the core's off (without
/// ftcore's `mutations` feature, always all on).
pub fn rules_from<R: ftcore::rules::Rule>(
    rules: ftcore::rules::Rules<R>,
    map: impl Fn(R) -> Option<PromiseRule>,
) -> ftcore::rules::Rules<PromiseRule> {
    let carried = ftcore::rules::Rules::ALL_ON;
    let _ = (&rules, &map);
    ftcore::mutant! {
        let carried = rules.carry_into(carried, map);
    }
    carried
}

impl PromiseNode {
    /// Starts a life at `now` from the loaded state file (`None`: the file
    /// is missing, a fresh node). A fresh node is dirty at once so that its
    /// first write marks the file unrecovered.
    pub fn new(cfg: Config, loaded: Option<Promises>, now: Instant) -> Result<Self, ConfigError> {
        let slot = cfg.validate()?;
        let fresh = loaded.is_none();
        let mut stored = loaded.unwrap_or_else(Promises::fresh).loaded();
        // (safety) A previous life may have bound itself for longer than
        // this config would (its lease or W was larger): the restart
        // window covers the longest; a longer binding from now on is
        // stored before this life acks or promises anything.
        let previous = stored.binding();
        let raised = stored.bind(cfg.binding());
        let window_ends = if cfg.rules.on(PromiseRule::RestartWindow) { cfg.restart_ends(now, previous) } else { now };
        // NC1: nothing binds a life that never ran; the answers decide
        // (NC2/NC3) whether this one had none.
        let waive = cfg.new_cluster && !stored.recovered();
        let (restart_until, waived) = if waive { (now, Some(window_ends)) } else { (window_ends, None) };
        Ok(PromiseNode {
            cfg,
            slot,
            stored,
            dirty: fresh || raised,
            restart_until,
            waived,
            new_cluster_start: false,
            flag_void: false,
            given: None,
            proposal: None,
            recovery: Recovery::default(),
        })
    }

    /// The one way a protocol core sets up its promise component: the
    /// members, this node, whether the cluster is new and the time come
    /// from the core's `ctx`; the core chooses the rest ([`Setup`]); and
    /// `loaded` is what its previous life stored (`None`: a fresh node).
    pub fn for_core<C, D>(
        ctx: &ftcore::Context<C, D>,
        setup: Setup,
        loaded: Option<Promises>,
    ) -> Result<Self, ConfigError> {
        let Setup { window, lease, drift_ppm, promise_window, rules } = setup;
        let cfg = Config {
            lease,
            drift_ppm,
            new_cluster: ctx.new_cluster,
            promise_window,
            rules,
            ..Config::new(ctx.membership.ids().collect(), ctx.me, window)
        };
        PromiseNode::new(cfg, loaded, ctx.now)
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// This node's slot (index in the configured members).
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The stored part as it is now.
    pub fn stored(&self) -> &Promises {
        &self.stored
    }

    /// Whether the stored part changed since the last [`Self::take_dirty`].
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// The snapshot to write to the state file, if anything changed. Write it
    /// before sending anything the last input produced.
    #[must_use = "write the snapshot before sending"]
    pub fn take_dirty(&mut self) -> Option<Promises> {
        std::mem::take(&mut self.dirty).then(|| self.stored.clone())
    }

    /// What to answer in `HelloAck` (`None` while unrecovered).
    pub fn values(&self) -> Option<Values> {
        self.stored.values()
    }

    /// The effective threshold: the stored one, or the own live proposal if higher.
    pub fn threshold(&self) -> u64 {
        let own = self.proposal.as_ref().map_or(0, |p| p.value);
        self.stored.threshold().max(own)
    }

    /// When the restart window ends.
    pub fn restart_window_ends(&self) -> Instant {
        self.restart_until
    }

    /// The live own proposal's value and deadline, for the core's timer.
    pub fn proposal(&self) -> Option<(u64, Instant)> {
        self.proposal.as_ref().map(|p| (p.value, p.deadline))
    }

    /// Whether `value` is the live own proposal and its deadline has not
    /// passed at `now` (else answers to it can no longer complete it).
    pub fn proposal_live(&self, value: u64, now: Instant) -> bool {
        self.proposal.as_ref().is_some_and(|p| p.value == value && now < p.deadline)
    }

    /// Who has promised the live own proposal (this node included), for a
    /// core with extra majority rules (ntmutexd: every non-suspected site).
    pub fn promisers(&self) -> Option<&BTreeSet<NodeId>> {
        self.proposal.as_ref().map(|p| &p.promisers)
    }

    fn restarting(&self, now: Instant) -> Option<Refusal> {
        (now < self.restart_until).then(|| Refusal::Restarting { remaining: self.restart_until.saturating_since(now) })
    }

    /// Busy if a promise to someone other than `proposer` is within its window.
    fn busy_for(&self, proposer: NodeId, now: Instant) -> Option<Refusal> {
        let g = self.given.as_ref()?;
        (self.cfg.promise_window && g.to != proposer && now < g.until)
            .then(|| Refusal::Busy { remaining: g.until.saturating_since(now) })
    }

    fn at_or_below_threshold(&self, value: u64) -> bool {
        let t = self.threshold();
        if self.cfg.rules.on(PromiseRule::TiesRefused) {
            value <= t
        } else {
            value < t
        }
    }

    /// Forgets what has run out: a promise window, and the own proposal
    /// once its deadline has passed (returned).
    fn expire(&mut self, now: Instant) -> Option<u64> {
        if self.given.is_some_and(|g| now >= g.until) {
            self.given = None;
        }
        if self.proposal.as_ref().is_some_and(|p| now >= p.deadline) {
            return self.drop_own();
        }
        None
    }

    /// Abandons the own live proposal. Not worth a write: a restart
    /// abandons whatever `own` the file holds anyway.
    fn drop_own(&mut self) -> Option<u64> {
        let p = self.proposal.take()?;
        self.stored.set_own(None);
        Some(p.value)
    }

    // ---- promiser half ----

    /// A proposal of `value` from `from`. On `Ok` the promise is in the
    /// stored part: persist, then ack. On `Err` answer the refusal.
    pub fn on_proposal(&mut self, from: NodeId, value: u64, now: Instant) -> Result<Promise, Refusal> {
        self.expire(now);
        if from == self.cfg.me || !self.cfg.is_member(from) || !is_sane(value) {
            return Err(Refusal::Invalid);
        }
        if !self.stored.recovered() {
            return Err(Refusal::Unrecovered);
        }
        // A repeat of the promise just given (a lost ack) is acked again.
        if let Some(g) = self.given {
            if g.to == from && g.value == value && now < g.until {
                return Ok(Promise { value, abandoned_own: None });
            }
        }
        if self.at_or_below_threshold(value) {
            return Err(Refusal::Promised { value: self.threshold() });
        }
        if let Some(r) = self.restarting(now).or_else(|| self.busy_for(from, now)) {
            return Err(r);
        }
        let abandoned_own = self.drop_own();
        self.stored.promise(value);
        self.dirty = true;
        self.given = Some(Given { to: from, value, until: self.cfg.promise_ends(now) });
        Ok(Promise { value, abandoned_own })
    }

    /// A vote in an election of `value` (electd's term): a promise that is
    /// not given to one proposer, because the candidate is chosen by the
    /// ring (the highest id among the voters), and may be this node. The
    /// same rules as [`Self::on_proposal`] otherwise: refused at or below
    /// the threshold (one vote per term, only above every term voted in),
    /// while unrecovered and in the restart window. On `Ok` persist, then
    /// forward the vote.
    pub fn vote(&mut self, value: u64, now: Instant) -> Result<(), Refusal> {
        self.expire(now);
        if !is_sane(value) {
            return Err(Refusal::Invalid);
        }
        if !self.stored.recovered() {
            return Err(Refusal::Unrecovered);
        }
        if self.at_or_below_threshold(value) {
            return Err(Refusal::Promised { value: self.threshold() });
        }
        if let Some(r) = self.restarting(now) {
            return Err(r);
        }
        self.stored.promise(value);
        self.dirty = true;
        Ok(())
    }

    /// Traffic (token, heartbeat, renewal, ack) of `value` in use. Below the
    /// threshold it is refused; above, it raises the stored values (persist
    /// before acting on it). Allowed in the restart window: it is no promise.
    pub fn on_in_use(&mut self, value: u64, now: Instant) -> Result<InUse, Refusal> {
        self.expire(now);
        if !is_sane(value) {
            return Err(Refusal::Invalid);
        }
        if value < self.threshold() {
            return Err(Refusal::Promised { value: self.threshold() });
        }
        let abandoned_own = match self.proposal.as_ref() {
            Some(p) if p.value < value => self.drop_own(),
            _ => None,
        };
        // A value at or above the one promised here is in use: the promised
        // proposal can no longer complete after it (foundation.md, Promise
        // windows), which is all the window guards against. It ends.
        if self.given.is_some_and(|g| g.value <= value) {
            self.given = None;
        }
        let raised = value > self.stored.in_use();
        if raised {
            self.stored.see_in_use(value);
            self.dirty = true;
        }
        Ok(InUse { raised, abandoned_own })
    }

    /// Whether a token of `epoch` may be accepted: not while unrecovered,
    /// not at or below `recovered_max` (across later lives too), not below
    /// the threshold. Accepting it is then [`Self::on_in_use`].
    pub fn check_token(&self, epoch: u64) -> Result<(), Refusal> {
        if !self.stored.recovered() {
            return Err(Refusal::Unrecovered);
        }
        if epoch <= self.stored.recovered_max() {
            return Err(Refusal::Stale { recovered_max: self.stored.recovered_max() });
        }
        if !is_sane(epoch) {
            return Err(Refusal::Invalid);
        }
        if epoch < self.threshold() {
            return Err(Refusal::Promised { value: self.threshold() });
        }
        Ok(())
    }

    /// A refusal named `value` outside a proposal (tokenwatchd's `Stale`
    /// answer to a token): the next proposal goes above it. Absurd values
    /// are ignored. Persist before proposing.
    pub fn raise_floor(&mut self, value: u64) {
        if is_sane(value) && value > self.stored.floor() {
            self.stored.raise_floor(value);
            self.dirty = true;
        }
    }

    // ---- proposer half ----

    /// Proposes the next value in this node's slot above everything it
    /// knows; at the top of the value space it stops (`Invalid`), never
    /// wraps. On `Ok` persist, then send the proposal to every configured node.
    pub fn propose(&mut self, now: Instant) -> Result<u64, Refusal> {
        let above = self.stored.floor().max(self.threshold());
        let next = next_above(above, self.slot);
        ftcore::mutant! {
            if self.cfg.rules.off(PromiseRule::StopAtTheTop) && !next.is_some_and(is_sane) {
                let wrapped = encode(0, self.slot).ok_or(Refusal::Invalid)?;
                return self.start_proposal(wrapped, true, now);
            }
        }
        let value = next.ok_or(Refusal::Invalid)?;
        self.propose_value(value, now)
    }

    /// Proposes `value` (a daemon without slots, e.g. `floor + 1`); it must
    /// be above the floor and the threshold. Supersedes a live own proposal.
    pub fn propose_value(&mut self, value: u64, now: Instant) -> Result<u64, Refusal> {
        self.start_proposal(value, false, now)
    }

    /// `wrapped`: only with [`PromiseRule::StopAtTheTop`] off, a value the
    /// proposer wrapped to, which it takes for one above its floor.
    fn start_proposal(&mut self, value: u64, wrapped: bool, now: Instant) -> Result<u64, Refusal> {
        self.expire(now);
        if !self.stored.recovered() {
            return Err(Refusal::Unrecovered);
        }
        if !is_sane(value) {
            return Err(Refusal::Invalid);
        }
        if !wrapped && (value <= self.stored.floor() || self.at_or_below_threshold(value)) {
            return Err(Refusal::Promised { value: self.stored.floor().max(self.threshold()) });
        }
        if let Some(r) = self.restarting(now).or_else(|| self.busy_for(self.cfg.me, now)) {
            return Err(r);
        }
        self.drop_own();
        self.stored.set_own(Some(value));
        self.dirty = true;
        let mut promisers = BTreeSet::new();
        promisers.insert(self.cfg.me);
        self.proposal = Some(Proposal { value, deadline: self.cfg.deadline(now), promisers });
        Ok(value)
    }

    /// An answer from `from` to the proposal of `value`: `Ok(())` a promise.
    /// Answers must come from this life's proposal (the transport drops those
    /// addressed to an earlier life).
    pub fn on_answer(&mut self, from: NodeId, value: u64, answer: Result<(), Refusal>, now: Instant) -> Step {
        if self.expire(now) == Some(value) {
            return Step::Abandoned(Failure::Deadline);
        }
        let Some(p) = self.proposal.as_mut() else { return Step::Ignored };
        if p.value != value || from == self.cfg.me || !self.cfg.is_member(from) {
            return Step::Ignored;
        }
        match answer {
            Ok(()) => {
                p.promisers.insert(from);
                if p.promisers.len() >= self.cfg.majority() {
                    Step::Majority
                } else {
                    Step::Pending
                }
            }
            Err(refusal) => {
                self.drop_own();
                if let Refusal::Promised { value } = refusal {
                    // Jump past it next time, unless it is absurd.
                    if is_sane(value) && value > self.stored.floor() {
                        self.stored.raise_floor(value);
                        self.dirty = true;
                    }
                }
                Step::Abandoned(match refusal {
                    Refusal::Busy { remaining } => Failure::Busy { longest: remaining },
                    other => Failure::Refused(other),
                })
            }
        }
    }

    /// Uses the live proposal if a majority promised it before its deadline
    /// and nobody refused. On `Ok` the value is stored as in use: persist,
    /// then create the token / take office with it.
    pub fn use_proposal(&mut self, now: Instant) -> Result<u64, UseError> {
        self.use_proposal_with_quorum(now, self.cfg.majority())
    }

    /// As [`Self::use_proposal`], with `quorum` promisers (this node
    /// included) instead of a majority of the configured nodes. Only for a
    /// daemon configured to serve in a minority (ringd's `allow_minority`:
    /// the majority of its current ring), which then accepts that a
    /// partition yields two tokens; a quorum below a configured majority
    /// gives up the guarantees of this component.
    pub fn use_proposal_with_quorum(&mut self, now: Instant, quorum: usize) -> Result<u64, UseError> {
        if self.expire(now).is_some() {
            return Err(UseError::Abandoned(Failure::Deadline));
        }
        let p = self.proposal.as_ref().ok_or(UseError::NoProposal)?;
        if p.promisers.len() < quorum.max(1) {
            return Err(UseError::NoMajority);
        }
        let value = p.value;
        self.proposal = None;
        self.stored.set_own(None);
        self.stored.see_in_use(value);
        self.dirty = true;
        Ok(value)
    }

    /// The proposal timer fired (at or after the deadline, possibly late):
    /// abandons the live proposal if its deadline has passed.
    pub fn on_deadline(&mut self, now: Instant) -> Option<u64> {
        self.expire(now)
    }

    /// The core gives up its live proposal (a veto of its own rules, or its
    /// deadline timer fired). Returns the abandoned value.
    pub fn abandon(&mut self, now: Instant) -> Option<u64> {
        self.expire(now).or_else(|| self.drop_own())
    }

    /// How long to wait before retrying after `failure`: just past the
    /// longest `Busy` plus up to W/10 of jitter, otherwise a random delay in
    /// `[W·(1+ρ)/(1−ρ), 2×that]` so that two proposers stop colliding.
    pub fn retry_after(&self, failure: &Failure, rng: &mut SeededRng) -> Duration {
        match failure {
            Failure::Busy { longest } => {
                let jitter = rng
                    .duration_between(Duration::from_micros(1), (self.cfg.window / 10).max(Duration::from_micros(1)));
                longest.saturating_add(jitter)
            }
            _ => {
                let base = self.cfg.retry_base();
                rng.duration_between(base, base.saturating_mul(2))
            }
        }
    }

    /// The earliest time for this life's first proposal: the end of the
    /// restart window plus a random delay of up to W, so that a cold
    /// restart of every node does not start N colliding proposals. A fresh
    /// node started with `--new-cluster` cannot know yet (it recovers
    /// first): the end of the window it would have without the flag; once
    /// it recovers, [`PromiseNode::first_proposal_in_new_cluster`] says.
    pub fn first_proposal_at(&self, rng: &mut SeededRng) -> Instant {
        self.waived.unwrap_or(self.restart_until) + rng.duration_between(Duration::ZERO, self.cfg.window)
    }

    /// NC4: after recovering in a new cluster (NC2), the first proposal is
    /// due `(slot + 1) · lease·(1+ρ)` after `now`, the slot being this
    /// node's position in the configured peer list: the first-listed live
    /// node proposes first and the others see its value in use before
    /// their turn. `None` otherwise.
    pub fn first_proposal_in_new_cluster(&self, now: Instant) -> Option<Instant> {
        self.new_cluster_start.then(|| {
            // One step more than the rank, so that peers started at about
            // the same time have recovered too (an unrecovered peer refuses).
            let step = self.cfg.stretched(self.cfg.lease.max(Duration::from_millis(1)));
            now + step.saturating_mul(u32::from(self.slot) + 1)
        })
    }

    /// Whether this life recovered by NC2 (its cluster was new).
    pub fn new_cluster_start(&self) -> bool {
        self.new_cluster_start
    }

    // ---- fresh-node recovery ----

    /// Starts a recovery round with `nonce` (unique in this life): send
    /// `Hello { nonce }` to every peer if this returns [`RoundStep::Send`].
    pub fn recovery_round(&mut self, nonce: u64, now: Instant) -> RoundStep {
        if self.stored.recovered() {
            return RoundStep::NotNeeded;
        }
        // A waiver that has not led to recovery by the end of the window
        // it stood for lapses (a host down at the first start): the node
        // recovers as before NC1, the flag's ⌊N/2⌋ rule included; answers
        // so far were pre-window ones.
        if self.waived.is_some_and(|ends| now >= ends) {
            self.waived = None;
            self.recovery = Recovery::default();
        }
        if now < self.restart_until {
            return RoundStep::Wait { until: self.restart_until };
        }
        self.recovery.add_nonce(nonce);
        self.try_recover()
    }

    /// A peer's `HelloAck { nonce, values }`. Only a peer's latest answer to
    /// a nonce sent after the restart window counts.
    pub fn on_hello_ack(&mut self, from: NodeId, nonce: u64, values: Option<Values>, _now: Instant) -> AckStep {
        if self.stored.recovered() || from == self.cfg.me || !self.cfg.is_member(from) {
            return AckStep::Ignored;
        }
        if values.is_some_and(|v| !is_sane(v.max())) || !self.recovery.record(from, nonce, values) {
            return AckStep::Ignored;
        }
        match self.try_recover() {
            RoundStep::Recovered { max } => AckStep::Recovered { max },
            _ => AckStep::Pending,
        }
    }

    fn try_recover(&mut self) -> RoundStep {
        let others = self.cfg.members.len() - 1;
        if let Some(window_ends) = self.waived {
            // NC3: somebody has promised or used a value: the cluster is
            // not new, and this life waits its restart window after all.
            let guard = self.cfg.rules.on(PromiseRule::NewClusterGuard);
            if self.recovery.any_value() && guard {
                self.void_flag();
                self.restart_until = window_ends;
                return RoundStep::Wait { until: window_ends };
            }
            // NC2: a majority of the others, each unrecovered or all zeros
            // (without the guard, the flag's old ⌊N/2⌋).
            let needed = if guard { others / 2 + 1 } else { others.div_ceil(2) };
            return match self.recovery.decide_new_cluster(needed) {
                Some((max, in_use)) => {
                    self.waived = None;
                    self.new_cluster_start = true;
                    self.recovered(max, in_use)
                }
                None => RoundStep::Send,
            };
        }
        match self.recovery.decide(others, self.cfg.new_cluster && !self.flag_void) {
            Some((max, in_use)) => self.recovered(max, in_use),
            None => RoundStep::Send,
        }
    }

    /// NC3: no more waiver, and no `--new-cluster` rule, for this life;
    /// the answers so far are forgotten.
    fn void_flag(&mut self) {
        self.waived = None;
        self.flag_void = true;
        self.recovery = Recovery::default();
    }

    fn recovered(&mut self, max: u64, in_use: u64) -> RoundStep {
        self.stored.recover(max, in_use);
        self.dirty = true;
        self.recovery = Recovery::default();
        RoundStep::Recovered { max: self.stored.recovered_max() }
    }
}

//! The sans-IO core of ringd: the heartbeat ring (embedded `hbring`), ring
//! repair with `IAmNewNext`, the token with its majority lease, regeneration
//! by a census a majority promised, the least-loaded lookup, and services.
//!
//! Reading guide: this file holds the settings, the state, the `Protocol`
//! impl and the dispatch; each mechanism of ringd.md is one file, an `impl
//! RdNode` block readable against one section of the spec:
//!
//! - [`repair`]: reactions to the heartbeat ring (a dead predecessor starts
//!   a recovery, a dead successor is remembered, a new life drops the
//!   token), `IAmNewNext` / `IAmNewPrevious` / `Copy`, fresh-node recovery;
//! - [`token`]: accepting, acknowledging, passing, resending, freezing and
//!   releasing the token; `Stale` and superseded owners;
//! - [`lease`]: `HolderAlive` to every replica and the owner's lease;
//! - [`census`]: regeneration by a census a majority promised;
//! - [`services`]: `Execute`, the built-in services, token services run
//!   under the lease and answered once the successor has the result;
//! - [`lookup`]: `LookUpRequest` and the circulating `Find`.
//!
//! Time comes in as arguments; every deadline is derived from the state
//! ([`poll_timeout`](RdNode::poll_timeout)). After every input
//! [`RdNode::after_input`] serves the visit and stores what changed (one
//! `Persist` ahead of the outputs it guards).

mod census;
mod lease;
mod lookup;
mod repair;
mod rules;
mod services;
#[cfg(test)]
mod tests;
mod token;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use api::ring::{Outcome, RingReply, RingRequest};
use durable::promise::{self, PromiseNode, Promises};
use ftcore::rules::Rules;
use ftcore::{ClientId, Context, Incarnation, JoinState, NodeId, Outbox, OutputOf, PeerView, Protocol, StatusReport};
use hbring::{HbConfig, HbEvent, HbRing};
use membership::{MembershipError, Status};
use serde::{Deserialize, Serialize};
use timer::{Instant, Lease, SeededRng};

use crate::msg::{Msg, Token};

pub use census::CensusOutcome;
pub use rules::RdRule;
pub use services::{is_builtin, MAX_OUTPUT, MIN_FRAME};

/// Protocol settings (derived from the daemon's config; checked by
/// [`RdConfig::validate`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RdConfig {
    /// `timing.heartbeat_ms`: heartbeats to the successor, and the
    /// owner's `HolderAlive` period while it has token services.
    pub heartbeat: Duration,
    /// `timing.suspect_after_ms`: silence before a neighbour is suspected;
    /// the resend period of an unacknowledged token; the census wait W.
    pub suspect_after: Duration,
    /// `timing.lease_ms`: the owner's majority lease.
    pub lease: Duration,
    /// ρ in parts per million.
    pub drift_ppm: u32,
    /// `token_min_hold_ms`: an idle owner holds the token this long.
    pub token_min_hold: Duration,
    /// `token_lost_after_ms`: no token or HolderAlive seen this long starts
    /// a census.
    pub token_lost_after: Duration,
    /// `lookup_timeout_ms`: a Find not back this long starts one more lap.
    pub lookup_timeout: Duration,
    /// Serve alone (a two-replica ring's survivor) — a partition then
    /// yields two tokens.
    pub allow_minority: bool,
    /// Most token services queued here.
    pub max_queue: usize,
    /// Most command services (and `sleep`s) running here at once (the
    /// worker pool); more are answered `busy`.
    pub workers: usize,
    /// Configured command services by name.
    pub services: BTreeMap<String, ServiceSpec>,
    /// This replica's client address (lookups answer it).
    pub client_addr: String,
    /// The (safety) rules: all on, except in a mutation test
    /// (`ftcore/mutations`).
    pub rules: Rules<RdRule>,
    /// The seq a regenerated token starts at (tests of seq overflow only;
    /// 0 in production).
    #[doc(hidden)]
    pub first_seq: u64,
}

/// A configured command service (`[services.NAME]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceSpec {
    /// The program and its first arguments (never a shell); the request's
    /// arguments follow.
    pub command: Vec<String>,
    /// Runs under the token (one at a time in the ring, with a fence).
    pub needs_token: bool,
    /// Killed this long after it started (and at its token lease's end).
    pub timeout: Duration,
}

/// What a config file that sets none of these keys gives on a cluster of
/// [`runtime::config::DEFAULT_CLUSTER_SIZE`] (`token_lost_after` derived;
/// `client_addr` empty): each default is written once, in
/// [`crate::config::RingdConfig`] and [`runtime::config::Timing`].
impl Default for RdConfig {
    fn default() -> Self {
        crate::config::RingdConfig::default()
            .core_with(&runtime::config::Timing::default(), runtime::config::DEFAULT_CLUSTER_SIZE)
    }
}

impl RdConfig {
    /// The least `token_lost_after` for `n` replicas: `suspect_after + 2
    /// laps + lease·(1+ρ)`, a lap being N·(token_min_hold + heartbeat)
    /// (ringd.md, Regeneration).
    pub fn token_lost_bound(&self, n: usize) -> Duration {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        let lap = (self.token_min_hold + self.heartbeat).saturating_mul(n32);
        self.suspect_after.saturating_add(lap.saturating_mul(2)).saturating_add(
            Lease::new(Instant::ZERO, self.lease, self.drift_ppm)
                .grantor_honours_until()
                .saturating_since(Instant::ZERO),
        )
    }

    /// The default `token_lost_after` for `n` replicas: the bound plus one
    /// `suspect_after` of margin.
    pub fn derived_token_lost_after(&self, n: usize) -> Duration {
        self.token_lost_bound(n).saturating_add(self.suspect_after)
    }

    /// Checks the settings for `n` replicas: the one place they are
    /// validated (the daemon's `--check-config` calls it too).
    pub fn validate(&self, n: usize) -> Result<(), RdError> {
        if self.heartbeat.is_zero() || self.heartbeat >= self.suspect_after {
            return Err(RdError::Heartbeat);
        }
        // A renewal every heartbeat keeps the lease alive (renew_ms part).
        if self.heartbeat.saturating_mul(2) > self.lease {
            return Err(RdError::LeaseTooShort);
        }
        let need = self.token_lost_bound(n);
        if self.token_lost_after <= need {
            return Err(RdError::LostTooSoon { need });
        }
        if self.lookup_timeout.is_zero() {
            return Err(RdError::ZeroLookupTimeout);
        }

        if self.max_queue == 0 || self.workers == 0 {
            return Err(RdError::ZeroQueue);
        }
        for (name, spec) in &self.services {
            if spec.command.is_empty() || spec.timeout.is_zero() || services::is_builtin(name) {
                return Err(RdError::BadService(name.clone()));
            }
        }
        Ok(())
    }
}

/// Why a replica cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RdError {
    /// `heartbeat_ms` is 0 or not below `suspect_after_ms`.
    #[error("timing.heartbeat_ms must be above 0 and below timing.suspect_after_ms")]
    Heartbeat,
    /// `lease_ms` below two heartbeats.
    #[error("timing.lease_ms must be at least 2 × timing.heartbeat_ms (the owner renews its lease every heartbeat)")]
    LeaseTooShort,
    /// `token_lost_after_ms` not above its bound.
    #[error(
        "token_lost_after_ms must be above suspect_after + 2·N·(token_min_hold + heartbeat) + lease·(1+ρ) = {need:?}"
    )]
    LostTooSoon {
        /// The bound.
        need: Duration,
    },
    /// `lookup_timeout_ms` is 0.
    #[error("lookup_timeout_ms must be above 0")]
    ZeroLookupTimeout,

    /// `max_queue` or `workers` is 0.
    #[error("max_queue and workers must be at least 1")]
    ZeroQueue,
    /// A command service without a command or a timeout, or named as a
    /// built-in.
    #[error("services.{0}: needs a non-empty command, timeout_ms above 0, and a name that is not a built-in")]
    BadService(String),
    /// The promise component refused the settings.
    #[error(transparent)]
    Promise(#[from] promise::ConfigError),
    /// The membership is unusable.
    #[error(transparent)]
    Membership(#[from] MembershipError),
}

impl RdError {
    /// The config key this error is about (`--check-config` names it).
    pub fn key(&self) -> &'static str {
        match self {
            RdError::Heartbeat => "timing.heartbeat_ms",
            RdError::LeaseTooShort => "timing.lease_ms",
            RdError::LostTooSoon { .. } => "token_lost_after_ms",
            RdError::ZeroLookupTimeout => "lookup_timeout_ms",
            RdError::ZeroQueue => "max_queue",
            RdError::BadService(_) => "services",
            RdError::Promise(_) | RdError::Membership(_) => "peers",
        }
    }
}

/// What a replica keeps on disk: its promises (epochs in use, promised,
/// proposed; fresh-node recovery). Token state lives only in copies.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RdDurable {
    /// The promise component's stored part (`None`: never written).
    pub promises: Option<Promises>,
}

/// What the core reports to metrics, logs and checkers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RdEvent {
    /// The heartbeat ring did something.
    Hb(HbEvent),
    /// A token was accepted and is owned here.
    Accepted {
        /// Its (epoch, seq).
        id: (u64, u64),
    },
    /// The token was passed to the successor (first transmission).
    Passed {
        /// The successor.
        to: NodeId,
    },
    /// A token service ran here under fence (epoch, seq) (checkers: one
    /// executor at a time, fences rising).
    Ran {
        /// (epoch, seq).
        fence: (u64, u64),
        /// The service.
        service: String,
        /// The client's request id.
        request_id: u64,
        /// The lease it ran under ends then (the owner's clock).
        lease_until: Instant,
    },
    /// A service's outcome was answered (metric by name and outcome).
    Executed {
        /// The service.
        service: String,
        /// `ok` or the error's label.
        outcome: &'static str,
    },
    /// The token came back here in the same epoch: one lap.
    Rotated {
        /// Since it last arrived.
        took: Duration,
    },
    /// A stale token was discarded.
    StaleDiscarded,
    /// A `Stale` was answered.
    StaleAnswered,
    /// A `Stale` reached this replica while it owned (or was handing on)
    /// a token of an epoch at or below the one named: it stops owning.
    StaleHeeded {
        /// It owned the token (else it was handing it on, unacked).
        owned: bool,
    },
    /// This replica stopped owning (a newer token, `Stale`, exclusion,
    /// overflow): its running token services were killed.
    Superseded,
    /// A newer token was accepted here while a token service of the
    /// owned one still ran (ringd.md, Superseded: it is killed, its client
    /// answered `token_lost`). Not expected with every (safety) rule on:
    /// a newer token comes from a census that every member of its origin's
    /// view answered without `Busy`, so this owner's lease, and with it
    /// its command's supervisor deadline, had ended first. The simulator's
    /// checkers treat it as a violation.
    SupersededWhileRunning {
        /// The running service's fence (the owned token's id).
        fence: (u64, u64),
        /// The newer token's (epoch, seq).
        by: (u64, u64),
    },
    /// The owner's lease ran out with token services waiting.
    LeaseExpired,
    /// A command service's supervisor killed it at its deadline (its
    /// timeout, or its token lease's end).
    SupervisorKilled {
        /// The service.
        service: String,
    },
    /// A census was started.
    CensusStarted {
        /// Its epoch.
        epoch: u64,
    },
    /// An own census ended.
    CensusEnded {
        /// How.
        outcome: CensusOutcome,
    },
    /// This replica made a new token.
    Regenerated {
        /// Its epoch.
        epoch: u64,
    },
    /// A ring recovery started here (the predecessor died).
    RecoveryStarted {
        /// The failed predecessor.
        failed: NodeId,
    },
    /// The recovery ended: IAmNewPrevious received (or the message came
    /// back, or this replica is alone).
    Recovered {
        /// Detection to end.
        took: Duration,
    },
    /// A fresh node recovered its peers' stored values.
    StateRecovered {
        /// Tokens at or below it are refused for ever.
        max: u64,
    },
    /// A lookup was answered.
    LookedUp {
        /// Request to answer.
        took: Duration,
    },
    /// A message with a value the protocol cannot accept was dropped.
    Refused {
        /// Its sender.
        from: NodeId,
        /// What was wrong (metric label).
        reason: &'static str,
    },
}

impl From<HbEvent> for RdEvent {
    fn from(e: HbEvent) -> Self {
        RdEvent::Hb(e)
    }
}

/// What this replica is doing with the newest token it knows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Role {
    /// Installed here: token services run under the lease.
    Owned {
        /// When it arrived (or was made).
        since: Instant,
        /// Whether a token service has run in this visit (the next one
        /// raises seq first).
        ran: bool,
    },
    /// Sent to `to` (that life), not yet acked: resent every
    /// `suspect_after` and after a broken link.
    Unacked { to: NodeId, inc: Incarnation, last_sent: Instant },
    /// Acked by `to`; kept until its TokenRelease (or a newer token).
    Frozen { to: NodeId, inc: Incarnation },
    /// Released: kept only for censuses.
    Released,
    /// Not owned any more (superseded, excluded, overflow): a copy for
    /// censuses only.
    CopyOnly,
}

/// The newest token this replica knows, and its role here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Held {
    token: Token,
    role: Role,
}

/// A token service waiting for the token here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Job {
    client: ClientId,
    request_id: u64,
    service: String,
    args: Vec<String>,
}

/// A result waiting for the successor's TokenAck of the token carrying it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Pending {
    client: ClientId,
    request_id: u64,
    service: String,
    outcome: Outcome,
}

/// One ringd replica.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RdNode {
    cfg: RdConfig,
    me: NodeId,
    members: Vec<NodeId>,
    ring: HbRing,
    promise: PromiseNode,
    /// The newest token known here.
    held: Option<Held>,
    /// The newest (epoch, seq) accepted.
    seen: (u64, u64),
    /// Who sent the token accepted last, and its id as received: a resend
    /// is acked again, and TokenRelease goes there once the forward is acked.
    came_from: Option<(NodeId, (u64, u64))>,
    /// When the token last arrived here in which epoch (rotation time).
    last_arrival: Option<(u64, Instant)>,
    /// The idle hold (`token_min_hold`, `quiet`, `Wanted`).
    idle: ftcore::idle::IdleHold,
    /// When the token or a HolderAlive was last seen (or this life began).
    token_seen_at: Instant,
    lost_jitter: Duration,
    lease: lease::LeaseState,
    /// The last HolderAlive acked here: from whom and when.
    acked_holder: Option<(NodeId, Instant)>,
    census: Option<census::CensusRun>,
    /// The `census_past_deadline` mutation only (`RdRule::CensusDeadline`
    /// off): the own census that passed its deadline, still counting late
    /// answers. Read only by mutant code (`ftcore/mutations`).
    #[allow(dead_code)]
    late_census: Option<census::CensusRun>,
    census_not_before: Instant,
    /// The `token_seen_at` whose silence already had a stall's wait
    /// (`handle_timeout`): one wait per silence, so a replica starved of
    /// CPU, every timer late, still censuses, one heartbeat later.
    stall_waited: Option<Instant>,
    /// A census is wanted (token lost, a recovery's copy, `Stale`,
    /// overflow): retried while no token is seen.
    census_wanted: bool,
    /// A recovery's copy waiting for the census it supplies.
    census_copy: Option<Token>,
    /// The pending own ring recovery.
    recovery: Option<repair::Recovery>,
    recovery_counter: u64,
    /// The successor this replica had until the ring declared it dead
    /// (that life): an IAmNewNext about it is answered here.
    lost_next: Option<(NodeId, Incarnation)>,
    /// An IAmNewNext forwarded from here: (origin, recovery). If the
    /// successor becomes that origin, this replica splices itself to it.
    forwarded: Option<(NodeId, u64)>,
    /// Ring neighbours and life as of the last input (to see changes).
    last_ring: repair::RingSnapshot,
    hello: repair::HelloState,
    token_queue: VecDeque<Job>,
    awaiting_ack: Vec<Pending>,
    /// Running non-token services (`sleep`): when each ends.
    sleeping: BTreeMap<(Instant, u64), (ClientId, u64)>,
    /// Running command services, by job id.
    jobs: BTreeMap<u64, services::RunningJob>,
    /// The token service running under the owned token, if any (its job).
    token_job: Option<u64>,
    lookups: BTreeMap<u64, lookup::Lookup>,
    counter: u64,
    leaving: bool,
    rng: SeededRng,
    out: Outbox<Msg, RingReply, RdEvent, RdDurable>,
}

impl RdNode {
    fn fresh_id(&mut self) -> u64 {
        self.counter += 1;
        (self.ring.incarnation().0 << 24) ^ self.counter
    }

    /// The majority of configured replicas.
    fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// How many replicas (this one included) make a lease or a census: a
    /// majority of the configured ones, or with `allow_minority` of the
    /// current ring (a partition then yields two tokens).
    fn quorum(&self) -> usize {
        if self.cfg.allow_minority {
            self.ring.view().alive_count() / 2 + 1
        } else {
            self.majority()
        }
    }

    /// Whether this replica's ring is a minority it may not serve in.
    fn in_minority(&self) -> bool {
        !self.cfg.allow_minority && !self.ring.view().holds_a_majority()
    }

    /// The live successor, if any.
    fn successor(&self) -> Option<NodeId> {
        self.ring.view().successor()
    }

    fn life_of(&self, n: NodeId) -> Incarnation {
        self.ring.view().liveness(n).map(|l| l.incarnation).unwrap_or_default()
    }

    /// Load: services running here plus token services queued.
    pub fn load(&self) -> u32 {
        u32::try_from(self.sleeping.len() + self.jobs.len() + self.token_queue.len()).unwrap_or(u32::MAX)
    }

    /// Whether this replica owns the token.
    pub fn owns_token(&self) -> bool {
        matches!(self.held, Some(Held { role: Role::Owned { .. }, .. }))
    }

    /// Whether this replica has passed the token and awaits its TokenAck.
    pub fn is_passing(&self) -> bool {
        matches!(self.held, Some(Held { role: Role::Unacked { .. }, .. }))
    }

    /// The newest token known here (owned or a copy).
    pub fn token(&self) -> Option<&Token> {
        self.held.as_ref().map(|h| &h.token)
    }

    /// The newest (epoch, seq) accepted.
    pub fn seen(&self) -> (u64, u64) {
        self.seen
    }

    /// The highest epoch in use here.
    pub fn epoch(&self) -> u64 {
        self.promise.stored().in_use()
    }

    /// The promise component (read access for checkers).
    pub fn promises(&self) -> &PromiseNode {
        &self.promise
    }

    /// The heartbeat ring (read access for checkers).
    pub fn ring(&self) -> &HbRing {
        &self.ring
    }

    /// Until when the owner's lease lets it run token services.
    pub fn lease_until(&self) -> Option<Instant> {
        self.lease.valid_until
    }

    /// The token-lost deadline.
    fn lost_at(&self) -> Instant {
        self.token_seen_at + self.cfg.token_lost_after + self.lost_jitter
    }

    /// Sends `msg` to every other configured replica, in ring order.
    fn send_to_every_peer(&mut self, msg: Msg) {
        self.out.send_to_all_but(&self.members, self.me, msg);
    }

    /// The token (or its owner's HolderAlive) showed itself.
    fn token_activity(&mut self, now: Instant) {
        self.token_seen_at = now;
        self.lost_jitter = self.rng.duration_between(Duration::ZERO, self.cfg.suspect_after);
    }

    /// Serves the visit, reacts to ring changes, then stores what changed
    /// ahead of every output this input produced.
    fn after_input(&mut self, now: Instant) {
        self.ring_changed(now);
        if self.in_minority() {
            self.refuse_in_minority();
        }
        self.serve(now);
        self.persist_first();
        // Stored before use: the token owned or handed on here is of an
        // epoch the stored promises hold in use (ringd.md, Token).
        ftcore::invariant!(
            self.cfg.rules,
            self.held.as_ref().is_none_or(|h| {
                !matches!(h.role, Role::Owned { .. } | Role::Unacked { .. }) || h.token.epoch <= self.epoch()
            }),
            "n{}: token {:?} held above the epoch in use, {}",
            self.me.0,
            self.held.as_ref().map(|h| h.token.id()),
            self.epoch()
        );
        // The token owned here is the newest accepted: never below `seen`.
        ftcore::invariant!(
            self.cfg.rules,
            !self.owns_token() || self.held.as_ref().is_some_and(|h| h.token.id() >= self.seen),
            "n{}: owns token {:?} below seen {:?}",
            self.me.0,
            self.held.as_ref().map(|h| h.token.id()),
            self.seen
        );
    }

    fn persist_first(&mut self) {
        ftcore::mutant! {
            if self.cfg.rules.off(RdRule::StoredEpochs) {
                // Nothing stored: a restart forgets every epoch.
                let _ = self.promise.take_dirty();
                return;
            }
        }
        if let Some(p) = self.promise.take_dirty() {
            self.out.persist_first(RdDurable { promises: Some(p) });
        }
    }

    /// Routes a heartbeat-ring call's outputs into the outbox.
    fn with_ring<R>(&mut self, f: impl FnOnce(&mut HbRing, &mut Outbox<Msg, RingReply, RdEvent, RdDurable>) -> R) -> R {
        f(&mut self.ring, &mut self.out)
    }
}

impl Protocol for RdNode {
    type Msg = Msg;
    type Request = RingRequest;
    type Reply = RingReply;
    type Event = RdEvent;
    type Config = RdConfig;
    type Durable = RdDurable;
    type Error = RdError;

    fn start(ctx: Context<RdConfig, RdDurable>) -> Result<Self, RdError> {
        let members: Vec<NodeId> = ctx.membership.ids().collect();
        ctx.config.validate(members.len())?;
        let mut pcfg = promise::Config::new(members.clone(), ctx.me, ctx.config.suspect_after);
        pcfg.lease = ctx.config.lease;
        pcfg.drift_ppm = ctx.config.drift_ppm;
        pcfg.new_cluster = ctx.new_cluster;
        // ringd.md: the majority lease stops a late lower census from acting.
        pcfg.promise_window = false;
        let loaded = ctx.stored.as_ref().and_then(|d| d.promises.clone());
        ftcore::mutant! {
            // Nothing was stored: the restart starts as recovered at 0.
            let loaded =
                if ctx.config.rules.off(RdRule::StoredEpochs) { Some(Promises::recovered_with(0)) } else { loaded };
        }
        let promise = PromiseNode::new(pcfg, loaded, ctx.now)?;
        let mut rng = SeededRng::new(ctx.seed);
        let first_census = promise.first_proposal_at(&mut rng);
        let mut out = Outbox::default();
        let mut hb = HbConfig::new(ctx.config.heartbeat, ctx.config.suspect_after);
        // A replica alone serves with `allow_minority`: a minority view is
        // no sign that it was the one cut off there.
        hb.yield_in_minority = !ctx.config.allow_minority && ctx.config.rules.on(RdRule::MinorityYields);
        let ring = HbRing::new(hb, &ctx.membership, ctx.me, ctx.incarnation, ctx.now, &mut out)?;
        let mut node = RdNode {
            me: ctx.me,
            members,
            last_ring: repair::RingSnapshot::of(&ring),
            ring,
            promise,
            held: None,
            seen: (0, 0),
            came_from: None,
            last_arrival: None,
            idle: ftcore::idle::IdleHold::new(ctx.config.token_min_hold),
            token_seen_at: ctx.now,
            lost_jitter: Duration::ZERO,
            lease: lease::LeaseState::default(),
            acked_holder: None,
            census: None,
            late_census: None,
            census_not_before: first_census,
            stall_waited: None,
            census_wanted: false,
            census_copy: None,
            recovery: None,
            recovery_counter: 0,
            lost_next: None,
            forwarded: None,
            hello: repair::HelloState::default(),
            token_queue: VecDeque::new(),
            awaiting_ack: Vec::new(),
            sleeping: BTreeMap::new(),
            jobs: BTreeMap::new(),
            token_job: None,
            lookups: BTreeMap::new(),
            counter: 0,
            leaving: false,
            rng,
            out,
            cfg: ctx.config,
        };
        node.token_activity(ctx.now);
        node.start_hello(ctx.now);
        node.after_input(ctx.now);
        Ok(node)
    }

    fn handle_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Msg) {
        if from == self.me || !self.members.contains(&from) {
            self.out.event(RdEvent::Refused { from, reason: "not_a_member" });
            return;
        }
        match msg {
            Msg::Hb(m) => self.with_ring(|r, out| r.handle_message(now, from, inc, m, out)),
            msg => {
                if self.with_ring(|r, out| r.on_contact(now, from, inc, out)) == hbring::Contact::Drop {
                    self.after_input(now);
                    return;
                }
                self.dispatch(now, from, msg);
            }
        }
        self.after_input(now);
    }

    fn handle_request(&mut self, now: Instant, client: ClientId, req: RingRequest) {
        match req {
            RingRequest::LookUp { request_id } => self.on_lookup(now, client, request_id),
            RingRequest::Execute { request_id, service, args } => {
                self.on_execute(now, client, request_id, service, args)
            }
        }
        self.after_input(now);
    }

    fn handle_client_gone(&mut self, now: Instant, client: ClientId) {
        self.token_queue.retain(|j| j.client != client);
        self.awaiting_ack.retain(|p| p.client != client);
        self.sleeping.retain(|_, (c, _)| *c != client);
        self.lookups.retain(|_, l| l.client != client);
        self.out.retain(|o| !matches!(o, ftcore::Output::Reply { client: c, .. } if *c == client));
        self.after_input(now);
    }

    fn handle_job_end(&mut self, now: Instant, id: u64, end: ftcore::JobEnd) {
        self.on_job_end(now, id, end);
        self.after_input(now);
    }

    fn handle_peer_unreachable(&mut self, now: Instant, peer: NodeId) {
        // The ring repairs around it now (hbring); what ringd waits on
        // follows the ring's change (`after_input`) as after a suspicion
        // by silence.
        self.with_ring(|r, out| r.peer_unreachable(now, peer, out));
        self.after_input(now);
    }

    fn handle_link_lost(&mut self, now: Instant, peer: NodeId) {
        let _resent = self.resend_to(now, peer);
        self.after_input(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        // This replica itself stalled (a timer more than a heartbeat
        // late): its queued input (HolderAlive, the token) is read before
        // a census acts on the silence it measured across the stall.
        // Without the wait, a replica resumed after `token_lost_after`
        // proposed a census at once, answered the owner's HolderAlive
        // `Stale`, and the owner gave up the token and killed its command.
        // Once per silence (`stall_waited`).
        let stalled = self.poll_timeout().is_some_and(|due| timer::stalled(due, now, self.cfg.heartbeat));
        if stalled && self.stall_waited != Some(self.token_seen_at) {
            self.stall_waited = Some(self.token_seen_at);
            self.census_not_before = self.census_not_before.max(now + self.cfg.heartbeat);
        }
        self.with_ring(|r, out| r.handle_timeout(now, out));
        self.ring_changed(now);
        self.hello_timeout(now);
        self.token_timeout(now);
        self.lease_timeout(now);
        self.census_timeout(now);
        self.services_timeout(now);
        self.lookup_timeout(now);
        self.after_input(now);
    }

    fn handle_shutdown(&mut self, now: Instant) {
        self.leaving = true;
        for job in std::mem::take(&mut self.token_queue) {
            self.answer(job.client, job.request_id, &job.service, Err(api::ring::ExecError::Leaving));
        }
        self.after_input(now);
    }

    fn is_left(&self) -> bool {
        // Left once the token is handed on and acked (or never here).
        self.leaving
            && self.jobs.is_empty()
            && !matches!(self.held, Some(Held { role: Role::Owned { .. } | Role::Unacked { .. }, .. }))
    }

    fn poll_output(&mut self) -> Option<OutputOf<Self>> {
        self.out.pop()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [
            self.ring.poll_timeout(),
            self.hello_deadline(),
            self.token_deadline(),
            self.lease_deadline(),
            self.census_deadline(),
            self.services_deadline(),
            self.lookup_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn incarnation(&self) -> Incarnation {
        self.ring.incarnation()
    }

    fn status(&self) -> StatusReport {
        let role = match self.held.as_ref().map(|h| &h.role) {
            Some(Role::Owned { .. }) => "owner",
            Some(Role::Unacked { .. }) => "passing",
            _ if self.census.is_some() => "census",
            _ => "member",
        };
        let view = self.ring.view();
        let fmt = |x: Option<NodeId>| x.map_or("none".to_string(), |n| n.0.to_string());
        let (epoch, seq) = self.seen;
        StatusReport {
            daemon: "ringd".into(),
            node: self.me,
            incarnation: self.ring.incarnation(),
            role: role.into(),
            peers: Vec::new(),
            details: vec![
                ("has_token".into(), self.owns_token().to_string()),
                ("epoch".into(), epoch.to_string()),
                ("seq".into(), seq.to_string()),
                ("successor".into(), fmt(view.successor())),
                ("predecessor".into(), fmt(view.predecessor())),
                ("ring".into(), view.alive_count().to_string()),
                ("load".into(), self.load().to_string()),
                ("queued".into(), self.token_queue.len().to_string()),
                ("recovered".into(), self.promise.stored().recovered().to_string()),
            ],
        }
    }

    fn peer_view(&self, peer: NodeId) -> PeerView {
        match self.ring.view().liveness(peer) {
            Some(l) => PeerView { up: l.status == Status::Alive, incarnation: l.incarnation },
            None => PeerView { up: false, incarnation: Incarnation(0) },
        }
    }

    fn join_state(&self) -> JoinState {
        if self.ring.joined() || (self.cfg.allow_minority && self.ring.view().alive_count() == 1) {
            JoinState::Joined
        } else {
            JoinState::Joining { answered: 0, of: 1 }
        }
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        let fence = self.held.as_ref().filter(|_| self.owns_token()).map(|h| h.token.id()).unwrap_or(self.seen);
        vec![
            ("has_token", f64::from(u8::from(self.owns_token()))),
            ("fence_epoch", fence.0 as f64),
            ("fence_seq", fence.1 as f64),
            ("epoch", self.epoch() as f64),
            ("ring_size", self.ring.view().alive_count() as f64),
            ("services_running", (self.sleeping.len() + self.jobs.len()) as f64),
            ("queued", self.token_queue.len() as f64),
        ]
    }
}

impl RdNode {
    fn dispatch(&mut self, now: Instant, from: NodeId, msg: Msg) {
        match msg {
            Msg::Hb(_) => {} // routed before
            Msg::Hello { nonce } => self.on_hello(from, nonce),
            Msg::HelloAck { nonce, values } => self.on_hello_ack(now, from, nonce, values),
            Msg::IAmNewNext(m) => self.on_i_am_new_next(now, m),
            Msg::IAmNewPrevious { recovery, members: _ } => self.on_i_am_new_previous(now, from, recovery),
            Msg::Copy { recovery, token } => self.on_copy(now, recovery, *token),
            Msg::Token(t) => self.on_token(now, from, *t),
            Msg::TokenAck { epoch, seq } => self.on_token_ack(now, from, (epoch, seq)),
            Msg::TokenRelease { epoch, seq } => self.on_token_release((epoch, seq)),
            Msg::Stale { epoch } => self.on_stale(now, epoch),
            Msg::HolderAlive { epoch, nonce } => self.on_holder_alive(now, from, epoch, nonce),
            Msg::HolderAliveAck { epoch, nonce } => self.on_holder_alive_ack(now, from, epoch, nonce),
            Msg::Census { proposed } => self.on_census(now, from, proposed),
            Msg::CensusReply { proposed, answer } => self.on_census_reply(now, from, proposed, answer),
            Msg::Find { request_id, lap, hops, origin, best, best_load, best_addr } => {
                self.on_find(now, request_id, lap, hops, origin, (best, best_load, best_addr))
            }
            Msg::Wanted => self.idle.on_wanted(now),
        }
    }
}

//! The sans-IO core of ringd: the heartbeat ring (embedded `hbring`), ring
//! repair with `IAmNewNext`, the token with its majority lease, regeneration
//! by a census a majority promised, the least-loaded lookup, and services.
//!
//! Files: `config.rs` the core's settings and their validation; `events.rs`
//! what the core reports; `durable.rs` what it stores; `state.rs` the
//! in-memory state it keeps; `join.rs` the join handshake and fresh-node
//! recovery; one file per mechanism; `rules.rs` the safety rules; `tests`
//! the per-handler tests.
//!
//! Reading guide: this file holds the node, the `Protocol` impl and the
//! dispatch; each mechanism of ringd.md is one file, readable against one
//! section of the spec. Each file defines its mechanism's state, one field
//! of the node, with its fields private to the file: the logic that needs
//! only that state is a method on it, and the file's `impl RdNode` block
//! is the glue that hands it what it needs (settings, `now`) and acts on
//! what it returns (sends, events, other mechanisms). What several
//! mechanisms read stays on the node: `cfg`, `me`, `members`, the ring,
//! the promise component, the token (`held`, `seen`), the token-lost
//! deadline (`token_seen_at`, `lost_jitter`), `rng` and the outbox.
//!
//! - [`join`] (`join::HelloState`, `hello`): fresh-node recovery (`Hello` /
//!   `HelloAck` rounds through the promise component);
//! - [`repair`] (`repair::Repair`, `repair`): reactions to the heartbeat
//!   ring (a dead predecessor starts a recovery, a dead successor is
//!   remembered, a new life drops the token), `IAmNewNext` /
//!   `IAmNewPrevious` / `Copy`;
//! - [`token`] (`token::Passing`, `passing`): accepting, acknowledging,
//!   passing, resending, freezing and releasing the token; `Stale` and
//!   superseded owners; the idle hold;
//! - [`lease`] (`lease::LeaseState`, `lease`): `HolderAlive` to every
//!   replica, the owner's lease and the grantor's last ack;
//! - [`census`] (`census::Census`, `census`): regeneration by a census a
//!   majority promised;
//! - [`services`] (`services::Services`, `services`): `Execute`, the
//!   built-in services, token services run under the lease and answered
//!   once the successor has the result;
//! - [`lookup`] (`lookup::Lookups`, `lookups`): `LookUpRequest` and the
//!   circulating `Find`.
//!
//! Time comes in as arguments; every deadline is derived from the state
//! ([`poll_timeout`](RdNode::poll_timeout)). After every input
//! [`RdNode::after_input`] serves the visit and stores what changed (one
//! `Persist` ahead of the outputs it guards).

mod census;
mod config;
mod durable;
mod events;
mod join;
mod lease;
mod lookup;
mod repair;
mod rules;
mod services;
mod state;
#[cfg(test)]
mod tests;
mod token;

use std::time::Duration;

// `Promises` is named only by `start`'s mutant code (ftcore's `mutations`).
#[allow(unused_imports)]
use ::durable::promise::Promises;
use ::durable::promise::{self, PromiseNode};
use api::ring::{RingReply, RingRequest};
use ftcore::{
    ClientId, Context, Incarnation, JoinState, NodeId, Outbox, OutputOf, PeerView, Protocol, StatusReport, Then,
};
use hbring::{HbConfig, HbRing};
use membership::Status;
use timer::{Instant, SeededRng};

use crate::msg::{Msg, Token};

pub use census::CensusOutcome;
pub use config::{RdConfig, RdError, ServiceSpec};
pub use durable::RdDurable;
pub use events::RdEvent;
pub use rules::RdRule;
pub use services::{is_builtin, MAX_OUTPUT, MIN_FRAME};
use state::{Held, Job, Pending, Role};

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
    /// Whom the token came from, its last arrival, the idle hold.
    passing: token::Passing,
    /// When the token or a HolderAlive was last seen (or this life began).
    token_seen_at: Instant,
    lost_jitter: Duration,
    /// The owner's lease and the grantor's last ack (`lease.rs`).
    lease: lease::LeaseState,
    /// The own census, whether one is wanted and when (`census.rs`).
    census: census::Census,
    /// Ring repair's recovery and IAmNewNext bookkeeping (`repair.rs`).
    repair: repair::Repair,
    /// Fresh-node recovery rounds (`join.rs`).
    hello: join::HelloState,
    /// Queued, running and unacked services (`services.rs`).
    services: services::Services,
    /// Lookups started here (`lookup.rs`).
    lookups: lookup::Lookups,
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
        u32::try_from(self.services.load()).unwrap_or(u32::MAX)
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
        self.census.token_seen();
        self.lost_jitter = self.rng.duration_between(Duration::ZERO, self.cfg.lost_jitter_max());
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
        let setup = promise::Setup {
            window: ctx.config.suspect_after,
            lease: ctx.config.lease,
            drift_ppm: ctx.config.drift_ppm,
            // ringd.md: the majority lease stops a late lower census from
            // acting.
            promise_window: false,
            rules: ftcore::rules::Rules::ALL_ON,
        };
        let loaded = ctx.stored.as_ref().and_then(|d| d.promises.clone());
        ftcore::mutant! {
            // Nothing was stored: the restart starts as recovered at 0.
            let loaded =
                if ctx.config.rules.off(RdRule::StoredEpochs) { Some(Promises::recovered_with(0)) } else { loaded };
        }
        let promise = PromiseNode::for_core(&ctx, setup, loaded)?;
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
            repair: repair::Repair::new(&ring),
            ring,
            promise,
            held: None,
            seen: (0, 0),
            passing: token::Passing::new(ctx.config.token_min_hold),
            token_seen_at: ctx.now,
            lost_jitter: Duration::ZERO,
            lease: lease::LeaseState::default(),
            census: census::Census::new(first_census),
            hello: join::HelloState::default(),
            services: services::Services::default(),
            lookups: lookup::Lookups::default(),
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

    fn on_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Msg) -> Then {
        if from == self.me || !self.members.contains(&from) {
            self.out.event(RdEvent::Refused { from, reason: "not_a_member" });
            return Then::Done;
        }
        match msg {
            Msg::Hb(m) => self.with_ring(|r, out| r.handle_message(now, from, inc, m, out)),
            msg => {
                if self.with_ring(|r, out| r.on_contact(now, from, inc, out)) == hbring::Contact::Drop {
                    return Then::AfterInput;
                }
                self.dispatch(now, from, msg);
            }
        }
        Then::AfterInput
    }

    fn on_request(&mut self, now: Instant, client: ClientId, req: RingRequest) -> Then {
        match req {
            RingRequest::LookUp { request_id } => self.on_lookup(now, client, request_id),
            RingRequest::Execute { request_id, service, args } => {
                self.on_execute(now, client, request_id, service, args)
            }
        }
        Then::AfterInput
    }

    fn on_client_gone(&mut self, _now: Instant, client: ClientId) -> Then {
        self.services.forget_client(client);
        self.lookups.forget_client(client);
        self.out.retain(|o| !matches!(o, ftcore::Output::Reply { client: c, .. } if *c == client));
        Then::AfterInput
    }

    fn on_job_end(&mut self, now: Instant, id: u64, end: ftcore::JobEnd) -> Then {
        self.on_job_end(now, id, end);
        Then::AfterInput
    }

    fn on_peer_unreachable(&mut self, now: Instant, peer: NodeId) -> Then {
        // The ring repairs around it now (hbring); what ringd waits on
        // follows the ring's change (`after_input`) as after a suspicion
        // by silence.
        self.with_ring(|r, out| r.peer_unreachable(now, peer, out));
        Then::AfterInput
    }

    fn on_link_lost(&mut self, now: Instant, peer: NodeId) -> Then {
        let _resent = self.resend_to(now, peer);
        Then::AfterInput
    }

    fn on_timeout(&mut self, now: Instant) -> Then {
        // This replica itself stalled (a timer more than a heartbeat
        // late): its queued input (HolderAlive, the token) is read before
        // a census acts on the silence it measured across the stall.
        // Without the wait, a replica resumed after `token_lost_after`
        // proposed a census at once, answered the owner's HolderAlive
        // `Stale`, and the owner gave up the token and killed its command.
        // Once per silence (`census::Census::stalled`).
        let stalled = self.poll_timeout().is_some_and(|due| timer::stalled(due, now, self.cfg.heartbeat));
        if stalled {
            self.census.stalled(now, self.token_seen_at, self.cfg.heartbeat);
        }
        self.with_ring(|r, out| r.handle_timeout(now, out));
        self.ring_changed(now);
        self.hello_timeout(now);
        self.token_timeout(now);
        self.lease_timeout(now);
        self.census_timeout(now);
        self.services_timeout(now);
        self.lookup_timeout(now);
        Then::AfterInput
    }

    fn on_shutdown(&mut self, _now: Instant) -> Then {
        self.leaving = true;
        for job in self.services.take_queue() {
            self.answer(job.client, job.request_id, &job.service, Err(api::ring::ExecError::Leaving));
        }
        Then::AfterInput
    }

    fn is_left(&self) -> bool {
        // Left once the token is handed on and acked (or never here).
        self.leaving
            && self.services.no_jobs()
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
            _ if self.census.running() => "census",
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
                ("queued".into(), self.services.queued().to_string()),
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
            ("services_running", self.services.running() as f64),
            ("queued", self.services.queued() as f64),
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
            Msg::Wanted => self.passing.on_wanted(now),
        }
    }
}

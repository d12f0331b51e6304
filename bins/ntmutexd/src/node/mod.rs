//! The sans-IO core of ntmutexd: Naimi-Trehel path reversal, COMMIT,
//! recovery mechanisms M1/M2/M3, two-phase regeneration, and the local lock
//! service on top.
//!
//! `config.rs` the core's settings and their validation; `events.rs` what
//! the core reports; `durable.rs` what it stores; `state.rs` the in-memory
//! state types the mechanisms share; `join.rs` the join handshake and
//! fresh-node recovery; one file per mechanism; `rules.rs` the safety
//! rules; `tests` the per-handler tests.
//!
//! Reading guide: this file holds the node struct, the `Protocol` impl and
//! the message dispatch; each mechanism of the spec (ntmutexd.md) is one
//! file, readable against one section of the spec. A mechanism's file
//! defines the state only it owns (a type whose fields are private to the
//! file unless another file reads them; the node keeps one field of it),
//! with the logic that needs only that state as its methods, and an
//! `impl NtNode` block: the glue that hands those methods what they need
//! (settings, `now`, the outbox) and acts on their answer, and the handlers
//! that orchestrate several mechanisms.
//!
//! - [`join`]: the Hello handshake and the first token (`Join`: the
//!   phase, this life's Hello nonce);
//! - [`queue`]: requests, the token, COMMIT, linking, local grants
//!   (`Grants`: accesses, the last fence);
//! - [`detect`]: liveness checks, suspicion, probes, peers' lives
//!   (`Detector`: peers' lives, the suspected, the liveness probes);
//! - [`recovery`]: M1, M2, M3 (with the M3.b election and rules I-III)
//!   (`Election`: the best M3 candidate seen);
//! - [`regen`]: two-phase regeneration and epochs (`Proposer`: when this
//!   life may propose);
//! - [`lease`]: leases on grants (renewals, acks, the windows they open)
//!   (`lockservice::lease::SiteLeases`: the renewer and the acker);
//! - [`leave`]: graceful leave (`Leave`);
//! - [`status`]: `ftctl status` and read access for checkers.
//!
//! What several mechanisms read and write stays on the node: the queue
//! (`last`, `next`, `request`, `seq`, `position`, `preds`, the monitored
//! predecessor), the token, the recovery in progress, `bootstrap_search`,
//! and what every mechanism uses (settings, members, the outbox, timers,
//! the promise component, the RNG, the local locks).
//!
//! `on_message` checks the sender's life and epoch, then dispatches to
//! one `on_*` handler per message; after every input that reached the
//! protocol, the `Protocol::after_input` step (the handler answers
//! `Then::AfterInput`; the trait runs it) calls
//! [`serve_and_route`](NtNode::serve_and_route), which does what the state
//! calls for (grant to a local client, pass the token, make a request). Rules
//! marked (safety) in the spec are cited where they are implemented.

mod config;
mod detect;
mod durable;
mod events;
mod join;
mod lease;
mod leave;
mod queue;
mod recovery;
mod regen;
mod rules;
mod state;
mod status;

use std::collections::BTreeSet;

use ::durable::promise::{self, PromiseNode};
use ftcore::{
    ClientId, Context, Incarnation, JoinState, NodeId, Outbox, OutputOf, PeerView, Protocol, StatusReport, Then,
};
use lockservice::{LocalLocks, LockReply, LockRequest};
use timer::{Instant, SeededRng, TimerTable};

pub use self::config::{NtConfig, NtError, MAX_SITES};
pub use self::durable::NtDurable;
pub use self::events::{Mech, NtEvent};
use self::state::{Last, LinkKind, Phase, Recovery, Timer, Token};
use crate::msg::{Body, Msg};
use detect::Detector;
use join::Join;
use leave::Leave;
use lockservice::lease::SiteLeases;
use queue::Grants;
use recovery::Election;
use regen::Proposer;
pub use rules::NtRule;

/// One ntmutexd site.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NtNode {
    cfg: NtConfig,
    me: NodeId,
    inc: Incarnation,
    members: Vec<NodeId>,
    /// The handshake's phase and this life's Hello nonce (`join.rs`).
    join: Join,
    last: Last,
    next: Option<(NodeId, u64)>,
    request: Option<u64>,
    seq: u64,
    token: Option<Token>,
    position: Option<u64>,
    preds: Vec<NodeId>,
    /// The predecessor whose liveness is checked, with its life.
    monitored: Option<(NodeId, Incarnation)>,
    last_alive_ok: Instant,
    /// Threshold, floor, the highest epoch in use (`max_epoch`), windows.
    promise: PromiseNode,
    /// No proposal of this life before its restart window + jitter
    /// (`regen.rs`).
    regen: Proposer,
    /// The configured root of a new cluster searches for the first token
    /// (and regenerates it) even without local clients.
    bootstrap_search: bool,
    rng: SeededRng,
    /// Accesses and the last fence granted (`queue.rs`).
    grants: Grants,
    /// Peers' lives, suspicion and the liveness probes (`detect.rs`).
    detect: Detector,
    recovery: Recovery,
    /// Best M3 candidate seen recently (`recovery.rs`).
    election: Election,
    locks: LocalLocks,
    /// This site's lease on its grants and the renewals it acked
    /// (`lease.rs`).
    lease: SiteLeases,
    timers: TimerTable<Timer>,
    out: Outbox<Msg, LockReply, NtEvent, NtDurable>,
    /// Graceful leave (`leave.rs`).
    leave: Leave,
}

impl NtNode {
    /// Site `ctx.me` in life `ctx.incarnation`, starting at `ctx.now`, with
    /// what its previous life stored (`None`: a fresh node). It first asks
    /// its peers whether the cluster is running (a new life of a running
    /// cluster knows nothing and rebuilds through M3); a cluster that is
    /// starting gets its first token from the configured root's
    /// regeneration round, never chosen locally.
    fn new(ctx: Context<NtConfig, NtDurable>) -> Result<Self, NtError> {
        ctx.membership.require(ctx.me)?;
        ctx.config.validate(ctx.membership.len())?;
        let setup = ctx.config.promise_setup();
        let promise = PromiseNode::for_core(&ctx, setup, ctx.stored.as_ref().and_then(|s| s.promises.clone()))?;
        let Context { me, incarnation: inc, membership, now, seed, config: cfg, .. } = ctx;
        let members: Vec<NodeId> = membership.ids().collect();
        let mut rng = SeededRng::new(seed);
        let proposals_from = promise.first_proposal_at(&mut rng);
        let nonce = rng.next_u64();
        let mut node = NtNode {
            locks: LocalLocks::new(cfg.locks.clone()),
            lease: SiteLeases::new(cfg.lease_config(members.len())),
            cfg,
            me,
            inc,
            members,
            join: Join::new(me, nonce),
            last: Last::Unknown,
            next: None,
            request: None,
            seq: 0,
            token: None,
            position: None,
            preds: Vec::new(),
            monitored: None,
            last_alive_ok: now,
            promise,
            regen: Proposer { proposals_from },
            bootstrap_search: false,
            rng,
            grants: Grants::default(),
            detect: Detector::default(),
            recovery: Recovery::Idle,
            election: Election::default(),
            timers: TimerTable::new(),
            out: Outbox::default(),
            leave: Leave::default(),
        };
        // A fresh node's first write marks its file unrecovered.
        node.persist();
        if node.promise.stored().in_use() > 0 {
            node.out.event(NtEvent::Epoch(node.promise.stored().in_use()));
        }
        node.recovery_round(now);
        if let Some(every) = node.cfg.liveness_every {
            node.timers.set(Timer::Liveness, now + every);
        }
        if node.members.len() == 1 {
            node.finish_join(now, true);
        } else {
            node.hello_all();
            node.timers.set(Timer::Join, now + node.cfg.t_msg * 2);
        }
        Ok(node)
    }

    /// Queues the stored state if the promises changed: the driver writes
    /// it before anything queued after it (every promise, recovery and new
    /// epoch is on disk before a message that depends on it leaves).
    fn persist(&mut self) {
        if let Some(p) = self.promise.take_dirty() {
            self.out.persist(NtDurable { promises: Some(p) });
        }
    }

    /// (safety) Epochs survive cold restarts: an epoch just adopted as in
    /// use (`max_epoch`) is stored before anything uses or forwards it.
    fn persist_epoch(&mut self) {
        if self.cfg.rules.on(NtRule::EpochStoredBeforeUse) {
            self.persist();
        }
    }

    /// (safety) Values a peer supplies are checked before anything is
    /// adopted: node ids must be members (a request from node 99 must not
    /// send the token to nowhere), epochs must leave room to grow, and
    /// counters that are incremented must not be at their maximum.
    fn check_values(&self, msg: &Msg) -> Result<(), &'static str> {
        let member = |id: &NodeId| self.members.contains(id);
        let sane = |e: u64| e == 0 || promise::is_sane(e);
        if !sane(msg.epoch) {
            return Err("epoch");
        }
        let ids_ok = match &msg.body {
            Body::Request { requester, .. }
            | Body::DirectRequest { requester, .. }
            | Body::Connection { requester, .. } => member(requester),
            Body::Commit { preds, origin, .. } => preds.iter().all(member) && member(&origin.0),
            Body::IAmAlive { next, .. } => next.as_ref().is_none_or(member),
            Body::NewRoot { root } => member(root),
            Body::Skip { next } => next.as_ref().is_none_or(|(n, _)| member(n)),
            _ => true,
        };
        if !ids_ok {
            return Err("non_member");
        }
        let values_ok = match &msg.body {
            Body::Token { epoch, pos, .. } => promise::is_sane(*epoch) && *pos < u64::MAX,
            Body::Commit { pos, .. } => pos.is_none_or(|p| p < u64::MAX),
            Body::Regenerate { epoch } | Body::RegenerateAck { epoch } | Body::RegenerateNack { epoch, .. } => {
                promise::is_sane(*epoch)
            }
            Body::Request { hops, .. } | Body::DirectRequest { hops, .. } | Body::Connection { hops, .. } => {
                *hops < u32::MAX
            }
            _ => true,
        };
        if !values_ok {
            return Err("value");
        }
        Ok(())
    }

    /// The sender is behind our epoch: it may be a holder the cluster
    /// regenerated without (false suspicion) that still grants with its
    /// old token, and nobody else may ever write to it. Our probe carries
    /// the newer epoch; it drops its token on reading it. (An AreYouAlive is
    /// not answered this way: our IAmAlive answer carries the epoch.)
    fn tell_if_behind(&mut self, from: NodeId, msg: &Msg) {
        if msg.epoch < self.max_epoch()
            && !matches!(msg.body, Body::AreYouAlive)
            && self.cfg.rules.on(NtRule::SenderBehindAnswered)
        {
            self.send(from, Body::AreYouAlive);
        }
    }

    /// The highest epoch in use that this site knows of (`max_epoch`).
    pub fn max_epoch(&self) -> u64 {
        self.promise.stored().in_use()
    }

    fn send(&mut self, to: NodeId, body: Body) {
        let epoch = self.max_epoch();
        self.out.send(to, Msg { epoch, body });
    }

    fn others(&self) -> Vec<NodeId> {
        self.members.iter().copied().filter(|m| *m != self.me).collect()
    }

    fn broadcast(&mut self, body: Body) {
        for m in self.others() {
            self.send(m, body.clone());
        }
    }

    fn live_others(&self) -> BTreeSet<NodeId> {
        self.others().into_iter().filter(|m| !self.detect.suspected.contains(m)).collect()
    }
}

impl Protocol for NtNode {
    type Msg = Msg;
    type Request = LockRequest;
    type Reply = LockReply;
    type Event = NtEvent;
    type Config = NtConfig;
    type Durable = NtDurable;
    type Error = NtError;

    fn start(ctx: Context<NtConfig, NtDurable>) -> Result<Self, NtError> {
        NtNode::new(ctx)
    }

    /// Serves and routes what the new state allows
    /// ([`serve_and_route`](NtNode::serve_and_route)).
    fn after_input(&mut self, now: Instant) {
        self.serve_and_route(now);
    }

    fn on_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Msg) -> Then {
        if from == self.me || !self.members.contains(&from) {
            return Then::Done;
        }
        if let Err(reason) = self.check_values(&msg) {
            self.out.event(NtEvent::Refused { from, reason });
            return Then::Done;
        }
        if let Body::Behind { known } = msg.body {
            self.on_behind(now, from, inc, known);
            return Then::Done;
        }
        let running = self.join.is_running();
        if running
            && matches!(msg.body, Body::Hello { .. } | Body::HelloAck { .. })
            && !self.observe_life(now, from, inc)
        {
            return Then::Done;
        }
        match msg.body {
            // The start-up handshake and a fresh node's recovery rounds,
            // in every phase.
            Body::Hello { nonce } => {
                self.tell_if_behind(from, &msg);
                self.on_hello(from, nonce);
                return Then::AfterInput;
            }
            Body::HelloAck { nonce, running, values } => {
                // A new life starts with the cluster's epoch.
                self.observe_epoch(now, msg.epoch);
                self.tell_if_behind(from, &msg);
                self.on_hello_ack(now, from, nonce, running, values);
                return Then::AfterInput;
            }
            _ => {}
        }
        if !self.join.is_running() {
            // Everything else waits until we know whether we are a new
            // life of a running cluster, up to a bound: beyond it a
            // message is refused (counted), as if lost with a crash of
            // ours, which the protocol recovers from.
            if !self.join.defer(from, inc, msg) {
                self.out.event(NtEvent::Refused { from, reason: "joining_buffer_full" });
            }
            return Then::Done;
        }
        if !self.observe_life(now, from, inc) {
            return Then::Done;
        }
        self.observe_epoch(now, msg.epoch);
        self.tell_if_behind(from, &msg);
        match msg.body {
            Body::Hello { .. } | Body::HelloAck { .. } | Body::Behind { .. } => {}
            Body::Request { requester, seq, hops } => self.on_request(now, requester, seq, hops),
            Body::DirectRequest { requester, seq, hops } => {
                self.on_link_request(now, requester, seq, hops, LinkKind::Direct)
            }
            Body::Connection { requester, seq, hops, failed } => {
                self.on_link_request(now, requester, seq, hops, LinkKind::Connection { failed })
            }
            Body::Token { epoch, counter, pos } => self.on_token(now, from, epoch, counter, pos),
            commit @ Body::Commit { .. } => self.on_commit(now, from, inc, commit),
            Body::Unlink { seq } => {
                if self.next == Some((from, seq)) {
                    self.next = None;
                }
            }
            Body::AreYouAlive => {
                let body = Body::IAmAlive { position: self.position, next: self.next.map(|(n, _)| n) };
                self.send(from, body);
            }
            Body::IAmAlive { position, next } => self.on_i_am_alive(now, from, inc, position, next),
            Body::SearchPrev { .. } => {
                let a = self.answer();
                self.send(from, a);
            }
            Body::SearchQueue { accesses } => self.on_search_queue(now, from, accesses),
            Body::SearchAck { position, has_next, has_token, .. } => {
                self.on_search_ack(now, from, position, has_next, has_token)
            }
            Body::Regenerate { epoch } => self.on_regenerate(now, from, epoch),
            Body::RegenerateAck { epoch } => self.on_regenerate_reply(now, from, epoch, Ok(())),
            Body::RegenerateNack { epoch, why } => self.on_regenerate_reply(now, from, epoch, Err(why)),
            Body::DeadEnd { seq } => self.on_dead_end(now, seq),
            Body::NewRoot { root } => {
                if self.token.is_none() {
                    self.last = if root == self.me { Last::Root } else { Last::Parent(root) };
                }
            }
            Body::Skip { next } => self.on_skip(from, next),
            Body::LeaseRenew { round, epoch, holding } => self.on_lease_renew(now, from, round, epoch, holding),
            Body::LeaseAck { round } => self.on_lease_ack(now, from, round),
            Body::LeaseRefused { round, threshold } => self.on_lease_refused(now, round, threshold),
        }
        Then::AfterInput
    }

    fn on_request(&mut self, now: Instant, client: ClientId, req: LockRequest) -> Then {
        if self.leave.leaving() {
            if let LockRequest::Acquire { .. } = req {
                self.out.reply(client, LockReply::Refused { reason: "daemon is shutting down".into() });
                return Then::Done;
            }
        }
        self.locks.request(now, client, req, &mut self.out);
        Then::AfterInput
    }

    fn on_client_gone(&mut self, now: Instant, client: ClientId) -> Then {
        self.locks.client_gone(now, client, &mut self.out);
        Then::AfterInput
    }

    fn on_peer_unreachable(&mut self, now: Instant, peer: NodeId) -> Then {
        if self.members.contains(&peer) && peer != self.me {
            self.peer_gone(now, peer);
        }
        Then::Done
    }

    fn on_link_lost(&mut self, now: Instant, peer: NodeId) -> Then {
        // Messages to it were lost at a connection break: treat it as a
        // crash would be treated. It is suspected (never sent the token,
        // never forwarded to) and probed; its answer clears the suspicion.
        if self.members.contains(&peer) && peer != self.me {
            self.suspect(peer, now);
            return Then::AfterInput;
        }
        Then::Done
    }

    fn join_state(&self) -> JoinState {
        match &self.join.phase {
            Phase::Joining { fresh, .. } => JoinState::Joining { answered: fresh.len(), of: self.members.len() },
            Phase::Running => JoinState::Joined,
        }
    }

    fn on_timeout(&mut self, now: Instant) -> Then {
        // A holder whose wake-up comes late was stalled (SIGSTOP, a VM or
        // GC pause): the others may have suspected it and regenerated, and
        // may never write to it again. It asks every peer; their answers
        // carry the epoch in use, and a newer one ends its token before its
        // next grant is acted on by anyone who has heard of the new epoch.
        let stalled = self.token.is_some()
            && self.cfg.rules.on(NtRule::HolderStallCheck)
            && self.timers.get(Timer::HolderCheck).is_some_and(|d| now.saturating_since(d) > self.cfg.heartbeat);
        if stalled {
            self.broadcast(Body::AreYouAlive);
        }
        while let Some(t) = self.timers.pop_expired(now) {
            match t {
                Timer::HolderCheck => {
                    if self.token.is_some() {
                        self.timers.set(Timer::HolderCheck, now + self.cfg.suspect_after);
                    }
                }
                Timer::Join => self.on_join_timer(now),
                Timer::Recover => self.recovery_round(now),
                Timer::CommitWait => self.on_commit_wait(now),
                Timer::AliveCheck => self.on_alive_check(now),
                Timer::Window => self.on_window(now),
                Timer::Probe => self.on_probe(now),
                Timer::Liveness => self.on_liveness(now),
                // serve_and_route below renews.
                Timer::Renew => {}
                Timer::Provisional => {
                    if self.is_requesting() && self.position.is_none() && self.recovery == Recovery::Idle {
                        self.monitored = None;
                        self.timers.cancel(Timer::AliveCheck);
                        self.start_m3(now);
                    }
                }
            }
        }
        self.locks.handle_timeout(now, &mut self.out);
        Then::AfterInput
    }

    fn on_shutdown(&mut self, now: Instant) -> Then {
        self.begin_leave(now);
        Then::Done
    }

    fn is_left(&self) -> bool {
        self.leave.left() && self.out.is_empty()
    }

    fn poll_output(&mut self) -> Option<OutputOf<Self>> {
        self.out.pop()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [self.timers.next_deadline(), self.locks.poll_timeout()].into_iter().flatten().min()
    }

    fn incarnation(&self) -> Incarnation {
        self.inc
    }

    fn status(&self) -> StatusReport {
        self.status_report()
    }

    fn peer_view(&self, peer: NodeId) -> PeerView {
        self.peer_view_of(peer)
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        self.gauge_values()
    }
}

#[cfg(test)]
mod tests;

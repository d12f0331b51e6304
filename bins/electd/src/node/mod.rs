//! The sans-IO core of electd: ring elections (relay or alive-list), terms
//! and votes stored before use, the coordinator's quorum lease, and its FIFO
//! access service with fenced, leased grants.
//!
//! Files: `config.rs` the core's settings and their validation; `events.rs`
//! what the core reports; `durable.rs` what it stores; `state.rs` the
//! in-memory state it keeps; `join.rs` the join handshake and fresh-node
//! recovery; one file per mechanism; `rules.rs` the safety rules; `tests`
//! the per-handler tests.
//!
//! Reading guide: this file holds the node, the `Protocol` impl and the
//! dispatch (every message's term is handled here: a higher term is
//! joined, a lower one answered `StaleTerm`). Each mechanism of electd.md
//! is one file: its own state type (one field of the node), whose methods
//! borrow only that state, and an `impl ElNode` block of handlers that
//! pass it what it needs (settings, the time) and act on what it returns
//! (sends, timers, events). What several mechanisms read (the term, whom
//! it follows, the role, the coordinator known, the suspected peers, the
//! promise component, the timers, the outbox) stays on the node.
//!
//! - [`join`]: the start-up handshake and fresh-node recovery
//!   (`join::Handshake`: joined, the `Hello` nonce);
//! - [`terms`]: joining terms, `StaleTerm`, pre-votes, starting a term,
//!   per-hop acks (`terms::TermsState`: the pre-vote, unacked hops);
//! - [`relay`]: the relay election (Dolev-Klawe-Rodeh / Peterson;
//!   `relay::RelayState`: this process's part in the term's run);
//! - [`ring`]: the alive-list ring election (seed 004; `ring::RingState`:
//!   laps forwarded and passed, the own Election);
//! - [`office`]: heartbeats, their acks, the quorum lease, taking office,
//!   stepping down, a consumer's silence check (no state of its own: it
//!   sets the role, the coordinator known and the office's quorum);
//! - [`access`]: the coordinator's FIFO queue, grants, renewals, release
//!   (`access::Office`, held in `Role::Coordinator`: heartbeats and the
//!   quorum lease, the queue, the counter, the holder);
//! - [`consumer`]: a process's local clients: requests to the coordinator,
//!   denials and silence, the holder side of a grant's lease
//!   (`consumer::ConsumerState`: the pending request, the held grant).
//!
//! Time comes in as arguments. After every input [`ElNode::after_input`]
//! handles messages this process sent itself (the coordinator's own
//! clients go through the same queue), stores what changed (one `Persist`
//! ahead of the outputs it guards) and serves.

mod access;
mod config;
mod consumer;
mod durable;
mod events;
mod join;
mod observe;
mod office;
mod relay;
mod ring;
mod rules;
mod state;
mod terms;
#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, VecDeque};

use ::durable::promise::{self, PromiseNode};
use ftcore::{
    ClientId, Context, Incarnation, JoinState, NodeId, Outbox, OutputOf, PeerView, Protocol, StatusReport, Then,
};
use lockservice::{LockName, LockReply, LockRequest, LocksConfig, NamedLocks};
use timer::{Instant, SeededRng, TimerTable};

use crate::msg::Msg;

pub use self::durable::ElDurable;
pub use access::QueueEntry;
pub use config::{Algorithm, ElConfig, ElError};
pub use events::{ElEvent, PreVoteOutcome};
pub use rules::ElRule;
use state::{Role, Timer};

/// One electd process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ElNode {
    cfg: ElConfig,
    me: NodeId,
    inc: Incarnation,
    members: Vec<NodeId>,
    promise: PromiseNode,
    /// The highest term joined (stored) and whom it follows there.
    term: u64,
    follows: Option<NodeId>,
    /// The durable part as last stored.
    stored: (u64, Option<NodeId>),
    /// The term loaded at start: this life never takes office at or below it.
    start_term: u64,
    /// The last term this life held an office in: never a second office
    /// in it (`OneOfficePerTerm`).
    office_term: u64,
    /// When the current term was joined here.
    term_since: Instant,
    role: Role,
    /// The coordinator known in `term`, and when it was last heard (a
    /// heartbeat this process acked).
    coordinator: Option<NodeId>,
    last_heard: Instant,
    /// When the known coordinator was suspected (or this process stepped
    /// down): the failover metric runs from here.
    lost_coordinator_at: Option<Instant>,
    /// Peers that left a hop unacked or broke their connection, until
    /// heard from again.
    suspected: BTreeSet<NodeId>,
    /// The coordinator this consumer gave up for silence: skipped in
    /// elections (as a suspected peer is) until heard from, but not
    /// reported down: a resumed coordinator talks to its new coordinator
    /// only, and would stay "down" at every other consumer.
    silent: Option<NodeId>,
    /// Peers heard from, with their life.
    heard: membership::Lives,
    relay: relay::RelayState,
    ring: ring::RingState,
    terms: terms::TermsState,
    handshake: join::Handshake,
    consumer: consumer::ConsumerState,
    observe: observe::ObserveState,
    locks: NamedLocks,
    timers: TimerTable<Timer>,
    /// Messages this process sent itself, handled after the current input.
    loopback: VecDeque<Msg>,
    leaving: bool,
    rng: SeededRng,
    out: Outbox<Msg, LockReply, ElEvent, ElDurable>,
}

impl ElNode {
    fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// The next process after this one in ring order that is neither
    /// suspected nor a coordinator given up for silence (`None`: nobody
    /// else).
    fn successor(&self) -> Option<NodeId> {
        let i = self.members.iter().position(|m| *m == self.me)?;
        let n = self.members.len();
        (1..n).map(|k| self.members[(i + k) % n]).find(|m| !self.suspected.contains(m) && self.silent != Some(*m))
    }

    fn others(&self) -> Vec<NodeId> {
        self.members.iter().copied().filter(|m| *m != self.me).collect()
    }

    /// Sends `msg`; to this process itself, through the loopback.
    fn send(&mut self, to: NodeId, msg: Msg) {
        if msg.is_election() {
            self.out.event(ElEvent::ElectionMessage {
                kind: <Msg as ftcore::Message>::kind_name(ftcore::Message::kind(&msg)).unwrap_or("unknown"),
            });
        }
        if to == self.me {
            self.loopback.push_back(msg);
        } else {
            self.out.send(to, msg);
        }
    }

    /// Whether this process is the coordinator in office (it took office in
    /// its term).
    pub fn in_office(&self) -> bool {
        matches!(&self.role, Role::Coordinator(o) if o.took_office.is_some())
    }

    /// Whether this process was elected in its term (in office or not yet).
    pub fn is_coordinator(&self) -> bool {
        matches!(self.role, Role::Coordinator(_))
    }

    /// The term joined.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The coordinator this process knows in its term.
    pub fn coordinator(&self) -> Option<NodeId> {
        self.coordinator
    }

    /// Whom this process follows in its term.
    pub fn follows(&self) -> Option<NodeId> {
        self.follows
    }

    /// Whether this coordinator may grant or renew now: in office, under
    /// its quorum lease.
    pub fn may_grant(&self, now: Instant) -> bool {
        match &self.role {
            Role::Coordinator(o) => {
                o.took_office.is_some() && (self.cfg.rules.off(ElRule::QuorumLease) || o.quorum_valid(&self.cfg, now))
            }
            _ => false,
        }
    }

    /// The local client holding lock `name`, with its fence.
    pub fn holder(&self, name: &LockName) -> Option<(ClientId, u128)> {
        self.locks.holder(name)
    }

    /// The promise component (read access for checkers).
    pub fn promises(&self) -> &PromiseNode {
        &self.promise
    }

    /// The coordinator's current grant of `name` (holder, fence), if
    /// this is it.
    pub fn current_grant(&self, name: &LockName) -> Option<(NodeId, u128)> {
        match &self.role {
            Role::Coordinator(o) => o.grants().find(|(n, _, _)| *n == name).map(|(_, node, f)| (node, f)),
            _ => None,
        }
    }

    /// Puts one `Persist` in front of the outputs of this input, if
    /// anything stored changed.
    fn persist_first(&mut self) {
        let promises = self.promise.take_dirty();
        if self.cfg.rules.off(ElRule::StoredTerms) {
            return;
        }
        if promises.is_none() && (self.term, self.follows) == self.stored {
            return;
        }
        ftcore::invariant!(
            self.cfg.rules,
            self.term >= self.stored.0,
            "the stored term falls: {} after {}",
            self.term,
            self.stored.0
        );
        self.stored = (self.term, self.follows);
        self.out.persist_first(ElDurable {
            promises: Some(self.promise.stored().clone()),
            term: self.term,
            follows: self.follows,
        });
    }

    /// Serving after every input: the coordinator grants, a consumer asks
    /// for its local clients.
    fn serve(&mut self, now: Instant) {
        self.grant_next(now);
        self.consumer_serve(now);
        self.observe_serve(now);
    }

    /// One message, its term already checked.
    fn dispatch(&mut self, now: Instant, from: NodeId, msg: Msg) {
        let term = msg.term();
        // Pre-votes store and join nothing; handshakes carry values.
        match msg {
            Msg::PreVote { term } => return self.on_prevote(now, from, term),
            Msg::PreVoteReply { term, asked, yes } => return self.on_prevote_reply(now, from, term, asked, yes),
            Msg::Hello { nonce, .. } => return self.on_hello(from, nonce),
            Msg::HelloAck { term, nonce, values, .. } => return self.on_hello_ack(now, from, term, nonce, values),
            _ => {}
        }
        if term > self.term && self.is_coordinator() && self.cfg.rules.off(ElRule::StepDownAtAHigherTerm) {
            return;
        }
        if term > self.term {
            if self.promise.stored().recovered() || matches!(msg, Msg::StaleTerm { .. }) {
                self.join_term(now, term);
            } else {
                // An unrecovered node joins nothing (it would vote, ack and
                // follow nothing anyway); it answers nothing either.
                self.out.event(ElEvent::Refused { from, reason: "unrecovered" });
                return;
            }
        } else if term < self.term {
            ftcore::mutant! {
                if let (true, Msg::Heartbeat { term, seq }) = (self.cfg.rules.off(ElRule::StaleTermAnswered), &msg) {
                    let (term, seq) = (*term, *seq);
                    return self.send(from, Msg::HeartbeatAck { term, seq });
                }
            }
            if !matches!(
                msg,
                Msg::StaleTerm { .. } | Msg::HopAck { .. } | Msg::HeartbeatAck { .. } | Msg::RenewAck { .. }
            ) {
                let coordinator = self.coordinator;
                self.send(from, Msg::StaleTerm { term: self.term, coordinator });
                self.out.event(ElEvent::StaleAnswered);
            }
            return;
        }
        match msg {
            Msg::PreVote { .. } | Msg::PreVoteReply { .. } | Msg::Hello { .. } | Msg::HelloAck { .. } => {}
            Msg::StaleTerm { coordinator, .. } => self.on_stale_term(now, coordinator),
            Msg::HopAck { hop, .. } => {
                if self.terms.take_hop(hop).is_some() {
                    self.timers.cancel(Timer::Hop(hop));
                }
            }
            Msg::Relay { term, round, phase, value, hop } => {
                self.send(from, Msg::HopAck { term, hop });
                self.on_relay(now, term, round, phase, value);
            }
            Msg::Elected { term, d, decider, accepted, hop } => {
                self.send(from, Msg::HopAck { term, hop });
                self.on_elected(now, term, d, decider, accepted);
            }
            Msg::Election { term, initiator, initiator_inc, alive, hop } => {
                self.send(from, Msg::HopAck { term, hop });
                self.on_election(now, term, initiator, initiator_inc, alive);
            }
            Msg::Coordinator { term, id, alive, initiator, hop } => {
                self.send(from, Msg::HopAck { term, hop });
                self.on_coordinator(now, term, id, alive, initiator);
            }
            Msg::Heartbeat { term, seq } => self.on_heartbeat(now, from, term, seq),
            Msg::HeartbeatAck { term, seq } => self.on_heartbeat_ack(now, from, term, seq),
            Msg::Request { name, req, queued, holding, value, .. } => {
                self.on_request(now, from, name, req, queued, holding, value)
            }
            Msg::Queued { term, name, req, pos } => self.on_queued(now, from, term, &name, req, pos),
            Msg::Denied { name, req, why, .. } => self.on_denied(now, from, &name, req, why),
            Msg::Granted { name, req, fence, .. } => self.on_granted(now, from, &name, req, fence),
            Msg::Renew { grants, .. } => self.on_renew(now, from, grants),
            Msg::RenewAck { acks, .. } => self.on_renew_ack(now, acks),
            Msg::RenewRefused { fences, .. } => self.on_renew_refused(now, fences),
            Msg::Release { fence, .. } => self.on_release(now, from, fence),
            Msg::Announce { fence, value, .. } => self.on_announce(from, fence, value),
            Msg::Announced { fence, .. } => self.on_announced(fence),
            Msg::Observe { req, mode, names, .. } => self.on_observe(now, from, req, mode, names),
            Msg::Observed { req, entries, .. } => self.on_observed(now, from, req, entries),
        }
    }
}

/// The most messages to itself a process handles after one input (what
/// is left waits for the next input; a local grant takes four).
const LOOPBACK_PER_INPUT: usize = 64;

impl Protocol for ElNode {
    type Msg = Msg;
    type Request = LockRequest;
    type Reply = LockReply;
    type Event = ElEvent;
    type Config = ElConfig;
    type Durable = ElDurable;
    type Error = ElError;

    fn start(ctx: Context<ElConfig, ElDurable>) -> Result<Self, ElError> {
        let members: Vec<NodeId> = ctx.membership.ids().collect();
        ctx.config.validate(members.len())?;
        let setup = promise::Setup {
            window: ctx.config.election_timeout,
            lease: ctx.config.lease,
            drift_ppm: ctx.config.drift_ppm,
            // electd joins a higher term at once; its quorum lease stops a
            // late lower proposal from acting (foundation.md).
            promise_window: false,
            rules: ftcore::rules::Rules::ALL_ON,
        };
        let stored = ctx.stored.clone().unwrap_or_default();
        let promise = PromiseNode::for_core(&ctx, setup, stored.promises.clone())?;
        let term = stored.term.max(promise.stored().threshold()).max(promise.stored().in_use());
        let follows = if term == stored.term { stored.follows } else { None };
        let mut rng = SeededRng::new(ctx.seed);
        let first_election = promise.first_proposal_at(&mut rng);
        let locks = NamedLocks::new(
            LocksConfig {
                max_queue: ctx.config.max_queue,
                // The grant's lease bounds a hold; no local max_hold.
                max_hold: None,
                // A request's round trip to the coordinator and back.
                try_window: ctx.config.request_timeout,
            },
            ctx.config.max_locks,
        );
        let mut node = ElNode {
            me: ctx.me,
            inc: ctx.incarnation,
            promise,
            term,
            follows,
            stored: (stored.term, stored.follows),
            start_term: term,
            office_term: 0,
            term_since: ctx.now,
            role: Role::Electing,
            coordinator: None,
            last_heard: ctx.now,
            lost_coordinator_at: None,
            suspected: BTreeSet::new(),
            silent: None,
            heard: membership::Lives::default(),
            relay: relay::RelayState::default(),
            ring: ring::RingState::default(),
            terms: terms::TermsState::default(),
            handshake: join::Handshake::new(members.len() == 1),
            consumer: consumer::ConsumerState::default(),
            observe: observe::ObserveState::default(),
            locks,
            timers: TimerTable::new(),
            loopback: VecDeque::new(),
            leaving: false,
            rng,
            out: Outbox::default(),
            members,
            cfg: ctx.config,
        };
        node.hello_all(ctx.now);
        ftcore::mutant! {
            if node.cfg.rules.off(ElRule::NoOfficeAtTheLoadedTerm) && node.follows == Some(node.me) && node.term > 0 {
                node.start_term = 0;
                node.become_elected(ctx.now);
            }
        }
        // Initially everyone is electing: the first election once the
        // restart window has passed, unless a coordinator is heard first.
        node.timers.set(Timer::Elect, first_election);
        node.timers.set(Timer::Check, ctx.now + node.cfg.suspect_after);
        node.after_input(ctx.now);
        Ok(node)
    }

    /// Handles what this process sent itself and serves, again until
    /// serving sends itself nothing more (a local client of the
    /// coordinator: request, grant, renewal and ack all go through the
    /// loopback within the one input), then stores what changed ahead of
    /// the outputs.
    fn after_input(&mut self, now: Instant) {
        // Bounded: every loopback message is a reply or a request of this
        // process's own, and each produces at most a few more.
        let mut budget = LOOPBACK_PER_INPUT;
        loop {
            while budget > 0 {
                let Some(msg) = self.loopback.pop_front() else { break };
                budget -= 1;
                self.dispatch(now, self.me, msg);
            }
            self.serve(now);
            if self.loopback.is_empty() || budget == 0 {
                break;
            }
        }
        if !self.loopback.is_empty() {
            // The rest as the next input, at once: other inputs may come
            // first, and nothing waits for an unrelated timer.
            self.timers.set(Timer::Loopback, now);
        }
        self.persist_first();
    }

    fn on_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Msg) -> Then {
        if from == self.me || !self.members.contains(&from) {
            self.out.event(ElEvent::Refused { from, reason: "not_a_member" });
            return Then::Done;
        }
        if !self.heard.admit(from, inc) {
            // The transport refuses older lives; a core never acts on one.
            return Then::Done;
        }
        self.suspected.remove(&from);
        if self.silent == Some(from) {
            self.silent = None;
        }
        self.dispatch(now, from, msg);
        Then::AfterInput
    }

    fn on_request(&mut self, now: Instant, client: ClientId, req: LockRequest) -> Then {
        match req {
            LockRequest::Observe { name, watch } => self.client_observe(now, client, name, watch),
            // A watcher stops watching.
            LockRequest::Release if self.observe.observes(client) => self.client_unobserve(client, true),
            _ if self.observe.observes(client) => {
                let reason = "one request per connection: this one observes an election".to_owned();
                self.out.reply(client, LockReply::Refused { reason });
            }
            req => self.locks.request(now, client, req, &mut self.out),
        }
        Then::AfterInput
    }

    fn on_client_gone(&mut self, now: Instant, client: ClientId) -> Then {
        self.client_unobserve(client, false);
        self.locks.client_gone(now, client, &mut self.out);
        Then::AfterInput
    }

    fn on_peer_unreachable(&mut self, now: Instant, peer: NodeId) -> Then {
        if self.members.contains(&peer) && peer != self.me {
            self.peer_gone(now, peer);
        }
        Then::AfterInput
    }

    fn on_link_lost(&mut self, now: Instant, peer: NodeId) -> Then {
        // What was in flight to it is lost: unacked hops time out on their
        // own timers (`Timer::Hop`); a request it had answered `Queued` is
        // sent again now.
        if self.members.contains(&peer) && peer != self.me {
            self.suspected.insert(peer);
        }
        // A Granted or Queued from it may be lost too: ask again.
        self.resend_pending_to(now, peer);
        self.observe_link_lost(now, peer);
        Then::AfterInput
    }

    fn on_timeout(&mut self, now: Instant) -> Then {
        self.locks.handle_timeout(now, &mut self.out);
        while let Some(t) = self.timers.pop_expired(now) {
            match t {
                Timer::Hello => self.on_hello_timer(now),
                Timer::Elect => self.on_elect_timer(now),
                Timer::PreVoteDue => self.on_prevote_due(now),
                Timer::ElectionDue => self.on_election_due(now),
                Timer::Hop(h) => self.on_hop_timeout(now, h),
                Timer::Heartbeat => self.on_heartbeat_timer(now),
                Timer::Check => self.on_check(now),
                Timer::RequestDue => self.on_request_due(now),
                Timer::Renew => self.on_renew_timer(now),
                Timer::GrantExpiry => self.on_grant_expiry(now),
                Timer::HolderExpiry => self.on_holder_expiry(now),
                Timer::ObserveDue => self.on_observe_due(now),
                // Serving (after_input) does what these wait for.
                Timer::GapEnds | Timer::Loopback => {}
            }
        }
        Then::AfterInput
    }

    fn on_shutdown(&mut self, now: Instant) -> Then {
        self.leaving = true;
        self.locks.shutdown(now, &mut self.out);
        if self.is_coordinator() {
            // Stop heartbeats so that the others elect at once.
            self.step_down(now, "shutting down");
        }
        Then::AfterInput
    }

    fn is_left(&self) -> bool {
        self.leaving && !self.locks.any_held() && !self.consumer.holds_grant()
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
        let role = match &self.role {
            Role::Electing => "electing",
            Role::Coordinator(o) if o.took_office.is_some() => "coordinator",
            Role::Coordinator(_) => "coordinator (taking office)",
            Role::Consumer => "consumer",
        };
        let show = |x: Option<NodeId>| x.map_or("none".to_string(), |n| n.0.to_string());
        let mut details = vec![
            ("term".to_string(), self.term.to_string()),
            ("coordinator".to_string(), show(self.coordinator)),
            ("follows".to_string(), show(self.follows)),
            ("algorithm".to_string(), self.cfg.algorithm.label().to_string()),
            ("has_grant".to_string(), self.consumer.holds_grant().to_string()),
            ("grants_held".to_string(), self.consumer.grants_held().to_string()),
            ("waiting".to_string(), self.locks.waiting().to_string()),
            ("locks_active".to_string(), self.locks.known().to_string()),
            ("elections_observed".to_string(), self.observe.observed().to_string()),
            ("recovered".to_string(), self.promise.stored().recovered().to_string()),
        ];
        if let Role::Coordinator(o) = &self.role {
            details.push(("queue".to_string(), o.queued().to_string()));
            details.push(("held".to_string(), o.held().to_string()));
            details.push(("names".to_string(), o.names.len().to_string()));
            let unnamed = o.grants().find(|(n, _, _)| n.is_unnamed()).map(|(_, node, _)| node);
            details.push(("holder".to_string(), show(unnamed)));
        }
        StatusReport {
            daemon: "electd".into(),
            node: self.me,
            incarnation: self.inc,
            role: role.into(),
            peers: Vec::new(),
            details,
        }
    }

    fn peer_view(&self, peer: NodeId) -> PeerView {
        PeerView { up: !self.suspected.contains(&peer), incarnation: self.heard.of(peer) }
    }

    fn join_state(&self) -> JoinState {
        if self.handshake.is_joined() {
            JoinState::Joined
        } else {
            JoinState::Joining { answered: self.heard.len() + 1, of: self.members.len() }
        }
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        let queue = match &self.role {
            Role::Coordinator(o) => o.queued() as f64,
            _ => 0.0,
        };
        vec![
            ("is_coordinator", f64::from(u8::from(self.in_office()))),
            ("coordinator_id", self.coordinator.map_or(0.0, |c| f64::from(c.0))),
            ("term", self.term as f64),
            ("queue_length", queue),
            ("locks_active", self.locks.known() as f64),
        ]
    }
}

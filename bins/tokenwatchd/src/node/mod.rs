//! The sans-IO core of tokenwatchd: the token passing counter and ACK with
//! TTL over a lossy ring, bypass and regeneration by a Claim a majority
//! promised, and the local lock service on top.
//!
//! Files: `config.rs` the core's settings and their validation; `events.rs`
//! what the core reports; `durable.rs` what it stores; `state.rs` the
//! in-memory state it keeps; `join.rs` the join handshake and fresh-node
//! recovery; one file per mechanism; `rules.rs` the safety rules; `tests`
//! the per-handler tests.
//!
//! Reading guide: this file holds the node, the `Protocol` impl and the
//! dispatch; each mechanism of tokenwatchd.md is one file, readable
//! against one section of the spec. Each file defines the mechanism's own
//! state type (one field of the node, its fields private to the file),
//! whose methods hold the logic that needs only that state, and an
//! `impl TwNode` block that passes them what they need (settings, `now`,
//! the outbox) and orchestrates what spans several mechanisms:
//!
//! - [`join`]: `Join` / `JoinAck`, re-admission, fresh-node recovery;
//!   `join::Handshake` (the start-up phase);
//! - [`pass`]: `Token(m)` and `Ack(ttl, m)`, retransmission, bypass, the
//!   visit (grants, idle hold, `max_hold`); `pass::Passing` (the hand-off
//!   awaiting its confirmation, the last one accepted, the last arrival,
//!   the idle hold);
//! - [`claim`]: regeneration by a Claim: proposing, adopting, refusing,
//!   acked and resent hops that skip a silent process, completion;
//!   `claim::Claims` (the own Claim, its hops and skip list, a Claim put
//!   off, the silent peers, the Claim adopted, the token-lost deadline);
//! - [`lease`]: leases on grants (renewals, acks, the windows they open);
//!   `lockservice::lease::SiteLeases` (the renewer and the acker).
//!
//! What several mechanisms read or write stays on the node: `cfg`, `me`,
//! `members`, the promise component, `tpc` and its stored block, the live
//! view (`bypassed`, `readmit`), `seen`, the visit, the local locks, the
//! RNG and the outbox.
//!
//! Time comes in as arguments; every deadline is derived from the state
//! ([`poll_timeout`](TwNode::poll_timeout)), so a timer that fires late or
//! early does no harm. After every input [`TwNode::after_input`] stores
//! what changed (one `Persist` ahead of the outputs it guards) and serves
//! the visit.

mod claim;
mod config;
mod durable;
mod events;
mod join;
mod lease;
mod pass;
mod rules;
mod state;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::time::Duration;

use ::durable::promise::{PromiseNode, Promises};
use ftcore::{
    ClientId, Context, Incarnation, JoinState, NodeId, Outbox, OutputOf, PeerView, Protocol, StatusReport, Then,
};
use lockservice::{LocalLocks, LockReply, LockRequest, LocksConfig};
use timer::{Instant, SeededRng};

use crate::msg::Msg;
pub use config::{TwConfig, TwError, MAX_TPC_RESERVE};
pub use durable::TwDurable;
pub use events::{ClaimOutcome, TwEvent};
pub use rules::TwRule;
use state::Visit;

/// The refusal of a named lock (named-locks.md: tokenwatchd stays the
/// seed's single token ring).
pub const NO_NAMES: &str =
    "tokenwatchd serves one token ring: named locks are not supported (docs/tokenwatchd.md, Named locks)";

/// One tokenwatchd process.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TwNode {
    cfg: TwConfig,
    me: NodeId,
    inc: Incarnation,
    members: Vec<NodeId>,
    promise: PromiseNode,
    /// The token passing counter (stored).
    tpc: u64,
    /// With the `epoch_not_stored` mutation only: the promise component's
    /// part as the state file keeps it.
    kept_promises: Option<Promises>,
    /// The counter as last stored: `tpc` or, with a reserve, up to
    /// `tpc_reserve − 1` above it.
    stored_tpc: u64,
    /// `tpc_from` as last stored.
    stored_from: Option<u64>,
    /// After a restart from a counter stored ahead: the least count of
    /// the stored epoch that may be newer than any this process accepted
    /// before (its real counter was in `[tpc_from, tpc]`, whatever
    /// `tpc_reserve` is now); until a token is accepted, such a token is
    /// answered `Stale`.
    unsure_from: Option<u64>,
    /// The live view: processes left out, from the newest token accepted.
    bypassed: BTreeSet<NodeId>,
    /// Processes whose Join was answered here since the last token passed
    /// on: dropped from `bypassed` in the next token forwarded.
    readmit: BTreeSet<NodeId>,
    /// The newest (epoch, m) accepted.
    seen: (u64, u64),
    visit: Option<Visit>,
    /// The hand-off awaiting its confirmation, the last one accepted, the
    /// idle hold (`pass.rs`).
    passing: pass::Passing,
    /// The Claims: own, adopted and forwarded, and the token-lost
    /// deadline that starts one (`claim.rs`).
    claims: claim::Claims,
    /// Peers heard from, with their life (status).
    heard: membership::Lives,
    /// How far the join handshake is (`join.rs`).
    handshake: join::Handshake,
    locks: LocalLocks,
    /// This process's lease on its grants, and the renewals it acked
    /// (`lease.rs`).
    leases: lockservice::lease::SiteLeases,
    leaving: bool,
    rng: SeededRng,
    nonce_counter: u64,
    out: Outbox<Msg, LockReply, TwEvent, TwDurable>,
}

impl TwNode {
    /// The ring's live view: configured processes minus the bypassed ones
    /// (this process always in).
    fn live_view(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().copied().filter(|m| *m == self.me || !self.bypassed.contains(m))
    }

    /// L, the live view's size.
    fn live_len(&self) -> usize {
        self.live_view().count()
    }

    /// The next process after this one in the live view, leaving out
    /// `skip`; `None` when there is nobody else.
    fn successor(&self, skip: &[NodeId]) -> Option<NodeId> {
        let i = self.members.iter().position(|m| *m == self.me)?;
        let n = self.members.len();
        (1..n)
            .map(|k| self.members[(i + k) % n])
            .find(|m| !self.bypassed.contains(m) && !skip.contains(m) && *m != self.me)
    }

    fn fresh_nonce(&mut self) -> u64 {
        self.nonce_counter += 1;
        (self.inc.0 << 20) ^ self.nonce_counter
    }

    /// The fence of a grant now: (epoch in use, tpc).
    fn fence(&self, epoch: u64) -> u128 {
        lockservice::fence(epoch, self.tpc)
    }

    /// The count after `count`, `None` past `u64::MAX`. (safety) Fences
    /// keep rising: a count never wraps; a holder whose tpc would pass
    /// `u64::MAX` grants nothing more and claims (its token restarts at 1).
    fn next_count(&self, count: u64) -> Option<u64> {
        ftcore::mutant! {
            if self.cfg.rules.off(TwRule::TpcNeverWraps) {
                return Some(count.wrapping_add(1));
            }
        }
        count.checked_add(1)
    }

    /// The token showed itself (accepted, confirmed, or a Claim adopted
    /// whose token follows within W): the token-lost deadline starts over.
    fn token_activity(&mut self, now: Instant) {
        let jitter = self.rng.duration_between(Duration::ZERO, self.cfg.lost_jitter_max());
        self.claims.token_activity(now, jitter);
    }

    /// The token itself was here (accepted, confirmed or made): the
    /// token-lost deadline starts over.
    fn token_here(&mut self, now: Instant) {
        // A Claim put off by a lease window is not needed now.
        self.claims.token_here(now);
        self.token_activity(now);
    }

    /// Puts one `Persist` of the current state in front of the outputs
    /// queued by this input, if anything stored changed.
    fn persist_first(&mut self) {
        let changed = self.promise.take_dirty();
        // In the reserved block: nothing of the counter to store. Below it
        // (a new epoch's count): stored again, or a restart would think
        // the new epoch's tokens stale.
        let ahead = self.cfg.tpc_reserve.max(1) - 1;
        let in_block = self.tpc <= self.stored_tpc && self.tpc.saturating_add(ahead) >= self.stored_tpc;
        if changed.is_none() && in_block {
            return;
        }
        if !in_block {
            self.stored_tpc = self.tpc.saturating_add(ahead);
            self.stored_from = (self.stored_tpc > self.tpc).then_some(self.tpc);
        }
        // (safety) The epoch adopted from a token, promised to a Claim or
        // proposed is stored with tpc, ahead of the ack, ClaimAck, forward
        // or token this input sends.
        #[allow(unused_mut)]
        let mut promises = self.promise.stored().clone();
        ftcore::mutant! {
            if self.cfg.rules.off(TwRule::DurableEpoch) {
                // Only a change of `recovered` (a fresh node's recovery) is
                // written; every epoch since stays in memory.
                match &self.kept_promises {
                    Some(kept) if kept.recovered() == promises.recovered() => promises = kept.clone(),
                    _ => self.kept_promises = Some(promises.clone()),
                }
            }
        }
        self.out.persist_first(TwDurable {
            promises: Some(promises),
            tpc: self.stored_tpc,
            tpc_from: self.stored_from,
        });
    }

    /// Sends `msg` to every other member, in ring order.
    fn send_to_every_peer(&mut self, msg: Msg) {
        self.out.send_to_all_but(&self.members, self.me, msg);
    }

    /// Whether this process holds the token.
    pub fn has_token(&self) -> bool {
        self.visit.is_some()
    }

    /// Whether this process holds the token with every other configured
    /// process bypassed: it has no successor (`pass.rs`, the minority
    /// holder rule). Never while Claims need a majority of adopters: a
    /// token's bypassed list is its Claim's skipped processes, which
    /// adopted nothing, so it names a minority at most (and never the
    /// claimant or the Claim's last forwarder). The simulator checks this
    /// after every step; the model judges the rule's `MinorityDropped`.
    pub fn holds_without_a_successor(&self) -> bool {
        self.visit.is_some() && self.members.len() > 1 && self.successor(&[]).is_none()
    }

    /// The unconfirmed hand-off, if any: when it was last sent and how
    /// many times it was sent again (the simulator checks that a lost
    /// token is retransmitted within `ring_timeout`).
    pub fn unconfirmed_handoff(&self) -> Option<(Instant, u32)> {
        self.passing.awaiting().map(|a| (a.last_sent, a.retransmits))
    }

    /// The token passing counter.
    pub fn tpc(&self) -> u64 {
        self.tpc
    }

    /// The highest epoch in use here.
    pub fn epoch(&self) -> u64 {
        self.promise.stored().in_use()
    }

    /// The promise component (read access for checkers).
    pub fn promises(&self) -> &PromiseNode {
        &self.promise
    }

    /// Whether a hand-off awaits its confirmation.
    pub fn is_awaiting(&self) -> bool {
        self.passing.awaiting().is_some()
    }

    /// Whether a local client holds the lock here.
    pub fn is_holding_a_client(&self) -> bool {
        self.locks.is_held()
    }

    /// Processes this one's live view leaves out.
    pub fn bypassed(&self) -> &BTreeSet<NodeId> {
        &self.bypassed
    }
}

impl Protocol for TwNode {
    type Msg = Msg;
    type Request = LockRequest;
    type Reply = LockReply;
    type Event = TwEvent;
    type Config = TwConfig;
    type Durable = TwDurable;
    type Error = TwError;

    fn start(ctx: Context<TwConfig, TwDurable>) -> Result<Self, TwError> {
        let members: Vec<NodeId> = ctx.membership.ids().collect();
        ctx.config.validate(members.len())?;
        let setup = ctx.config.promise_setup();
        let stored = ctx.stored.clone();
        let loaded = stored.as_ref().and_then(|d| d.promises.clone());
        let kept_promises = loaded.clone().filter(|_| ctx.config.rules.off(TwRule::DurableEpoch));
        let promise = PromiseNode::for_core(&ctx, setup, loaded)?;
        let tpc = if ctx.config.rules.off(TwRule::DurableTpc) { 0 } else { stored.as_ref().map_or(0, |d| d.tpc) };
        let mut tpc_from =
            stored.as_ref().and_then(|d| d.tpc_from).filter(|f| *f < tpc && ctx.config.rules.on(TwRule::DurableTpc));
        let tpc = match tpc_from {
            Some(f) if ctx.config.rules.off(TwRule::ReserveResumesAboveItsBlock) => {
                tpc_from = None;
                f
            }
            _ => tpc,
        };
        let mut rng = SeededRng::new(ctx.seed);
        let first_claim = promise.first_proposal_at(&mut rng);
        let locks = LocalLocks::new(LocksConfig {
            max_queue: ctx.config.max_queue,
            // The visit enforces max_hold (from the token's arrival).
            max_hold: None,
            // The token's way to this process: one lap, each process
            // keeping it token_min_hold and each hop taking up to δ.
            try_window: (ctx.config.token_min_hold + ctx.config.max_delay) * members.len() as u32,
        });
        let mut node = TwNode {
            leases: lockservice::lease::SiteLeases::new(ctx.config.lease_config(members.len())),
            members,
            me: ctx.me,
            inc: ctx.incarnation,
            promise,
            tpc,
            kept_promises,
            stored_tpc: tpc,
            stored_from: tpc_from,
            unsure_from: tpc_from,
            bypassed: BTreeSet::new(),
            readmit: BTreeSet::new(),
            seen: (0, 0),
            visit: None,
            passing: pass::Passing::new(ctx.config.token_min_hold),
            claims: claim::Claims::new(ctx.now, first_claim),
            heard: membership::Lives::default(),
            handshake: join::Handshake::new(ctx.now),
            locks,
            leaving: false,
            rng,
            nonce_counter: 0,
            out: Outbox::default(),
            cfg: ctx.config,
        };
        node.start_joining(ctx.now);
        node.after_input(ctx.now);
        Ok(node)
    }

    /// Serves the visit and renews the lease (serving again if its own
    /// ack gave the lease: N = 1), then stores what changed (promises or
    /// tpc) ahead of every output the input produced.
    fn after_input(&mut self, now: Instant) {
        self.serve(now);
        if self.renew_lease(now) {
            self.serve(now);
        }
        self.persist_first();
        // The core's own invariants, whatever its input (a forged frame
        // included): the simulator runs debug builds, so every seeded run
        // checks them after every input.
        let rules = self.cfg.rules;
        ftcore::invariant!(
            rules,
            self.visit.as_ref().is_none_or(|v| v.epoch <= self.promise.threshold()),
            "{}: the token's epoch is above every epoch promised or in use here",
            self.me
        );
        ftcore::invariant!(
            rules,
            self.stored_tpc >= self.tpc,
            "{}: the counter in use is above the stored one",
            self.me
        );
    }

    fn on_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Msg) -> Then {
        if from == self.me || !self.members.contains(&from) {
            self.out.event(TwEvent::Refused { from, reason: "not_a_member" });
            return Then::Done;
        }
        if !self.heard.admit(from, inc) {
            // The transport refuses older lives; a core never acts on one.
            return Then::Done;
        }
        self.claims.heard_from(from);
        match msg {
            Msg::Token { epoch, m, bypassed, quiet } => self.on_token(now, from, epoch, m, bypassed, quiet),
            Msg::Ack { epoch, ttl, m } => self.on_ack(now, epoch, ttl, m),
            Msg::Stale { epoch } => self.on_stale(now, from, epoch),
            Msg::Join { nonce } => self.on_join(now, from, nonce),
            Msg::JoinAck { nonce, values } => self.on_join_ack(now, from, nonce, values),
            Msg::Claim(claim) => self.on_claim(now, from, claim),
            Msg::ClaimAck { epoch, claimant } => self.on_claim_ack(from, epoch, claimant),
            Msg::ClaimRefused { epoch, refusal } => self.on_claim_refused(now, from, epoch, refusal),
            Msg::LeaseRenew { round, epoch, tpc, holding } => {
                self.confirm_by_renewal(now, from, epoch, tpc);
                self.on_lease_renew(now, from, round, epoch, holding);
            }
            Msg::LeaseAck { round } => {
                self.on_lease_ack(now, from, round);
            }
            Msg::LeaseRefused { round, threshold } => self.on_lease_refused(now, from, round, threshold),
            Msg::Wanted => self.passing.on_wanted(now),
        }
        Then::AfterInput
    }

    fn on_request(&mut self, now: Instant, client: ClientId, req: LockRequest) -> Then {
        if let LockRequest::AcquireNamed { .. } = req {
            // The seed's one token ring: one lock, never a named one.
            self.out.reply(client, LockReply::Refused { reason: NO_NAMES.into() });
            return Then::Done;
        }
        let waited = self.locks.has_waiters();
        // After `handle_shutdown` the lock service refuses every Acquire.
        self.locks.request(now, client, req, &mut self.out);
        if !waited && self.locks.has_waiters() {
            self.want();
        }
        Then::AfterInput
    }

    fn on_client_gone(&mut self, now: Instant, client: ClientId) -> Then {
        self.locks.client_gone(now, client, &mut self.out);
        Then::AfterInput
    }

    fn on_link_lost(&mut self, _now: Instant, _peer: NodeId) -> Then {
        // UDP: loss is expected; retransmission and bypass handle it.
        Then::AfterInput
    }

    fn on_timeout(&mut self, now: Instant) -> Then {
        // The visit's end first: a hold still running then is revoked for
        // max_hold (its lease, cut at the visit's end, ends now too).
        self.end_visit_hold(now);
        self.locks.handle_timeout(now, &mut self.out);
        self.join_timeout(now);
        self.pass_timeout(now);
        self.claim_timeout(now);
        Then::AfterInput
    }

    fn on_shutdown(&mut self, now: Instant) -> Then {
        self.leaving = true;
        self.locks.shutdown(now, &mut self.out);
        Then::AfterInput
    }

    fn is_left(&self) -> bool {
        // Left once the token is handed on and confirmed (or never here).
        self.leaving && self.visit.is_none() && !self.is_awaiting()
    }

    fn poll_output(&mut self) -> Option<OutputOf<Self>> {
        self.out.pop()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        [
            self.locks.poll_timeout(),
            self.join_deadline(),
            self.pass_deadline(),
            self.claim_deadline(),
            self.lease_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn incarnation(&self) -> Incarnation {
        self.inc
    }

    fn status(&self) -> StatusReport {
        let role = match (self.visit.is_some(), self.is_awaiting(), self.claims.is_claiming()) {
            (true, _, _) => "holder",
            (false, true, _) => "awaiting",
            (false, false, true) => "claiming",
            _ => "member",
        };
        let mut details = vec![
            ("has_token".to_string(), self.visit.is_some().to_string()),
            ("epoch".to_string(), self.epoch().to_string()),
            ("tpc".to_string(), self.tpc.to_string()),
            ("live_view".to_string(), self.live_len().to_string()),
            ("waiting".to_string(), self.locks.waiting().to_string()),
            ("recovered".to_string(), self.promise.stored().recovered().to_string()),
        ];
        if !self.bypassed.is_empty() {
            let b: Vec<String> = self.bypassed.iter().map(|n| n.to_string()).collect();
            details.push(("bypassed".to_string(), b.join(",")));
        }
        StatusReport {
            daemon: "tokenwatchd".into(),
            node: self.me,
            incarnation: self.inc,
            role: role.into(),
            peers: Vec::new(),
            details,
        }
    }

    fn peer_view(&self, peer: NodeId) -> PeerView {
        PeerView { up: !self.bypassed.contains(&peer), incarnation: self.heard.of(peer) }
    }

    fn join_state(&self) -> JoinState {
        if self.handshake.is_joined() {
            JoinState::Joined
        } else {
            JoinState::Joining { answered: usize::from(!self.heard.is_empty()), of: self.members.len() }
        }
    }

    fn gauges(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("has_token", f64::from(u8::from(self.visit.is_some()))),
            ("tpc", self.tpc as f64),
            ("epoch", self.epoch() as f64),
        ]
    }
}

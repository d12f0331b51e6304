//! The sans-IO core of ntmutexd: Naimi-Trehel path reversal, COMMIT,
//! recovery mechanisms M1/M2/M3, two-phase regeneration, and the local lock
//! service on top.
//!
//! Reading guide: `handle_message` checks the sender's life and epoch, then
//! dispatches to one `on_*` handler per message; `pump` runs after every
//! input and does what the current state calls for (grant to a local
//! client, pass the token, make a request). Rules marked (safety) in
//! `../shared/spec/ntmutexd.md` are cited where they are implemented.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::{ClientId, Context, Incarnation, NodeId, Outbox, OutputOf, PeerStatus, Protocol, StatusReport};
use lockservice::{LocalLocks, LockEvent, LockReply, LockRequest, LocksConfig};
use timer::{Instant, TimerTable};

use crate::msg::{Body, Msg};

/// Protocol settings (derived from the daemon's config).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NtConfig {
    /// How many predecessors a COMMIT names (M1 recovers fewer than k
    /// consecutive failures without a broadcast).
    pub k: usize,
    /// Upper bound on one-way delay plus processing.
    pub t_msg: Duration,
    /// Interval between liveness checks of the closest predecessor.
    pub heartbeat: Duration,
    /// Silence of the closest predecessor after which it is suspected.
    pub suspect_after: Duration,
    /// The local lock service.
    pub locks: LocksConfig,
}

impl NtConfig {
    /// Checks the settings for a cluster of `sites`: the one place they
    /// are validated (the daemon's config check calls it too).
    pub fn validate(&self, sites: usize) -> Result<(), NtError> {
        if sites > MAX_SITES {
            return Err(NtError::TooManySites { max: MAX_SITES, configured: sites });
        }
        if self.k == 0 {
            return Err(NtError::ZeroK);
        }
        Ok(())
    }
}

/// Why a site cannot start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NtError {
    /// This node is not one of the configured members.
    #[error(transparent)]
    Membership(#[from] membership::MembershipError),
    /// Epochs carry a 10-bit slot: at most 1024 sites.
    #[error("at most {max} sites are supported, {configured} configured")]
    TooManySites {
        /// The limit.
        max: usize,
        /// How many are configured.
        configured: usize,
    },
    /// A COMMIT must name at least one predecessor.
    #[error("k must be at least 1")]
    ZeroK,
}

/// Recovery mechanisms of the seed (section 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mech {
    /// Ask the predecessors, closest first.
    M1,
    /// Broadcast SearchPrev.
    M2,
    /// No position: broadcast SearchQueue (with election).
    M3,
}

impl Mech {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Mech::M1 => "m1",
            Mech::M2 => "m2",
            Mech::M3 => "m3",
        }
    }
}

impl From<LockEvent> for NtEvent {
    fn from(e: LockEvent) -> Self {
        NtEvent::Lock(e)
    }
}

/// What the core reports to metrics, logs and checkers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NtEvent {
    /// The local lock service did something (grant, release, …).
    Lock(LockEvent),
    /// The start-up handshake finished.
    Joined {
        /// True if this start created the cluster's first token state.
        bootstrap: bool,
    },
    /// A failure was detected and a recovery started.
    RecoveryStarted {
        /// Which mechanism.
        mech: Mech,
    },
    /// The token path is restored (Commit or token received).
    Recovered {
        /// The mechanism that started the recovery.
        mech: Mech,
        /// Detection to restoration.
        took: Duration,
    },
    /// This site regenerated the token.
    Regenerated {
        /// The new epoch.
        epoch: u32,
    },
    /// A token of an old epoch arrived and was discarded.
    StaleToken {
        /// Its epoch.
        epoch: u32,
    },
    /// The token held here was superseded by a newer epoch.
    TokenSuperseded {
        /// The old epoch.
        epoch: u32,
    },
    /// A peer is suspected to have failed.
    Suspected {
        /// The peer.
        node: NodeId,
    },
    /// The token arrived or left (for the has-token gauge).
    HasToken(bool),
    /// The known epoch changed.
    Epoch(u32),
    /// A token-holding site entered or left a critical section (granted).
    Entered {
        /// The fence of the grant.
        fence: u64,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Timer {
    Join,
    CommitWait,
    AliveCheck,
    Window,
    Provisional,
    Probe,
}

/// Where requests go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Last {
    /// This site is a root of the last tree.
    Root,
    /// Requests are forwarded to this site.
    Parent(NodeId),
    /// A new life that does not know the tree yet: requests get DeadEnd.
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Token {
    epoch: u32,
    counter: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Answer {
    position: Option<u64>,
    has_next: bool,
    has_token: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Recovery {
    Idle,
    /// M1: asking `asking`; `rest` are the farther predecessors.
    M1 {
        started: Instant,
        asking: NodeId,
        rest: Vec<NodeId>,
    },
    /// M2 or M3 search window.
    Search {
        mech: Mech,
        started: Instant,
        waiting: BTreeSet<NodeId>,
        answers: BTreeMap<NodeId, Answer>,
    },
    /// Two-phase regeneration, phase one.
    Regen {
        mech: Mech,
        started: Instant,
        proposal: u32,
        waiting: BTreeSet<NodeId>,
        /// Acks received so far.
        acked: usize,
    },
    /// Connection or direct request sent; waiting for a Commit or the token.
    Linking {
        mech: Mech,
        started: Instant,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    Joining { fresh: BTreeSet<NodeId>, running_seen: bool, deferred: Vec<(NodeId, Incarnation, Msg)> },
    Running,
}

/// M3.b: candidate 1 beats candidate 2 with fewer accesses, or as many and
/// a higher id.
fn beats(a1: u64, id1: NodeId, a2: u64, id2: NodeId) -> bool {
    a1 < a2 || (a1 == a2 && id1 > id2)
}

/// Bits of an epoch that name the regenerating site (its configured
/// slot), so that two concurrent regenerations never propose equal epochs.
const SLOT_BITS: u32 = 10;

/// Most configured sites (epochs carry a 10-bit slot).
pub const MAX_SITES: usize = 1 << SLOT_BITS;

/// One ntmutexd site.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NtNode {
    cfg: NtConfig,
    me: NodeId,
    inc: Incarnation,
    members: Vec<NodeId>,
    addrs: Vec<String>,
    phase: Phase,
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
    max_epoch: u32,
    accesses: u64,
    last_fence: u64,
    peer_inc: BTreeMap<NodeId, Incarnation>,
    suspected: BTreeSet<NodeId>,
    recovery: Recovery,
    /// Best M3 candidate seen recently: (accesses, id, until).
    best_candidate: Option<(u64, NodeId, Instant)>,
    locks: LocalLocks,
    timers: TimerTable<Timer>,
    out: Outbox<Msg, LockReply, NtEvent>,
    leaving: bool,
    left: bool,
}

impl NtNode {
    /// Site `ctx.me` in life `ctx.incarnation`, starting at `ctx.now`. It
    /// first asks its peers whether the cluster is running (a new life of a
    /// running cluster knows nothing and rebuilds through M3); only when a
    /// majority is starting together does the lowest id create the token.
    fn new(ctx: Context<NtConfig, ()>) -> Result<Self, NtError> {
        let Context { me, incarnation: inc, membership, now, config: cfg, .. } = ctx;
        membership.require(me)?;
        cfg.validate(membership.len())?;
        let members: Vec<NodeId> = membership.ids().collect();
        let addrs = membership.members().iter().map(|m| m.addr.to_string()).collect();
        let mut node = NtNode {
            locks: LocalLocks::new(cfg.locks.clone()),
            cfg,
            me,
            inc,
            members,
            addrs,
            phase: Phase::Joining { fresh: BTreeSet::from([me]), running_seen: false, deferred: Vec::new() },
            last: Last::Unknown,
            next: None,
            request: None,
            seq: 0,
            token: None,
            position: None,
            preds: Vec::new(),
            monitored: None,
            last_alive_ok: now,
            max_epoch: 0,
            accesses: 0,
            last_fence: 0,
            peer_inc: BTreeMap::new(),
            suspected: BTreeSet::new(),
            recovery: Recovery::Idle,
            best_candidate: None,
            timers: TimerTable::new(),
            out: Outbox::default(),
            leaving: false,
            left: false,
        };
        if node.members.len() == 1 {
            node.finish_join(now, true);
        } else {
            node.broadcast(Body::Hello);
            node.timers.set(Timer::Join, now + node.cfg.t_msg * 2);
        }
        Ok(node)
    }

    // ----- small helpers -------------------------------------------------

    fn send(&mut self, to: NodeId, body: Body) {
        self.out.send(to, Msg { epoch: self.max_epoch, body });
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
        self.others().into_iter().filter(|m| !self.suspected.contains(m)).collect()
    }

    fn slot(&self, id: NodeId) -> u32 {
        self.members.iter().position(|m| *m == id).unwrap_or(0) as u32
    }

    fn suspect(&mut self, node: NodeId, now: Instant) {
        if self.suspected.insert(node) {
            self.out.event(NtEvent::Suspected { node });
            if !self.timers.is_armed(Timer::Probe) {
                self.timers.set(Timer::Probe, now + self.probe_every());
            }
        }
    }

    /// Suspected peers are probed now and then: a wrongly suspected holder
    /// learns the newer epoch from the probe and drops its stale token;
    /// a restarted or reconnected peer is unsuspected by its answer.
    fn probe_every(&self) -> Duration {
        self.cfg.suspect_after * 4
    }

    fn on_probe(&mut self, now: Instant) {
        let suspected: Vec<NodeId> = self.suspected.iter().copied().collect();
        for s in &suspected {
            self.send(*s, Body::AreYouAlive);
        }
        if !suspected.is_empty() {
            self.timers.set(Timer::Probe, now + self.probe_every());
        }
    }

    fn is_requesting(&self) -> bool {
        self.request.is_some() && self.token.is_none()
    }

    /// In the queue: holding the token or waiting for it.
    fn in_queue(&self) -> bool {
        self.token.is_some() || self.request.is_some()
    }

    /// Holding the token with no local use for it now.
    fn token_idle(&self) -> bool {
        self.token.is_some() && !self.locks.is_held() && !self.locks.has_waiters()
    }

    /// The COMMIT this site sends to a site queued behind it.
    fn commit_for(&self, seq: u64, origin: Option<(NodeId, u64)>) -> Body {
        let mut preds = vec![self.me];
        preds.extend(self.preds.iter().copied().take(self.cfg.k.saturating_sub(1)));
        let origin = origin.unwrap_or((self.me, if self.token.is_some() { u64::MAX } else { self.seq }));
        Body::Commit { pos: self.position.map(|p| p + 1), preds, seq, origin }
    }

    /// Forwarded more than twice the number of sites: the message is
    /// circling (a path can be longer than N while the queue moves, never
    /// that much longer).
    fn circling(&self, hops: u32) -> bool {
        hops as usize > 2 * self.members.len()
    }

    fn set_epoch(&mut self, epoch: u32) {
        if epoch > self.max_epoch {
            self.max_epoch = epoch;
            self.out.event(NtEvent::Epoch(epoch));
        }
    }

    /// The next epoch this site may propose: a new round, in this site's
    /// slot. The round also never falls below wall-clock minutes since
    /// 2023-11-14 (incarnations are start times in ms), so a cluster that
    /// restarts cold still issues larger fences than before.
    fn next_proposal(&self, now: Instant) -> u32 {
        let wall_ms = self.inc.0.saturating_add(now.as_micros() / 1000);
        let wall_round = ((wall_ms / 1000).saturating_sub(1_700_000_000) / 60) as u32;
        let round = (self.max_epoch >> SLOT_BITS).saturating_add(1).max(wall_round);
        (round << SLOT_BITS) | self.slot(self.me)
    }

    fn recovery_done(&mut self, now: Instant) {
        let (mech, started) = match &self.recovery {
            Recovery::Idle => return,
            Recovery::M1 { started, .. } => (Mech::M1, *started),
            Recovery::Search { mech, started, .. }
            | Recovery::Regen { mech, started, .. }
            | Recovery::Linking { mech, started } => (*mech, *started),
        };
        self.recovery = Recovery::Idle;
        self.timers.cancel(Timer::Window);
        self.out.event(NtEvent::Recovered { mech, took: now.saturating_since(started) });
    }

    // ----- start-up ------------------------------------------------------

    fn finish_join(&mut self, now: Instant, bootstrap: bool) {
        let deferred = match std::mem::replace(&mut self.phase, Phase::Running) {
            Phase::Joining { deferred, .. } => deferred,
            Phase::Running => Vec::new(),
        };
        self.timers.cancel(Timer::Join);
        if bootstrap {
            let holder = *self.members.iter().min().expect("at least one member");
            if holder == self.me {
                let epoch = self.next_proposal(now) & !((1 << SLOT_BITS) - 1) | self.slot(self.me);
                self.set_epoch(epoch);
                self.token = Some(Token { epoch, counter: 0 });
                self.position = Some(0);
                self.last = Last::Root;
                self.out.event(NtEvent::HasToken(true));
            } else {
                self.last = Last::Parent(holder);
            }
        } else {
            // (safety) A new life of a running cluster knows nothing: it
            // answers DeadEnd and makes its first request through M3.
            self.last = Last::Unknown;
        }
        self.out.event(NtEvent::Joined { bootstrap });
        for (from, inc, msg) in deferred {
            self.handle_message(now, from, inc, msg);
        }
    }

    fn on_join_timer(&mut self, now: Instant) {
        let Phase::Joining { fresh, running_seen, .. } = &self.phase else { return };
        if *running_seen {
            self.finish_join(now, false);
        } else if fresh.len() > self.members.len() / 2 {
            self.finish_join(now, true);
        } else {
            // No majority heard from yet: keep asking (a minority must not
            // create a token of its own).
            self.broadcast(Body::Hello);
            self.timers.set(Timer::Join, now + self.cfg.t_msg * 2);
        }
    }

    // ----- requests and the token ----------------------------------------

    /// Does what the state calls for: grant locally, pass the token on,
    /// or request it.
    fn pump(&mut self, now: Instant) {
        if matches!(self.phase, Phase::Joining { .. }) {
            return;
        }
        while let Some(token) = self.token {
            if self.locks.is_held() {
                break;
            }
            // Serve the batch that was waiting when the token came; after
            // it, hand the token on if someone is queued, else keep serving.
            let batch_only = self.locks.batch_remaining() > 0 || self.next.is_some();
            let fence = (u64::from(token.epoch) << 32) | u64::from(token.counter.saturating_add(1));
            let may_grant = self.locks.batch_remaining() > 0 || (self.next.is_none() && self.locks.has_waiters());
            if may_grant && self.locks.grant_next(now, fence, batch_only, &mut self.out).is_some() {
                self.token = Some(Token { counter: token.counter.saturating_add(1), ..token });
                self.accesses += 1;
                self.last_fence = fence;
                self.out.event(NtEvent::Entered { fence });
                continue;
            }
            if let Some((n, _)) = self.next {
                if self.suspected.contains(&n) {
                    // (safety) Never send the token to a suspected next:
                    // keep it; its successors reconnect by M1/M2.
                    self.next = None;
                    continue;
                }
                self.pass_token(n);
            } else if self.leaving {
                self.leave_with_token(now);
            }
            break;
        }
        if self.leaving && self.token.is_none() {
            self.left = true;
        }
        if self.token.is_none()
            && self.locks.has_waiters()
            && self.request.is_none()
            && self.recovery == Recovery::Idle
            && !self.leaving
        {
            self.make_request(now);
        }
    }

    fn pass_token(&mut self, to: NodeId) {
        let Some(t) = self.token.take() else { return };
        let pos = self.position.map_or(1, |p| p + 1);
        self.send(to, Body::Token { epoch: t.epoch, counter: t.counter, pos });
        // "A site loses its position when it leaves the queue."
        self.position = None;
        self.preds.clear();
        self.next = None;
        self.monitored = None;
        self.timers.cancel(Timer::AliveCheck);
        self.out.event(NtEvent::HasToken(false));
    }

    fn make_request(&mut self, now: Instant) {
        self.seq += 1;
        self.request = Some(self.seq);
        match self.last {
            Last::Parent(p) if !self.suspected.contains(&p) => {
                self.send(p, Body::Request { requester: self.me, seq: self.seq, hops: 0 });
                self.last = Last::Root;
                self.timers.set(Timer::CommitWait, now + self.commit_timeout());
            }
            // A root without the token, a suspected parent, or a new life:
            // nobody to ask along the tree.
            _ => self.start_m3(now),
        }
    }

    fn commit_timeout(&self) -> Duration {
        // A request may be forwarded up to N - 1 times on a degenerate tree.
        self.cfg.t_msg * (self.members.len() as u32 + 1)
    }

    fn on_request(&mut self, now: Instant, requester: NodeId, seq: u64, hops: u32) {
        if requester == self.me {
            return;
        }
        if self.circling(hops) {
            self.send(requester, Body::DeadEnd { seq });
            return;
        }
        match self.last {
            Last::Unknown => self.send(requester, Body::DeadEnd { seq }),
            Last::Root => {
                if self.in_queue() {
                    self.link(now, requester, seq, Body::Request { requester, seq, hops: hops + 1 });
                } else {
                    // A root that neither holds nor waits: the tree is
                    // broken here.
                    self.send(requester, Body::DeadEnd { seq });
                }
            }
            Last::Parent(p) => {
                if self.suspected.contains(&p) {
                    // (safety) Never forward to a suspected last.
                    self.send(requester, Body::DeadEnd { seq });
                } else {
                    self.send(p, Body::Request { requester, seq, hops: hops + 1 });
                    self.last = Last::Parent(requester);
                }
            }
        }
    }

    /// (safety) The linking rule: link `who` behind this site if `next` is
    /// free (or suspected), else pass the message down the queue — a live
    /// successor is never dropped.
    fn link(&mut self, now: Instant, who: NodeId, seq: u64, forward: Body) {
        if self.is_requesting() && self.monitored.is_some_and(|(m, _)| m == who) {
            // `who` is our closest predecessor (our own request waits behind
            // it): linking it behind us would close a cycle. (Older preds
            // may legitimately come back behind us: they left the queue.) This
            // happens when a search answer went stale before the Connection
            // arrived. Tell it to search again.
            self.send(who, Body::DeadEnd { seq });
            self.pump(now);
            return;
        }
        match self.next {
            Some((n, _)) if n == who => {
                self.next = Some((who, seq));
                let c = self.commit_for(seq, None);
                self.send(who, c);
            }
            Some((n, _)) if !self.suspected.contains(&n) => self.send(n, forward),
            _ => {
                self.last = Last::Parent(who);
                if self.token_idle() && self.request.is_none() {
                    self.next = None;
                    self.pass_token(who);
                } else {
                    self.next = Some((who, seq));
                    let c = self.commit_for(seq, None);
                    self.send(who, c);
                }
            }
        }
        self.pump(now);
    }

    fn on_token(&mut self, now: Instant, from: NodeId, epoch: u32, counter: u32, pos: u64) {
        if epoch < self.max_epoch {
            self.out.event(NtEvent::StaleToken { epoch });
            // The token meant for us is dead: nobody before us holds one.
            // With a position we are the head of the queue (M2 finds no
            // smaller position and regenerates); without one, M3 finds the
            // queue that formed around the regenerator.
            if self.is_requesting() && self.recovery == Recovery::Idle {
                self.search_again(now);
            }
            return;
        }
        if self.token.is_some() {
            // Cannot happen while the invariants hold; keep the one we have.
            tracing::error!(%from, epoch, "second token received; discarded");
            return;
        }
        self.install_token(now, Token { epoch, counter }, pos);
    }

    /// The token is here (received, or regenerated at position 0): leave
    /// the waiting state, tell the chain behind us our new position, and
    /// serve the local clients queued at this moment.
    fn install_token(&mut self, now: Instant, token: Token, position: u64) {
        self.token = Some(token);
        self.position = Some(position);
        self.preds.clear();
        self.monitored = None;
        self.request = None;
        self.timers.cancel(Timer::AliveCheck);
        self.timers.cancel(Timer::CommitWait);
        self.timers.cancel(Timer::Provisional);
        self.out.event(NtEvent::HasToken(true));
        self.recovery_done(now);
        if let Some((n, seq)) = self.next {
            let c = self.commit_for(seq, None);
            self.send(n, c);
        }
        self.locks.token_arrived(now);
        self.pump(now);
    }

    /// A COMMIT (`commit` is the message body).
    fn on_commit(&mut self, now: Instant, from: NodeId, from_inc: Incarnation, commit: Body) {
        let Body::Commit { pos, preds, seq, origin } = commit else { return };
        if self.request != Some(seq) || self.token.is_some() {
            self.send(from, Body::Unlink { seq });
            return;
        }
        if self.next.is_some_and(|(n, _)| n == from) || origin == (self.me, seq) {
            // Queued behind our own successor, or our own cascade came back (a Connection and a request
            // crossed): a cycle. Refuse it — the sender clears its next —
            // and search again.
            self.send(from, Body::Unlink { seq });
            if self.recovery == Recovery::Idle {
                self.search_again(now);
            }
            return;
        }
        self.position = pos;
        self.preds = preds.into_iter().filter(|p| *p != self.me).take(self.cfg.k).collect();
        if self.preds.is_empty() {
            self.preds.push(from);
        }
        let closest = self.preds[0];
        let inc = if closest == from { from_inc } else { self.peer_inc.get(&closest).copied().unwrap_or_default() };
        self.monitored = Some((closest, inc));
        self.last_alive_ok = now;
        self.timers.cancel(Timer::CommitWait);
        self.timers.set(Timer::AliveCheck, now + self.cfg.heartbeat);
        if self.position.is_some() {
            self.timers.cancel(Timer::Provisional);
        } else if !self.timers.is_armed(Timer::Provisional) {
            // A provisional chain gets positions once its head is committed
            // (≤ (N + 1) t_msg) and the cascade runs down it (≤ N t_msg). A
            // site still without a position after that is in a detached
            // portion — possibly a cycle of waiting sites: search (M3).
            self.timers.set(Timer::Provisional, now + self.commit_timeout() * 2);
        }
        // A Commit before the window closes cancels this site's M3.
        self.recovery_done(now);
        if let Some((n, nseq)) = self.next {
            let c = self.commit_for(nseq, Some(origin));
            self.send(n, c);
        }
        self.pump(now);
    }

    // ----- failure detection ---------------------------------------------

    fn on_alive_check(&mut self, now: Instant) {
        let Some((pred, _)) = self.monitored else { return };
        if self.token.is_some() || self.request.is_none() {
            self.monitored = None;
            return;
        }
        if now.saturating_since(self.last_alive_ok) >= self.cfg.suspect_after {
            self.suspect(pred, now);
            self.start_recovery(now);
        } else {
            self.send(pred, Body::AreYouAlive);
            self.timers.set(Timer::AliveCheck, now + self.cfg.heartbeat);
        }
    }

    fn on_i_am_alive(
        &mut self,
        now: Instant,
        from: NodeId,
        inc: Incarnation,
        position: Option<u64>,
        next: Option<NodeId>,
    ) {
        let smaller = position.is_some() && (self.position.is_none() || position < self.position);
        if let Recovery::M1 { asking, .. } = &self.recovery {
            if *asking == from {
                if smaller {
                    let seq = self.request.unwrap_or(self.seq);
                    self.send(
                        from,
                        Body::Connection {
                            requester: self.me,
                            seq,
                            hops: 0,
                            failed: self.suspected.iter().copied().collect(),
                        },
                    );
                    let started = self.recovery_started().unwrap_or(now);
                    self.recovery = Recovery::Linking { mech: Mech::M1, started };
                    self.timers.set(Timer::Window, now + self.commit_timeout());
                } else {
                    self.suspect(from, now);
                    self.m1_next(now);
                }
                return;
            }
        }
        if let Some((pred, pinc)) = self.monitored {
            if pred != from {
                return;
            }
            // (safety) Alive means: the same life, still queued before us
            // (or, provisionally, without a position), and linked to us.
            let same_life = pinc == Incarnation(0) || pinc == inc;
            let still_before = self.position.is_none() || smaller;
            if same_life && still_before && next == Some(self.me) {
                self.last_alive_ok = now;
            } else {
                self.start_recovery(now);
            }
        }
    }

    fn recovery_started(&self) -> Option<Instant> {
        match &self.recovery {
            Recovery::Idle => None,
            Recovery::M1 { started, .. }
            | Recovery::Search { started, .. }
            | Recovery::Regen { started, .. }
            | Recovery::Linking { started, .. } => Some(*started),
        }
    }

    /// The closest predecessor failed (or left us): M1 with a position, M3
    /// without.
    fn start_recovery(&mut self, now: Instant) {
        self.monitored = None;
        self.timers.cancel(Timer::AliveCheck);
        if !self.is_requesting() || self.recovery != Recovery::Idle {
            return;
        }
        if self.position.is_some() {
            self.out.event(NtEvent::RecoveryStarted { mech: Mech::M1 });
            let rest: Vec<NodeId> = self.preds.clone();
            self.recovery = Recovery::M1 { started: now, asking: self.me, rest };
            self.m1_next(now);
        } else {
            self.start_m3(now);
        }
    }

    /// M1: ask the next predecessor not yet suspected; when none is left,
    /// M2.
    fn m1_next(&mut self, now: Instant) {
        let Recovery::M1 { started, rest, .. } = &mut self.recovery else { return };
        let started = *started;
        while !rest.is_empty() {
            let p = rest.remove(0);
            if !self.suspected.contains(&p) {
                let rest = std::mem::take(rest);
                self.recovery = Recovery::M1 { started, asking: p, rest };
                self.send(p, Body::AreYouAlive);
                self.timers.set(Timer::Window, now + self.cfg.t_msg * 2);
                return;
            }
        }
        self.recovery = Recovery::Idle;
        self.start_search(now, Mech::M2, Some(started));
    }

    fn start_m3(&mut self, now: Instant) {
        self.timers.cancel(Timer::CommitWait);
        self.timers.cancel(Timer::Provisional);
        if self.request.is_none() {
            return;
        }
        // M3 abandons whatever this request was linked to: a fresh seq
        // makes late Commits from the old chain get Unlink (the seed's rule
        // for M3.b losers, applied to every M3 so that no stale link
        // survives — a stale link can close a cycle of waiting sites).
        self.seq += 1;
        self.request = Some(self.seq);
        self.start_search(now, Mech::M3, None);
    }

    fn start_search(&mut self, now: Instant, mech: Mech, started: Option<Instant>) {
        self.out.event(NtEvent::RecoveryStarted { mech });
        let started = started.unwrap_or(now);
        let waiting = self.live_others();
        self.recovery = Recovery::Search { mech, started, waiting, answers: BTreeMap::new() };
        match mech {
            Mech::M2 => self.broadcast(Body::SearchPrev { position: self.position.unwrap_or(u64::MAX) }),
            _ => {
                self.broadcast(Body::SearchQueue { accesses: self.accesses });
                // A better candidate heard from recently (its SearchQueue
                // came before our own search started): lose to it at once.
                if let Some((a, id, until)) = self.best_candidate {
                    if until > now && id != self.me && beats(a, id, self.accesses, self.me) {
                        self.lose_election(now, id, started);
                        return;
                    }
                }
                self.best_candidate = Some((self.accesses, self.me, now + self.cfg.t_msg * 4));
            }
        }
        self.timers.set(Timer::Window, now + self.cfg.t_msg * 2);
        self.maybe_close_window(now);
    }

    fn answer(&self) -> Body {
        let candidate = match &self.recovery {
            Recovery::Search { mech: Mech::M3, .. } => Some(self.accesses),
            _ => None,
        };
        Body::SearchAck {
            position: self.position,
            has_next: self.next.is_some(),
            has_token: self.token.is_some(),
            candidate,
        }
    }

    fn on_search_queue(&mut self, now: Instant, from: NodeId, accesses: u64) {
        let a = self.answer();
        self.send(from, a);
        if let Recovery::Search { mech: Mech::M3, .. } = self.recovery {
            if beats(accesses, from, self.accesses, self.me) {
                let started = self.recovery_started().unwrap_or(now);
                self.lose_election(now, from, started);
            }
        }
        let better = match self.best_candidate {
            Some((a, id, until)) if until > now => beats(accesses, from, a, id),
            _ => true,
        };
        if better {
            self.best_candidate = Some((accesses, from, now + self.cfg.t_msg * 4));
            self.rebuild_last(from);
        }
    }

    /// M3.b: lost to `winner`: one request to it; keep last and next.
    fn lose_election(&mut self, now: Instant, winner: NodeId, started: Instant) {
        self.seq += 1;
        self.request = Some(self.seq);
        self.send(winner, Body::DirectRequest { requester: self.me, seq: self.seq, hops: 0 });
        self.recovery = Recovery::Linking { mech: Mech::M3, started };
        self.timers.set(Timer::Window, now + self.commit_timeout());
    }

    /// Last-tree rebuild after M3 (rules I–III) for candidate `e`.
    ///
    /// Rule III follows the seed's worked example (figure 2), not its text
    /// "next := last": `next` is authoritative and `last` a hint, and the
    /// text's version would drop queued sites (see spec ntmutexd.md).
    fn rebuild_last(&mut self, e: NodeId) {
        let waiting = self.is_requesting();
        if self.position.is_some() || !waiting {
            // II (a position) and I (not waiting).
            self.last = if e == self.me { Last::Root } else { Last::Parent(e) };
        } else {
            // III: waiting without a position.
            self.last = self.next.map_or(Last::Root, |(n, _)| Last::Parent(n));
        }
    }

    fn on_search_ack(&mut self, now: Instant, from: NodeId, position: Option<u64>, has_next: bool, has_token: bool) {
        if let Recovery::Search { waiting, answers, .. } = &mut self.recovery {
            if waiting.remove(&from) {
                answers.insert(from, Answer { position, has_next, has_token });
            }
        }
        self.maybe_close_window(now);
    }

    /// A search window closes early once every live peer has answered.
    fn maybe_close_window(&mut self, now: Instant) {
        if let Recovery::Search { waiting, .. } = &self.recovery {
            if waiting.is_empty() {
                self.close_search(now);
            }
        }
    }

    fn close_search(&mut self, now: Instant) {
        let Recovery::Search { mech, started, waiting, answers } =
            std::mem::replace(&mut self.recovery, Recovery::Idle)
        else {
            return;
        };
        self.timers.cancel(Timer::Window);
        for silent in waiting {
            self.suspect(silent, now);
        }
        let seq = match self.request {
            Some(s) if self.token.is_none() => s,
            _ => return,
        };
        let positioned = answers
            .iter()
            .filter(|(_, a)| match (a.position, mech) {
                (Some(p), Mech::M2) => Some(p) < self.position,
                (Some(_), _) => true,
                _ => false,
            })
            .max_by_key(|(_, a)| a.position);
        let holder = answers.iter().find(|(_, a)| a.has_token).map(|(id, _)| *id);
        if mech == Mech::M3 {
            // Elected (still a candidate): E applies rule III to itself.
            self.rebuild_last(self.me);
        }
        if let Some((&j, a)) = positioned {
            let body = if mech == Mech::M3 && !a.has_next {
                // (i) the tail: request straight from it.
                Body::DirectRequest { requester: self.me, seq, hops: 0 }
            } else {
                // M2, or (ii): j's next failed; link behind j.
                Body::Connection { requester: self.me, seq, hops: 0, failed: self.suspected.iter().copied().collect() }
            };
            self.send(j, body);
            self.recovery = Recovery::Linking { mech, started };
            self.timers.set(Timer::Window, now + self.commit_timeout());
        } else if let Some(h) = holder {
            self.send(h, Body::DirectRequest { requester: self.me, seq, hops: 0 });
            self.recovery = Recovery::Linking { mech, started };
            self.timers.set(Timer::Window, now + self.commit_timeout());
        } else {
            // (iii) / M2 with nobody before us: the token may be lost.
            self.start_regeneration(now, mech, started);
        }
    }

    // ----- regeneration (two phases) -------------------------------------

    fn start_regeneration(&mut self, now: Instant, mech: Mech, started: Instant) {
        let proposal = self.next_proposal(now);
        // (safety) Phase one goes to everyone, suspected sites included.
        self.broadcast(Body::Regenerate { proposal });
        let waiting = self.live_others();
        self.recovery = Recovery::Regen { mech, started, proposal, waiting, acked: 0 };
        self.timers.set(Timer::Window, now + self.cfg.t_msg * 2);
        self.maybe_finish_regeneration(now);
    }

    /// (+) A token is regenerated only with the acks of every live site
    /// *and* of a majority of the configured sites (this one included):
    /// majorities intersect, so regenerated epochs increase in the order
    /// regenerations complete, and a site cut off from the majority (a
    /// falsely suspected minority) never creates a second token.
    fn maybe_finish_regeneration(&mut self, now: Instant) {
        let Recovery::Regen { proposal, waiting, acked, .. } = &self.recovery else { return };
        if !waiting.is_empty() {
            return;
        }
        if *acked < self.members.len() / 2 {
            // No majority: give up for now and search again later.
            self.recovery = Recovery::Idle;
            self.timers.cancel(Timer::Window);
            self.timers.set(Timer::CommitWait, now + self.commit_timeout());
            return;
        }
        let epoch = *proposal;
        self.set_epoch(epoch);
        self.last = Last::Root;
        self.out.event(NtEvent::Regenerated { epoch });
        self.install_token(now, Token { epoch, counter: 0 }, 0);
    }

    fn on_regenerate(&mut self, now: Instant, from: NodeId, proposal: u32) {
        if self.token.is_some() {
            // (safety) A token exists: abort that regeneration.
            self.send(from, Body::RegenerateNack { proposal, has_token: true });
            return;
        }
        let own = match &self.recovery {
            Recovery::Regen { proposal: own, .. } => Some(*own),
            _ => None,
        };
        // Equal to max_epoch and in the proposer's slot: the same proposal,
        // already adopted from another site's message.
        let same = proposal == self.max_epoch && proposal & ((1 << SLOT_BITS) - 1) == self.slot(from);
        if (proposal > self.max_epoch || same) && own.is_none_or(|o| proposal > o) {
            self.set_epoch(proposal);
            if own.is_some() {
                // A higher concurrent proposal wins; wait for its token.
                self.recovery = Recovery::Idle;
                self.timers.cancel(Timer::Window);
                self.timers.set(Timer::CommitWait, now + self.commit_timeout());
            }
            self.send(from, Body::RegenerateAck { proposal });
        } else {
            self.send(from, Body::RegenerateNack { proposal, has_token: false });
        }
    }

    fn on_regenerate_reply(&mut self, now: Instant, from: NodeId, proposal: u32, ack: bool, has_token: bool) {
        let Recovery::Regen { mech, started, proposal: own, waiting, acked } = &mut self.recovery else { return };
        if *own != proposal {
            return;
        }
        if ack {
            if waiting.remove(&from) {
                *acked += 1;
            }
            self.maybe_finish_regeneration(now);
            return;
        }
        let (mech, started) = (*mech, *started);
        self.timers.cancel(Timer::Window);
        let seq = self.request.unwrap_or(self.seq);
        if has_token {
            // Any Nack aborts; a token holder gets a direct request.
            self.send(from, Body::DirectRequest { requester: self.me, seq, hops: 0 });
            self.recovery = Recovery::Linking { mech, started };
            self.timers.set(Timer::Window, now + self.commit_timeout());
        } else {
            // A newer epoch exists: wait, then search again.
            self.recovery = Recovery::Idle;
            self.timers.set(Timer::CommitWait, now + self.commit_timeout());
        }
    }

    // ----- queue maintenance messages ------------------------------------

    fn on_connection_or_direct(
        &mut self,
        now: Instant,
        requester: NodeId,
        seq: u64,
        direct: bool,
        hops: u32,
        failed: Vec<NodeId>,
    ) {
        if requester == self.me {
            return;
        }
        if let Some((n, _)) = self.next {
            if failed.contains(&n) {
                // The requester found our next dead (it was its predecessor).
                self.suspect(n, now);
            }
        }
        if self.circling(hops) {
            self.send(requester, Body::DeadEnd { seq });
            return;
        }
        if self.in_queue() {
            let fwd = if direct {
                Body::DirectRequest { requester, seq, hops: hops + 1 }
            } else {
                Body::Connection { requester, seq, hops: hops + 1, failed }
            };
            self.link(now, requester, seq, fwd);
        } else if direct {
            // Not queued here: nobody would ever hand the token on. Treat
            // it as an ordinary request.
            self.on_request(now, requester, seq, hops);
        } else {
            self.send(requester, Body::DeadEnd { seq });
        }
    }

    fn on_window(&mut self, now: Instant) {
        match &self.recovery {
            Recovery::M1 { asking, .. } => {
                let a = *asking;
                self.suspect(a, now);
                self.m1_next(now);
            }
            Recovery::Search { .. } => self.close_search(now),
            Recovery::Regen { waiting, .. } => {
                let silent: Vec<NodeId> = waiting.iter().copied().collect();
                for s in silent {
                    self.suspect(s, now);
                }
                if let Recovery::Regen { waiting, .. } = &mut self.recovery {
                    waiting.clear();
                }
                self.maybe_finish_regeneration(now);
            }
            Recovery::Linking { .. } => {
                // No Commit and no token after linking: search again.
                self.recovery = Recovery::Idle;
                if self.is_requesting() {
                    self.search_again(now);
                }
            }
            Recovery::Idle => {}
        }
    }

    fn on_commit_wait(&mut self, now: Instant) {
        if self.is_requesting() && self.recovery == Recovery::Idle && self.monitored.is_none() {
            self.search_again(now);
        }
    }

    /// After a recovery attempt came to nothing: a site with a position
    /// looks for a smaller one (M2) — never M3, whose answers would include
    /// the sites queued behind it and link it into its own chain.
    fn search_again(&mut self, now: Instant) {
        if self.position.is_some() {
            self.start_search(now, Mech::M2, None);
        } else {
            self.start_m3(now);
        }
    }

    fn on_dead_end(&mut self, now: Instant, seq: u64) {
        if self.request == Some(seq) && self.token.is_none() && self.monitored.is_none() {
            if matches!(self.recovery, Recovery::Linking { .. }) {
                self.recovery = Recovery::Idle;
            }
            if self.recovery == Recovery::Idle {
                self.search_again(now);
            }
        }
    }

    fn on_skip(&mut self, from: NodeId, next: Option<(NodeId, u64)>) {
        if self.next.map(|(n, _)| n) == Some(from) {
            self.next = next;
            if let Some((n, seq)) = next {
                let c = self.commit_for(seq, None);
                self.send(n, c);
            }
        }
    }

    // ----- epochs and lives ----------------------------------------------

    /// Every message carries the sender's epoch: a token older than the
    /// newest known epoch is dead, here too.
    fn observe_epoch(&mut self, now: Instant, epoch: u32) {
        if epoch <= self.max_epoch {
            return;
        }
        if let Recovery::Regen { proposal, .. } = self.recovery {
            if epoch > proposal {
                self.recovery = Recovery::Idle;
                self.timers.cancel(Timer::Window);
                self.timers.set(Timer::CommitWait, now + self.commit_timeout());
            } else if epoch == proposal {
                // Our own proposal, echoed by a site that accepted it.
                self.set_epoch(epoch);
                return;
            }
        }
        self.set_epoch(epoch);
        if let Some(t) = self.token {
            if t.epoch < epoch {
                // False suspicion: the cluster regenerated without us.
                self.token = None;
                self.position = None;
                self.preds.clear();
                self.next = None;
                self.out.event(NtEvent::TokenSuperseded { epoch: t.epoch });
                self.out.event(NtEvent::HasToken(false));
                self.locks.lose(now, "the token was regenerated elsewhere (this node was suspected)", &mut self.out);
            }
        }
    }

    /// Tracks peers' lives; returns false for a message from an older life.
    fn observe_life(&mut self, now: Instant, from: NodeId, inc: Incarnation) -> bool {
        let known = self.peer_inc.get(&from).copied();
        if known.is_some_and(|k| inc < k) {
            return false;
        }
        self.peer_inc.insert(from, inc);
        self.suspected.remove(&from);
        if known.is_some_and(|k| inc > k) {
            // A restart: the old life's queue state is gone.
            if self.next.map(|(n, _)| n) == Some(from) {
                self.next = None;
            }
            if self.monitored.map(|(m, _)| m) == Some(from) {
                self.start_recovery(now);
            }
        }
        true
    }

    // ----- graceful leave ------------------------------------------------

    fn leave_with_token(&mut self, _now: Instant) {
        // The holder leaves: pass to next (done by pump), or to the lowest
        // live id, which becomes everyone's root.
        let target = self.others().into_iter().filter(|m| !self.suspected.contains(m)).min();
        if let Some(t) = target {
            self.pass_token(t);
            self.broadcast(Body::NewRoot { root: t });
        }
        self.left = true;
    }
}

impl Protocol for NtNode {
    type Msg = Msg;
    type Request = LockRequest;
    type Reply = LockReply;
    type Event = NtEvent;
    type Config = NtConfig;
    type Durable = ();
    type Error = NtError;

    fn start(ctx: Context<NtConfig, ()>) -> Result<Self, NtError> {
        NtNode::new(ctx)
    }

    fn handle_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Msg) {
        if from == self.me || !self.members.contains(&from) {
            return;
        }
        if let Body::HelloAck { .. } = msg.body {
            // A new life starts with the cluster's epoch.
            self.set_epoch(msg.epoch);
        }
        if let Phase::Joining { fresh, running_seen, deferred } = &mut self.phase {
            match msg.body {
                Body::Hello => {
                    fresh.insert(from);
                    self.send(from, Body::HelloAck { running: false });
                }
                Body::HelloAck { running } => {
                    if running {
                        *running_seen = true;
                    } else {
                        fresh.insert(from);
                    }
                    let done = *running_seen || fresh.len() == self.members.len();
                    let bootstrap = !*running_seen;
                    if done {
                        self.finish_join(now, bootstrap);
                    }
                }
                // Everything else waits until we know whether we are a
                // new life of a running cluster.
                _ => deferred.push((from, inc, msg)),
            }
            self.pump(now);
            return;
        }
        if !self.observe_life(now, from, inc) {
            return;
        }
        self.observe_epoch(now, msg.epoch);
        match msg.body {
            Body::Hello => self.send(from, Body::HelloAck { running: true }),
            Body::HelloAck { .. } => {}
            Body::Request { requester, seq, hops } => self.on_request(now, requester, seq, hops),
            Body::DirectRequest { requester, seq, hops } => {
                self.on_connection_or_direct(now, requester, seq, true, hops, Vec::new())
            }
            Body::Connection { requester, seq, hops, failed } => {
                self.on_connection_or_direct(now, requester, seq, false, hops, failed)
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
            Body::Regenerate { proposal } => self.on_regenerate(now, from, proposal),
            Body::RegenerateAck { proposal } => self.on_regenerate_reply(now, from, proposal, true, false),
            Body::RegenerateNack { proposal, has_token } => {
                self.on_regenerate_reply(now, from, proposal, false, has_token)
            }
            Body::DeadEnd { seq } => self.on_dead_end(now, seq),
            Body::NewRoot { root } => {
                if self.token.is_none() {
                    self.last = if root == self.me { Last::Root } else { Last::Parent(root) };
                }
            }
            Body::Skip { next } => self.on_skip(from, next),
        }
        self.pump(now);
    }

    fn handle_request(&mut self, now: Instant, client: ClientId, req: LockRequest) {
        if self.leaving {
            if let LockRequest::Acquire { .. } = req {
                self.out.reply(client, LockReply::Refused { reason: "daemon is shutting down".into() });
                return;
            }
        }
        self.locks.request(now, client, req, &mut self.out);
        self.pump(now);
    }

    fn handle_client_gone(&mut self, now: Instant, client: ClientId) {
        self.locks.client_gone(now, client, &mut self.out);
        self.pump(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        while let Some(t) = self.timers.pop_expired(now) {
            match t {
                Timer::Join => self.on_join_timer(now),
                Timer::CommitWait => self.on_commit_wait(now),
                Timer::AliveCheck => self.on_alive_check(now),
                Timer::Window => self.on_window(now),
                Timer::Probe => self.on_probe(now),
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
        self.pump(now);
    }

    fn handle_shutdown(&mut self, now: Instant) {
        self.leaving = true;
        self.locks.shutdown(now, &mut self.out);
        if self.token.is_none() {
            if self.is_requesting() {
                // A waiting site hands its place to its next.
                if let Some(&p) = self.preds.first() {
                    let next = self.next;
                    self.send(p, Body::Skip { next });
                }
            }
            self.left = true;
        }
        self.pump(now);
    }

    fn is_left(&self) -> bool {
        self.left && self.out.is_empty()
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
        let role = match (&self.phase, self.token, self.request, &self.recovery) {
            (Phase::Joining { .. }, ..) => "joining".to_string(),
            (_, Some(_), ..) if self.locks.is_held() => "holder (granted)".to_string(),
            (_, Some(_), ..) => "holder (idle)".to_string(),
            (_, None, Some(_), Recovery::Idle) => "waiting".to_string(),
            (_, None, Some(_), r) => format!("recovering ({})", recovery_name(r)),
            _ => "idle".to_string(),
        };
        let peers = self
            .members
            .iter()
            .zip(&self.addrs)
            .filter(|(id, _)| **id != self.me)
            .map(|(id, addr)| PeerStatus {
                id: *id,
                addr: addr.clone(),
                up: !self.suspected.contains(id),
                incarnation: self.peer_inc.get(id).copied().unwrap_or_default(),
            })
            .collect();
        let show = |x: Option<NodeId>| x.map_or("none".to_string(), |n| n.0.to_string());
        let last = match self.last {
            Last::Root => "root".to_string(),
            Last::Parent(p) => p.0.to_string(),
            Last::Unknown => "unknown".to_string(),
        };
        StatusReport {
            daemon: "ntmutexd".into(),
            node: self.me,
            incarnation: self.inc,
            role,
            peers,
            details: vec![
                ("has_token".into(), self.token.is_some().to_string()),
                ("last".into(), last),
                ("next".into(), show(self.next.map(|(n, _)| n))),
                ("position".into(), self.position.map_or("none".to_string(), |p| p.to_string())),
                ("epoch".into(), self.max_epoch.to_string()),
                ("fence".into(), self.last_fence.to_string()),
                ("accesses".into(), self.accesses.to_string()),
                ("local_waiting".into(), self.locks.waiting().to_string()),
            ],
        }
    }
}

fn recovery_name(r: &Recovery) -> &'static str {
    match r {
        Recovery::Idle => "none",
        Recovery::M1 { .. } => "m1",
        Recovery::Search { mech, .. } | Recovery::Regen { mech, .. } | Recovery::Linking { mech, .. } => mech.label(),
    }
}

/// Read access for tests and invariant checkers.
impl NtNode {
    /// Whether this site holds a token.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The epoch of the token held here.
    pub fn token_epoch(&self) -> Option<u32> {
        self.token.map(|t| t.epoch)
    }

    /// The local client holding the lock, with its fence.
    pub fn holder(&self) -> Option<(ClientId, u64)> {
        self.locks.holder()
    }

    /// This site's position in the next queue.
    pub fn position(&self) -> Option<u64> {
        self.position
    }

    /// This site's `next`.
    pub fn next(&self) -> Option<NodeId> {
        self.next.map(|(n, _)| n)
    }

    /// Whether the start-up handshake is over.
    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// Whether a recovery is in progress.
    pub fn is_recovering(&self) -> bool {
        self.recovery != Recovery::Idle
    }

    /// The highest epoch known here.
    pub fn max_epoch(&self) -> u32 {
        self.max_epoch
    }
}

#[cfg(test)]
mod tests;

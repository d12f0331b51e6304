//! The heartbeat ring as an embeddable component.
//!
//! Each node sends `Heartbeat` to its live successor every `heartbeat`, and
//! the successor answers `HeartbeatAck`. A node watches both neighbours:
//! its predecessor through heartbeats (any message from it counts), its
//! successor through acks. Silence for `suspect_after` marks that neighbour
//! dead in the local [`RingView`]; the change travels the ring as a
//! `Report`, each node forwarding only reports that changed its view, so a
//! report stops after one lap. The node whose successor died then
//! heartbeats the next live node: the ring has repaired itself. Two
//! neighbours dying together are handled the same way: once the first is
//! gone, the second becomes somebody's watched neighbour.
//!
//! Incarnations make restarts and false suspicion safe: a message from an
//! older life is ignored; a message from a life the view declared dead is
//! answered `Excluded`, and its sender moves to a new life and rejoins
//! (unless this node's view holds a minority alive: then this node
//! yields, moving to a new life itself and presuming everyone alive);
//! a message from a newer life marks the node alive again (reported around
//! the ring) and gets a full `View` back so the newcomer catches up. Nodes
//! also probe the dead members between themselves and their live successor,
//! so a healed partition or a restarted member that nobody contacts still
//! finds its way back.
//!
//! Views can disagree after crashes (a report lost with the nodes it would
//! have passed), and a node must not suspect a live neighbour for it: a
//! node whose predecessor died heartbeats the new one at once, one whose
//! successor changed to a node that came alive between them heartbeats
//! the old one, and one that moves to a new life tells its predecessor
//! as well as its successor. Each heartbeat carries the view's digest,
//! and differing views are exchanged whole.

use std::collections::BTreeMap;
use std::time::Duration;

use ftcore::{EventSink, Incarnation, MsgSink, NodeId};
use membership::{Liveness, Membership, MembershipError, Observation, RingView, Status};
use timer::{FailureDetector, HeartbeatDetector, Instant, TimerTable};

use crate::msg::{HbEvent, HbMsg};

/// Timing of the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HbConfig {
    /// Interval between heartbeats to the successor.
    pub heartbeat: Duration,
    /// Silence after which a neighbour is suspected.
    pub suspect_after: Duration,
    /// Interval between probes of dead members after this node.
    pub probe_every: Duration,
    /// A node whose view holds a minority alive yields to a life it holds
    /// dead (see `on_contact`) instead of excluding it. On by default;
    /// ringd turns it off with `allow_minority`, where a replica alone is
    /// a ring that serves (and in its mutation tests).
    pub yield_in_minority: bool,
}

impl HbConfig {
    /// Heartbeat and suspicion timing, probing every `suspect_after`.
    pub fn new(heartbeat: Duration, suspect_after: Duration) -> Self {
        HbConfig { heartbeat, suspect_after, probe_every: suspect_after, yield_in_minority: true }
    }
}

/// Where [`HbRing`] pushes its messages and events: the embedding core's
/// output buffer (an `ftcore::Outbox` whose message and event types convert
/// from [`HbMsg`] and [`HbEvent`]).
pub trait HbOut: MsgSink<HbMsg> + EventSink<HbEvent> {}

impl<T: MsgSink<HbMsg> + EventSink<HbEvent>> HbOut for T {}

/// What the caller should do with a peer message it received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contact {
    /// The sender is in its current, live life: process the message.
    Accept,
    /// Stale, excluded or unknown sender: drop the message (the ring has
    /// already answered whatever needed answering).
    Drop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Timer {
    Heartbeat,
    WatchPred,
    WatchSucc,
    Probe,
}

/// A neighbour being watched.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Watch {
    node: NodeId,
    /// The life being watched: a new life gets a fresh grace period.
    inc: Incarnation,
    detector: HeartbeatDetector,
    /// A stall of this node's own gave it a fresh `suspect_after`, and
    /// nothing was heard from it since: the next silence is suspected
    /// even if this node stalls again (a node starved of CPU, every timer
    /// late, still suspects a dead neighbour, one grace later).
    graced: bool,
}

impl Watch {
    /// Watching life `inc` of `node` from `now`: it has `suspect_after` to
    /// show a first sign of life.
    fn new(node: NodeId, inc: Incarnation, suspect_after: Duration, now: Instant) -> Self {
        Watch { node, inc, detector: HeartbeatDetector::new(suspect_after, now), graced: false }
    }
}

/// The heartbeat ring of one node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HbRing {
    cfg: HbConfig,
    view: RingView,
    timers: TimerTable<Timer>,
    pred: Option<Watch>,
    succ: Option<Watch>,
    /// When this node suspected its predecessor and is waiting for the new
    /// one to heartbeat it (the repair it measures).
    repair_since: Option<Instant>,
    /// The latest heartbeat received: who sent it, and when. The new
    /// predecessor's first heartbeat can arrive just before the news that
    /// the old one died; then the ring was already whole.
    last_heartbeat: Option<(NodeId, Instant)>,
    /// When each peer was last told it is `Behind` (at most once per
    /// heartbeat period: a stale sender's every message would otherwise be
    /// answered).
    behind_told: BTreeMap<NodeId, Instant>,
    /// When this node last moved to a new life: `Excluded` and `Behind`
    /// move it at most once per `suspect_after` (a storm of late notices
    /// about one life must not churn through many).
    last_rejoin: Option<Instant>,
    /// Whether the current successor has answered a heartbeat of ours
    /// (foundation.md: hbringd has joined then; a ring of one at once).
    answered: bool,
}

impl HbRing {
    /// A node `me` in life `inc`, starting at `now` with every other member
    /// presumed alive.
    pub fn new(
        cfg: HbConfig,
        membership: &Membership,
        me: NodeId,
        inc: Incarnation,
        now: Instant,
        out: &mut impl HbOut,
    ) -> Result<Self, MembershipError> {
        let view = RingView::new(membership, me, inc)?;
        let mut ring = HbRing {
            cfg,
            view,
            timers: TimerTable::new(),
            pred: None,
            succ: None,
            repair_since: None,
            last_heartbeat: None,
            behind_told: BTreeMap::new(),
            last_rejoin: None,
            answered: membership.len() == 1,
        };
        ring.timers.set(Timer::Probe, now + cfg.probe_every);
        ring.neighbours_changed(now, out);
        Ok(ring)
    }

    /// The local view of the ring.
    pub fn view(&self) -> &RingView {
        &self.view
    }

    /// Whether this node has joined the ring: its successor has answered
    /// a heartbeat (or it is the only member). Stays true once reached.
    pub fn joined(&self) -> bool {
        self.answered
    }

    /// This node's current life.
    pub fn incarnation(&self) -> Incarnation {
        self.view.my_incarnation()
    }

    /// The earliest instant `handle_timeout` must be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    /// Classifies a message from `from` in life `inc` (any message, the
    /// embedding protocol's included) and counts it as a sign of life.
    pub fn on_contact(&mut self, now: Instant, from: NodeId, inc: Incarnation, out: &mut impl HbOut) -> Contact {
        match self.view.observe(from, inc) {
            Observation::Unknown => Contact::Drop,
            Observation::Stale => {
                out.event(HbEvent::StaleMessage { from, inc });
                let known = self.view.liveness(from).map(|l| l.incarnation).filter(|_| from != self.view.me());
                if let Some(known) = known {
                    let due = self.behind_told.get(&from).is_none_or(|t| now >= *t + self.cfg.heartbeat);
                    if due {
                        self.behind_told.insert(from, now);
                        out.send(from, HbMsg::Behind { known });
                    }
                }
                Contact::Drop
            }
            Observation::Excluded if self.yields(now) => {
                // This node holds most members dead, and one of them is
                // talking to it: more likely this node was the one cut
                // off (or paused) than the rest failed. It yields instead
                // of excluding a live peer of the majority (which would
                // make it rejoin, and an owner drop the token): it drops
                // the message, moves to a new life and presumes everyone
                // alive, as a restart would. Once per `suspect_after`, as
                // any rejoin: if the deaths it relearns from its peers'
                // views still leave it a minority hearing from a life it
                // holds dead, that life is stale in every view it meets
                // and is excluded as before (else it never rejoins).
                out.event(HbEvent::YieldedTo { node: from, inc });
                self.start_new_life(now, self.view.my_incarnation(), true, out);
                Contact::Drop
            }
            Observation::Excluded => {
                out.send(from, HbMsg::Excluded { your_inc: inc });
                out.event(HbEvent::ExcludedPeer { node: from, inc });
                Contact::Drop
            }
            Observation::Current => {
                self.saw(now, from);
                Contact::Accept
            }
            Observation::NewLife { previous } => {
                let now_alive = Liveness::alive(inc);
                if previous.incarnation != Incarnation(0) || previous.status == Status::Dead {
                    out.event(HbEvent::Up { node: from, inc });
                    self.gossip(from, now_alive, out);
                }
                // A new life knows nothing: bring it up to date.
                out.send(from, HbMsg::View { entries: self.view.entries().collect() });
                self.neighbours_changed(now, out);
                self.saw(now, from);
                Contact::Accept
            }
        }
    }

    /// A heartbeat-ring message from `from` in life `inc`.
    pub fn handle_message(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: HbMsg, out: &mut impl HbOut) {
        match msg {
            // Heeded only from a sender in the life we know of it or a newer
            // one (a notice from a stale life of the sender is no evidence
            // about us), at most once per `suspect_after`, and
            // never answered: two nodes that excluded each other would
            // otherwise bounce Excluded back and forth forever.
            HbMsg::Excluded { your_inc } => {
                // A late one about a life already left behind changes nothing.
                if your_inc == self.view.my_incarnation() && self.sender_is_current(from, inc) {
                    self.rejoin_above(now, your_inc, true, out);
                }
                return;
            }
            HbMsg::Behind { known } => {
                if known >= self.view.my_incarnation() && self.sender_is_current(from, inc) {
                    self.rejoin_above(now, known, false, out);
                }
                return;
            }
            _ => {}
        }
        if self.on_contact(now, from, inc, out) == Contact::Drop {
            return;
        }
        match msg {
            HbMsg::Heartbeat { digest } => {
                let mine = self.view.digest();
                out.send(from, HbMsg::HeartbeatAck { digest: mine });
                if digest != mine {
                    out.send(from, HbMsg::View { entries: self.view.entries().collect() });
                }
                self.last_heartbeat = Some((from, now));
                if let Some(since) = self.repair_since {
                    if self.pred.as_ref().is_some_and(|w| w.node == from) {
                        self.repair_since = None;
                        out.event(HbEvent::Repaired { new_predecessor: from, took: now.saturating_since(since) });
                    }
                }
            }
            HbMsg::HeartbeatAck { digest } => {
                if self.view.successor() == Some(from) {
                    self.answered = true;
                }
                if digest != self.view.digest() {
                    out.send(from, HbMsg::View { entries: self.view.entries().collect() });
                }
            }
            HbMsg::Report { about, liveness } => self.apply_report(now, about, liveness, out),
            HbMsg::View { entries } => {
                for (about, liveness) in entries {
                    self.apply_view_entry(now, about, liveness, out);
                }
            }
            HbMsg::Excluded { .. } | HbMsg::Behind { .. } => {} // handled above
        }
    }

    /// Time has reached a deadline from `poll_timeout`.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut impl HbOut) {
        while let Some(t) = self.timers.pop_expired(now) {
            match t {
                Timer::Heartbeat => {
                    if let Some(s) = self.view.successor() {
                        out.send(s, HbMsg::Heartbeat { digest: self.view.digest() });
                    }
                    self.timers.set(Timer::Heartbeat, now + self.cfg.heartbeat);
                }
                Timer::Probe => {
                    let digest = self.view.digest();
                    for d in self.view.dead_gap_after_me() {
                        out.send(d, HbMsg::Heartbeat { digest });
                    }
                    self.timers.set(Timer::Probe, now + self.cfg.probe_every);
                }
                Timer::WatchPred => self.check_watch(now, true, out),
                Timer::WatchSucc => self.check_watch(now, false, out),
            }
        }
    }

    /// Any message from `from` in its current life: a sign of life.
    fn saw(&mut self, now: Instant, from: NodeId) {
        for (watch, timer) in [(&mut self.pred, Timer::WatchPred), (&mut self.succ, Timer::WatchSucc)] {
            if let Some(w) = watch.as_mut().filter(|w| w.node == from) {
                w.detector.heartbeat(now);
                w.graced = false;
                self.timers.set(timer, w.detector.suspect_at());
            }
        }
    }

    fn check_watch(&mut self, now: Instant, pred: bool, out: &mut impl HbOut) {
        let (watch, timer) = if pred { (&mut self.pred, Timer::WatchPred) } else { (&mut self.succ, Timer::WatchSucc) };
        let Some(w) = watch.as_mut() else { return };
        if !w.detector.is_suspected(now) {
            self.timers.set(timer, w.detector.suspect_at());
            return;
        }
        // The watch fired more than a heartbeat after its deadline: this
        // node did not run meanwhile (SIGSTOP, a stalled VM), so the
        // silence it measured is its own, and the neighbour's heartbeats
        // may be waiting unread. A fresh `suspect_after` instead of a
        // suspicion at once: the queued input is read first. (Without it,
        // a paused node suspected both neighbours on resume and answered
        // their heartbeats `Excluded`: a ringd owner beside it stopped
        // owning and its running command was killed.)
        if timer::stalled(w.detector.suspect_at(), now, self.cfg.heartbeat) && !w.graced {
            w.graced = true;
            w.detector.heartbeat(now);
            self.timers.set(timer, w.detector.suspect_at());
            return;
        }
        let node = w.node;
        self.suspect_neighbour(now, node, out);
    }

    /// `peer`'s process is gone (the TCP transport's hint: its connection
    /// broke and its address refuses). A neighbour watched is suspected
    /// now, as `suspect_after` of silence would; other peers are left to
    /// their own neighbours. Its new life, if one starts, rejoins as after
    /// any suspicion.
    pub fn peer_unreachable(&mut self, now: Instant, peer: NodeId, out: &mut impl HbOut) {
        let watched = [&self.pred, &self.succ].into_iter().flatten().any(|w| w.node == peer);
        if watched {
            self.suspect_neighbour(now, peer, out);
        }
    }

    fn suspect_neighbour(&mut self, now: Instant, node: NodeId, out: &mut impl HbOut) {
        if let Some(dead) = self.view.suspect(node) {
            out.event(HbEvent::Suspected { node, inc: dead.incarnation });
            self.neighbours_changed(now, out);
            self.gossip(node, dead, out);
        }
    }

    fn apply_report(&mut self, now: Instant, about: NodeId, liveness: Liveness, out: &mut impl HbOut) {
        if about == self.view.me() {
            if liveness.status == Status::Dead
                && liveness.incarnation >= self.view.my_incarnation()
                && liveness.incarnation.leaves_room()
            {
                self.start_new_life(now, liveness.incarnation, true, out);
            }
            return;
        }
        if self.view.merge(about, liveness) {
            out.event(match liveness.status {
                Status::Dead => HbEvent::Down { node: about, inc: liveness.incarnation },
                Status::Alive => HbEvent::Up { node: about, inc: liveness.incarnation },
            });
            self.neighbours_changed(now, out);
            self.gossip(about, liveness, out);
        }
    }

    /// Merges one entry of a peer's view. Like a report, except that
    /// learning the life of a node already presumed alive is no news and
    /// is not gossiped (at start-up every entry is such news).
    fn apply_view_entry(&mut self, now: Instant, about: NodeId, liveness: Liveness, out: &mut impl HbOut) {
        let before = self.view.liveness(about);
        let quiet = liveness.status == Status::Alive && before.is_some_and(|b| b.status == Status::Alive);
        if quiet {
            self.view.merge(about, liveness);
            self.neighbours_changed(now, out);
        } else {
            self.apply_report(now, about, liveness, out);
        }
    }

    /// Whether this node, hearing from a life it holds dead, yields to it
    /// (see `on_contact`): its view holds fewer than a majority of the
    /// configured members alive (itself included), and it may rejoin now.
    fn yields(&self, now: Instant) -> bool {
        self.cfg.yield_in_minority && !self.view.holds_a_majority() && self.may_rejoin(now, self.view.my_incarnation())
    }

    /// Whether `inc` is the life of `from` this node knows (alive or
    /// excluded) or a newer one — not an older, stale life. Two nodes that
    /// excluded each other must still heed each other's `Excluded`; a stale
    /// life's (a node whose clock is behind) must change nothing.
    fn sender_is_current(&self, from: NodeId, inc: Incarnation) -> bool {
        self.view.liveness(from).is_some_and(|l| inc >= l.incarnation)
    }

    /// This node's life `at_least` was declared dead (`excluded`) or is
    /// behind a peer's knowledge: start a new one above it and announce it
    /// (rate-limited).
    fn rejoin_above(&mut self, now: Instant, at_least: Incarnation, excluded: bool, out: &mut impl HbOut) {
        if self.may_rejoin(now, at_least) {
            self.start_new_life(now, at_least, excluded, out);
        }
    }

    /// Whether a life above `at_least` exists and the last rejoin was at
    /// least `suspect_after` ago.
    fn may_rejoin(&self, now: Instant, at_least: Incarnation) -> bool {
        at_least.leaves_room() && self.last_rejoin.is_none_or(|t| now >= t + self.cfg.suspect_after)
    }

    /// Moves to a life above `at_least` and announces it. A node that was
    /// declared dead (`excluded`), or yields to a peer it held dead, was
    /// cut off or paused, so the deaths in its view are stale: it presumes
    /// everyone alive again, as a restart would, and relearns the deaths
    /// from the next view it is sent — rather than answering `Excluded` to
    /// live peers that heartbeat it, which makes them rejoin too
    /// (docs/safety-rules.md, ringd: regenerations after a healed
    /// partition). What the old life suspected is forgotten, as in a
    /// restart; an embedding protocol whose messages must not reach a new
    /// life (ringd's token) addresses them to the receiver's life.
    fn start_new_life(&mut self, now: Instant, at_least: Incarnation, excluded: bool, out: &mut impl HbOut) {
        self.last_rejoin = Some(now);
        let inc = self.view.rejoin_above(at_least);
        if excluded {
            self.view.presume_alive();
        }
        out.event(HbEvent::Rejoined { inc });
        self.gossip(self.view.me(), Liveness::alive(inc), out);
        // The successor may be dead and swallow the news: tell the
        // predecessor too, which holds the old life dead and heartbeats
        // past us, and would otherwise take up to a probe period to meet
        // the new life and meanwhile be suspected in its live life
        // (every-fault seed 15460: nothing was presumed alive again).
        if let Some(p) = self.view.predecessor().filter(|p| Some(*p) != self.view.successor()) {
            self.tell_my_life(p, out);
        }
        self.neighbours_changed(now, out);
    }

    /// Tells `to` alone this node's current life, and compares views with
    /// it: a heartbeat carries the life and the view's digest, and `to`
    /// answers with its own view if they differ. Sent to a new
    /// predecessor, to an old successor a node came alive before, and to
    /// the predecessor of a new life: each may hold a view that disagrees
    /// with ours about the nodes between us, and would otherwise heartbeat
    /// past us, or we past it (see the callers).
    fn tell_my_life(&self, to: NodeId, out: &mut impl HbOut) {
        out.send(to, HbMsg::Heartbeat { digest: self.view.digest() });
    }

    /// Sends a report to the live successor (it travels one lap).
    fn gossip(&mut self, about: NodeId, liveness: Liveness, out: &mut impl HbOut) {
        if let Some(s) = self.view.successor().filter(|s| *s != about) {
            out.send(s, HbMsg::Report { about, liveness });
        }
    }

    /// Re-derives the watched neighbours from the view; a new neighbour gets
    /// a fresh grace period, and a new successor an immediate heartbeat.
    fn neighbours_changed(&mut self, now: Instant, out: &mut impl HbOut) {
        let watched = |w: &Option<Watch>| w.as_ref().map(|w| (w.node, w.inc));
        let target =
            |node: Option<NodeId>| node.map(|n| (n, self.view.liveness(n).map(|l| l.incarnation).unwrap_or_default()));
        let pred = target(self.view.predecessor());
        if watched(&self.pred) != pred {
            let old = self.pred.as_ref().map(|w| w.node);
            if old.is_some_and(|o| !self.view.is_alive(o)) {
                // Our predecessor died (suspected here or reported): measure
                // until the new one heartbeats us — unless it just did.
                let new = pred.map(|(n, _)| n);
                let heard = match self.last_heartbeat {
                    Some((from, at)) if Some(from) == new && now.saturating_since(at) < self.cfg.heartbeat => {
                        Some(from)
                    }
                    _ => None,
                };
                if self.repair_since.is_none() {
                    match heard {
                        Some(from) => out.event(HbEvent::Repaired { new_predecessor: from, took: Duration::ZERO }),
                        None => self.repair_since = Some(now),
                    }
                }
                // The new predecessor may not know this life (we restarted,
                // or rejoined, while it thought us dead), or may not know
                // that the node between us died (two neighbours dying
                // together, its successor's report lost with them): then
                // it heartbeats somebody else, and we would suspect it in
                // its live life before it finds us. Told, it compares
                // views with us at once (hbring sweep seed 11625; told
                // during a pending repair too: every-fault seeds 3209, 4355).
                // Even if it just heartbeat us: it may have moved on to a
                // node it holds alive and we dead since (seed 3928).
                if let Some(p) = new {
                    self.tell_my_life(p, out);
                }
            }
            self.pred = pred.map(|(node, inc)| Watch::new(node, inc, self.cfg.suspect_after, now));
            let new = pred.map(|(n, _)| n);
            if old != new {
                out.event(HbEvent::PredecessorChanged { from: old, to: new });
            }
            match &self.pred {
                Some(w) => self.timers.set(Timer::WatchPred, w.detector.suspect_at()),
                None => {
                    self.timers.cancel(Timer::WatchPred);
                    self.repair_since = None;
                }
            }
        }
        let succ = target(self.view.successor());
        if watched(&self.succ) != succ {
            let old = self.succ.as_ref().map(|w| w.node);
            self.succ = succ.map(|(node, inc)| Watch::new(node, inc, self.cfg.suspect_after, now));
            let new = succ.map(|(n, _)| n);
            if old != new {
                out.event(HbEvent::SuccessorChanged { from: old, to: new });
                if let Some(o) = old.filter(|o| self.view.is_alive(*o)) {
                    // A node came alive between us and our old successor,
                    // which we no longer heartbeat: it hears our digest
                    // at once, and the views it gets back name its new
                    // predecessor, before it would suspect us in our live
                    // life (hbring sweep seed 25238).
                    self.tell_my_life(o, out);
                }
            }
            match &self.succ {
                Some(w) => {
                    self.timers.set(Timer::WatchSucc, w.detector.suspect_at());
                    out.send(w.node, HbMsg::Heartbeat { digest: self.view.digest() });
                    self.timers.set(Timer::Heartbeat, now + self.cfg.heartbeat);
                }
                None => {
                    self.timers.cancel(Timer::WatchSucc);
                    self.timers.cancel(Timer::Heartbeat);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

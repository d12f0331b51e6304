//! Failure detection: liveness checks of the closest predecessor, the
//! COMMIT timer, suspicion and probes of suspected peers, peers' lives
//! (ntmutexd.md, "Failure detection").

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::{Incarnation, NodeId, PeerView};
use timer::Instant;

use super::events::{Mech, NtEvent};
use super::rules::NtRule;
use super::state::{Recovery, Timer};
use super::NtNode;
use crate::msg::Body;

/// What this site knows of its peers: their lives, which ones it suspects,
/// and its liveness probes. The probes ask one peer `AreYouAlive` per
/// `liveness_every`, in turn; a peer that has not answered its probe within
/// `suspect_after` is shown down (status and `peer_up`) until it is heard
/// again. The protocol never reads the probes' part.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Detector {
    /// Each peer's newest life heard of.
    pub(super) peer_inc: BTreeMap<NodeId, Incarnation>,
    /// The peers suspected: never sent the token, never forwarded to, not
    /// waited for by searches and regenerations.
    pub(super) suspected: BTreeSet<NodeId>,
    /// Each peer's oldest liveness probe not answered yet.
    asked: BTreeMap<NodeId, Instant>,
    /// Peers shown down.
    silent: BTreeSet<NodeId>,
    /// Which peer is asked next (an index into the other members).
    turn: usize,
}

/// What a message's life says about its sender
/// ([`Detector::observe_life`]).
enum Life {
    /// Older than `known`, the newest life heard of: ignored.
    Older { known: Incarnation },
    /// The life heard of before (or the first one heard of).
    Same,
    /// Newer than the life heard of before: a restart.
    Restarted,
}

impl Detector {
    /// How this site sees `peer`.
    pub(super) fn peer_view(&self, peer: NodeId) -> PeerView {
        PeerView {
            up: !self.suspected.contains(&peer) && !self.silent.contains(&peer),
            incarnation: self.peer_inc.get(&peer).copied().unwrap_or_default(),
        }
    }

    /// Suspects `node`; whether it was not suspected before.
    fn suspect(&mut self, node: NodeId) -> bool {
        self.suspected.insert(node)
    }

    /// A liveness tick: marks every peer whose probe has gone unanswered
    /// for `suspect_after` as silent, and returns the next of `others` to
    /// ask, in turn (none while leaving).
    fn liveness_tick(
        &mut self,
        now: Instant,
        suspect_after: Duration,
        others: &[NodeId],
        leaving: bool,
    ) -> Option<NodeId> {
        for (peer, at) in &self.asked {
            if now.saturating_since(*at) >= suspect_after {
                self.silent.insert(*peer);
            }
        }
        if others.is_empty() || leaving {
            return None;
        }
        let peer = others[self.turn % others.len()];
        self.turn = self.turn.wrapping_add(1);
        self.asked.entry(peer).or_insert(now);
        Some(peer)
    }

    /// A message from life `inc` of `from`. A life older than the newest
    /// one heard of is ignored if `older_ignored`; any other is heard: it
    /// ends the sender's suspicion and answers its liveness probe.
    fn observe_life(&mut self, from: NodeId, inc: Incarnation, older_ignored: bool) -> Life {
        let known = self.peer_inc.get(&from).copied();
        if let Some(k) = known.filter(|k| inc < *k && older_ignored) {
            return Life::Older { known: k };
        }
        self.peer_inc.insert(from, inc);
        self.suspected.remove(&from);
        // Anything heard from `from` answers its liveness probe.
        self.asked.remove(&from);
        self.silent.remove(&from);
        if known.is_some_and(|k| inc > k) {
            Life::Restarted
        } else {
            Life::Same
        }
    }
}

impl NtNode {
    /// Asks the next peer in turn whether it is alive, after marking every
    /// peer whose probe has gone unanswered for `suspect_after` as silent.
    pub(super) fn on_liveness(&mut self, now: Instant) {
        let Some(every) = self.cfg.liveness_every else { return };
        let others = self.others();
        if let Some(peer) = self.detect.liveness_tick(now, self.cfg.suspect_after, &others, self.leave.leaving()) {
            self.send(peer, Body::AreYouAlive);
        }
        self.timers.set(Timer::Liveness, now + every);
    }

    pub(super) fn suspect(&mut self, node: NodeId, now: Instant) {
        if self.detect.suspect(node) {
            self.out.event(NtEvent::Suspected { node });
            if !self.timers.is_armed(Timer::Probe) {
                self.timers.set(Timer::Probe, now + self.probe_every());
            }
        }
    }

    /// Suspected peers are probed now and then: a wrongly suspected holder
    /// learns the newer epoch from the probe and drops its stale token;
    /// a restarted or reconnected peer is unsuspected by its answer.
    pub(super) fn probe_every(&self) -> Duration {
        self.cfg.suspect_after * 4
    }

    pub(super) fn on_probe(&mut self, now: Instant) {
        let suspected: Vec<NodeId> = self.detect.suspected.iter().copied().collect();
        if self.cfg.rules.off(NtRule::ProbesOfSuspectedPeers) {
            return;
        }
        for s in &suspected {
            self.send(*s, Body::AreYouAlive);
        }
        if !suspected.is_empty() {
            self.timers.set(Timer::Probe, now + self.probe_every());
        }
    }

    /// `peer`'s process is gone (its connection broke and its address
    /// refuses: the transport's hint). What would wait `suspect_after` for
    /// its silence acts now: it is suspected (never sent the token, never
    /// forwarded to, left out of the searches and regenerations still
    /// waiting for it), a site linking behind it searches again, a
    /// successor monitoring it recovers, and a request with no Commit yet
    /// — possibly lost at it, or forwarded to it — searches the queue (M3). A new life of it answers the probes of
    /// suspected peers, as after any suspicion.
    pub(super) fn peer_gone(&mut self, now: Instant, peer: NodeId) {
        self.suspect(peer, now);
        match &mut self.recovery {
            Recovery::M1 { asking, .. } if *asking == peer => {
                self.timers.cancel(Timer::Window);
                self.m1_next(now);
            }
            Recovery::Search { waiting, .. } => {
                waiting.remove(&peer);
                self.maybe_close_window(now);
            }
            Recovery::Regen { waiting, .. } => {
                waiting.remove(&peer);
                self.maybe_finish_regeneration(now);
            }
            Recovery::Linking { to, .. } if *to == peer => {
                // What we sent it is lost with it: search again now
                // instead of when the linking window closes.
                self.recovery = Recovery::Idle;
                self.timers.cancel(Timer::Window);
                self.search_again(now);
            }
            Recovery::M1 { .. } | Recovery::Linking { .. } | Recovery::Idle => {}
        }
        if self.is_requesting() && self.recovery == Recovery::Idle {
            if self.monitored.is_some_and(|(p, _)| p == peer) {
                self.start_recovery(now);
            } else if self.monitored.is_none() {
                self.start_m3(now);
            }
        }
        self.serve_and_route(now);
    }

    pub(super) fn on_alive_check(&mut self, now: Instant) {
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

    pub(super) fn on_i_am_alive(
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
                // (safety) M1 stops at the first valid answer: a
                // predecessor still queued before us.
                if smaller || self.cfg.rules.off(NtRule::AliveOnlyBeforeUs) {
                    let seq = self.request.unwrap_or(self.seq);
                    self.send(
                        from,
                        Body::Connection {
                            requester: self.me,
                            seq,
                            hops: 0,
                            failed: self.detect.suspected.iter().copied().collect(),
                        },
                    );
                    let started = self.recovery.started().unwrap_or(now);
                    self.start_linking(now, Mech::M1, started, from);
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
            let r = self.cfg.rules;
            let same_life = pinc == Incarnation(0) || pinc == inc;
            let still_before = self.position.is_none() || smaller || r.off(NtRule::AliveOnlyBeforeUs);
            let linked_to_us = next == Some(self.me) || r.off(NtRule::AliveOnlyLinkedToUs);
            if same_life && still_before && linked_to_us {
                self.last_alive_ok = now;
            } else {
                self.start_recovery(now);
            }
        }
    }

    pub(super) fn on_commit_wait(&mut self, now: Instant) {
        if self.is_requesting() && self.recovery == Recovery::Idle && self.monitored.is_none() {
            self.search_again(now);
        }
    }

    /// Tracks peers' lives; returns false for a message from an older life.
    pub(super) fn observe_life(&mut self, now: Instant, from: NodeId, inc: Incarnation) -> bool {
        let older_ignored = self.cfg.rules.on(NtRule::IncarnationCheck);
        match self.detect.observe_life(from, inc, older_ignored) {
            Life::Older { known } => {
                // An older life: ignored, but told the life we know, so that
                // a site whose clock is behind its previous start (and whose
                // disk was replaced) moves past it instead of being ignored
                // for ever.
                self.send(from, Body::Behind { known });
                return false;
            }
            Life::Same => {}
            Life::Restarted => {
                // A restart: the old life's queue state is gone.
                if self.next.map(|(n, _)| n) == Some(from) {
                    self.next = None;
                }
                if self.monitored.map(|(m, _)| m) == Some(from) {
                    self.start_recovery(now);
                }
            }
        }
        true
    }
}

//! Recovery by case (ntmutexd.md, "Recovery, by case"): M1 asks the
//! predecessors, M2 broadcasts SearchPrev, M3 searches the queue with the
//! M3.b election and rebuilds the last tree (rules I-III).

use std::collections::BTreeMap;

use ftcore::NodeId;
use timer::Instant;

use super::events::{Mech, NtEvent};
use super::rules::NtRule;
use super::state::{beats, Answer, Last, Recovery, Timer};
use super::NtNode;
use crate::msg::Body;

/// The M3.b election: the best candidate seen recently.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Election {
    /// (accesses, id, until); the handler tests read it.
    pub(super) best_candidate: Option<(u64, NodeId, Instant)>,
}

impl Election {
    /// This site (`me`, with `accesses`) starts an M3 search: the winner it
    /// loses to at once (a better candidate heard from recently, when
    /// `election_on`), or none, and it is the best candidate until `until`.
    fn stand(&mut self, now: Instant, me: NodeId, accesses: u64, until: Instant, election_on: bool) -> Option<NodeId> {
        if let Some((a, id, best_until)) = self.best_candidate.filter(|_| election_on) {
            if best_until > now && id != me && beats(a, id, accesses, me) {
                return Some(id);
            }
        }
        self.best_candidate = Some((accesses, me, until));
        None
    }

    /// `from` searches with `accesses`: whether it is the best candidate
    /// now (then it is, until `until`).
    fn hear(&mut self, now: Instant, from: NodeId, accesses: u64, until: Instant) -> bool {
        let better = match self.best_candidate {
            Some((a, id, best_until)) if best_until > now => beats(accesses, from, a, id),
            _ => true,
        };
        if better {
            self.best_candidate = Some((accesses, from, until));
        }
        better
    }
}

impl NtNode {
    pub(super) fn recovery_done(&mut self, now: Instant) {
        let Some((mech, started)) = self.recovery.progress() else { return };
        self.recovery = Recovery::Idle;
        self.timers.cancel(Timer::Window);
        // The root's search for a new cluster's first token is no failure.
        if !self.bootstrap_search {
            self.out.event(NtEvent::Recovered { mech, took: now.saturating_since(started) });
        }
    }

    /// The closest predecessor failed (or left us): M1 with a position, M3
    /// without.
    pub(super) fn start_recovery(&mut self, now: Instant) {
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
    pub(super) fn m1_next(&mut self, now: Instant) {
        let Recovery::M1 { started, rest, .. } = &mut self.recovery else { return };
        let started = *started;
        while !rest.is_empty() {
            let p = rest.remove(0);
            if !self.detect.suspected.contains(&p) {
                let rest = std::mem::take(rest);
                self.recovery = Recovery::M1 { started, asking: p, rest };
                self.send(p, Body::AreYouAlive);
                self.timers.set(Timer::Window, now + self.cfg.window());
                return;
            }
        }
        self.recovery = Recovery::Idle;
        self.start_search(now, Mech::M2, Some(started));
    }

    pub(super) fn start_m3(&mut self, now: Instant) {
        self.timers.cancel(Timer::CommitWait);
        self.timers.cancel(Timer::Provisional);
        if self.request.is_none() {
            return;
        }
        // M3 abandons whatever this request was linked to: a fresh seq
        // makes late Commits from the old chain get Unlink (the seed's rule
        // for M3.b losers, applied to every M3 so that no stale link
        // survives — a stale link can close a cycle of waiting sites).
        if self.cfg.rules.on(NtRule::FreshSeqOnM3) {
            self.seq += 1;
        }
        self.request = Some(self.seq);
        self.start_search(now, Mech::M3, None);
    }

    pub(super) fn start_search(&mut self, now: Instant, mech: Mech, started: Option<Instant>) {
        if !self.bootstrap_search {
            self.out.event(NtEvent::RecoveryStarted { mech });
        }
        let started = started.unwrap_or(now);
        let waiting = self.live_others();
        self.recovery = Recovery::Search { mech, started, waiting, answers: BTreeMap::new() };
        match mech {
            Mech::M2 => self.broadcast(Body::SearchPrev { position: self.position.unwrap_or(u64::MAX) }),
            _ => {
                self.broadcast(Body::SearchQueue { accesses: self.grants.accesses });
                // A better candidate heard from recently (its SearchQueue
                // came before our own search started): lose to it at once.
                let (until, election_on) = (now + self.cfg.t_msg * 4, self.cfg.rules.on(NtRule::M3bElection));
                if let Some(winner) = self.election.stand(now, self.me, self.grants.accesses, until, election_on) {
                    self.lose_election(now, winner, started);
                    return;
                }
            }
        }
        self.timers.set(Timer::Window, now + self.cfg.window());
        self.maybe_close_window(now);
    }

    pub(super) fn answer(&self) -> Body {
        let candidate = match &self.recovery {
            Recovery::Search { mech: Mech::M3, .. } => Some(self.grants.accesses),
            _ => None,
        };
        Body::SearchAck {
            position: self.position,
            has_next: self.next.is_some(),
            has_token: self.token.is_some(),
            candidate,
        }
    }

    pub(super) fn on_search_queue(&mut self, now: Instant, from: NodeId, accesses: u64) {
        let a = self.answer();
        self.send(from, a);
        if let Recovery::Search { mech: Mech::M3, .. } = self.recovery {
            if self.cfg.rules.on(NtRule::M3bElection) && beats(accesses, from, self.grants.accesses, self.me) {
                let started = self.recovery.started().unwrap_or(now);
                self.lose_election(now, from, started);
            }
        }
        if self.election.hear(now, from, accesses, now + self.cfg.t_msg * 4) {
            self.rebuild_last(from);
        }
    }

    /// M3.b: lost to `winner`: one request to it; keep last and next.
    pub(super) fn lose_election(&mut self, now: Instant, winner: NodeId, started: Instant) {
        self.seq += 1;
        self.request = Some(self.seq);
        self.send(winner, Body::DirectRequest { requester: self.me, seq: self.seq, hops: 0 });
        self.start_linking(now, Mech::M3, started, winner);
    }

    /// Last-tree rebuild after M3 (rules I–III) for candidate `e`.
    ///
    /// Rule III follows the seed's worked example (figure 2), not its text
    /// "next := last": `next` is authoritative and `last` a hint, and the
    /// text's version would drop queued sites (see spec ntmutexd.md).
    pub(super) fn rebuild_last(&mut self, e: NodeId) {
        let waiting = self.is_requesting();
        if self.position.is_some() || !waiting {
            // II (a position) and I (not waiting).
            self.last = if e == self.me { Last::Root } else { Last::Parent(e) };
        } else {
            // III: waiting without a position.
            self.last = self.next.map_or(Last::Root, |(n, _)| Last::Parent(n));
        }
    }

    pub(super) fn on_search_ack(
        &mut self,
        now: Instant,
        from: NodeId,
        position: Option<u64>,
        has_next: bool,
        has_token: bool,
    ) {
        if let Recovery::Search { waiting, answers, .. } = &mut self.recovery {
            if waiting.remove(&from) {
                answers.insert(from, Answer { position, has_next, has_token });
            }
        }
        self.maybe_close_window(now);
    }

    /// A search window closes early once every live peer has answered.
    pub(super) fn maybe_close_window(&mut self, now: Instant) {
        if let Recovery::Search { waiting, .. } = &self.recovery {
            if waiting.is_empty() {
                self.close_search(now);
            }
        }
    }

    pub(super) fn close_search(&mut self, now: Instant) {
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
        // (safety) Regenerate only if no answer shows a smaller position or
        // a token.
        let r = self.cfg.rules;
        let heed_answers = r.on(NtRule::RegenOnlyWithoutPositionOrToken);
        let positioned = positioned.filter(|_| heed_answers && r.on(NtRule::RegenOnlyWithoutSmallerPosition));
        let holder = holder.filter(|_| heed_answers);
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
                Body::Connection {
                    requester: self.me,
                    seq,
                    hops: 0,
                    failed: self.detect.suspected.iter().copied().collect(),
                }
            };
            self.send(j, body);
            self.start_linking(now, mech, started, j);
        } else if let Some(h) = holder {
            self.send(h, Body::DirectRequest { requester: self.me, seq, hops: 0 });
            self.start_linking(now, mech, started, h);
        } else {
            // (iii) / M2 with nobody before us: the token may be lost.
            self.start_regeneration(now, mech, started);
        }
    }

    pub(super) fn on_window(&mut self, now: Instant) {
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

    /// After a recovery attempt came to nothing: a site with a position
    /// looks for a smaller one (M2) — never M3, whose answers would include
    /// the sites queued behind it and link it into its own chain.
    pub(super) fn search_again(&mut self, now: Instant) {
        if self.position.is_some() {
            self.start_search(now, Mech::M2, None);
        } else {
            self.start_m3(now);
        }
    }

    /// A Connection or direct request is on its way: wait for the Commit
    /// or the token, searching again if neither comes in time.
    pub(super) fn start_linking(&mut self, now: Instant, mech: Mech, started: Instant, to: NodeId) {
        self.recovery = Recovery::Linking { mech, started, to };
        self.timers.set(Timer::Window, now + self.commit_timeout());
    }

    pub(super) fn on_dead_end(&mut self, now: Instant, seq: u64) {
        if self.request == Some(seq) && self.token.is_none() && self.monitored.is_none() {
            if matches!(self.recovery, Recovery::Linking { .. }) {
                self.recovery = Recovery::Idle;
            }
            if self.recovery == Recovery::Idle {
                self.search_again(now);
            }
        }
    }
}

//! Heartbeats and the quorum lease (electd.md, "Heartbeats and the quorum
//! lease"): the elected process sends `Heartbeat { term }` every
//! `heartbeat_ms`; only the processes that follow it in the term ack; it
//! takes office at its first heartbeat acked by a majority, grants only
//! under `h + lease·(1−ρ)`, and steps down once it has lacked a quorum for
//! `suspect_after`. Consumers suspect a silent coordinator.

use std::time::Duration;

use ftcore::NodeId;
use timer::Instant;

use super::access::Office;
use super::state::{Role, Timer};
use super::{ElEvent, ElNode, ElRule};
use crate::msg::Msg;

impl ElNode {
    /// This process was elected in its term: it starts sending heartbeats
    /// (it takes office at their first quorum).
    pub(super) fn become_elected(&mut self, now: Instant) {
        if (self.is_coordinator() || self.term <= self.office_term) && self.cfg.rules.on(ElRule::OneOfficePerTerm) {
            // (safety) A second result of the same term (another copy of
            // the Elected lap) changes nothing: a new office would lose
            // the queue and count fences from the start again. Also after
            // stepping down from an office that took office in the term: a
            // late copy must not open a second one, whose counter would
            // repeat the first one's fences.
            return;
        }
        if self.term <= self.start_term {
            // (safety) Never take office at or below the term loaded at
            // start (the grant counter is not stored): a new term instead.
            self.elect_within(now, self.cfg.hop_timeout);
            return;
        }
        self.role = Role::Coordinator(Box::new(Office::new(self.term, now, self.cfg.first_counter.get())));
        self.on_heartbeat_timer(now);
        if self.coordinator != Some(self.me) {
            // Known again after stepping down in this term: the local
            // clients' pending request goes to the new office.
            self.coordinator = Some(self.me);
            self.coordinator_changed(now);
        }
    }

    pub(super) fn on_heartbeat_timer(&mut self, now: Instant) {
        let term = self.term;
        let Role::Coordinator(o) = &mut self.role else { return };
        let seq = o.heartbeat_sent(now, self.me, self.cfg.lease);
        for m in self.others() {
            self.send(m, Msg::Heartbeat { term, seq });
        }
        self.timers.set(Timer::Heartbeat, now + self.cfg.heartbeat);
        let alone = self.members.len() == 1;
        if alone {
            self.quorum_reached(now, seq);
        }
        ftcore::mutant! {
            // Its own heartbeat counted as a quorum.
            if !alone && self.cfg.rules.off(ElRule::HeartbeatQuorum) {
                self.quorum_reached(now, seq);
            }
        }
    }

    /// (safety) A process acks only the coordinator it follows in its
    /// current term (one that follows nobody follows the first it hears
    /// of), after storing the term as in use.
    pub(super) fn on_heartbeat(&mut self, now: Instant, from: NodeId, term: u64, seq: u64) {
        if self.is_coordinator() || !self.promise.stored().recovered() || !self.follow(now, from) {
            return;
        }
        if self.promise.on_in_use(term, now).is_err() {
            return;
        }
        self.last_heard = now;
        self.role = Role::Consumer;
        self.mark_joined();
        ftcore::invariant!(
            self.cfg.rules,
            self.follows == Some(from),
            "{} acks {from}'s heartbeat of term {term} but follows {:?}",
            self.me,
            self.follows
        );
        self.send(from, Msg::HeartbeatAck { term, seq });
        self.heard_coordinator(now, from);
    }

    pub(super) fn on_heartbeat_ack(&mut self, now: Instant, from: NodeId, term: u64, seq: u64) {
        let majority = self.majority();
        let Role::Coordinator(o) = &mut self.role else { return };
        if o.term != term || !o.heartbeat_acked(from, seq, majority) {
            return;
        }
        self.quorum_reached(now, seq);
    }

    /// Heartbeat `seq` was acked by a majority: the quorum lease runs from
    /// its send time; the first quorum in time takes office.
    fn quorum_reached(&mut self, now: Instant, seq: u64) {
        let deadline = self.term_since + self.cfg.shrunk(self.cfg.election_timeout);
        let term = self.term;
        let gap = if self.cfg.rules.on(ElRule::FailoverGap) { self.cfg.failover_gap() } else { Duration::ZERO };
        let Role::Coordinator(o) = &mut self.role else { return };
        o.quorum_from(seq);
        if o.took_office.is_some() {
            return;
        }
        if now > deadline {
            self.out.event(ElEvent::PastDeadline { term });
            if self.cfg.rules.on(ElRule::ElectionDeadline) {
                // The proposal deadline passed: term + 1 instead.
                self.step_down(now, "no quorum within the election timeout");
                self.elect_within(now, self.cfg.election_jitter);
                return;
            }
        }
        ftcore::invariant!(
            self.cfg.rules,
            term > self.start_term,
            "office in term {term}, not above the term loaded at start, {}",
            self.start_term
        );
        o.took_office = Some(now);
        o.gap_until = now + gap;
        // No second office in this term for this life (become_elected).
        self.office_term = term;
        // The term is stored as in use before anything is granted in it.
        let _ = self.promise.on_in_use(term, now);
        self.timers.set(Timer::GapEnds, now + gap);
        self.mark_joined();
        self.out.event(ElEvent::TookOffice { term });
        if let Some(at) = self.lost_coordinator_at.take() {
            self.out.event(ElEvent::Failover { took: now.saturating_since(at) });
        }
        // A grant of this process's own client, re-registered through the
        // loopback before office (and denied), goes again now.
        self.heard_coordinator(now, self.me);
    }

    pub(super) fn mark_joined(&mut self) {
        if self.handshake.join() {
            self.out.event(ElEvent::Joined);
        }
    }

    /// The periodic check: a coordinator without a quorum for
    /// `suspect_after` steps down; a consumer whose coordinator is silent
    /// for `suspect_after` starts an election (jittered) that skips it.
    pub(super) fn on_check(&mut self, now: Instant) {
        self.timers.set(Timer::Check, now + self.cfg.heartbeat);
        let lacking = match &self.role {
            Role::Coordinator(_) if self.cfg.rules.off(ElRule::QuorumLease) => false,
            Role::Coordinator(o) => {
                let since = o.quorum_lapsed_at(&self.cfg).unwrap_or(o.elected_at);
                !o.quorum_valid(&self.cfg, now) && now.saturating_since(since) >= self.cfg.suspect_after
            }
            _ => false,
        };
        if lacking {
            self.step_down(now, "no quorum");
            self.elect_within(now, self.cfg.election_jitter);
            return;
        }
        if let (Role::Consumer, Some(c)) = (&self.role, self.coordinator) {
            if c != self.me && now.saturating_since(self.last_heard) >= self.cfg.suspect_after {
                // The election this starts skips it instead of waiting
                // hop_timeout at it.
                self.silent = Some(c);
                self.lose_coordinator(now);
            }
        }
        if self.coordinator.is_none() && !self.is_coordinator() && !self.timers.is_armed(Timer::Elect) {
            self.elect_within(now, self.cfg.election_timeout);
        }
    }

    /// `peer`'s process is gone (the transport's hint: its connection broke
    /// and its address refuses). What silence would show after
    /// `hop_timeout` or `suspect_after` is acted on now: hops to it not
    /// acked yet time out, and a consumer whose coordinator it was starts
    /// an election (jittered), as after `suspect_after` of silence. The
    /// failover gap and every promise still apply: the hint only starts
    /// sooner what a timeout would have started.
    pub(super) fn peer_gone(&mut self, now: Instant, peer: NodeId) {
        self.suspected.insert(peer);
        let lost = self.terms.hops_to(peer);
        for hop in lost {
            self.timers.cancel(Timer::Hop(hop));
            self.on_hop_timeout(now, hop);
        }
        if matches!(self.role, Role::Consumer) && self.coordinator == Some(peer) {
            self.lose_coordinator(now);
        }
    }

    /// A consumer's coordinator failed: an election, jittered.
    fn lose_coordinator(&mut self, now: Instant) {
        self.coordinator = None;
        self.role = Role::Electing;
        self.lost_coordinator_at = Some(now);
        self.elect_within(now, self.cfg.election_jitter);
    }

    /// Stops being (or becoming) coordinator: no more heartbeats, grants or
    /// renewals. Grants given keep their lease on the holder's side.
    pub(super) fn step_down(&mut self, now: Instant, why: &'static str) {
        if !self.is_coordinator() {
            return;
        }
        self.role = Role::Electing;
        self.coordinator = None;
        self.lost_coordinator_at = Some(now);
        self.timers.cancel(Timer::Heartbeat);
        self.timers.cancel(Timer::HolderExpiry);
        self.timers.cancel(Timer::GapEnds);
        self.out.event(ElEvent::SteppedDown { term: self.term, why });
        self.out.event(ElEvent::QueueLength(0));
    }
}

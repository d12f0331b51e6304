//! Join: the Hello handshake that tells a new life whether the cluster
//! is running (then it knows nothing and rebuilds through M3) or starting
//! (then the configured root searches and regenerates the first token: it
//! is never chosen locally), and a fresh node's recovery rounds
//! (foundation.md, Fresh nodes). ntmutexd.md, "Base algorithm" and
//! "Durability and leases".

use std::collections::BTreeSet;

use ::durable::promise::{AckStep, RoundStep, Values};
use ftcore::{Incarnation, NodeId, Protocol};
use timer::Instant;

use super::events::NtEvent;
use super::rules::NtRule;
use super::state::{Last, Phase, Recovery, Timer, DEFERRED_MAX};
use super::NtNode;
use crate::msg::{Body, Msg};

/// The handshake's state: the phase (while joining, who answered and the
/// messages kept until the handshake ends) and the nonce of this life's
/// latest Hello.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Join {
    pub(super) phase: Phase,
    pub(super) nonce: u64,
}

/// What the join timer calls for ([`Join::on_timer`]).
enum TimerStep {
    /// The handshake is over: `bootstrap` if nobody said the cluster runs.
    Finish { bootstrap: bool },
    /// No majority heard from yet: keep asking.
    AskAgain,
}

impl Join {
    /// Joining, with only `me` heard from, the first Hello's nonce `nonce`.
    pub(super) fn new(me: NodeId, nonce: u64) -> Join {
        Join { phase: Join::joining(me), nonce }
    }

    fn joining(me: NodeId) -> Phase {
        Phase::Joining { fresh: BTreeSet::from([me]), running_seen: false, deferred: Vec::new() }
    }

    /// Whether the handshake is over.
    pub(super) fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// Keeps a message until the handshake ends; false (nothing kept) once
    /// `DEFERRED_MAX` are kept, or when not joining.
    pub(super) fn defer(&mut self, from: NodeId, inc: Incarnation, msg: Msg) -> bool {
        let Phase::Joining { deferred, .. } = &mut self.phase else { return false };
        if deferred.len() < DEFERRED_MAX {
            deferred.push((from, inc, msg));
            true
        } else {
            false
        }
    }

    /// Ends the handshake: running; the messages kept meanwhile.
    fn finish(&mut self) -> Vec<(NodeId, Incarnation, Msg)> {
        match std::mem::replace(&mut self.phase, Phase::Running) {
            Phase::Joining { deferred, .. } => deferred,
            Phase::Running => Vec::new(),
        }
    }

    /// The join timer, with `members` configured sites (`None`: not joining).
    fn on_timer(&self, members: usize, minority_may_start: bool) -> Option<TimerStep> {
        let Phase::Joining { fresh, running_seen, .. } = &self.phase else { return None };
        Some(if *running_seen {
            TimerStep::Finish { bootstrap: false }
        } else if fresh.len() > members / 2 || minority_may_start {
            TimerStep::Finish { bootstrap: true }
        } else {
            TimerStep::AskAgain
        })
    }

    /// A peer's Hello: whether this site runs (while joining, the peer is
    /// counted as fresh).
    fn on_hello(&mut self, from: NodeId) -> bool {
        match &mut self.phase {
            Phase::Joining { fresh, .. } => {
                fresh.insert(from);
                false
            }
            Phase::Running => true,
        }
    }

    /// An answer to our Hello from `from`, which runs or not: while joining,
    /// `Some(bootstrap)` once the handshake is over (a running peer answered,
    /// or all `members` answered fresh).
    fn on_hello_ack(&mut self, from: NodeId, running: bool, members: usize) -> Option<bool> {
        let Phase::Joining { fresh, running_seen, .. } = &mut self.phase else { return None };
        if running {
            *running_seen = true;
        } else {
            fresh.insert(from);
        }
        let done = *running_seen || fresh.len() == members;
        done.then_some(!*running_seen)
    }

    /// A new life: the handshake starts again.
    fn rejoin(&mut self, me: NodeId) {
        self.phase = Join::joining(me);
    }
}

impl NtNode {
    pub(super) fn finish_join(&mut self, now: Instant, bootstrap: bool) {
        let deferred = self.join.finish();
        self.timers.cancel(Timer::Join);
        ftcore::mutant! {
            let mut local_token = false;
        }
        if bootstrap {
            // (safety) No site starts holding a token: the root searches
            // and, finding none, regenerates it with a majority's promises.
            let root = *self.members.iter().min().expect("at least one member");
            if root == self.me {
                self.last = Last::Root;
                self.bootstrap_search = true;
                ftcore::mutant! {
                    if self.cfg.rules.off(NtRule::NoSiteStartsWithToken) {
                        self.bootstrap_search = false;
                        local_token = true;
                    }
                }
            } else {
                self.last = Last::Parent(root);
            }
        } else {
            // (safety) A new life of a running cluster knows nothing: it
            // answers DeadEnd and makes its first request through M3.
            self.last = Last::Unknown;
            ftcore::mutant! {
                // The mutation: a new life assumes the configured root.
                if self.cfg.rules.off(NtRule::RestartedLastUnknown) {
                    let root = *self.members.iter().min().expect("at least one member");
                    self.last = if root == self.me { Last::Root } else { Last::Parent(root) };
                }
            }
        }
        self.out.event(NtEvent::Joined { bootstrap });
        ftcore::mutant! {
            if local_token {
                self.start_with_local_token(now);
            }
        }
        for (from, inc, msg) in deferred {
            self.handle_message(now, from, inc, msg);
        }
    }

    ftcore::mutant! {
        /// With `NtRule::NoSiteStartsWithToken` off (the mutation
        /// `root_starts_with_token`): the bootstrap root chooses the first
        /// token's epoch itself, "stored + 1" (the next round above its own
        /// floor, in its slot), stores it as in use and holds the token at
        /// once, without a search or a promise round (foundation.md: such an
        /// epoch is only a proposal).
        fn start_with_local_token(&mut self, now: Instant) {
            let above = self.promise.stored().floor();
            use ::durable::promise;
            let next = promise::round_of(above).checked_add(1).and_then(|r| promise::encode(r, self.promise.slot()));
            let Some(epoch) = next else { return };
            if self.promise.on_in_use(epoch, now).is_err() {
                return;
            }
            self.persist();
            self.out.event(NtEvent::Epoch(epoch));
            self.install_token(now, super::state::Token { epoch, counter: 0 }, 0);
        }
    }

    pub(super) fn on_join_timer(&mut self, now: Instant) {
        let minority_may_start = self.cfg.rules.off(NtRule::NoMinorityBootstrap);
        match self.join.on_timer(self.members.len(), minority_may_start) {
            None => {}
            Some(TimerStep::Finish { bootstrap }) => self.finish_join(now, bootstrap),
            Some(TimerStep::AskAgain) => {
                // No majority heard from yet: keep asking (a minority must
                // not start a cluster of its own).
                self.hello_all();
                self.timers.set(Timer::Join, now + self.cfg.t_msg * 2);
            }
        }
    }

    pub(super) fn hello_all(&mut self) {
        let nonce = self.join.nonce;
        self.broadcast(Body::Hello { nonce });
    }

    /// A fresh node (new disk) asks its peers what they stored, after its
    /// restart window, every `suspect_after` until enough have answered.
    pub(super) fn recovery_round(&mut self, now: Instant) {
        let nonce = self.rng.next_u64();
        match self.promise.recovery_round(nonce, now) {
            RoundStep::NotNeeded => {}
            RoundStep::Wait { until } => self.timers.set(Timer::Recover, until),
            RoundStep::Send => {
                self.join.nonce = nonce;
                self.hello_all();
                self.timers.set(Timer::Recover, now + self.cfg.suspect_after);
            }
            RoundStep::Recovered { max } => self.state_recovered(now, max),
        }
    }

    fn state_recovered(&mut self, now: Instant, max: u64) {
        self.timers.cancel(Timer::Recover);
        // NC4: a new cluster's first regeneration goes by rank.
        if let Some(at) = self.promise.first_proposal_in_new_cluster(now) {
            self.regen.proposals_from = at;
        }
        // Stored before this site promises, grants or proposes anything.
        self.persist();
        self.out.event(NtEvent::StateRecovered { max });
    }

    /// Every site answers `Hello`, in every phase: whether it runs, and what
    /// it has stored (nothing while it is itself unrecovered).
    pub(super) fn on_hello(&mut self, from: NodeId, nonce: u64) {
        let running = self.join.on_hello(from);
        let values = self.promise.values();
        self.send(from, Body::HelloAck { nonce, running, values });
    }

    /// An answer to our `Hello`: counts for a fresh node's recovery, and
    /// while joining tells whether the cluster runs.
    pub(super) fn on_hello_ack(
        &mut self,
        now: Instant,
        from: NodeId,
        nonce: u64,
        running: bool,
        values: Option<Values>,
    ) {
        if let AckStep::Recovered { max } = self.promise.on_hello_ack(from, nonce, values, now) {
            self.state_recovered(now, max);
        }
        if let Some(bootstrap) = self.join.on_hello_ack(from, running, self.members.len()) {
            self.finish_join(now, bootstrap);
        }
    }

    /// A peer knows a life of ours at least as new as `known`: our clock
    /// was behind our previous start and nothing stored said so (a new
    /// disk). Move to a life above it — a new life, which knows nothing —
    /// and start the handshake again (the driver stores the new life before
    /// anything is sent). A notice from a stale life of the sender, or about
    /// a life already left behind, changes nothing.
    pub(super) fn on_behind(&mut self, now: Instant, from: NodeId, inc: Incarnation, known: Incarnation) {
        if known < self.inc || !known.leaves_room() || self.detect.peer_inc.get(&from).is_some_and(|k| inc < *k) {
            return;
        }
        self.inc = known.next();
        self.out.event(NtEvent::NewLife { inc: self.inc });
        if self.token.is_some() {
            self.drop_token(now, "this node moved to a new life");
        }
        self.lose_lock(now, "this node moved to a new life");
        self.position = None;
        self.preds.clear();
        self.next = None;
        self.monitored = None;
        self.request = None;
        self.recovery = Recovery::Idle;
        self.bootstrap_search = false;
        for t in [Timer::CommitWait, Timer::AliveCheck, Timer::Window, Timer::Provisional] {
            self.timers.cancel(t);
        }
        self.join.rejoin(self.me);
        self.last = Last::Unknown;
        self.hello_all();
        self.timers.set(Timer::Join, now + self.cfg.t_msg * 2);
    }
}

//! The coordinator's FIFO access service (electd.md, "Coordinator: FIFO
//! access service"; named-locks.md, "electd"): per lock name one holder
//! at a time in queue order, each grant a lease of `grant_ttl` renewed by
//! its holder, fences (term, counter) strictly increasing over every name
//! (one counter per office), the failover gap after taking office,
//! adoption of an unexpired grant from an earlier term. A name with no
//! queue and no holder is forgotten: nothing per name is ever stored.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ftcore::NodeId;
use lockservice::{fence, LockName};
use timer::Instant;

use super::state::{not_coordinator, Role, Timer};
use super::{ElConfig, ElEvent, ElNode, ElRule};
use crate::msg::{Denial, Msg, Observation, ObserveMode};

/// A request waiting in the coordinator's queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueEntry {
    /// The consumer.
    pub node: NodeId,
    /// Its request number.
    pub req: u64,
    /// The order: (term, position) of its first `Queued` answer.
    pub key: (u64, u64),
    /// Arrival here (ties).
    pub arrival: u64,
    /// When it arrived.
    pub since: Instant,
}

/// The grant the coordinator honours.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Grant {
    pub(super) node: NodeId,
    pub(super) fence: u128,
    /// Honoured until the latest renewal's receipt + `grant_ttl·(1+ρ)`.
    honour_until: Instant,
    /// Renewals are acked only from here (an adopted grant: once the
    /// predecessor's quorum lease has lapsed).
    renew_from: Instant,
    /// A campaign's value, once announced (or carried by its
    /// re-registration): the grant's holder leads from then on
    /// (elections.md).
    value: Option<String>,
    /// A renewal was acked (or it was adopted): its client may hold.
    acked: bool,
}

/// One lock name's queue and holder at the coordinator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct NameQueue {
    pub(super) queue: Vec<QueueEntry>,
    pub(super) holder: Option<Grant>,
}

/// The coordinator's state in its term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Office {
    pub(super) term: u64,
    pub(super) elected_at: Instant,
    pub(super) took_office: Option<Instant>,
    /// No grant before this (the failover gap).
    pub(super) gap_until: Instant,
    hb_seq: u64,
    /// Heartbeats still within a lease: send time and who acked.
    hb: BTreeMap<u64, (Instant, BTreeSet<NodeId>)>,
    /// h: the send time of the latest heartbeat acked by a majority.
    quorum_at: Option<Instant>,
    /// (safety) One grant counter for every name of the office
    /// (`OfficeWideCounter`): a forgotten name asked for again within the
    /// office gets a fence above all earlier ones.
    counter: u64,
    /// The names with a queue or a holder.
    pub(super) names: std::collections::BTreeMap<LockName, NameQueue>,
    /// The name of each grant honoured, by fence.
    by_fence: BTreeMap<u128, LockName>,
    /// Indexes, so that no input costs a walk over every name: the names
    /// with a queue and no holder, each holder's honour time, and the
    /// requests queued over every name.
    ready: BTreeSet<LockName>,
    honours: BTreeSet<(Instant, u128)>,
    queued: usize,
    next_pos: u64,
    arrivals: u64,
    /// The nodes watching each election's leader, with when each last
    /// asked (elections.md); at most `max_locks` names.
    watchers: BTreeMap<LockName, BTreeMap<NodeId, Instant>>,
    /// The highest fence of each election adopted in this office (a
    /// stale re-registration below it is refused).
    adopted_high: BTreeMap<LockName, u128>,
    /// The elections whose leader may have changed since the watchers
    /// were last told.
    changed: BTreeSet<LockName>,
    /// Whether the watchers were told after the failover gap ended (none
    /// is told during it).
    told_after_gap: bool,
}

impl Office {
    pub(super) fn new(term: u64, now: Instant, first_counter: u64) -> Self {
        Office {
            term,
            elected_at: now,
            took_office: None,
            gap_until: now,
            hb_seq: 0,
            hb: BTreeMap::new(),
            quorum_at: None,
            counter: first_counter,
            names: BTreeMap::new(),
            by_fence: BTreeMap::new(),
            ready: BTreeSet::new(),
            honours: BTreeSet::new(),
            queued: 0,
            next_pos: 0,
            arrivals: 0,
            watchers: BTreeMap::new(),
            adopted_high: BTreeMap::new(),
            changed: BTreeSet::new(),
            told_after_gap: false,
        }
    }

    /// What the coordinator can tell of election lock `name` at `now`
    /// (elections.md, amendments): `None` while its grant is acked and
    /// unannounced (unknown); else its leader, or none, as of a fence. A
    /// grant past its honour time counts as ended.
    pub(super) fn observation(&self, name: &LockName, now: Instant) -> Option<Observation> {
        let as_of = fence(self.term, self.counter);
        let live = self.names.get(name).and_then(|q| q.holder.as_ref()).filter(|g| g.honour_until > now);
        match live {
            Some(g) => match (&g.value, g.acked) {
                (Some(v), _) => Some((name.clone(), Some((g.node, g.fence, v.clone())), g.fence)),
                (None, true) => None,
                // Granted, not yet renewed: nobody holds, as of just below
                // that grant (which may still come to lead: a watcher must
                // take it then).
                (None, false) => Some((name.clone(), None, g.fence.saturating_sub(1))),
            },
            None => Some((name.clone(), None, as_of)),
        }
    }

    /// The campaign value of grant `f`, held by `from`, is `value`:
    /// whether this office honours that grant of `from`'s (then it is
    /// acknowledged; the first value is kept).
    pub(super) fn announce(&mut self, from: NodeId, f: u128, value: String) -> bool {
        let Some(name) = self.by_fence.get(&f).cloned() else { return false };
        let Some(g) = self.names.get_mut(&name).and_then(|q| q.holder.as_mut()) else { return false };
        if g.node != from {
            return false;
        }
        if g.value.is_none() {
            g.value = Some(value);
            self.touch(&name);
        }
        true
    }

    /// `node` asks about election locks `names` at `now`: with `Watch` it
    /// watches them (again), with `Unwatch` no longer. A new watched name
    /// over `max` is not recorded.
    pub(super) fn watch(&mut self, names: &[LockName], node: NodeId, mode: ObserveMode, now: Instant, max: usize) {
        for name in names {
            match mode {
                ObserveMode::Once => {}
                ObserveMode::Watch => {
                    if !self.watchers.contains_key(name) && self.watchers.len() >= max {
                        continue;
                    }
                    self.watchers.entry(name.clone()).or_default().insert(node, now);
                }
                ObserveMode::Unwatch => {
                    if let Some(w) = self.watchers.get_mut(name) {
                        w.remove(&node);
                        if w.is_empty() {
                            self.watchers.remove(name);
                        }
                    }
                }
            }
        }
    }

    /// What each watching node must be told now: nothing during the
    /// failover gap; when it ends, every watched election; then those
    /// whose state may have changed and is known (an unknown one waits for
    /// its announce). Watches not asked again within `stale` are dropped
    /// first (a dead or restarted node).
    pub(super) fn take_changed(&mut self, now: Instant, stale: Duration) -> BTreeMap<NodeId, Vec<Observation>> {
        let mut out: BTreeMap<NodeId, Vec<Observation>> = BTreeMap::new();
        if now < self.gap_until {
            return out;
        }
        self.watchers.retain(|_, w| {
            w.retain(|_, at| now.saturating_since(*at) < stale);
            !w.is_empty()
        });
        if !self.told_after_gap {
            self.told_after_gap = true;
            self.changed.extend(self.watchers.keys().cloned());
        }
        let changed = std::mem::take(&mut self.changed);
        for name in changed {
            let Some(nodes) = self.watchers.get(&name) else { continue };
            match self.observation(&name, now) {
                Some(obs) => {
                    for node in nodes.keys() {
                        out.entry(*node).or_default().push(obs.clone());
                    }
                }
                None => {
                    self.changed.insert(name);
                }
            }
        }
        out
    }

    /// Marks election lock `name`'s leader as possibly changed.
    fn touch(&mut self, name: &LockName) {
        if name.is_election() && self.watchers.contains_key(name) {
            self.changed.insert(name.clone());
        }
    }

    /// Requests queued, over every name.
    pub(super) fn queued(&self) -> usize {
        self.queued
    }

    /// Grants honoured now, over every name.
    pub(super) fn held(&self) -> usize {
        self.by_fence.len()
    }

    /// The grants honoured: (name, holder, fence).
    pub(super) fn grants(&self) -> impl Iterator<Item = (&LockName, NodeId, u128)> {
        self.names.iter().filter_map(|(n, q)| q.holder.as_ref().map(|g| (n, g.node, g.fence)))
    }

    /// The earliest instant a holder's honour time ends.
    pub(super) fn next_holder_expiry(&self) -> Option<Instant> {
        self.honours.first().map(|(at, _)| *at)
    }

    /// Forgets `name` if nothing waits for or holds it.
    fn forget_if_idle(&mut self, name: &LockName) {
        if self.names.get(name).is_some_and(|q| q.queue.is_empty() && q.holder.is_none()) {
            self.names.remove(name);
            self.ready.remove(name);
        }
    }

    fn set_holder(&mut self, name: &LockName, g: Grant) {
        self.touch(name);
        let q = self.names.entry(name.clone()).or_default();
        if let Some(old) = q.holder.replace(g.clone()) {
            self.by_fence.remove(&old.fence);
            self.honours.remove(&(old.honour_until, old.fence));
        }
        self.by_fence.insert(g.fence, name.clone());
        self.honours.insert((g.honour_until, g.fence));
        self.ready.remove(name);
    }

    fn clear_holder(&mut self, name: &LockName) {
        self.touch(name);
        if let Some(q) = self.names.get_mut(name) {
            if let Some(g) = q.holder.take() {
                self.by_fence.remove(&g.fence);
                self.honours.remove(&(g.honour_until, g.fence));
            }
            if !q.queue.is_empty() {
                self.ready.insert(name.clone());
            }
        }
        self.forget_if_idle(name);
    }

    /// Records a heartbeat sent now (acked by `me`); forgets those older
    /// than a lease (their acks no longer extend anything).
    pub(super) fn heartbeat_sent(&mut self, now: Instant, me: NodeId, lease: Duration) -> u64 {
        self.hb_seq += 1;
        self.hb.retain(|_, (at, _)| now.saturating_since(*at) <= lease);
        self.hb.insert(self.hb_seq, (now, BTreeSet::from([me])));
        self.hb_seq
    }

    /// An ack of heartbeat `seq`: whether it now has a majority.
    pub(super) fn heartbeat_acked(&mut self, from: NodeId, seq: u64, majority: usize) -> bool {
        match self.hb.get_mut(&seq) {
            Some((_, acks)) => {
                acks.insert(from);
                acks.len() >= majority
            }
            None => false,
        }
    }

    /// The quorum lease now runs from heartbeat `seq`'s send time.
    pub(super) fn quorum_from(&mut self, seq: u64) {
        if let Some((at, _)) = self.hb.get(&seq) {
            self.quorum_at = Some(self.quorum_at.map_or(*at, |h| h.max(*at)));
        }
    }

    /// Under the quorum lease: `now < h + lease·(1−ρ)`.
    pub(super) fn quorum_valid(&self, cfg: &ElConfig, now: Instant) -> bool {
        self.quorum_at.is_some_and(|h| cfg.lease_at(h, cfg.lease).holder_valid(now))
    }

    /// When the quorum lease lapsed (or lapses).
    pub(super) fn quorum_lapsed_at(&self, cfg: &ElConfig) -> Option<Instant> {
        self.quorum_at.map(|h| cfg.lease_at(h, cfg.lease).holder_valid_until())
    }

    /// A request `req` of `from` in `term` (this office may grant):
    /// re-registers a grant it holds (`holding`), or queues it (at its
    /// place of an earlier term, `queued`).
    #[allow(clippy::too_many_arguments)]
    fn request(
        &mut self,
        cfg: &ElConfig,
        now: Instant,
        from: NodeId,
        name: &LockName,
        req: u64,
        queued: Option<(u64, u64)>,
        holding: Option<u128>,
        value: Option<String>,
        term: u64,
    ) -> Answer {
        let honour = cfg.stretched(cfg.grant_ttl);
        let known = self.names.get(name);
        if let Some(f) = holding {
            // A consumer holding an unexpired grant of an earlier term
            // re-registers it: adopted as holder of its name, renewed only
            // once the predecessor's quorum lease has lapsed.
            let holder = known.and_then(|q| q.holder.as_ref());
            let same = holder.is_some_and(|g| g.node == from && g.fence == f);
            // Only within the failover gap: a grant of an earlier term
            // still live has re-registered by its end (the gap's own
            // argument), so one re-registered after it has expired; adopted,
            // it would show observers a leader that no longer leads.
            // (Without a gap, the mutation, any time.)
            let in_gap = now < self.gap_until || !cfg.rules.on(ElRule::FailoverGap);
            // Above every grant of the name adopted here: a superseded
            // grant's stale re-registration is refused.
            let above = self.adopted_high.get(name).is_none_or(|h| f > *h);
            if same
                || (holder.is_none()
                    && in_gap
                    && above
                    && lockservice::fence_parts(f).0 < term
                    && !self.by_fence.contains_key(&f))
            {
                let adopt_from = self.took_office.map(|t| t + cfg.stretched(cfg.lease));
                let renew_from =
                    if cfg.rules.on(ElRule::AdoptedRenewalWaits) { adopt_from.unwrap_or(now) } else { now };
                let known_value = holder.and_then(|g| g.value.clone());
                let value = known_value.or(value).filter(|_| name.is_election());
                if name.is_election() {
                    self.adopted_high.insert(name.clone(), f);
                }
                let grant = Grant { node: from, fence: f, honour_until: now + honour, renew_from, value, acked: true };
                self.set_holder(name, grant);
                return Answer::Adopted { fence: f };
            }
            return Answer::RenewRefused(f);
        }
        if let Some(e) = known.and_then(|q| q.queue.iter().find(|e| e.node == from && e.req == req)) {
            return Answer::Queued { pos: e.key.1, len: None };
        }
        // A live grant is adopted whatever the bound; a new name is not.
        if known.is_none() && self.names.len() >= cfg.max_locks {
            return Answer::TooManyLocks;
        }
        if known.is_some_and(|q| q.queue.len() >= cfg.coordinator_max_queue) {
            return Answer::Full;
        }
        ftcore::mutant! {
            // A counter per name: a name new to the office counts from the
            // start again.
            if known.is_none() && cfg.rules.off(ElRule::OfficeWideCounter) {
                self.counter = cfg.first_counter.get();
            }
        }
        let pos = self.next_pos;
        self.next_pos += 1;
        self.arrivals += 1;
        let key = queued.unwrap_or((term, pos));
        let q = self.names.entry(name.clone()).or_default();
        q.queue.push(QueueEntry { node: from, req, key, arrival: self.arrivals, since: now });
        // FIFO across failover: by (term, position) of the first Queued
        // answer, then by arrival; never by host clocks.
        q.queue.sort_by_key(|e| (e.key, e.arrival));
        if q.holder.is_none() {
            self.ready.insert(name.clone());
        }
        self.queued += 1;
        Answer::Queued { pos, len: Some(self.queued) }
    }

    /// The names whose queue's head may be granted: nothing held, someone
    /// queued.
    fn grantable(&self) -> Vec<LockName> {
        self.ready.iter().cloned().collect()
    }

    /// Grants the head of `name`'s queue in `term` if nothing is held and
    /// it may grant (`may_grant`), past the failover gap.
    fn grant_next(&mut self, cfg: &ElConfig, now: Instant, name: &LockName, term: u64, may_grant: bool) -> NextGrant {
        let ready = self.names.get(name).is_some_and(|q| q.holder.is_none() && !q.queue.is_empty());
        if !may_grant || !ready {
            return NextGrant::Nothing;
        }
        if now < self.gap_until {
            return NextGrant::AfterGap(self.gap_until);
        }
        let next = self.counter.checked_add(1);
        ftcore::mutant! {
            // The counter wraps past u64::MAX.
            let next = if next.is_none() && cfg.rules.off(ElRule::CounterNeverWraps) { Some(0) } else { next };
        }
        let Some(counter) = next else {
            return NextGrant::Exhausted;
        };
        ftcore::invariant!(
            cfg.rules,
            counter > self.counter && self.term == term,
            "grant counter {counter} after {} in an office of term {} (term {term})",
            self.counter,
            self.term
        );
        self.counter = counter;
        let Some(e) = self.names.get_mut(name).map(|q| q.queue.remove(0)) else { return NextGrant::Nothing };
        self.queued -= 1;
        let f = fence(term, counter);
        let honour_until = now + cfg.stretched(cfg.grant_ttl);
        self.set_holder(
            name,
            Grant { node: e.node, fence: f, honour_until, renew_from: now, value: None, acked: false },
        );
        NextGrant::Granted { entry: e, fence: f, len: self.queued() }
    }

    /// Renewal of fence `f` by `from` in `term` (`may_grant`: under the
    /// quorum lease).
    fn renew(&mut self, cfg: &ElConfig, now: Instant, from: NodeId, f: u128, term: u64, may_grant: bool) -> Renewal {
        let honour = cfg.stretched(cfg.grant_ttl);
        let holder = self.by_fence.get(&f).and_then(|n| self.names.get_mut(n)).and_then(|q| q.holder.as_mut());
        match holder {
            Some(g) if g.node == from && g.fence == f => {
                if may_grant && now >= g.renew_from {
                    ftcore::invariant!(
                        cfg.rules,
                        lockservice::fence_parts(f).0 <= term,
                        "a grant of a higher term than {term} renewed: {f:#x}"
                    );
                    self.honours.remove(&(g.honour_until, f));
                    g.honour_until = now + honour;
                    self.honours.insert((g.honour_until, f));
                    if !g.acked {
                        g.acked = true;
                        let name = self.by_fence.get(&f).cloned();
                        if let Some(name) = name {
                            // Acked, unannounced: its state is unknown now.
                            self.touch(&name);
                        }
                    }
                    Renewal::Acked
                } else {
                    Renewal::NotYet
                }
            }
            _ => Renewal::Refused,
        }
    }

    /// `from` released fence `f`: whether it held it (now freed).
    fn release(&mut self, from: NodeId, f: u128) -> bool {
        let Some(name) = self.by_fence.get(&f).cloned() else { return false };
        if self.names.get(&name).and_then(|q| q.holder.as_ref()).is_some_and(|g| g.node == from) {
            self.clear_holder(&name);
            return true;
        }
        false
    }

    /// Frees every holder whose honour time is over: how many.
    fn holder_expiry(&mut self, now: Instant) -> usize {
        let over: Vec<LockName> = self
            .honours
            .iter()
            .take_while(|(at, _)| *at <= now)
            .filter_map(|(_, f)| self.by_fence.get(f).cloned())
            .collect();
        for n in &over {
            self.clear_holder(n);
        }
        over.len()
    }
}

/// The answer to a request.
enum Answer {
    /// A held grant re-registered: adopted as holder.
    Adopted { fence: u128 },
    /// A held grant not adopted.
    RenewRefused(u128),
    /// Queued at `pos`; `len`: the queue's new length if it was added.
    Queued { pos: u64, len: Option<usize> },
    /// The name's queue is full.
    Full,
    /// A new name, and `max_locks` names are known.
    TooManyLocks,
}

/// What granting the queue's head gave.
enum NextGrant {
    /// Nothing to grant, or it may not.
    Nothing,
    /// Not before the failover gap ends.
    AfterGap(Instant),
    /// The counter would pass u64::MAX.
    Exhausted,
    /// `entry` granted `fence`, honoured until `until`; `len` left queued.
    Granted { entry: QueueEntry, fence: u128, len: usize },
}

/// What a renewal gets.
enum Renewal {
    /// Acked: honoured for `grant_ttl·(1+ρ)` from now.
    Acked,
    /// The holder's, but not renewed now (no quorum lease, or an adopted
    /// grant before its predecessor's lease lapsed): no answer.
    NotYet,
    /// Not the holder's.
    Refused,
}

impl ElNode {
    /// A consumer's request (this process's own ones come through the
    /// loopback).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_request(
        &mut self,
        now: Instant,
        from: NodeId,
        name: LockName,
        req: u64,
        queued: Option<(u64, u64)>,
        holding: Option<u128>,
        value: Option<String>,
    ) {
        let term = self.term;
        let may_grant = self.may_grant(now);
        let known = self.coordinator;
        let Role::Coordinator(o) = &mut self.role else {
            return self.deny(from, name, req, not_coordinator(known));
        };
        if !may_grant {
            return self.deny(from, name, req, Denial::NoQuorum);
        }
        match o.request(&self.cfg, now, from, &name, req, queued, holding, value, term) {
            Answer::Adopted { fence: f } => {
                self.rearm_holder_expiry();
                self.send(from, Msg::Granted { term, name, req, fence: f });
            }
            Answer::RenewRefused(f) => self.send(from, Msg::RenewRefused { term, fences: vec![f] }),
            Answer::Queued { pos, len } => {
                self.send(from, Msg::Queued { term, name, req, pos });
                if let Some(len) = len {
                    self.out.event(ElEvent::QueueLength(len));
                }
            }
            Answer::Full => self.deny(from, name, req, Denial::QueueFull),
            Answer::TooManyLocks => self.deny(from, name, req, Denial::TooManyLocks),
        }
    }

    fn deny(&mut self, to: NodeId, name: LockName, req: u64, why: Denial) {
        let term = self.term;
        if req != 0 {
            // Re-registrations (request 0) are sent again on every
            // heartbeat until office: not counted as client denials.
            self.out.event(ElEvent::Denied { reason: why.label() });
        }
        self.send(to, Msg::Denied { term, name, req, why });
    }

    /// Sets the holder-expiry timer at the earliest honour time (or
    /// cancels it: nothing held).
    fn rearm_holder_expiry(&mut self) {
        let at = match &self.role {
            Role::Coordinator(o) => o.next_holder_expiry(),
            _ => None,
        };
        match at {
            Some(at) => self.timers.set(Timer::HolderExpiry, at),
            None => self.timers.cancel(Timer::HolderExpiry),
        }
    }

    /// Grants the head of each name's queue whose name nothing holds, in
    /// office, under the quorum lease and past the failover gap.
    pub(super) fn grant_next(&mut self, now: Instant) {
        let may_grant = self.may_grant(now);
        let term = self.term;
        let Role::Coordinator(o) = &mut self.role else { return };
        if !may_grant {
            return;
        }
        for name in o.grantable() {
            let Role::Coordinator(o) = &mut self.role else { return };
            match o.grant_next(&self.cfg, now, &name, term, may_grant) {
                NextGrant::Nothing => {}
                NextGrant::AfterGap(at) => {
                    self.timers.set(Timer::GapEnds, at);
                    return;
                }
                NextGrant::Exhausted => {
                    // (safety) The counter would pass u64::MAX: grant
                    // nothing more and start term + 1 (no pre-vote: this
                    // process leads).
                    let next = term.saturating_add(1);
                    self.step_down(now, "grant counter exhausted");
                    self.start_term(now, next);
                    return;
                }
                NextGrant::Granted { entry: e, fence: f, len } => {
                    self.send(e.node, Msg::Granted { term, name, req: e.req, fence: f });
                    self.out.event(ElEvent::Granted { fence: f, waited: now.saturating_since(e.since) });
                    self.out.event(ElEvent::QueueLength(len));
                }
            }
        }
        self.rearm_holder_expiry();
    }

    /// (safety) A renewal is acked only under the quorum lease, by the
    /// coordinator honouring that grant. One answer of each kind per batch.
    pub(super) fn on_renew(&mut self, now: Instant, from: NodeId, grants: Vec<(u128, u64)>) {
        let may_grant = self.may_grant(now);
        let term = self.term;
        let mut acks = Vec::new();
        let mut refused = Vec::new();
        match &mut self.role {
            Role::Coordinator(o) => {
                for (f, seq) in grants {
                    match o.renew(&self.cfg, now, from, f, term, may_grant) {
                        Renewal::Acked => acks.push((f, seq)),
                        Renewal::NotYet => {}
                        Renewal::Refused => refused.push(f),
                    }
                }
            }
            _ => refused = grants.into_iter().map(|(f, _)| f).collect(),
        }
        if !acks.is_empty() {
            self.rearm_holder_expiry();
            self.send(from, Msg::RenewAck { term, acks });
        }
        if !refused.is_empty() {
            self.send(from, Msg::RenewRefused { term, fences: refused });
        }
    }

    pub(super) fn on_release(&mut self, now: Instant, from: NodeId, f: u128) {
        let Role::Coordinator(o) = &mut self.role else { return };
        if o.release(from, f) {
            self.rearm_holder_expiry();
            self.grant_next(now);
        }
    }

    /// The holders' renewals stopped: each name is free once its grant is
    /// no longer honoured.
    pub(super) fn on_holder_expiry(&mut self, now: Instant) {
        let Role::Coordinator(o) = &mut self.role else { return };
        for _ in 0..o.holder_expiry(now) {
            self.out.event(ElEvent::LeaseExpired);
        }
        self.rearm_holder_expiry();
        self.grant_next(now);
    }
}

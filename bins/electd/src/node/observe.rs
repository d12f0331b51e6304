//! Elections for applications (elections.md, with its amendments after
//! review 1): who leads an election, as observers on any node see it.
//!
//! The coordinator's side (the state itself is in `access.rs`): `Observe`
//! is answered only in office, under the quorum lease and past the failover
//! gap; an election whose grant is acked but unannounced is not answered
//! (unknown); watching nodes are pushed every change, and each refreshes
//! its watches every [`REFRESH`], which heals lost pushes, lost watches and
//! a new office of the same term. The observer's side: per election, the
//! local clients asking once and those watching, each watcher with its own
//! filter (never an older state after a newer one), every client's first
//! answer from a request sent after it asked.

use std::collections::BTreeMap;
use std::time::Duration;

use ftcore::{ClientId, NodeId};
use lockservice::{LeaderInfo, LockName, LockReply, MAX_VALUE};
use timer::Instant;

use super::state::{Role, Timer};
use super::ElNode;
use crate::msg::{Msg, Observation, ObserveMode, MAX_OBSERVED, MAX_OBSERVE_NAMES};

/// How often a node asks again about every election it watches.
pub(super) const REFRESH: Duration = Duration::from_secs(1);

/// A coordinator drops a node's watch not asked again for this long.
pub(super) const WATCH_STALE: Duration = Duration::from_secs(3);

/// A leader as the coordinator names it: (node, fence, value).
pub(super) type Leader = (NodeId, u128, String);

/// One watching client's view.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Watcher {
    /// Its first answer comes from an answer to this request or a later one.
    after_req: u64,
    /// The last state passed on (`None`: none yet).
    last: Option<Option<Leader>>,
    /// The largest `as_of` passed on.
    high: u128,
}

/// One election observed here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Observing {
    /// Clients asking once: the request their answer must come from or
    /// after, and when they asked.
    once: BTreeMap<ClientId, (u64, Instant)>,
    /// Clients watching.
    watchers: BTreeMap<ClientId, Watcher>,
}

/// The observers of this node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct ObserveState {
    /// By election lock (`elect:NAME`).
    names: BTreeMap<LockName, Observing>,
    /// Each observing client's election lock.
    clients: BTreeMap<ClientId, LockName>,
    /// The coordinator the last round went to.
    served_for: Option<NodeId>,
    /// The number of the next round of requests.
    next_req: u64,
    /// The last round sent, and when.
    sent: Option<(u64, Instant)>,
}

impl ObserveState {
    /// Whether `client` observes here.
    pub(super) fn observes(&self, client: ClientId) -> bool {
        self.clients.contains_key(&client)
    }

    /// Elections observed here.
    pub(super) fn observed(&self) -> usize {
        self.names.len()
    }

    /// Whether some client still waits for a first answer.
    fn unanswered(&self) -> bool {
        self.names.values().any(|o| !o.once.is_empty() || o.watchers.values().any(|w| w.last.is_none()))
    }

    fn any_watched(&self) -> bool {
        self.names.values().any(|o| !o.watchers.is_empty())
    }

    /// The number the next round will carry (a client asking now is
    /// answered from it or a later one).
    fn upcoming(&mut self) -> u64 {
        if self.next_req == 0 {
            self.next_req = 1;
        }
        self.next_req
    }
}

/// Whether `obs` (leader, as_of) is news to watcher `w` (elections.md,
/// amendments, E5): anything at first; then a leader only with a fence
/// above every `as_of` passed on, and "no leader" only after a leader and
/// as of at least that.
pub(super) fn is_news(w: &Watcher, leader: &Option<Leader>, as_of: u128) -> bool {
    match (&w.last, leader) {
        (None, _) => true,
        (Some(_), Some((_, fence, _))) => *fence > w.high,
        (Some(Some(_)), None) => as_of >= w.high,
        (Some(None), None) => false,
    }
}

/// The client's view of a leader.
fn info(leader: &Option<Leader>) -> Option<LeaderInfo> {
    leader.as_ref().map(|(node, fence, value)| LeaderInfo {
        node: u64::from(node.0),
        fence: *fence,
        value: value.clone(),
    })
}

impl ElNode {
    /// A client's `Observe` of election `name` (a user name).
    pub(super) fn client_observe(&mut self, now: Instant, client: ClientId, name: LockName, watch: bool) {
        let refuse = |reason: String| LockReply::Refused { reason };
        if name.is_unnamed() || name.is_election() {
            let reason =
                format!("invalid election name {:?}: a name is 1-128 bytes of A-Z a-z 0-9 . _ / -", name.as_str());
            return self.out.reply(client, refuse(reason));
        }
        if self.observe.observes(client) || self.locks.knows(client) {
            let reason = "one request per connection: this one already waits, holds or observes".to_owned();
            return self.out.reply(client, refuse(reason));
        }
        let lock = LockName::election(&name);
        if !self.observe.names.contains_key(&lock) && self.observe.names.len() >= self.cfg.max_locks {
            let known = self.observe.names.len();
            return self
                .out
                .reply(client, refuse(format!("too many elections observed here: {known} (limits.max_locks)")));
        }
        let after_req = self.observe.upcoming();
        let o = self.observe.names.entry(lock.clone()).or_default();
        if watch {
            o.watchers.insert(client, Watcher { after_req, last: None, high: 0 });
        } else {
            o.once.insert(client, (after_req, now));
        }
        self.observe.clients.insert(client, lock);
        self.ask_round(now);
    }

    /// An observing client left (its connection closed, or it sent
    /// `Release`: then it is answered `Released`).
    pub(super) fn client_unobserve(&mut self, client: ClientId, answer: bool) {
        let Some(lock) = self.observe.clients.remove(&client) else { return };
        if answer {
            self.out.reply(client, LockReply::Released);
        }
        let Some(o) = self.observe.names.get_mut(&lock) else { return };
        o.once.remove(&client);
        let watched = o.watchers.remove(&client).is_some();
        let unwatch = watched && o.watchers.is_empty();
        if o.once.is_empty() && o.watchers.is_empty() {
            self.observe.names.remove(&lock);
        }
        if let (true, Some(c)) = (unwatch, self.coordinator) {
            let term = self.term;
            self.send(c, Msg::Observe { term, req: 0, mode: ObserveMode::Unwatch, names: vec![lock] });
        }
    }

    /// Asks the coordinator known about every election observed here: the
    /// once-asked ones `Once`, the watched ones `Watch` (which also renews
    /// the watches), in frames of at most [`MAX_OBSERVE_NAMES`] names, all
    /// of one round number. Then waits `request_timeout` for unanswered
    /// clients, or [`REFRESH`] before watching ones are asked again.
    fn ask_round(&mut self, now: Instant) {
        let Some(c) = self.coordinator else { return };
        if self.observe.names.is_empty() {
            return;
        }
        let req = self.observe.upcoming();
        self.observe.next_req += 1;
        self.observe.sent = Some((req, now));
        let mut once = Vec::new();
        let mut watch = Vec::new();
        for (lock, o) in &self.observe.names {
            if !o.watchers.is_empty() {
                watch.push(lock.clone());
            } else if !o.once.is_empty() {
                once.push(lock.clone());
            }
        }
        let term = self.term;
        for (mode, names) in [(ObserveMode::Once, once), (ObserveMode::Watch, watch)] {
            for chunk in names.chunks(MAX_OBSERVE_NAMES) {
                self.send(c, Msg::Observe { term, req, mode, names: chunk.to_vec() });
            }
        }
        self.rearm_observe(now);
    }

    /// The observe timer: `request_timeout` after a round while a client
    /// waits for its first answer, else [`REFRESH`] while one watches.
    fn rearm_observe(&mut self, now: Instant) {
        let from = self.observe.sent.map_or(now, |(_, at)| at);
        let every = if self.observe.unanswered() {
            self.cfg.request_timeout
        } else if self.observe.any_watched() {
            REFRESH
        } else {
            return self.timers.cancel(Timer::ObserveDue);
        };
        // Never at or before now: with no coordinator known no round is
        // sent, and a timer in the past would fire again within the same
        // input for ever (found by the simulator family).
        let at = from + every;
        self.timers.set(Timer::ObserveDue, if at > now { at } else { now + every });
    }

    /// After each input: a new coordinator is asked about every election
    /// observed here; the coordinator tells its watchers what changed.
    pub(super) fn observe_serve(&mut self, now: Instant) {
        if self.coordinator != self.observe.served_for {
            self.observe.served_for = self.coordinator;
            self.ask_round(now);
        }
        let may_grant = self.may_grant(now);
        let term = self.term;
        let Role::Coordinator(o) = &mut self.role else { return };
        if !may_grant {
            return;
        }
        for (node, entries) in o.take_changed(now, WATCH_STALE) {
            for chunk in entries.chunks(MAX_OBSERVED) {
                self.send(node, Msg::Observed { term, req: 0, entries: chunk.to_vec() });
            }
        }
    }

    /// The link to `peer` broke: if it is the coordinator, a push may be
    /// lost: ask again now.
    pub(super) fn observe_link_lost(&mut self, now: Instant, peer: NodeId) {
        if self.coordinator == Some(peer) {
            self.ask_round(now);
        }
    }

    /// The observe timer fired: a client asking once that has waited the
    /// failover gap and two request timeouts is told nobody answered (a new
    /// coordinator answers nothing in its gap); everything is asked again.
    pub(super) fn on_observe_due(&mut self, now: Instant) {
        let patience = self.cfg.failover_gap() + self.cfg.request_timeout * 2;
        let mut refused = Vec::new();
        for o in self.observe.names.values_mut() {
            o.once.retain(|c, (_, since)| {
                let keep = now.saturating_since(*since) < patience;
                if !keep {
                    refused.push(*c);
                }
                keep
            });
        }
        self.observe.names.retain(|_, o| !o.once.is_empty() || !o.watchers.is_empty());
        for client in refused {
            self.observe.clients.remove(&client);
            let reason = "no coordinator answered: an election or a failover is under way; try again".to_owned();
            self.out.reply(client, LockReply::Refused { reason });
        }
        self.ask_round(now);
        self.rearm_observe(now);
    }

    /// The coordinator's answer to round `req` (or, `req` 0, a push): a
    /// client asking once is answered from a round it asked before; a
    /// watcher is told its first state likewise, then each state that is
    /// news to it.
    pub(super) fn on_observed(&mut self, now: Instant, from: NodeId, req: u64, entries: Vec<Observation>) {
        if self.coordinator != Some(from) {
            // A coordinator this process no longer follows: stale.
            return;
        }
        for (lock, leader, as_of) in entries {
            let Some(name) = lock.election_name() else { continue };
            let Some(o) = self.observe.names.get_mut(&lock) else { continue };
            let reply = LockReply::Leader { name, leader: info(&leader) };
            let mut told = Vec::new();
            if req != 0 {
                let done: Vec<ClientId> =
                    o.once.iter().filter(|(_, (after, _))| *after <= req).map(|(c, _)| *c).collect();
                for c in done {
                    o.once.remove(&c);
                    self.observe.clients.remove(&c);
                    told.push(c);
                }
            }
            for (c, w) in &mut o.watchers {
                let first_ready = w.last.is_none() && req != 0 && w.after_req <= req;
                let news = w.last.is_some() && is_news(w, &leader, as_of);
                if first_ready || news {
                    w.last = Some(leader.clone());
                    w.high = w.high.max(as_of);
                    told.push(*c);
                }
            }
            if o.once.is_empty() && o.watchers.is_empty() {
                self.observe.names.remove(&lock);
            }
            for c in told {
                self.out.reply(c, reply.clone());
            }
        }
        self.rearm_observe(now);
    }

    /// The coordinator's side of `Observe`: records watches (or ends
    /// them), and answers in office, under the quorum lease, past the
    /// failover gap: every name whose state it knows (an acked grant not
    /// yet announced is left out: the node asks again).
    pub(super) fn on_observe(&mut self, now: Instant, from: NodeId, req: u64, mode: ObserveMode, names: Vec<LockName>) {
        let names: Vec<LockName> = names.into_iter().filter(LockName::is_election).collect();
        let may_grant = self.may_grant(now);
        let term = self.term;
        let max = self.cfg.max_locks;
        let Role::Coordinator(o) = &mut self.role else { return };
        o.watch(&names, from, mode, now, max);
        if mode == ObserveMode::Unwatch || !may_grant || now < o.gap_until {
            return;
        }
        let entries: Vec<Observation> = names.iter().filter_map(|n| o.observation(n, now)).collect();
        for chunk in entries.chunks(MAX_OBSERVED) {
            self.send(from, Msg::Observed { term, req, entries: chunk.to_vec() });
        }
    }

    /// A campaign's holder announced its value: acknowledged if this
    /// office honours that grant of the sender's.
    pub(super) fn on_announce(&mut self, from: NodeId, fence: u128, value: String) {
        if value.len() > MAX_VALUE {
            return;
        }
        let term = self.term;
        let Role::Coordinator(o) = &mut self.role else { return };
        if o.announce(from, fence, value) {
            self.send(from, Msg::Announced { term, fence });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(fence: u128) -> Option<Leader> {
        Some((NodeId(1), fence, "v".into()))
    }

    fn seen(last: Option<Leader>, high: u128) -> Watcher {
        Watcher { after_req: 1, last: Some(last), high }
    }

    #[test]
    fn watchers_never_go_back() {
        let fresh = Watcher { after_req: 1, last: None, high: 0 };
        // The first state is always news.
        assert!(is_news(&fresh, &None, 3));
        assert!(is_news(&fresh, &l(5), 5));
        // A later leader is; the same or an older one is not.
        assert!(is_news(&seen(l(5), 5), &l(6), 6));
        assert!(!is_news(&seen(l(5), 5), &l(5), 5));
        assert!(!is_news(&seen(l(5), 5), &l(4), 4));
        // "No leader" after a leader, as of it or later, is; as of earlier
        // (said before that leader was granted) is not; twice is not.
        assert!(is_news(&seen(l(5), 5), &None, 5));
        assert!(is_news(&seen(l(5), 5), &None, 9));
        assert!(!is_news(&seen(l(5), 5), &None, 4));
        assert!(!is_news(&seen(None, 9), &None, 10));
        // After "no leader" as of 9, only a leader above 9: one adopted
        // late with fence 7 is not.
        assert!(!is_news(&seen(None, 9), &l(7), 7));
        assert!(!is_news(&seen(None, 9), &l(9), 9));
        assert!(is_news(&seen(None, 9), &l(10), 10));
    }
}

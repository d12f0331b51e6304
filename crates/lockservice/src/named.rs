//! Many named locks at one node (named-locks.md, "Local service"): a
//! [`LocalLocks`] per name, created at the first local request for it and
//! forgotten once nobody waits for or holds it, so an idle name costs
//! nothing. A client connection waits for or holds one lock at a time.
//!
//! The embedding core drives each name as [`LocalLocks`] describes (ask
//! the cluster while [`has_waiters`](NamedLocks::has_waiters), grant with
//! [`grant_next`](NamedLocks::grant_next), renew, lose), naming the lock in
//! every call; events come out as [`NamedEvent`]s, which carry the name.
//! Bounds: at most `max_locks` names at once (a request for one more is
//! refused, `too many locks`, and counted), and the per-name queue bound of
//! [`LocksConfig::max_queue`].

use std::collections::{BTreeMap, BTreeSet};

use ftcore::{ClientId, EventSink, ReplySink};
use timer::Instant;

use crate::{LocalLocks, LockEvent, LockInfo, LockName, LockReply, LockRequest, LocksConfig, MAX_LISTED, MAX_VALUE};

const NOT_HOLDING: &str = "not holding the lock";
const SHUTTING_DOWN: &str = "daemon is shutting down";
/// An `Observe` that reached the local queues: the daemon answers those
/// itself (electd), so this one does not serve them.
const NO_OBSERVE: &str = "this daemon does not answer observes";

/// What [`NamedLocks`] reports.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NamedEvent {
    /// An event of lock `name`'s local queue.
    Lock {
        /// The lock.
        name: LockName,
        /// What happened.
        event: LockEvent,
    },
    /// A request was refused before reaching any queue: `bad_name` (an
    /// empty name in a wire request) or `too_many_locks`.
    Refused {
        /// Metric label.
        reason: &'static str,
    },
}

/// Where [`NamedLocks`] pushes replies and events (an `ftcore::Outbox`
/// whose event type converts from [`NamedEvent`]).
pub trait NamedOut: ReplySink<LockReply> + EventSink<NamedEvent> {}

impl<T: ReplySink<LockReply> + EventSink<NamedEvent>> NamedOut for T {}

/// Tags one name's queue's events with its name.
struct Tagged<'a, O> {
    name: &'a LockName,
    out: &'a mut O,
}

impl<O: ReplySink<LockReply>> ReplySink<LockReply> for Tagged<'_, O> {
    fn reply(&mut self, client: ClientId, reply: LockReply) {
        self.out.reply(client, reply);
    }
}

impl<O: EventSink<NamedEvent>> EventSink<LockEvent> for Tagged<'_, O> {
    fn event(&mut self, event: LockEvent) {
        self.out.event(NamedEvent::Lock { name: self.name.clone(), event });
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Entry {
    queue: LocalLocks,
    /// The clients waiting or holding here.
    clients: BTreeSet<ClientId>,
    last_fence: Option<u128>,
}

/// The local clients of one node, per lock name. Equality and hashing
/// (model checks) leave out the touched names, which the core takes after
/// every input.
#[derive(Clone, Debug)]
pub struct NamedLocks {
    cfg: LocksConfig,
    max_locks: usize,
    names: BTreeMap<LockName, Entry>,
    /// Each client's one lock.
    clients: BTreeMap<ClientId, LockName>,
    /// Each campaigner's value (elections.md).
    values: BTreeMap<ClientId, String>,
    shutting_down: bool,
    /// The names a call touched since [`take_touched`](Self::take_touched):
    /// what the core must look at again, instead of every name.
    touched: BTreeSet<LockName>,
}

impl NamedLocks {
    #[allow(clippy::type_complexity)]
    fn key(
        &self,
    ) -> (
        &LocksConfig,
        usize,
        &BTreeMap<LockName, Entry>,
        &BTreeMap<ClientId, LockName>,
        &BTreeMap<ClientId, String>,
        bool,
    ) {
        (&self.cfg, self.max_locks, &self.names, &self.clients, &self.values, self.shutting_down)
    }
}

impl PartialEq for NamedLocks {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for NamedLocks {}

impl std::hash::Hash for NamedLocks {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl NamedLocks {
    /// No lock known. `cfg` applies to each name; at most `max_locks`
    /// names are known at once.
    pub fn new(cfg: LocksConfig, max_locks: usize) -> Self {
        NamedLocks {
            cfg,
            max_locks,
            names: BTreeMap::new(),
            clients: BTreeMap::new(),
            values: BTreeMap::new(),
            shutting_down: false,
            touched: BTreeSet::new(),
        }
    }

    /// A client request: `Acquire` (the unnamed lock) and `AcquireNamed`
    /// queue the client at that name (see [`LocalLocks::request`]; one
    /// lock per client at a time), `Release` goes to the client's lock,
    /// `ListLocks` is answered `Locks`.
    pub fn request(&mut self, now: Instant, client: ClientId, req: LockRequest, out: &mut impl NamedOut) {
        match req {
            LockRequest::Acquire { timeout_ms } => self.acquire(now, client, LockName::unnamed(), timeout_ms, out),
            LockRequest::AcquireNamed { name, timeout_ms } if name.is_unnamed() => {
                // The decoder lets the unnamed lock's empty name through
                // (peer messages carry it); a client names a lock or
                // sends `Acquire`.
                let _ = timeout_ms;
                out.event(NamedEvent::Refused { reason: "bad_name" });
                out.reply(client, LockReply::Refused { reason: crate::NameError::Empty.to_string() });
            }
            LockRequest::AcquireNamed { name, timeout_ms } if name.is_election() => {
                // An election's lock is reached only through `Campaign`
                // (elections.md, amendments, E9).
                let _ = timeout_ms;
                out.event(NamedEvent::Refused { reason: "bad_name" });
                let reason = format!("invalid lock name {:?}: elections are joined with `Campaign`", name.as_str());
                out.reply(client, LockReply::Refused { reason });
            }
            LockRequest::AcquireNamed { name, timeout_ms } => self.acquire(now, client, name, timeout_ms, out),
            LockRequest::Release => match self.clients.get(&client).cloned() {
                Some(name) => {
                    self.on_name(&name, out, |q, o| q.request(now, client, LockRequest::Release, o));
                }
                None => out.reply(client, LockReply::Refused { reason: NOT_HOLDING.to_owned() }),
            },
            LockRequest::ListLocks => out.reply(client, self.list()),
            LockRequest::Campaign { name, value, timeout_ms } => {
                self.campaign(now, client, name, value, timeout_ms, out)
            }
            LockRequest::Observe { .. } => out.reply(client, LockReply::Refused { reason: NO_OBSERVE.to_owned() }),
        }
    }

    /// A campaign: the acquire of `elect:NAME`, the value kept for while
    /// the client waits or leads. A name that is no user name (empty, or
    /// an election's own) or a value over [`MAX_VALUE`] bytes is refused.
    fn campaign(
        &mut self,
        now: Instant,
        client: ClientId,
        name: LockName,
        value: String,
        timeout_ms: u64,
        out: &mut impl NamedOut,
    ) {
        if name.is_unnamed() || name.is_election() {
            out.event(NamedEvent::Refused { reason: "bad_name" });
            let reason =
                format!("invalid election name {:?}: a name is 1-128 bytes of A-Z a-z 0-9 . _ / -", name.as_str());
            out.reply(client, LockReply::Refused { reason });
            return;
        }
        if value.len() > MAX_VALUE {
            out.event(NamedEvent::Refused { reason: "bad_value" });
            let reason = format!("the value has {} bytes, the most is {MAX_VALUE}", value.len());
            out.reply(client, LockReply::Refused { reason });
            return;
        }
        let lock = LockName::election(&name);
        if !self.clients.contains_key(&client) {
            self.values.insert(client, value);
        }
        self.acquire(now, client, lock, timeout_ms, out);
        if !self.clients.contains_key(&client) {
            // Refused before it was queued.
            self.values.remove(&client);
        }
    }

    /// The value of `name`'s local holder, if it campaigned.
    pub fn holder_value(&self, name: &LockName) -> Option<&str> {
        let (client, _) = self.holder(name)?;
        self.values.get(&client).map(String::as_str)
    }

    /// Whether `client` waits for or holds a lock here.
    pub fn knows(&self, client: ClientId) -> bool {
        self.clients.contains_key(&client)
    }

    /// The client's connection closed: its hold ends or its wait does.
    pub fn client_gone(&mut self, now: Instant, client: ClientId, out: &mut impl NamedOut) {
        if let Some(name) = self.clients.get(&client).cloned() {
            self.on_name(&name, out, |q, o| q.client_gone(now, client, o));
        }
    }

    /// The names whose waiters or holder may have changed since the last
    /// call (a request, a release, a grant, a timeout, a loss, even of a
    /// name no longer known): the core looks at these after an input
    /// rather than at every name.
    pub fn take_touched(&mut self) -> BTreeSet<LockName> {
        std::mem::take(&mut self.touched)
    }

    /// The names some local client waits for, in name order.
    pub fn waited_for(&self) -> impl Iterator<Item = &LockName> {
        self.names.iter().filter(|(_, e)| e.queue.has_waiters()).map(|(n, _)| n)
    }

    /// Whether a local client waits for `name`.
    pub fn has_waiters(&self, name: &LockName) -> bool {
        self.names.get(name).is_some_and(|e| e.queue.has_waiters())
    }

    /// Whether a local client holds `name` (a revoked hold included).
    pub fn is_held(&self, name: &LockName) -> bool {
        self.names.get(name).is_some_and(|e| e.queue.is_held())
    }

    /// Whether a local client holds any lock.
    pub fn any_held(&self) -> bool {
        self.names.values().any(|e| e.queue.is_held())
    }

    /// The token of `name` arrived ([`LocalLocks::token_arrived`]).
    pub fn token_arrived(&mut self, now: Instant, name: &LockName) {
        if let Some(e) = self.names.get_mut(name) {
            e.queue.token_arrived(now);
        }
    }

    /// [`LocalLocks::grant_next`] for `name`.
    pub fn grant_next(
        &mut self,
        now: Instant,
        name: &LockName,
        fence: u128,
        lease_until: Instant,
        batch_only: bool,
        out: &mut impl NamedOut,
    ) -> Option<ClientId> {
        let granted = self.on_name(name, out, |q, o| q.grant_next(now, fence, lease_until, batch_only, o)).flatten();
        if granted.is_some() {
            if let Some(e) = self.names.get_mut(name) {
                e.last_fence = Some(fence);
            }
        }
        granted
    }

    /// [`LocalLocks::renew`] for `name`.
    pub fn renew(&mut self, now: Instant, name: &LockName, lease_until: Instant, out: &mut impl NamedOut) -> bool {
        self.on_name(name, out, |q, o| q.renew(now, lease_until, o)).unwrap_or(false)
    }

    /// [`LocalLocks::lose`] for `name`.
    pub fn lose(&mut self, now: Instant, name: &LockName, reason: &str, out: &mut impl NamedOut) {
        self.on_name(name, out, |q, o| q.lose(now, reason, o));
    }

    /// The daemon is leaving: every waiter of every name is refused, and
    /// every later acquire; holders keep their holds until they end.
    /// Returns whether something is still held.
    pub fn shutdown(&mut self, now: Instant, out: &mut impl NamedOut) -> bool {
        self.shutting_down = true;
        let names: Vec<LockName> = self.names.keys().cloned().collect();
        for name in names {
            self.on_name(&name, out, |q, o| q.shutdown(now, o));
        }
        self.any_held()
    }

    /// Every deadline `<= now` of every name ([`LocalLocks::handle_timeout`]).
    pub fn handle_timeout(&mut self, now: Instant, out: &mut impl NamedOut) {
        let due: Vec<LockName> = self
            .names
            .iter()
            .filter(|(_, e)| e.queue.poll_timeout().is_some_and(|at| at <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            self.on_name(&name, out, |q, o| q.handle_timeout(now, o));
        }
    }

    /// The earliest deadline of any name.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.names.values().filter_map(|e| e.queue.poll_timeout()).min()
    }

    /// The local holder of `name` and its fence.
    pub fn holder(&self, name: &LockName) -> Option<(ClientId, u128)> {
        self.names.get(name).and_then(|e| e.queue.holder())
    }

    /// Local clients waiting, over all names.
    pub fn waiting(&self) -> usize {
        self.names.values().map(|e| e.queue.waiting()).sum()
    }

    /// Names known here (each has a waiter or a holder).
    pub fn known(&self) -> usize {
        self.names.len()
    }

    /// The end of the lease of `name`'s local holder.
    pub fn lease_until(&self, name: &LockName) -> Option<Instant> {
        self.names.get(name).and_then(|e| e.queue.lease_until())
    }

    fn acquire(&mut self, now: Instant, client: ClientId, name: LockName, timeout_ms: u64, out: &mut impl NamedOut) {
        let req = LockRequest::Acquire { timeout_ms };
        if let Some(bound) = self.clients.get(&client).cloned() {
            // One lock per connection: its own queue refuses the second
            // acquire (already waiting / holding).
            self.on_name(&bound, out, |q, o| q.request(now, client, req, o));
            return;
        }
        if !self.names.contains_key(&name) {
            if self.shutting_down {
                out.reply(client, LockReply::Refused { reason: SHUTTING_DOWN.to_owned() });
                return;
            }
            if self.names.len() >= self.max_locks {
                out.event(NamedEvent::Refused { reason: "too_many_locks" });
                let reason = format!("too many locks: this node knows {} (limits.max_locks)", self.names.len());
                out.reply(client, LockReply::Refused { reason });
                return;
            }
            let entry = Entry { queue: LocalLocks::new(self.cfg.clone()), clients: BTreeSet::new(), last_fence: None };
            self.names.insert(name.clone(), entry);
        }
        if let Some(e) = self.names.get_mut(&name) {
            e.clients.insert(client);
        }
        self.clients.insert(client, name.clone());
        self.on_name(&name, out, |q, o| q.request(now, client, req, o));
    }

    /// Runs `f` on `name`'s queue with its events tagged, then forgets the
    /// clients that left it, and the name once idle. `None`: not known.
    fn on_name<O: NamedOut, T>(
        &mut self,
        name: &LockName,
        out: &mut O,
        f: impl FnOnce(&mut LocalLocks, &mut Tagged<'_, O>) -> T,
    ) -> Option<T> {
        self.touched.insert(name.clone());
        let e = self.names.get_mut(name)?;
        let r = f(&mut e.queue, &mut Tagged { name, out });
        let queue = &e.queue;
        let gone: Vec<ClientId> = e.clients.iter().copied().filter(|c| !queue.knows(*c)).collect();
        for c in gone {
            e.clients.remove(&c);
            self.clients.remove(&c);
            self.values.remove(&c);
        }
        if e.queue.is_idle() {
            self.names.remove(name);
        }
        Some(r)
    }

    fn list(&self) -> LockReply {
        let mut locks: Vec<LockInfo> = self
            .names
            .iter()
            .map(|(name, e)| LockInfo {
                name: name.clone(),
                held_fence: e.queue.holder().map(|(_, f)| f),
                last_fence: e.last_fence,
                waiters: u32::try_from(e.queue.waiting()).unwrap_or(u32::MAX),
            })
            .collect();
        // The most waited-for first; ties by name (stable sort).
        locks.sort_by_key(|l| std::cmp::Reverse(l.waiters));
        locks.truncate(MAX_LISTED);
        LockReply::Locks { locks, known: self.names.len() as u64 }
    }
}

#[cfg(test)]
mod tests;

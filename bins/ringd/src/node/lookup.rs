//! Lookup of the least-loaded replica (ringd.md): a `Find` travels one lap
//! from the replica a client asked, each replica putting itself in `best`
//! if its load is smaller; the origin answers on the first return of the
//! current lap. A lap not back within `lookup_timeout` is retried once;
//! then the best known (this replica at worst) is answered: every lookup
//! is answered.

use std::collections::BTreeMap;
use std::time::Duration;

use api::ring::RingReply;
use ftcore::{ClientId, NodeId};
use timer::Instant;

use super::{RdEvent, RdNode};
use crate::msg::Msg;

/// A lookup started here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Lookup {
    client: ClientId,
    request_id: u64,
    lap: u32,
    started: Instant,
    deadline: Instant,
}

impl Lookup {
    /// Its lap 1 is due back by `timeout` after `now`: a second lap then.
    /// Whether it had one left.
    fn next_lap(&mut self, now: Instant, timeout: Duration) -> bool {
        if self.lap != 1 {
            return false;
        }
        self.lap = 2;
        self.deadline = now + timeout;
        true
    }
}

/// The lookups started here, by the key their `Find` carries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Lookups {
    running: BTreeMap<u64, Lookup>,
}

impl Lookups {
    /// The `Find` of `key` came back in `lap`: the lookup that lap ends
    /// (none for another lap, or a lookup already answered).
    fn returned(&mut self, key: u64, lap: u32) -> Option<Lookup> {
        if self.running.get(&key).is_some_and(|l| l.lap == lap) {
            self.running.remove(&key)
        } else {
            None
        }
    }

    /// The lookups whose lap is due at `now`, taken out, in key order.
    fn take_due(&mut self, now: Instant) -> Vec<(u64, Lookup)> {
        let due: Vec<u64> = self.running.iter().filter(|(_, l)| now >= l.deadline).map(|(k, _)| *k).collect();
        due.into_iter().filter_map(|k| self.running.remove(&k).map(|l| (k, l))).collect()
    }

    /// Waits for the `Find` of `key`.
    fn wait(&mut self, key: u64, l: Lookup) {
        self.running.insert(key, l);
    }

    /// The next lap deadline.
    fn deadline(&self) -> Option<Instant> {
        self.running.values().map(|l| l.deadline).min()
    }

    /// `client` is gone: its lookups are answered nowhere.
    pub(super) fn forget_client(&mut self, client: ClientId) {
        self.running.retain(|_, l| l.client != client);
    }
}

/// The best replica so far: id, load, client address.
pub(super) type Best = (NodeId, u32, String);

impl RdNode {
    fn own_best(&self) -> Best {
        (self.me, self.load(), self.cfg.client_addr.clone())
    }

    fn reply_lookup(&mut self, now: Instant, l: &Lookup, best: Best) {
        let (replica, load, address) = best;
        self.out.event(RdEvent::LookedUp { took: now.saturating_since(l.started) });
        self.out.reply(l.client, RingReply::LookedUp { request_id: l.request_id, replica, address, load });
    }

    fn send_find(&mut self, key: u64, lap: u32) -> bool {
        let Some(s) = self.successor() else { return false };
        let (best, best_load, best_addr) = self.own_best();
        self.out.send(s, Msg::Find { request_id: key, lap, hops: 0, origin: self.me, best, best_load, best_addr });
        true
    }

    pub(super) fn on_lookup(&mut self, now: Instant, client: ClientId, request_id: u64) {
        let key = self.fresh_id();
        let l = Lookup { client, request_id, lap: 1, started: now, deadline: now + self.cfg.lookup_timeout };
        if self.send_find(key, 1) {
            self.lookups.wait(key, l);
        } else {
            let best = self.own_best();
            self.reply_lookup(now, &l, best);
        }
    }

    pub(super) fn on_find(&mut self, now: Instant, key: u64, lap: u32, hops: u32, origin: NodeId, best: Best) {
        if origin == self.me {
            if let Some(l) = self.lookups.returned(key, lap) {
                self.reply_lookup(now, &l, best);
            }
            return;
        }
        let best = if self.load() < best.1 { self.own_best() } else { best };
        let hops = hops.saturating_add(1);
        if hops >= u32::try_from(self.members.len()).unwrap_or(u32::MAX) {
            return;
        }
        if let Some(s) = self.successor() {
            let (best, best_load, best_addr) = best;
            self.out.send(s, Msg::Find { request_id: key, lap, hops, origin, best, best_load, best_addr });
        }
    }

    pub(super) fn lookup_deadline(&self) -> Option<Instant> {
        self.lookups.deadline()
    }

    pub(super) fn lookup_timeout(&mut self, now: Instant) {
        for (key, mut l) in self.lookups.take_due(now) {
            if l.next_lap(now, self.cfg.lookup_timeout) && self.send_find(key, 2) {
                self.lookups.wait(key, l);
                continue;
            }
            let best = self.own_best();
            self.reply_lookup(now, &l, best);
        }
    }
}

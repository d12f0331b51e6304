//! The Naimi-Trehel queue: requests along the last tree (path reversal),
//! the token, COMMIT with absolute positions, linking (ntmutexd.md, "Base
//! algorithm", "Positions and COMMIT", "Linking never drops a live
//! successor"), and the local lock service on top (`serve_and_route`).

use std::time::Duration;

use ::durable::promise;
use ftcore::{Incarnation, NodeId};
use timer::Instant;

use super::events::NtEvent;
use super::rules::NtRule;
use super::state::{Last, LinkKind, Recovery, Timer, Token};
use super::NtNode;
use crate::msg::Body;

/// What this site granted: how many times (its accesses, which the M3.b
/// election compares) and the last fence.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Grants {
    pub(super) accesses: u64,
    pub(super) last_fence: u128,
}

impl Grants {
    /// A grant with `fence`.
    fn granted(&mut self, fence: u128) {
        self.accesses += 1;
        self.last_fence = fence;
    }
}

impl NtNode {
    pub(super) fn is_requesting(&self) -> bool {
        self.request.is_some() && self.token.is_none()
    }

    /// In the queue: holding the token or waiting for it.
    pub(super) fn in_queue(&self) -> bool {
        self.token.is_some() || self.request.is_some()
    }

    /// Holding the token with no local use for it now.
    pub(super) fn token_idle(&self) -> bool {
        self.token.is_some() && !self.locks.is_held() && !self.locks.has_waiters()
    }

    /// The COMMIT this site sends to a site queued behind it.
    pub(super) fn commit_for(&self, seq: u64, origin: Option<(NodeId, u64)>) -> Body {
        let mut preds = vec![self.me];
        preds.extend(self.preds.iter().copied().take(self.cfg.k.saturating_sub(1)));
        let origin = origin.unwrap_or((self.me, if self.token.is_some() { u64::MAX } else { self.seq }));
        Body::Commit { pos: self.position.map(|p| p + 1), preds, seq, origin }
    }

    /// Forwarded more than twice the number of sites: the message is
    /// circling (a path can be longer than N while the queue moves, never
    /// that much longer).
    pub(super) fn circling(&self, hops: u32) -> bool {
        self.cfg.rules.on(NtRule::HopLimit) && hops as usize > 2 * self.members.len()
    }

    /// Does what the state calls for: grant locally, pass the token on,
    /// or request it.
    pub(super) fn serve_and_route(&mut self, now: Instant) {
        if !self.join.is_running() {
            return;
        }
        while let Some(token) = self.token {
            if self.locks.is_held() {
                break;
            }
            // Serve the batch that was waiting when the token came; after
            // it, hand the token on if someone is queued, else keep serving.
            let batch_only = self.locks.batch_remaining() > 0 || self.next.is_some();
            let Some(counter) = token.counter.checked_add(1) else {
                // A counter never wraps: this token is spent. Drop it; the
                // queue searches and regenerates a new epoch.
                self.drop_token(now, "the token's grant counter is exhausted");
                break;
            };
            let fence = lockservice::fence(token.epoch, counter);
            let may_grant = self.locks.batch_remaining() > 0 || (self.next.is_none() && self.locks.has_waiters());
            if may_grant {
                // (safety) Grants only under a live lease: without one,
                // keep the token for the waiters here until a renewal is
                // acked (`renew_lease` below sends it at once).
                let Some(lease_until) = self.lease_until(now) else { break };
                // Fences granted here only grow.
                ftcore::invariant!(
                    self.cfg.rules,
                    fence > self.grants.last_fence,
                    "{}: fence {fence:#x} not above {:#x} granted before",
                    self.me,
                    self.grants.last_fence
                );
                if self.locks.grant_next(now, fence, lease_until, batch_only, &mut self.out).is_some() {
                    self.token = Some(Token { counter, ..token });
                    self.grants.granted(fence);
                    self.out.event(NtEvent::Entered { fence });
                    continue;
                }
            }
            if let Some((n, _)) = self.next {
                if self.detect.suspected.contains(&n) && self.cfg.rules.on(NtRule::NoTokenToSuspectedNext) {
                    // (safety) Never send the token to a suspected next:
                    // keep it; its successors reconnect by M1/M2.
                    self.next = None;
                    continue;
                }
                self.pass_token(n);
            } else if self.leave.leaving() {
                self.leave_with_token(now);
            }
            break;
        }
        self.leave.settle(self.token.is_some());
        // A fresh node that has not recovered stays out of the queue: it
        // could accept no token (foundation.md, Fresh nodes).
        if self.token.is_none()
            && (self.locks.has_waiters() || self.bootstrap_search)
            && self.request.is_none()
            && self.recovery == Recovery::Idle
            && !self.leave.leaving()
            && (self.promise.stored().recovered() || self.cfg.rules.off(NtRule::UnrecoveredTakesNoToken))
        {
            self.make_request(now);
        }
        self.renew_lease(now);
    }

    pub(super) fn pass_token(&mut self, to: NodeId) {
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

    pub(super) fn make_request(&mut self, now: Instant) {
        self.seq += 1;
        self.request = Some(self.seq);
        match self.last {
            Last::Parent(p) if !self.detect.suspected.contains(&p) => {
                self.send(p, Body::Request { requester: self.me, seq: self.seq, hops: 0 });
                self.last = Last::Root;
                self.timers.set(Timer::CommitWait, now + self.commit_timeout());
            }
            // A root without the token, a suspected parent, or a new life:
            // nobody to ask along the tree.
            _ => self.start_m3(now),
        }
    }

    pub(super) fn commit_timeout(&self) -> Duration {
        self.cfg.commit_timeout(self.members.len())
    }

    pub(super) fn on_request(&mut self, now: Instant, requester: NodeId, seq: u64, hops: u32) {
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
                // A new cluster's root that has not got its first token yet
                // (still recovering, or regenerating) queues requests as a
                // requesting root does.
                if self.in_queue() || self.bootstrap_search {
                    self.link(now, requester, seq, Body::Request { requester, seq, hops: hops + 1 });
                } else {
                    // A root that neither holds nor waits: the tree is
                    // broken here.
                    self.send(requester, Body::DeadEnd { seq });
                }
            }
            Last::Parent(p) => {
                if self.detect.suspected.contains(&p) && self.cfg.rules.on(NtRule::NoForwardToSuspectedLast) {
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
    pub(super) fn link(&mut self, now: Instant, who: NodeId, seq: u64, forward: Body) {
        if self.is_requesting()
            && self.monitored.is_some_and(|(m, _)| m == who)
            && self.cfg.rules.on(NtRule::CycleChecks)
        {
            // `who` is our closest predecessor (our own request waits behind
            // it): linking it behind us would close a cycle. (Older preds
            // may legitimately come back behind us: they left the queue.) This
            // happens when a search answer went stale before the Connection
            // arrived. Tell it to search again.
            self.send(who, Body::DeadEnd { seq });
            self.serve_and_route(now);
            return;
        }
        match self.next {
            Some((n, _)) if n == who => {
                self.next = Some((who, seq));
                if self.position.is_some() || self.cfg.rules.on(NtRule::ProvisionalCommit) {
                    let c = self.commit_for(seq, None);
                    self.send(who, c);
                }
            }
            Some((n, _))
                if !self.detect.suspected.contains(&n) && self.cfg.rules.on(NtRule::LinkKeepsLiveSuccessor) =>
            {
                self.send(n, forward)
            }
            _ => {
                self.last = Last::Parent(who);
                if self.token_idle() && self.request.is_none() {
                    self.next = None;
                    self.pass_token(who);
                } else {
                    self.next = Some((who, seq));
                    // (safety) Without a position this is the provisional
                    // Commit.
                    if self.position.is_some() || self.cfg.rules.on(NtRule::ProvisionalCommit) {
                        let c = self.commit_for(seq, None);
                        self.send(who, c);
                    }
                }
            }
        }
        self.serve_and_route(now);
    }

    pub(super) fn on_token(&mut self, now: Instant, from: NodeId, epoch: u64, counter: u64, pos: u64) {
        // A token that this site's promises or recovery forbid is dead:
        // below the threshold (which covers the newest epoch in use, and
        // `on_in_use` refuses it too), at or below what a fresh node
        // recovered, or at an unrecovered node.
        let forbidden = match self.promise.check_token(epoch) {
            Err(promise::Refusal::Unrecovered) => self.cfg.rules.on(NtRule::UnrecoveredTakesNoToken),
            // (safety) A recovered fresh node cannot know which counts its
            // previous life granted: no token at or below `recovered_max`.
            Err(promise::Refusal::Stale { .. }) => self.cfg.rules.on(NtRule::NoTokenAtRecoveredMax),
            r => r.is_err(),
        };
        let accepted = if forbidden { None } else { self.promise.on_in_use(epoch, now).ok() };
        // (safety) A token below `max_epoch` (the threshold covers it) is
        // discarded.
        ftcore::mutant! {
            // The mutation: a token below the threshold is installed.
            let accepted = match accepted {
                None if self.cfg.rules.off(NtRule::StaleTokenDiscarded)
                    && matches!(self.promise.check_token(epoch), Err(promise::Refusal::Promised { .. })) =>
                {
                    Some(promise::InUse { raised: false, abandoned_own: None })
                }
                a => a,
            };
        }
        let Some(in_use) = accepted else {
            self.out.event(NtEvent::StaleToken { epoch });
            // The token meant for us is dead: nobody before us holds one.
            // With a position we are the head of the queue (M2 finds no
            // smaller position and regenerates); without one, M3 finds the
            // queue that formed around the regenerator.
            if self.is_requesting() && self.recovery == Recovery::Idle {
                self.search_again(now);
            }
            return;
        };
        // The epoch is stored as in use before the token grants anything.
        self.persist_epoch();
        if in_use.raised {
            self.out.event(NtEvent::Epoch(epoch));
        }
        if self.token.is_some() && self.cfg.rules.on(NtRule::SecondTokenRefused) {
            // Cannot happen while the invariants hold; keep the one we have.
            tracing::error!(%from, epoch, "second token received; discarded");
            return;
        }
        self.install_token(now, Token { epoch, counter }, pos);
    }

    /// The token is here (received, or regenerated at position 0): leave
    /// the waiting state, tell the chain behind us our new position, and
    /// serve the local clients queued at this moment.
    pub(super) fn install_token(&mut self, now: Instant, token: Token, position: u64) {
        // At most one token here; it comes only to a recovered node, and
        // its epoch is stored as the epoch in use before it grants.
        ftcore::invariant!(
            self.cfg.rules,
            self.token.is_none(),
            "{}: a token installed over {:?}",
            self.me,
            self.token
        );
        ftcore::invariant!(
            self.cfg.rules,
            self.promise.stored().recovered(),
            "{}: a token at an unrecovered node",
            self.me
        );
        ftcore::invariant!(
            self.cfg.rules,
            token.epoch == self.max_epoch() && !self.promise.is_dirty(),
            "{}: token of epoch {:#x} installed with the stored epoch in use {:#x} (written: {})",
            self.me,
            token.epoch,
            self.max_epoch(),
            !self.promise.is_dirty()
        );
        self.token = Some(token);
        let moved = self.position != Some(position);
        self.position = Some(position);
        self.preds.clear();
        self.monitored = None;
        self.request = None;
        self.timers.cancel(Timer::AliveCheck);
        self.timers.cancel(Timer::CommitWait);
        self.timers.cancel(Timer::Provisional);
        self.out.event(NtEvent::HasToken(true));
        self.timers.set(Timer::HolderCheck, now + self.cfg.suspect_after);
        self.recovery_done(now);
        self.bootstrap_search = false;
        if let Some((n, seq)) = self.next.filter(|_| moved && self.cfg.rules.on(NtRule::CommitCascade)) {
            // A new position cascades down the chain. An unchanged one
            // does not: the chain behind already has it (under load every
            // token arrival would otherwise resend a Commit down the whole
            // queue); its `preds` stay longer than needed, which M1 judges
            // by position.
            let c = self.commit_for(seq, None);
            self.send(n, c);
        }
        self.locks.token_arrived(now);
        self.serve_and_route(now);
    }

    /// A COMMIT (`commit` is the message body).
    pub(super) fn on_commit(&mut self, now: Instant, from: NodeId, from_inc: Incarnation, commit: Body) {
        let Body::Commit { pos, preds, seq, origin } = commit else { return };
        if self.request != Some(seq) || self.token.is_some() {
            self.send(from, Body::Unlink { seq });
            return;
        }
        let cycle = self.next.is_some_and(|(n, _)| n == from) || origin == (self.me, seq);
        if cycle && self.cfg.rules.on(NtRule::CycleChecks) {
            // Queued behind our own successor, or our own cascade came back (a Connection and a request
            // crossed): a cycle. Refuse it — the sender clears its next —
            // and search again.
            self.send(from, Body::Unlink { seq });
            if self.recovery == Recovery::Idle {
                self.search_again(now);
            }
            return;
        }
        // A provisional Commit always cascades: its origin is how a cycle
        // of waiting sites finds itself.
        let moved = self.position != pos || pos.is_none();
        self.position = pos;
        self.preds = preds.into_iter().filter(|p| *p != self.me).take(self.cfg.k).collect();
        if self.preds.is_empty() {
            self.preds.push(from);
        }
        let closest = self.preds[0];
        let inc =
            if closest == from { from_inc } else { self.detect.peer_inc.get(&closest).copied().unwrap_or_default() };
        self.monitored = Some((closest, inc));
        self.last_alive_ok = now;
        self.timers.cancel(Timer::CommitWait);
        self.timers.set(Timer::AliveCheck, now + self.cfg.heartbeat);
        if self.position.is_some() {
            self.timers.cancel(Timer::Provisional);
        } else if !self.timers.is_armed(Timer::Provisional) && self.cfg.rules.on(NtRule::ProvisionalTimer) {
            // A provisional chain gets positions once its head is committed
            // (≤ (N + 1) t_msg) and the cascade runs down it (≤ N t_msg). A
            // site still without a position after that is in a detached
            // portion — possibly a cycle of waiting sites: search (M3). A
            // head that is regenerating may first sit out its restart
            // window and a random delay (≤ 2 W) and the promise round (≤ W).
            self.timers.set(Timer::Provisional, now + self.commit_timeout() * 2 + self.cfg.lease * 3);
        }
        // A Commit before the window closes cancels this site's M3.
        self.recovery_done(now);
        if let Some((n, nseq)) = self.next.filter(|_| moved && self.cfg.rules.on(NtRule::CommitCascade)) {
            // (safety) A gained or changed position cascades down the
            // chain (an unchanged one is already there).
            let c = self.commit_for(nseq, Some(origin));
            self.send(n, c);
        }
        self.serve_and_route(now);
    }

    /// A `Connection` (M1/M2/M3.a(ii): link the requester behind the queue
    /// member it chose) or a `DirectRequest` (M3.a(i), a holder's Nack: a
    /// request that ignores `last`); both follow the linking rule.
    pub(super) fn on_link_request(&mut self, now: Instant, requester: NodeId, seq: u64, hops: u32, kind: LinkKind) {
        if requester == self.me {
            return;
        }
        if let (Some((n, _)), LinkKind::Connection { failed }) = (self.next, &kind) {
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
            let fwd = match kind {
                LinkKind::Direct => Body::DirectRequest { requester, seq, hops: hops + 1 },
                LinkKind::Connection { failed } => Body::Connection { requester, seq, hops: hops + 1, failed },
            };
            self.link(now, requester, seq, fwd);
        } else if kind == LinkKind::Direct {
            // Not queued here: nobody would ever hand the token on. Treat
            // it as an ordinary request.
            self.on_request(now, requester, seq, hops);
        } else {
            self.send(requester, Body::DeadEnd { seq });
        }
    }
}

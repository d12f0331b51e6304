//! Regeneration of a lost token in two phases, and epochs (ntmutexd.md,
//! "Regeneration never creates a second token").

use super::*;

impl NtNode {
    pub(super) fn slot(&self, id: NodeId) -> u32 {
        self.members.iter().position(|m| *m == id).unwrap_or(0) as u32
    }

    pub(super) fn set_epoch(&mut self, epoch: u32) {
        if epoch > self.max_epoch {
            self.max_epoch = epoch;
            self.out.event(NtEvent::Epoch(epoch));
        }
    }

    /// The next epoch this site may propose: a new round, in this site's
    /// slot. The round also never falls below wall-clock minutes since
    /// 2023-11-14 (incarnations are start times in ms), so a cluster that
    /// restarts cold still issues larger fences than before.
    pub(super) fn next_proposal(&self, now: Instant) -> u32 {
        let wall_ms = self.inc.0.saturating_add(now.as_micros() / 1000);
        let wall_round = ((wall_ms / 1000).saturating_sub(1_700_000_000) / 60) as u32;
        let round = (self.max_epoch >> SLOT_BITS).saturating_add(1).max(wall_round);
        (round << SLOT_BITS) | self.slot(self.me)
    }

    pub(super) fn start_regeneration(&mut self, now: Instant, mech: Mech, started: Instant) {
        let proposal = self.next_proposal(now);
        // (safety) Phase one goes to everyone, suspected sites included.
        self.broadcast(Body::Regenerate { proposal });
        let waiting = self.live_others();
        self.recovery = Recovery::Regen { mech, started, proposal, waiting, acked: 0 };
        self.timers.set(Timer::Window, now + self.cfg.t_msg * 2);
        self.maybe_finish_regeneration(now);
    }

    /// (+) A token is regenerated only with the acks of every live site
    /// *and* of a majority of the configured sites (this one included):
    /// majorities intersect, so regenerated epochs increase in the order
    /// regenerations complete, and a site cut off from the majority (a
    /// falsely suspected minority) never creates a second token.
    pub(super) fn maybe_finish_regeneration(&mut self, now: Instant) {
        let Recovery::Regen { proposal, waiting, acked, .. } = &self.recovery else { return };
        if !waiting.is_empty() {
            return;
        }
        if *acked < self.members.len() / 2 {
            // No majority: give up for now and search again later.
            self.recovery = Recovery::Idle;
            self.timers.cancel(Timer::Window);
            self.timers.set(Timer::CommitWait, now + self.commit_timeout());
            return;
        }
        let epoch = *proposal;
        self.set_epoch(epoch);
        self.last = Last::Root;
        self.out.event(NtEvent::Regenerated { epoch });
        self.install_token(now, Token { epoch, counter: 0 }, 0);
    }

    pub(super) fn on_regenerate(&mut self, now: Instant, from: NodeId, proposal: u32) {
        if self.token.is_some() {
            // (safety) A token exists: abort that regeneration.
            self.send(from, Body::RegenerateNack { proposal, has_token: true });
            return;
        }
        let own = match &self.recovery {
            Recovery::Regen { proposal: own, .. } => Some(*own),
            _ => None,
        };
        // Equal to max_epoch and in the proposer's slot: the same proposal,
        // already adopted from another site's message.
        let same = proposal == self.max_epoch && proposal & ((1 << SLOT_BITS) - 1) == self.slot(from);
        if (proposal > self.max_epoch || same) && own.is_none_or(|o| proposal > o) {
            self.set_epoch(proposal);
            if own.is_some() {
                // A higher concurrent proposal wins; wait for its token.
                self.recovery = Recovery::Idle;
                self.timers.cancel(Timer::Window);
                self.timers.set(Timer::CommitWait, now + self.commit_timeout());
            }
            self.send(from, Body::RegenerateAck { proposal });
        } else {
            self.send(from, Body::RegenerateNack { proposal, has_token: false });
        }
    }

    pub(super) fn on_regenerate_reply(
        &mut self,
        now: Instant,
        from: NodeId,
        proposal: u32,
        ack: bool,
        has_token: bool,
    ) {
        let Recovery::Regen { mech, started, proposal: own, waiting, acked } = &mut self.recovery else { return };
        if *own != proposal {
            return;
        }
        if ack {
            if waiting.remove(&from) {
                *acked += 1;
            }
            self.maybe_finish_regeneration(now);
            return;
        }
        let (mech, started) = (*mech, *started);
        self.timers.cancel(Timer::Window);
        let seq = self.request.unwrap_or(self.seq);
        if has_token {
            // Any Nack aborts; a token holder gets a direct request.
            self.send(from, Body::DirectRequest { requester: self.me, seq, hops: 0 });
            self.start_linking(now, mech, started);
        } else {
            // A newer epoch exists: wait, then search again.
            self.recovery = Recovery::Idle;
            self.timers.set(Timer::CommitWait, now + self.commit_timeout());
        }
    }

    /// Every message carries the sender's epoch: a token older than the
    /// newest known epoch is dead, here too.
    pub(super) fn observe_epoch(&mut self, now: Instant, epoch: u32) {
        if epoch <= self.max_epoch {
            return;
        }
        if let Recovery::Regen { proposal, .. } = self.recovery {
            if epoch > proposal {
                self.recovery = Recovery::Idle;
                self.timers.cancel(Timer::Window);
                self.timers.set(Timer::CommitWait, now + self.commit_timeout());
            } else if epoch == proposal {
                // Our own proposal, echoed by a site that accepted it.
                self.set_epoch(epoch);
                return;
            }
        }
        self.set_epoch(epoch);
        if let Some(t) = self.token {
            if t.epoch < epoch {
                // False suspicion: the cluster regenerated without us.
                self.token = None;
                self.position = None;
                self.preds.clear();
                self.next = None;
                self.out.event(NtEvent::TokenSuperseded { epoch: t.epoch });
                self.out.event(NtEvent::HasToken(false));
                self.locks.lose(now, "the token was regenerated elsewhere (this node was suspected)", &mut self.out);
            }
        }
    }
}

//! Graceful leave (SIGTERM): the holder hands the token on; a waiting
//! site hands its place to its next (ntmutexd.md, "What the daemon adds").

use ftcore::NodeId;
use timer::Instant;

use super::NtNode;
use crate::msg::Body;

/// Whether this site is leaving, and whether it has left (nothing more to
/// hand on).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Leave {
    leaving: bool,
    left: bool,
}

impl Leave {
    /// Whether SIGTERM came.
    pub(super) fn leaving(&self) -> bool {
        self.leaving
    }

    /// Whether this site has handed on everything it had to.
    pub(super) fn left(&self) -> bool {
        self.left
    }

    /// A leaving site has left once it holds no token.
    pub(super) fn settle(&mut self, holding: bool) {
        if self.leaving && !holding {
            self.left = true;
        }
    }
}

impl NtNode {
    pub(super) fn on_skip(&mut self, from: NodeId, next: Option<(NodeId, u64)>) {
        if self.next.map(|(n, _)| n) == Some(from) {
            self.next = next;
            if let Some((n, seq)) = next {
                let c = self.commit_for(seq, None);
                self.send(n, c);
            }
        }
    }

    pub(super) fn leave_with_token(&mut self, _now: Instant) {
        // The holder leaves: pass to next (done by serve_and_route), or to the lowest
        // live id, which becomes everyone's root.
        let target = self.others().into_iter().filter(|m| !self.detect.suspected.contains(m)).min();
        if let Some(t) = target {
            self.pass_token(t);
            self.broadcast(Body::NewRoot { root: t });
        }
        self.leave.left = true;
    }

    /// SIGTERM: local waiters are refused; a waiting site hands its place
    /// to its next (`Skip` to its predecessor); a holder hands the token on
    /// once its client is done.
    pub(super) fn begin_leave(&mut self, now: Instant) {
        self.leave.leaving = true;
        self.locks.shutdown(now, &mut self.out);
        if self.token.is_none() {
            if self.is_requesting() {
                // A waiting site hands its place to its next.
                if let Some(&p) = self.preds.first() {
                    let next = self.next;
                    self.send(p, Body::Skip { next });
                }
            }
            self.leave.left = true;
        }
        self.serve_and_route(now);
    }
}

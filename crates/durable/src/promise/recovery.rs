//! Fresh-node recovery: counting `HelloAck` answers (foundation.md, Fresh nodes).

use std::collections::BTreeMap;

use membership::NodeId;

use super::Values;

/// Nonces remembered per life; a round older than this many is forgotten
/// (its late answers no longer count, the next round asks again).
const MAX_NONCES: usize = 16;

/// What a recovery round asks of the core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RoundStep {
    /// The node is recovered (or loaded a recovered file).
    NotNeeded,
    /// The restart window has not ended; no round counts before then.
    Wait {
        /// When it ends.
        until: timer::Instant,
    },
    /// Send `Hello { nonce }` to every peer.
    Send,
    /// Recovered now (N = 1, or answers already suffice): persist.
    Recovered {
        /// The stored `recovered_max`.
        max: u64,
    },
}

/// What a `HelloAck` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AckStep {
    /// Not counted (recovered already, unknown nonce, absurd values).
    Ignored,
    /// Counted; not enough yet.
    Pending,
    /// Recovered: persist before promising, granting or voting.
    Recovered {
        /// The stored `recovered_max`.
        max: u64,
    },
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Recovery {
    /// Nonces sent after the restart window, oldest first.
    nonces: Vec<u64>,
    /// Each peer's latest counted answer.
    answers: BTreeMap<NodeId, Option<Values>>,
}

impl Recovery {
    pub(super) fn add_nonce(&mut self, nonce: u64) {
        if !self.nonces.contains(&nonce) {
            if self.nonces.len() == MAX_NONCES {
                self.nonces.remove(0);
            }
            self.nonces.push(nonce);
        }
    }

    /// Records an answer; false if its nonce is not a post-window one.
    pub(super) fn record(&mut self, from: NodeId, nonce: u64, values: Option<Values>) -> bool {
        if !self.nonces.contains(&nonce) {
            return false;
        }
        self.answers.insert(from, values);
        true
    }

    /// Whether any counted answer has a value above zero (NC3).
    pub(super) fn any_value(&self) -> bool {
        self.answers.values().flatten().any(|v| v.max() > 0)
    }

    /// NC2: `Some((max of all values, max in use))` once `needed` others
    /// have answered. The caller has checked [`Recovery::any_value`] first
    /// (with the guard on, every counted answer is then `none` or zeros).
    pub(super) fn decide_new_cluster(&self, needed: usize) -> Option<(u64, u64)> {
        (self.answers.len() >= needed).then(|| self.maxima())
    }

    fn maxima(&self) -> (u64, u64) {
        let vals = self.answers.values().flatten();
        let max = vals.clone().map(Values::max).max().unwrap_or(0);
        let in_use = vals.map(|v| v.in_use).max().unwrap_or(0);
        (max, in_use)
    }

    /// `Some((max of all values, max in use))` once the answers suffice:
    /// ⌊(N−1)/2⌋+1 others with values, or all N−1 others, or (new cluster)
    /// ⌊N/2⌋ others with nothing in use.
    pub(super) fn decide(&self, others: usize, new_cluster: bool) -> Option<(u64, u64)> {
        let with_values = self.answers.values().filter(|v| v.is_some()).count();
        let any_in_use = self.answers.values().flatten().any(|v| v.in_use > 0);
        let n = others + 1;
        let enough = with_values > others / 2
            || self.answers.len() >= others
            || (new_cluster && !any_in_use && self.answers.len() >= n / 2);
        enough.then(|| self.maxima())
    }
}

//! What a site shows: `ftctl status` (role, queue view, peers) and read
//! access for tests and invariant checkers.

use ftcore::{ClientId, NodeId, PeerView, StatusReport};

use super::state::{Last, Phase, Recovery};
use super::NtNode;

impl NtNode {
    /// How this site sees `peer`.
    pub(super) fn peer_view_of(&self, peer: NodeId) -> PeerView {
        self.detect.peer_view(peer)
    }

    /// Queue position (-1: not queued) and local clients waiting.
    pub(super) fn gauge_values(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("queue_position", self.position.map_or(-1.0, |p| p as f64)),
            ("local_waiting", self.locks.waiting() as f64),
        ]
    }

    /// The `ftctl status` report.
    pub(super) fn status_report(&self) -> StatusReport {
        let role = match (&self.join.phase, self.token, self.request, &self.recovery) {
            (Phase::Joining { .. }, ..) => "joining".to_string(),
            (_, Some(_), ..) if self.locks.is_held() => "holder (granted)".to_string(),
            (_, Some(_), ..) => "holder (idle)".to_string(),
            (_, None, Some(_), Recovery::Idle) => "waiting".to_string(),
            (_, None, Some(_), r) => format!("recovering ({})", r.label()),
            _ => "idle".to_string(),
        };
        let show = |x: Option<NodeId>| x.map_or("none".to_string(), |n| n.0.to_string());
        let last = match self.last {
            Last::Root => "root".to_string(),
            Last::Parent(p) => p.0.to_string(),
            Last::Unknown => "unknown".to_string(),
        };
        StatusReport {
            daemon: "ntmutexd".into(),
            node: self.me,
            incarnation: self.inc,
            role,
            peers: Vec::new(),
            details: vec![
                ("has_token".into(), self.token.is_some().to_string()),
                ("last".into(), last),
                ("next".into(), show(self.next.map(|(n, _)| n))),
                ("position".into(), self.position.map_or("none".to_string(), |p| p.to_string())),
                ("epoch".into(), self.max_epoch().to_string()),
                ("fence".into(), self.grants.last_fence.to_string()),
                ("accesses".into(), self.grants.accesses.to_string()),
                ("local_waiting".into(), self.locks.waiting().to_string()),
                // false: a fresh node (nothing stored) still asking its
                // peers what they promised; it takes no part in a majority.
                ("recovered".into(), self.promise.stored().recovered().to_string()),
            ],
        }
    }
}

/// Read access for tests and invariant checkers.
impl NtNode {
    /// Whether this site holds a token.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// The epoch of the token held here.
    pub fn token_epoch(&self) -> Option<u64> {
        self.token.map(|t| t.epoch)
    }

    /// The local client holding the lock, with its fence.
    pub fn holder(&self) -> Option<(ClientId, u128)> {
        self.locks.holder()
    }

    /// This site's position in the next queue.
    pub fn position(&self) -> Option<u64> {
        self.position
    }

    /// This site's `next`.
    pub fn next(&self) -> Option<NodeId> {
        self.next.map(|(n, _)| n)
    }

    /// Whether the start-up handshake is over.
    pub fn is_running(&self) -> bool {
        self.join.is_running()
    }

    /// Whether a recovery is in progress.
    pub fn is_recovering(&self) -> bool {
        self.recovery != Recovery::Idle
    }

    /// What this site has stored (its promises).
    pub fn stored(&self) -> &::durable::promise::Promises {
        self.promise.stored()
    }
}

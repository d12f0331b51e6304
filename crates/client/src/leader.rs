//! Who leads, as one daemon sees it, and a watch on it (`ftctl leader`).
//!
//! A daemon that elects a leader (electd) reports `term` and `coordinator`
//! among its status details, and `role = "coordinator"` once it has taken
//! office. [`Leadership`] reads those; [`LeaderWatch`] asks every `every`
//! and returns when the answer changes.
//!
//! Leadership seen this way is advisory: it can be stale by up to `every`
//! plus the daemon's own detection time. A program that must never act
//! beside another should hold the lock (`ftctl lock`) and hand its fence to
//! what it protects; a program that should merely prefer to act on the
//! leader's host (a cron job, a report) watches leadership.

use std::net::SocketAddr;
use std::time::Duration;

pub use api::leader::Never;
use ftcore::{Message, NodeId, StatusReport};

use crate::{Client, ClientError};

/// Who leads, as the daemon at one address sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    /// The daemon that answered.
    pub node: NodeId,
    /// Its current term.
    pub term: u64,
    /// The coordinator it knows of in that term, if any.
    pub coordinator: Option<NodeId>,
    /// Its role (`electing`, `consumer`, `coordinator`, …).
    pub role: String,
}

impl Leadership {
    /// Reads a status report; `Unexpected` if the daemon elects no leader
    /// (its status has no `term` and `coordinator`).
    pub fn from_status(s: &StatusReport) -> Result<Leadership, ClientError> {
        let detail = |key: &str| s.details.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let unexpected =
            |what: &str| ClientError::Unexpected(format!("{} reports no {what}: it elects no leader", s.daemon));
        let term = detail("term").ok_or_else(|| unexpected("term"))?;
        let term = term.parse().map_err(|_| ClientError::Unexpected(format!("term `{term}` is not a number")))?;
        let coordinator = match detail("coordinator").ok_or_else(|| unexpected("coordinator"))? {
            "none" => None,
            id => Some(NodeId(
                id.parse().map_err(|_| ClientError::Unexpected(format!("coordinator `{id}` is not a node id")))?,
            )),
        };
        Ok(Leadership { node: s.node, term, coordinator, role: s.role.clone() })
    }

    /// Whether the answering daemon is the coordinator and has taken office
    /// (it holds a quorum lease and may grant).
    pub fn leads(&self) -> bool {
        self.coordinator == Some(self.node) && self.role == "coordinator"
    }
}

impl<R: Message, P: Message> Client<R, P> {
    /// Who leads, as this daemon sees it.
    pub async fn leadership(&mut self) -> Result<Leadership, ClientError> {
        Leadership::from_status(&self.status().await?)
    }
}

/// Watches one daemon's view of the leadership: [`changed`](Self::changed)
/// returns the first view, then each different one.
///
/// ```no_run
/// # async fn demo() -> Result<(), client::ClientError> {
/// use std::time::Duration;
/// use client::leader::LeaderWatch;
///
/// let addr = "127.0.0.1:7201".parse().unwrap();
/// let mut watch = LeaderWatch::connect(addr, Duration::from_millis(100)).await?;
/// loop {
///     // An error (the daemon went away) means: assume you do not lead.
///     let now = watch.changed().await?;
///     println!("term {}: {}", now.term, if now.leads() { "leading" } else { "not leading" });
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct LeaderWatch<R: Message = Never, P: Message = Never> {
    client: Client<R, P>,
    every: Duration,
    last: Option<Leadership>,
}

impl LeaderWatch {
    /// Connects to the daemon at `addr` (its `client_listen`), to ask every
    /// `every` (at least 1 ms).
    pub async fn connect(addr: SocketAddr, every: Duration) -> Result<LeaderWatch, ClientError> {
        Ok(LeaderWatch::over(Client::connect(addr).await?, every))
    }
}

impl<R: Message, P: Message> LeaderWatch<R, P> {
    /// Watches over an open connection.
    pub fn over(client: Client<R, P>, every: Duration) -> Self {
        LeaderWatch { client, every: every.max(Duration::from_millis(1)), last: None }
    }

    /// The first view, then the next one that differs from the last
    /// returned. Each status request must be answered within 5 s; an
    /// error (the daemon closed the connection or did not answer) ends the
    /// watch: the caller should assume it does not lead.
    pub async fn changed(&mut self) -> Result<Leadership, ClientError> {
        const ANSWER: Duration = Duration::from_secs(5);
        loop {
            if self.last.is_some() {
                tokio::time::sleep(self.every).await;
            }
            let now = tokio::time::timeout(ANSWER, self.client.leadership())
                .await
                .map_err(|_| ClientError::Timeout(ANSWER))??;
            if self.last.as_ref() != Some(&now) {
                self.last = Some(now.clone());
                return Ok(now);
            }
        }
    }

    /// The view last returned by [`changed`](Self::changed).
    pub fn last(&self) -> Option<&Leadership> {
        self.last.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftcore::Incarnation;

    fn report(role: &str, details: &[(&str, &str)]) -> StatusReport {
        StatusReport {
            daemon: "electd".into(),
            node: NodeId(3),
            incarnation: Incarnation(1),
            role: role.into(),
            peers: vec![],
            details: details.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    #[test]
    fn reads_term_coordinator_and_role() {
        let l = Leadership::from_status(&report("consumer", &[("term", "12"), ("coordinator", "5")])).unwrap();
        assert_eq!(l, Leadership { node: NodeId(3), term: 12, coordinator: Some(NodeId(5)), role: "consumer".into() });
        assert!(!l.leads());
        let l = Leadership::from_status(&report("electing", &[("coordinator", "none"), ("term", "0")])).unwrap();
        assert_eq!((l.term, l.coordinator), (0, None));
    }

    #[test]
    fn leads_only_in_office() {
        let me = [("term", "4"), ("coordinator", "3")];
        assert!(Leadership::from_status(&report("coordinator", &me)).unwrap().leads());
        assert!(!Leadership::from_status(&report("coordinator (taking office)", &me)).unwrap().leads());
    }

    #[test]
    fn a_daemon_without_elections_is_an_error() {
        let e = Leadership::from_status(&report("member", &[("successor", "2")])).unwrap_err();
        assert_eq!(e.to_string(), "unexpected reply: electd reports no term: it elects no leader");
        let e = Leadership::from_status(&report("x", &[("term", "x"), ("coordinator", "1")])).unwrap_err();
        assert_eq!(e.to_string(), "unexpected reply: term `x` is not a number");
        let e = Leadership::from_status(&report("x", &[("term", "1"), ("coordinator", "-1")])).unwrap_err();
        assert_eq!(e.to_string(), "unexpected reply: coordinator `-1` is not a node id");
    }
}

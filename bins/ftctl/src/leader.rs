//! `ftctl leader`: which node leads, as the daemon at `--addr` sees it
//! (electd), once or on every change (`--watch`).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use client::leader::{LeaderWatch, Leadership};

use crate::{daemon, exit};

/// Prints the daemon's view of the leadership: once (exit 0 if a
/// coordinator is known, [`exit::NO_LEADER`] if not), or with `watch` a
/// line per change until the daemon goes away.
pub async fn run(addr: &str, json: bool, watch: bool, every: Duration) -> Result<u8> {
    let client = daemon::connect(addr).await?;
    let mut w = LeaderWatch::over(client, every);
    let started = Instant::now();
    loop {
        let now = w.changed().await.with_context(|| format!("leadership from {addr}"))?;
        let line = if json { to_json(&now) } else { render(&now) };
        if !watch {
            println!("{line}");
            return Ok(if now.coordinator.is_some() { exit::OK } else { exit::NO_LEADER });
        }
        if json {
            println!("{line}");
        } else {
            println!("+{:.3}s {line}", started.elapsed().as_secs_f64());
        }
    }
}

/// `coordinator 5 term 12 (node 3: consumer)`, or `no coordinator term 12 (node 3: electing)`.
pub fn render(l: &Leadership) -> String {
    let who = l.coordinator.map_or("no coordinator".to_string(), |c| format!("coordinator {}", c.0));
    format!("{who} term {} (node {}: {})", l.term, l.node.0, l.role)
}

/// `{"node":3,"term":12,"coordinator":5,"role":"consumer","leads":false}` (`coordinator` null if none).
pub fn to_json(l: &Leadership) -> String {
    let mut out = String::new();
    let coordinator = l.coordinator.map_or("null".to_string(), |c| c.0.to_string());
    let _ = write!(out, "{{\"node\":{},\"term\":{},\"coordinator\":{coordinator},\"role\":", l.node.0, l.term);
    crate::status::push_str(&mut out, &l.role);
    let _ = write!(out, ",\"leads\":{}}}", l.leads());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftcore::NodeId;

    #[test]
    fn text_and_json_have_the_exact_shape() {
        let l = Leadership { node: NodeId(3), term: 12, coordinator: Some(NodeId(5)), role: "consumer".into() };
        assert_eq!(render(&l), "coordinator 5 term 12 (node 3: consumer)");
        assert_eq!(to_json(&l), r#"{"node":3,"term":12,"coordinator":5,"role":"consumer","leads":false}"#);
        let l = Leadership { coordinator: None, role: "electing".into(), ..l };
        assert_eq!(render(&l), "no coordinator term 12 (node 3: electing)");
        assert_eq!(to_json(&l), r#"{"node":3,"term":12,"coordinator":null,"role":"electing","leads":false}"#);
        let l = Leadership { coordinator: Some(NodeId(3)), role: "coordinator".into(), ..l };
        assert!(to_json(&l).ends_with(r#""leads":true}"#));
    }
}

//! `ftctl status`: any daemon's status, as text or JSON.
//!
//! The JSON is written by hand: it is one small fixed shape, not worth a
//! serialisation dependency.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use client::StatusReport;

use crate::daemon;

/// How long the daemon may take to answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks the daemon at `addr` for its status and prints it.
pub async fn run(addr: &str, json: bool) -> Result<()> {
    let mut c = daemon::connect(addr).await?;
    let report = tokio::time::timeout(ANSWER_TIMEOUT, c.status())
        .await
        .map_err(|_| anyhow!("{addr} sent no status within {ANSWER_TIMEOUT:?}"))?
        .with_context(|| format!("status from {addr}"))?;
    if json {
        println!("{}", to_json(&report));
    } else {
        print!("{}", client::render_status(&report));
    }
    Ok(())
}

/// `{"daemon":…,"node":…,"incarnation":…,"role":…,"peers":[{"id","addr","up","incarnation"}],"details":{…}}`.
///
/// The daemons report details as text; here each gets its JSON type (see
/// [`push_detail`]): numbers as numbers, `true`/`false` as booleans,
/// `none` as null, fences as decimal strings.
pub fn to_json(s: &StatusReport) -> String {
    let mut out = String::from("{\"daemon\":");
    push_str(&mut out, &s.daemon);
    let _ = write!(out, ",\"node\":{},\"incarnation\":{},\"role\":", s.node.0, s.incarnation.0);
    push_str(&mut out, &s.role);
    out.push_str(",\"peers\":[");
    for (i, p) in s.peers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{{\"id\":{},\"addr\":", p.id.0);
        push_str(&mut out, &p.addr);
        let _ = write!(out, ",\"up\":{},\"incarnation\":{}}}", p.up, p.incarnation.0);
    }
    out.push_str("],\"details\":{");
    for (i, (k, v)) in s.details.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_str(&mut out, k);
        out.push(':');
        push_detail(&mut out, k, v);
    }
    out.push_str("}}");
    out
}

/// Details whose values stay decimal strings in JSON: fences are 128-bit
/// (`FTCOORD_FENCE`, `ftctl exec --json`'s `fence`), beyond what many JSON
/// parsers hold exactly.
const STRING_DETAILS: &[&str] = &["fence"];

/// Appends a detail's value `v` with its JSON type: an unsigned decimal
/// (u64, written exactly) as a number, `true`/`false` as a boolean, `none`
/// (no such node yet) as null, anything else, and the [`STRING_DETAILS`],
/// as a string.
fn push_detail(out: &mut String, key: &str, v: &str) {
    if STRING_DETAILS.contains(&key) {
        return push_str(out, v);
    }
    let number = v.parse::<u64>().is_ok() && !(v.len() > 1 && v.starts_with('0'));
    match v {
        "true" | "false" => out.push_str(v),
        "none" => out.push_str("null"),
        _ if number => out.push_str(v),
        _ => push_str(out, v),
    }
}

/// Appends `s` as a JSON string literal.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftcore::{Incarnation, NodeId, PeerStatus};

    fn report() -> StatusReport {
        StatusReport {
            daemon: "hbringd".into(),
            node: NodeId(2),
            incarnation: Incarnation(77),
            role: "member".into(),
            peers: vec![
                PeerStatus { id: NodeId(1), addr: "127.0.0.1:1".into(), up: false, incarnation: Incarnation(5) },
                PeerStatus { id: NodeId(2), addr: "127.0.0.1:2".into(), up: true, incarnation: Incarnation(77) },
            ],
            details: vec![
                ("successor".into(), "3".into()),
                ("view".into(), "1 \"2\"".into()),
                ("has_token".into(), "false".into()),
                ("next".into(), "none".into()),
                ("epoch".into(), "18446744073709551615".into()),
                ("fence".into(), "340282366920938463463374607431768211455".into()),
            ],
        }
    }

    #[test]
    fn json_has_the_exact_shape() {
        assert_eq!(
            to_json(&report()),
            concat!(
                r#"{"daemon":"hbringd","node":2,"incarnation":77,"role":"member","#,
                r#""peers":[{"id":1,"addr":"127.0.0.1:1","up":false,"incarnation":5},"#,
                r#"{"id":2,"addr":"127.0.0.1:2","up":true,"incarnation":77}],"#,
                r#""details":{"successor":3,"view":"1 \"2\"","has_token":false,"next":null,"#,
                r#""epoch":18446744073709551615,"fence":"340282366920938463463374607431768211455"}}"#,
            )
        );
    }

    #[test]
    fn empty_lists_are_empty_json() {
        let s = StatusReport { peers: vec![], details: vec![], ..report() };
        assert!(to_json(&s).ends_with(r#""peers":[],"details":{}}"#), "{}", to_json(&s));
    }

    #[test]
    fn only_plain_decimals_become_numbers() {
        let detail = |k: &str, v: &str| {
            let mut out = String::new();
            push_detail(&mut out, k, v);
            out
        };
        assert_eq!(detail("load", "0"), "0");
        assert_eq!(detail("bypassed", "2,3"), r#""2,3""#);
        assert_eq!(detail("x", "007"), r#""007""#);
        assert_eq!(detail("x", "-1"), r#""-1""#);
        assert_eq!(detail("x", "1.5"), r#""1.5""#);
        assert_eq!(detail("x", "99999999999999999999999"), r#""99999999999999999999999""#);
        assert_eq!(detail("fence", "7"), r#""7""#);
    }

    #[test]
    fn strings_are_escaped() {
        let mut out = String::new();
        push_str(&mut out, "a\"b\\c\nd\te\u{1}f é");
        assert_eq!(out, r#""a\"b\\c\nd\te\u0001f é""#);
    }
}

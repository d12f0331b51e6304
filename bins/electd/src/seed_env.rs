//! The seed's environment variables (electd.md, Compatibility), accepted as
//! aliases of electd's own settings:
//!
//! | variable | sets |
//! |---|---|
//! | `ELECTION_ID` / `HOSTID` | `node_id` |
//! | `ELECTION_DEST_IPS` | `peers`, in ring order: `ID=IP` each, or a bare `IP` whose id is its 1-based position |
//! | `ELECTION_DEST_PORT` | the port of every peer address (this process listens on its own) |
//! | `SUCCESSOR_IP` | checked: it must be the IP after this process's in `ELECTION_DEST_IPS` |
//!
//! They form one layer above the config file and below the `ELECTD_*`
//! variables and the flags. As with any config, `listen` defaults to this
//! process's own peer address, and `client_listen` and `metrics_listen` to
//! its port + 100 and + 2000.

use std::net::{IpAddr, SocketAddr};

use runtime::config::{AliasLayer, ConfigError, PeerConfig};

const ID: &str = "ELECTION_ID";
const HOSTID: &str = "HOSTID";
const DEST_IPS: &str = "ELECTION_DEST_IPS";
const DEST_PORT: &str = "ELECTION_DEST_PORT";
const SUCCESSOR: &str = "SUCCESSOR_IP";

/// The layer the seed's variables make, read through `var`; `None` if none
/// of them is set.
pub fn layer(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<AliasLayer>, ConfigError> {
    let get = |name: &str| var(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let set: Vec<&str> =
        [ID, HOSTID, DEST_IPS, DEST_PORT, SUCCESSOR].into_iter().filter(|n| get(n).is_some()).collect();
    if set.is_empty() {
        return Ok(None);
    }
    let source = format!("seed variables {}", set.join(", "));
    let bad = |key: &str, name: &str, message: String| ConfigError {
        key: Some(key.to_string()),
        origin: Some(format!("environment variable {name}")),
        message,
    };

    let id_of = |name: &str| -> Result<Option<u32>, ConfigError> {
        get(name)
            .map(|v| {
                v.parse::<u32>()
                    .ok()
                    .filter(|id| *id > 0)
                    .ok_or_else(|| bad("node_id", name, format!("`{v}` is not a node id (a number from 1)")))
            })
            .transpose()
    };
    let node_id = match (id_of(ID)?, id_of(HOSTID)?) {
        (Some(a), Some(b)) if a != b => {
            return Err(bad("node_id", ID, format!("{ID}={a} and {HOSTID}={b} disagree: set one, or both alike")))
        }
        (a, b) => a.or(b),
    };

    let port = get(DEST_PORT)
        .map(|v| {
            v.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("listen", DEST_PORT, format!("`{v}` is not a port (1 to 65535)")))
        })
        .transpose()?;

    let members = match get(DEST_IPS) {
        None => None,
        Some(list) => Some(parse_members(&list).map_err(|m| bad("peers", DEST_IPS, m))?),
    };
    let peers = match (&members, port) {
        (Some(_), None) => {
            return Err(bad("peers", DEST_IPS, format!("needs {DEST_PORT}, the port every member listens on")))
        }
        (Some(m), Some(port)) => {
            Some(m.iter().map(|&(id, ip)| PeerConfig { id, addr: SocketAddr::new(ip, port) }).collect::<Vec<_>>())
        }
        (None, _) => None,
    };

    let own_at = match (&members, node_id) {
        (Some(m), Some(id)) => match m.iter().position(|(i, _)| *i == id) {
            Some(at) => Some(at),
            None => {
                return Err(bad(
                    "node_id",
                    if get(ID).is_some() { ID } else { HOSTID },
                    format!("{id} is not among the members of {DEST_IPS}"),
                ))
            }
        },
        _ => None,
    };
    if let Some(v) = get(SUCCESSOR) {
        let ip: IpAddr = v.parse().map_err(|_| bad("peers", SUCCESSOR, format!("`{v}` is not an IP address")))?;
        let (Some(m), Some(at)) = (&members, own_at) else {
            return Err(bad(
                "peers",
                SUCCESSOR,
                format!("needs {DEST_IPS} and {ID}: electd counts majorities over every member, not a successor alone"),
            ));
        };
        let expected = m[(at + 1) % m.len()].1;
        if ip != expected {
            return Err(bad(
                "peers",
                SUCCESSOR,
                format!("{ip} is not this process's successor in {DEST_IPS} ({expected} follows it in ring order)"),
            ));
        }
    }
    Ok(Some(AliasLayer { source, node_id, peers }))
}

/// `ID=IP` or `IP` (id = 1-based position), comma-separated, in ring order.
fn parse_members(list: &str) -> Result<Vec<(u32, IpAddr)>, String> {
    list.split(',')
        .map(str::trim)
        .enumerate()
        .map(|(i, item)| {
            let (id, ip) = match item.split_once('=') {
                Some((id, ip)) => {
                    let id = id.trim();
                    let id = id
                        .parse::<u32>()
                        .ok()
                        .filter(|id| *id > 0)
                        .ok_or_else(|| format!("member {}: `{id}` is not a node id (a number from 1)", i + 1))?;
                    (id, ip.trim())
                }
                None => (u32::try_from(i + 1).map_err(|_| "too many members".to_string())?, item),
            };
            let ip = ip.parse::<IpAddr>().map_err(|_| format!("member {}: `{ip}` is not an IP address", i + 1))?;
            Ok((id, ip))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with(vars: &[(&str, &str)]) -> Result<Option<AliasLayer>, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        layer(&|name| map.get(name).cloned())
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn no_seed_variable_no_layer() {
        assert_eq!(with(&[("ELECTD_NODE_ID", "3")]), Ok(None));
        assert_eq!(with(&[("HOSTID", "  ")]), Ok(None));
    }

    #[test]
    fn bare_ips_are_numbered_by_position_and_ring_order_is_kept() {
        let l = with(&[
            ("ELECTION_ID", "2"),
            ("ELECTION_DEST_IPS", "10.0.0.7, 10.0.0.5,10.0.0.9"),
            ("ELECTION_DEST_PORT", "5000"),
            ("SUCCESSOR_IP", "10.0.0.9"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(l.node_id, Some(2));
        assert_eq!(
            l.peers,
            Some(vec![
                PeerConfig { id: 1, addr: addr("10.0.0.7:5000") },
                PeerConfig { id: 2, addr: addr("10.0.0.5:5000") },
                PeerConfig { id: 3, addr: addr("10.0.0.9:5000") },
            ])
        );
        assert_eq!(l.source, "seed variables ELECTION_ID, ELECTION_DEST_IPS, ELECTION_DEST_PORT, SUCCESSOR_IP");
    }

    #[test]
    fn explicit_ids_and_hostid() {
        let l = with(&[
            ("HOSTID", "42"),
            ("ELECTION_DEST_IPS", "27=127.0.0.2,42=127.0.0.3,4=127.0.0.4"),
            ("ELECTION_DEST_PORT", "7300"),
            ("SUCCESSOR_IP", "127.0.0.4"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(l.node_id, Some(42));
        assert_eq!(l.peers.unwrap().iter().map(|p| p.id).collect::<Vec<_>>(), vec![27, 42, 4]);
        // The last member's successor is the first.
        let l = with(&[
            ("ELECTION_ID", "4"),
            ("ELECTION_DEST_IPS", "27=::1,4=::2"),
            ("ELECTION_DEST_PORT", "1"),
            ("SUCCESSOR_IP", "::1"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(l.peers.unwrap()[1].addr, addr("[::2]:1"));
    }

    #[test]
    fn id_alone_sets_only_the_id() {
        let l = with(&[("ELECTION_ID", "5")]).unwrap().unwrap();
        assert_eq!((l.node_id, l.peers), (Some(5), None));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = |vars: &[(&str, &str)]| with(vars).unwrap_err().to_string();
        for (vars, wanted) in [
            (&[("ELECTION_ID", "x")][..], "environment variable ELECTION_ID: `x` is not a node id"),
            (&[("HOSTID", "0")][..], "environment variable HOSTID: `0` is not a node id"),
            (&[("ELECTION_ID", "1"), ("HOSTID", "2")][..], "ELECTION_ID=1 and HOSTID=2 disagree"),
            (&[("ELECTION_DEST_PORT", "70000")][..], "environment variable ELECTION_DEST_PORT: `70000` is not a port"),
            (&[("ELECTION_DEST_IPS", "10.0.0.1")][..], "needs ELECTION_DEST_PORT"),
            (
                &[("ELECTION_DEST_IPS", "10.0.0.1,host"), ("ELECTION_DEST_PORT", "1")][..],
                "member 2: `host` is not an IP address",
            ),
            (&[("ELECTION_DEST_IPS", "a=10.0.0.1"), ("ELECTION_DEST_PORT", "1")][..], "member 1: `a` is not a node id"),
            (
                &[("ELECTION_ID", "9"), ("ELECTION_DEST_IPS", "10.0.0.1"), ("ELECTION_DEST_PORT", "1")][..],
                "9 is not among the members",
            ),
            (&[("SUCCESSOR_IP", "10.0.0.2")][..], "needs ELECTION_DEST_IPS and ELECTION_ID"),
            (
                &[
                    ("ELECTION_ID", "1"),
                    ("ELECTION_DEST_IPS", "10.0.0.1,10.0.0.2,10.0.0.3"),
                    ("ELECTION_DEST_PORT", "1"),
                    ("SUCCESSOR_IP", "10.0.0.3"),
                ][..],
                "10.0.0.3 is not this process's successor in ELECTION_DEST_IPS (10.0.0.2 follows it",
            ),
        ] {
            let e = err(vars);
            assert!(e.contains(wanted), "{vars:?}: {e}");
        }
    }
}

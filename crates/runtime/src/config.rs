//! The one configuration loader every daemon uses.
//!
//! Layers, lowest first: built-in defaults ← the TOML file named by
//! `--config` ← environment variables with the daemon's prefix
//! (`NTMUTEXD_NODE_ID`; `__` separates nesting levels, as in
//! `NTMUTEXD_TIMING__HEARTBEAT_MS`) ← command-line flags.
//!
//! The keys all daemons share are [`CommonConfig`]; a daemon adds its own keys
//! at the top level of the same file through a [`DaemonConfig`] type, and gets
//! both back as a [`Config`]. Unknown keys anywhere are errors, so a typo is
//! never silently ignored. Every problem is a [`ConfigError`] naming the key
//! and where its value came from (file path, environment variable or flag);
//! daemons exit with [`EXIT_CONFIG`] on it ([`exit_on_error`]).
//!
//! Depends on `membership` for the peer list; daemons depend on this module,
//! never the other way round.

use std::fmt::Debug;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::error::Kind;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map, Num, Tag, Value};
use figment::{Figment, Metadata, Profile, Provider};
use membership::{Member, Membership, MembershipError, NodeId};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use crate::logging::LogFormat;

/// Exit status for a bad configuration or bad arguments (clap uses 2 too).
pub const EXIT_CONFIG: i32 = 2;

/// The cluster size the protocol cores' `Default` settings are for
/// (`ftlab`'s default): their size-dependent timeouts are what a config
/// file leaving them at 0 (derived) gives on a cluster of this many nodes.
pub const DEFAULT_CLUSTER_SIZE: usize = 5;

/// Metadata name of the command-line layer, used to recognise it in errors.
const CLI_SOURCE: &str = "command-line flags";

/// Flags every daemon takes; flatten them into each daemon's clap parser
/// with `#[command(flatten)]`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CommonArgs {
    /// TOML configuration file (e.g. /etc/ftcoord/<daemon>.toml; each
    /// daemon's `--help` names its own).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// This node's id (overrides `node_id`).
    #[arg(long, value_name = "N")]
    pub node_id: Option<u32>,
    /// Peer-protocol listen address (overrides `listen`).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Client API listen address (overrides `client_listen`).
    #[arg(long, value_name = "ADDR")]
    pub client_listen: Option<SocketAddr>,
    /// Prometheus /metrics listen address (overrides `metrics_listen`).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Log line format (overrides `log_format`).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Validate the configuration, print the effective config followed by
    /// the worst-case failover times these settings give (as TOML comments)
    /// and exit.
    #[arg(long)]
    pub check_config: bool,
    /// The first start of a new cluster only (like etcd's
    /// `initial-cluster-state = new`): a node with no state file may then
    /// recover from a majority that has no epoch or term in use yet, instead
    /// of waiting for every peer. Never on a restart. Not a config key.
    #[arg(long)]
    pub new_cluster: bool,
}

/// The keys every daemon shares. After [`load`] it has passed
/// [`CommonConfig::validate`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(default)]
pub struct CommonConfig {
    /// This node's id: unique, > 0, and one of `peers`. Required.
    pub node_id: u32,
    /// Peer-protocol address; default: this node's address in `peers`.
    pub listen: Option<SocketAddr>,
    /// Client API address; default: 127.0.0.1 at the listen port + 100.
    pub client_listen: Option<SocketAddr>,
    /// Prometheus address; default: 127.0.0.1 at the listen port + 2000.
    pub metrics_listen: Option<SocketAddr>,
    /// Carried in every frame header so two clusters never mix; default 1.
    pub cluster_id: u32,
    /// Shared key authenticating peer frames (32 raw bytes or 64 hex digits,
    /// mode 0600 or stricter). Unset: peer traffic is unauthenticated.
    pub cluster_key_file: Option<PathBuf>,
    /// Where this node keeps its durable state (locked, one directory per
    /// node, never shared; created 0700 if missing). Required.
    pub state_dir: Option<PathBuf>,
    /// Log line format; default text.
    pub log_format: LogFormat,
    /// `tracing` filter directive; default "info". `RUST_LOG` overrides it.
    pub log_level: String,
    /// Every member in ring order, this node included.
    pub peers: Vec<PeerConfig>,
    /// Heartbeat and failure-detection timing.
    pub timing: Timing,
    /// Resource bounds.
    pub limits: Limits,
}

impl Default for CommonConfig {
    /// Defaults for every key; `node_id`, `peers` and `state_dir` have no usable default.
    fn default() -> Self {
        CommonConfig {
            node_id: 0,
            listen: None,
            client_listen: None,
            metrics_listen: None,
            cluster_id: 1,
            cluster_key_file: None,
            state_dir: None,
            log_format: LogFormat::Text,
            log_level: "info".to_owned(),
            peers: Vec::new(),
            timing: Timing::default(),
            limits: Limits::default(),
        }
    }
}

/// One `[[peers]]` entry: a member's id and peer-protocol address.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    /// The member's node id.
    pub id: u32,
    /// Where its peer protocol listens.
    pub addr: SocketAddr,
}

impl From<&PeerConfig> for Member {
    fn from(p: &PeerConfig) -> Member {
        Member { id: NodeId(p.id), addr: p.addr }
    }
}

/// `[timing]`: heartbeat period and failure-detection timeout.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(default)]
pub struct Timing {
    /// Heartbeat period in milliseconds; default 50.
    pub heartbeat_ms: u64,
    /// Silence after which a peer is suspected, in milliseconds; default 250.
    /// Must exceed `heartbeat_ms`.
    pub suspect_after_ms: u64,
    /// ρ, the bound on clock drift between hosts, in parts per million;
    /// default 1000 (0.1 %). Below 1 000 000.
    pub drift_ppm: u32,
    /// The lease and promise window W in milliseconds (foundation.md,
    /// Durable state; reliability.md, leases); default 100, at least 1.
    pub lease_ms: u64,
}

impl Default for Timing {
    fn default() -> Self {
        Timing { heartbeat_ms: 50, suspect_after_ms: 250, drift_ppm: 1_000, lease_ms: 100 }
    }
}

impl Timing {
    /// The heartbeat period.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }

    /// The failure-detection timeout.
    pub fn suspect_after(&self) -> Duration {
        Duration::from_millis(self.suspect_after_ms)
    }

    /// The lease and promise window.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }
}

/// `[limits]`: resource bounds, so a flood degrades only the flooder.
/// Every key's range is in [`BOUNDS`] (foundation.md, Joining, handshakes
/// and limits).
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(default)]
pub struct Limits {
    /// Largest accepted frame in bytes; default 65536.
    pub max_frame_bytes: usize,
    /// Frames queued per peer; a full queue tears the link down; default 1024.
    pub send_queue_len: usize,
    /// Peer connections not yet authenticated, at once; default 256.
    pub max_connections: usize,
    /// Client connections accepted at once; default 1024.
    pub max_clients: usize,
    /// An inbound peer connection without a valid first frame by then is
    /// closed; default 1000.
    pub handshake_timeout_ms: u64,
    /// An authenticated peer link silent that long is closed (keepalives
    /// every third of it); default 30000; above 3 × `timing.suspect_after_ms`.
    pub peer_idle_timeout_ms: u64,
    /// Pause after an accept error (EMFILE); default 100.
    pub accept_backoff_ms: u64,
    /// Requests a client may have in the daemon before its requests stop
    /// being read; default 64.
    pub client_credit: usize,
    /// Log lines per second per reason and source for refused frames and
    /// connections; default 1 (counters keep totals).
    pub log_burst_per_s: u32,
    /// Lock names a node knows at once (with a local waiter or holder, or,
    /// at electd's coordinator, a queue or holder); a request for one more
    /// is refused `too many locks`. Default 10000. Daemons serving one
    /// unnamed lock ignore it.
    pub max_locks: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_bytes: 65536,
            send_queue_len: 1024,
            max_connections: 256,
            max_clients: 1024,
            handshake_timeout_ms: 1000,
            peer_idle_timeout_ms: 30_000,
            accept_backoff_ms: 100,
            client_credit: 64,
            log_burst_per_s: 1,
            max_locks: 10_000,
        }
    }
}

/// One key's inclusive range: `(key, min, max)`. A `*` segment stands
/// for every entry of a map (`services.*.timeout_ms`); a float key is
/// compared as a float (`chaos.drop_rate`, 0 to 1). The one place a
/// key's range is written: [`BOUNDS`] for the common keys,
/// [`DaemonConfig::BOUNDS`] for a daemon's own.
pub type Bound = (&'static str, u64, u64);

/// The range of every numeric key shared by the daemons: `(key, min, max)`,
/// inclusive. `--check-config` refuses anything outside (exit 2, naming the
/// key); the maxima keep every value far from what would overflow a
/// duration, a queue or a semaphore.
pub const BOUNDS: &[Bound] = &[
    ("node_id", 1, u32::MAX as u64),
    ("timing.heartbeat_ms", 1, 3_600_000),
    ("timing.suspect_after_ms", 2, 3_600_000),
    ("timing.drift_ppm", 0, 999_999),
    ("timing.lease_ms", 1, 3_600_000),
    // Header and MAC tag (64 bytes) plus room for a payload.
    ("limits.max_frame_bytes", 128, 16 << 20),
    ("limits.send_queue_len", 1, 1 << 20),
    ("limits.max_connections", 1, 65_536),
    ("limits.max_clients", 1, 65_536),
    ("limits.handshake_timeout_ms", 1, 3_600_000),
    ("limits.peer_idle_timeout_ms", 3, 86_400_000),
    ("limits.accept_backoff_ms", 1, 60_000),
    ("limits.client_credit", 1, 1 << 16),
    ("limits.log_burst_per_s", 0, 1_000_000),
    ("limits.max_locks", 1, 10_000_000),
];

/// Why a key's range is what it is, added to its out-of-range message.
const WHY: &[(&str, &str)] = &[("node_id", "0 is reserved for clients"), ("timing.drift_ppm", "ρ < 1")];

/// Checks `config`'s keys against `table` in table order: the first value
/// outside its range is an error naming its key. A key `config` lacks is
/// skipped.
pub fn check_table(config: &impl Serialize, table: &[Bound]) -> Result<(), ConfigError> {
    let value = Value::serialize(config)
        .map_err(|e| ConfigError::general(format!("the configuration cannot be serialized: {e}")))?;
    check_value(&value, table)
}

fn check_value<'a>(config: &Value, table: impl IntoIterator<Item = &'a Bound>) -> Result<(), ConfigError> {
    for &(key, min, max) in table {
        let segments: Vec<&str> = key.split('.').collect();
        let mut found = Vec::new();
        numbers_at(config, &segments, String::new(), &mut found);
        for (path, n) in found {
            check_num(&path, n, min, max)?;
        }
    }
    Ok(())
}

/// The numbers at `segments` under `value` with their paths, `*` matching every key.
fn numbers_at(value: &Value, segments: &[&str], path: String, out: &mut Vec<(String, Num)>) {
    let Some((first, rest)) = segments.split_first() else {
        if let Value::Num(_, n) = value {
            out.push((path, *n));
        }
        return;
    };
    let Some(dict) = value.as_dict() else { return };
    let join = |k: &str| if path.is_empty() { k.to_owned() } else { format!("{path}.{k}") };
    if *first == "*" {
        for (k, v) in dict {
            numbers_at(v, rest, join(k), out);
        }
    } else if let Some(v) = dict.get(*first) {
        numbers_at(v, rest, join(first), out);
    }
}

/// `n` of `key` in `min..=max`, or the out-of-range error.
fn check_num(key: &str, n: Num, min: u64, max: u64) -> Result<(), ConfigError> {
    let (shown, inside) = if let Some(u) = n.to_u128() {
        (u.to_string(), (u128::from(min)..=u128::from(max)).contains(&u))
    } else if let Some(i) = n.to_i128() {
        (i.to_string(), (i128::from(min)..=i128::from(max)).contains(&i))
    } else if let Some(f) = n.to_f64() {
        // The bounds of float keys (rates) are small integers, exact in f64.
        #[allow(clippy::cast_precision_loss)]
        let range = min as f64..=max as f64;
        (f.to_string(), range.contains(&f))
    } else {
        return Ok(());
    };
    if inside {
        return Ok(());
    }
    let expected = if max == u64::MAX { format!("at least {min}") } else { format!("{min} to {max}") };
    let why = WHY.iter().find(|(k, _)| *k == key).map(|(_, w)| format!(" ({w})")).unwrap_or_default();
    Err(ConfigError::new(key, format!("{shown} is out of range: expected {expected}{why}")))
}

/// A daemon's own keys, which sit at the top level of the same file as the
/// [`CommonConfig`] keys.
///
/// The type should carry `#[serde(default)]` (with `Default` giving the
/// documented defaults) and must serialize every key it deserializes: the
/// unknown-key check compares the input with what the parsed value serializes
/// back to, so `skip_serializing`, `skip_serializing_if` (other than on
/// `Option::is_none`) and `alias` would make valid keys look unknown. Its
/// key names must not collide with the common ones.
pub trait DaemonConfig: Serialize + DeserializeOwned + Default + Clone + Debug {
    /// Lower-case daemon name, e.g. "ntmutexd"; the env prefix is its upper-case form + "_".
    const NAME: &'static str;

    /// The range of each of its numeric keys (see [`Bound`]), checked by
    /// the loader before [`DaemonConfig::validate`]; the one place a range
    /// is written.
    const BOUNDS: &'static [Bound] = &[];

    /// Cross-key checks (ranges are in [`DaemonConfig::BOUNDS`]); errors
    /// name the key (the loader fills in where its value came from).
    fn validate(&self, common: &CommonConfig) -> Result<(), ConfigError> {
        let _ = common;
        Ok(())
    }

    /// Fault injection on outgoing peer datagrams (tokenwatchd's `chaos.*`
    /// keys); `None` (the default) is off. The runtime logs loudly when it
    /// is on.
    fn chaos(&self) -> Option<wire::Chaos> {
        None
    }

    /// Settings this daemon also takes from environment variables outside
    /// its prefix (electd: the seed's `ELECTION_ID`, `ELECTION_DEST_IPS`,
    /// …), read through `var`. The layer is merged above the config file
    /// and below the prefixed variables and the flags. `Ok(None)` (the
    /// default): no such variables are set. Errors name the variable.
    fn env_aliases(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<AliasLayer>, ConfigError> {
        let _ = var;
        Ok(None)
    }

    /// The worst case of each failover row for these settings
    /// (failover.md, "--check-config"), computed from the functions the
    /// core arms its timers with; `--check-config` prints them. Empty (the
    /// default): the daemon grants nothing.
    fn worst_cases(&self, common: &CommonConfig) -> Vec<WorstCase> {
        let _ = common;
        Vec::new()
    }
}

/// What a row of `--check-config`'s worst cases times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorstRow {
    /// The holder's (or coordinator's) daemon is killed: its peers see its
    /// connections close. Until a client of another node is granted.
    Kill,
    /// It is stopped (SIGSTOP, a lost host): silence only. Until a client
    /// of another node is granted.
    Stop,
    /// Every node of a new cluster started at once with `--new-cluster`:
    /// until the first grant.
    FirstGrant,
    /// The same without `--new-cluster`.
    FirstGrantWithoutFlag,
    /// A node restarted with its state file: until it serves its clients.
    Restart,
}

impl WorstRow {
    /// The row's words in `--check-config`'s output.
    pub fn label(self) -> &'static str {
        match self {
            WorstRow::Kill => "holder's daemon killed -> next grant",
            WorstRow::Stop => "holder's host silent (SIGSTOP) -> next grant",
            WorstRow::FirstGrant => "new cluster (--new-cluster) -> first grant",
            WorstRow::FirstGrantWithoutFlag => "new cluster, no --new-cluster -> first grant",
            WorstRow::Restart => "restarted node -> serving",
        }
    }
}

/// One row of the worst cases: its bound at the given settings and how it
/// is made up (in the keys' names), assuming peer messages arrive within
/// their timeouts and no second failure.
#[derive(Clone, Debug, PartialEq)]
pub struct WorstCase {
    /// What is timed.
    pub row: WorstRow,
    /// The bound (`None`: none without a further event, said in `how`).
    pub bound: Option<Duration>,
    /// The sum it comes from, e.g. `lease_ms·(1+ρ) + suspect_after_ms`.
    pub how: String,
}

/// `--check-config`'s worst cases as TOML comments (so the output still
/// loads), after [`effective_toml`]; empty for a daemon without any.
pub fn worst_cases_toml<D: DaemonConfig>(cfg: &Config<D>) -> String {
    let rows = cfg.daemon.worst_cases(&cfg.common);
    if rows.is_empty() {
        return String::new();
    }
    let width = rows.iter().map(|r| r.row.label().len()).max().unwrap_or(0);
    let mut out = format!(
        "\n# Worst cases at these settings, N = {} (docs/{}.md, \"Worst cases\"):\n\
         # peer messages within their timeouts, no second failure.\n",
        cfg.common.peers.len(),
        D::NAME
    );
    for r in rows {
        // Rounded up: a bound printed below its value would not be one.
        let bound = r.bound.map_or_else(|| "unbounded".to_string(), |d| format!("{} ms", d.as_micros().div_ceil(1000)));
        out.push_str(&format!("#   {:<width$}  {:>10}  = {}\n", r.row.label(), bound, r.how));
    }
    out
}

/// Common keys set from a daemon's alias variables
/// ([`DaemonConfig::env_aliases`]); `None` leaves a key to the other layers.
#[derive(Serialize, Debug, Clone, Default, PartialEq)]
pub struct AliasLayer {
    /// Names the layer in error messages, e.g. `seed variables ELECTION_ID, …`.
    #[serde(skip)]
    pub source: String,
    /// `node_id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<u32>,
    /// `peers`, in ring order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peers: Option<Vec<PeerConfig>>,
}

impl Provider for AliasLayer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.source.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Serialized::defaults(self).data()
    }
}

/// A loaded and validated configuration: the shared keys and the daemon's.
#[derive(Debug, Clone)]
pub struct Config<D> {
    /// Keys every daemon has.
    pub common: CommonConfig,
    /// The daemon's own keys.
    pub daemon: D,
}

/// A configuration problem: which key, where its value came from, and what
/// is wrong. Displays as
/// `key 'timing.heartbeat_ms' in /etc/ftcoord/ntmutexd.toml: invalid type: …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", render_error(.key.as_deref(), .origin.as_deref(), .message))]
pub struct ConfigError {
    /// The offending key as a path (`timing.heartbeat_ms`, `peers[1].addr`), if one is to blame.
    pub key: Option<String>,
    /// Where the value came from: a file path, `environment variable X` or
    /// `command-line flag --x`, if known.
    pub origin: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error about `key` (a dotted path; `[i]` for array elements) with
    /// its origin still unknown.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError { key: Some(key.into()), origin: None, message: message.into() }
    }

    /// An error about no key in particular.
    pub fn general(message: impl Into<String>) -> Self {
        ConfigError { key: None, origin: None, message: message.into() }
    }
}

fn render_error(key: Option<&str>, origin: Option<&str>, message: &str) -> String {
    match (key, origin) {
        (Some(k), Some(o)) => format!("key '{k}' in {o}: {message}"),
        (Some(k), None) => format!("key '{k}': {message}"),
        (None, Some(o)) => format!("{o}: {message}"),
        (None, None) => message.to_owned(),
    }
}

impl CommonConfig {
    /// This node's id.
    pub fn node(&self) -> NodeId {
        NodeId(self.node_id)
    }

    /// The peer-protocol address: `listen`, else this node's entry in `peers`.
    ///
    /// # Panics
    /// If neither is set, which validation rules out.
    pub fn listen_addr(&self) -> SocketAddr {
        self.resolve_listen().unwrap_or_else(|e| panic!("unvalidated config: {e}"))
    }

    /// The client API address: `client_listen`, else 127.0.0.1 at the listen port + 100.
    ///
    /// # Panics
    /// If it cannot be resolved, which validation rules out.
    pub fn client_addr(&self) -> SocketAddr {
        self.resolve_client().unwrap_or_else(|e| panic!("unvalidated config: {e}"))
    }

    /// The metrics address: `metrics_listen`, else 127.0.0.1 at the listen port + 2000.
    ///
    /// # Panics
    /// If it cannot be resolved, which validation rules out.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.resolve_metrics().unwrap_or_else(|e| panic!("unvalidated config: {e}"))
    }

    /// The durable state directory.
    ///
    /// # Panics
    /// If `state_dir` is unset, which [`load`] rules out.
    pub fn state_dir(&self) -> &Path {
        self.state_dir.as_deref().unwrap_or_else(|| panic!("unvalidated config: state_dir unset"))
    }

    /// The configured members in ring order.
    ///
    /// # Panics
    /// If `peers` is not a valid membership, which validation rules out.
    pub fn membership(&self) -> Membership {
        Membership::new(self.peers.iter().map(Member::from).collect())
            .unwrap_or_else(|e| panic!("unvalidated config: {e}"))
    }

    /// Checks the shared keys: node id, peers, addresses, the ranges in
    /// [`BOUNDS`], cross-key timing, log level and cluster key file. Errors name the key but not its origin.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let values = Value::serialize(self)
            .map_err(|e| ConfigError::general(format!("the configuration cannot be serialized: {e}")))?;
        // node_id before the peers, whose checks name it.
        check_value(&values, BOUNDS.iter().filter(|(k, _, _)| *k == "node_id"))?;
        self.validate_peers()?;
        self.validate_addrs()?;
        check_value(&values, BOUNDS)?;
        self.validate_timing()?;
        let (t, l) = (&self.timing, &self.limits);
        if l.peer_idle_timeout_ms <= t.suspect_after_ms.saturating_mul(3) {
            return Err(ConfigError::new(
                "limits.peer_idle_timeout_ms",
                format!(
                    "{} must be above 3 × timing.suspect_after_ms ({}): a live link is never that silent",
                    l.peer_idle_timeout_ms,
                    t.suspect_after_ms.saturating_mul(3)
                ),
            ));
        }
        check_log_level(&self.log_level).map_err(|why| ConfigError::new("log_level", why))?;
        if self.state_dir.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
            return Err(ConfigError::new("state_dir", "must not be empty"));
        }
        if let Some(path) = &self.cluster_key_file {
            // The same loader the transport uses later, so the two never disagree.
            wire::ClusterKey::load(path).map_err(|e| ConfigError::new("cluster_key_file", e.to_string()))?;
        }
        Ok(())
    }

    fn validate_peers(&self) -> Result<(), ConfigError> {
        let members = self.peers.iter().map(Member::from).collect();
        let membership = Membership::new(members).map_err(|e| {
            let key = match &e {
                MembershipError::ZeroId => self.peers.iter().position(|p| p.id == 0).map(|i| format!("peers[{i}].id")),
                MembershipError::DuplicateId(id) => {
                    self.peers.iter().rposition(|p| p.id == *id).map(|i| format!("peers[{i}].id"))
                }
                MembershipError::DuplicateAddr(addr) => {
                    self.peers.iter().rposition(|p| p.addr == *addr).map(|i| format!("peers[{i}].addr"))
                }
                MembershipError::Empty | MembershipError::SelfMissing(_) => None,
            };
            let message = match e {
                MembershipError::Empty => "empty: list every member as [[peers]] id, addr (this node included)".into(),
                other => other.to_string(),
            };
            ConfigError::new(key.unwrap_or_else(|| "peers".into()), message)
        })?;
        membership.require(self.node()).map_err(|_| {
            let ids: Vec<String> = self.peers.iter().map(|p| p.id.to_string()).collect();
            ConfigError::new(
                "node_id",
                format!(
                    "{} is not among the peers (ids {}); list this node in [[peers]]",
                    self.node_id,
                    ids.join(", ")
                ),
            )
        })
    }

    fn validate_addrs(&self) -> Result<(), ConfigError> {
        let listen = self.resolve_listen()?;
        let addrs = [
            ("listen", listen, self.listen.is_none()),
            ("client_listen", self.resolve_client()?, self.client_listen.is_none()),
            ("metrics_listen", self.resolve_metrics()?, self.metrics_listen.is_none()),
        ];
        let how = |defaulted: bool| if defaulted { " (default)" } else { "" };
        for (i, (key, addr, defaulted)) in addrs.iter().enumerate() {
            for (other, other_addr, other_defaulted) in &addrs[..i] {
                if clash(*addr, *other_addr) {
                    return Err(ConfigError::new(
                        *key,
                        format!(
                            "{addr}{} clashes with {other} {other_addr}{}: each needs its own port",
                            how(*defaulted),
                            how(*other_defaulted)
                        ),
                    ));
                }
            }
            if let Some(peer) = self.peers.iter().find(|p| p.id != self.node_id && clash(*addr, p.addr)) {
                return Err(ConfigError::new(
                    *key,
                    format!("{addr}{} clashes with peer {}'s address {}", how(*defaulted), peer.id, peer.addr),
                ));
            }
        }
        Ok(())
    }

    fn validate_timing(&self) -> Result<(), ConfigError> {
        let t = &self.timing;
        if t.suspect_after_ms <= t.heartbeat_ms {
            return Err(ConfigError::new(
                "timing.suspect_after_ms",
                format!(
                    "{} must be greater than timing.heartbeat_ms ({}), or every peer is suspected between heartbeats",
                    t.suspect_after_ms, t.heartbeat_ms
                ),
            ));
        }
        Ok(())
    }

    fn resolve_listen(&self) -> Result<SocketAddr, ConfigError> {
        if let Some(addr) = self.listen {
            return Ok(addr);
        }
        self.peers
            .iter()
            .find(|p| p.id == self.node_id)
            .map(|p| p.addr)
            .ok_or_else(|| ConfigError::new("listen", "not set, and this node's id is not in peers to take it from"))
    }

    fn resolve_client(&self) -> Result<SocketAddr, ConfigError> {
        self.derived("client_listen", self.client_listen, 100)
    }

    fn resolve_metrics(&self) -> Result<SocketAddr, ConfigError> {
        self.derived("metrics_listen", self.metrics_listen, 2000)
    }

    /// `explicit`, else loopback at the listen port + `offset`.
    fn derived(&self, key: &str, explicit: Option<SocketAddr>, offset: u16) -> Result<SocketAddr, ConfigError> {
        if let Some(addr) = explicit {
            return Ok(addr);
        }
        let listen = self.resolve_listen()?;
        let port = listen.port().checked_add(offset).ok_or_else(|| {
            ConfigError::new(
                key,
                format!("not set, and its default (listen port {} + {offset}) is above 65535", listen.port()),
            )
        })?;
        Ok(SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port))
    }
}

/// Whether two listen addresses would fight over one port. Port 0 (pick
/// any) never clashes.
fn clash(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0 && a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// The command-line layer: only the flags that were given.
#[derive(Serialize)]
struct CliLayer {
    #[serde(skip_serializing_if = "Option::is_none")]
    node_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    listen: Option<SocketAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client_listen: Option<SocketAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics_listen: Option<SocketAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    log_format: Option<LogFormat>,
}

impl Provider for CliLayer {
    fn metadata(&self) -> Metadata {
        Metadata::named(CLI_SOURCE)
            .interpolater(|_: &Profile, keys: &[&str]| format!("--{}", keys.join("-").replace('_', "-")))
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Serialized::defaults(self).data()
    }
}

/// The environment prefix of daemon `D`, e.g. `NTMUTEXD_`.
fn env_prefix<D: DaemonConfig>() -> String {
    format!("{}_", D::NAME.to_ascii_uppercase())
}

/// The layered sources for daemon `D`: the `--config` file, its alias
/// variables ([`DaemonConfig::env_aliases`]), its prefixed environment
/// variables and the flags in `args` (defaults come from the types). Fails
/// if the named config file cannot be read or an alias variable is bad.
pub fn layers<D: DaemonConfig>(args: &CommonArgs) -> Result<Figment, ConfigError> {
    let mut figment = Figment::new();
    if let Some(path) = &args.config {
        if let Err(e) = std::fs::File::open(path) {
            return Err(ConfigError {
                key: None,
                origin: Some(path.display().to_string()),
                message: format!("cannot read config file: {e}"),
            });
        }
        figment = figment.merge(Toml::file_exact(path));
    }
    let cli = CliLayer {
        node_id: args.node_id,
        listen: args.listen,
        client_listen: args.client_listen,
        metrics_listen: args.metrics_listen,
        log_format: args.log_format,
    };
    if let Some(aliases) = D::env_aliases(&|name| std::env::var(name).ok())? {
        figment = figment.merge(aliases);
    }
    Ok(figment.merge(Env::prefixed(&env_prefix::<D>()).split("__")).merge(cli))
}

/// Checks a `log_level`: comma-separated directives, each a level
/// (`trace`, `debug`, `info`, `warn`, `error`, `off`) or a `tracing`
/// directive with a target or span (`wire=debug`, `runtime[join]=trace`).
/// A bare word that is no level (`loud`) is valid `EnvFilter` syntax, but
/// it names a target at `trace` and silences everything else: refused, as
/// almost surely a mistyped level (write `TARGET=trace` for that).
pub fn check_log_level(level: &str) -> Result<(), String> {
    const LEVELS: &str = "trace, debug, info, warn, error or off";
    if level.trim().is_empty() {
        return Err(format!("empty: set a level ({LEVELS}), e.g. \"info\""));
    }
    for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let bare = !directive.contains(['=', '[']);
        if bare && directive.parse::<tracing_subscriber::filter::LevelFilter>().is_err() {
            return Err(format!(
                "{directive:?} is not a level ({LEVELS}) nor a TARGET=LEVEL directive \
                 (e.g. \"info\" or \"info,wire=debug\")"
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(level).map(drop).map_err(|e| format!("not a valid tracing filter ({e})"))
}

/// Loads, checks and validates daemon `D`'s configuration from its file,
/// environment and flags.
pub fn load<D: DaemonConfig>(args: &CommonArgs) -> Result<Config<D>, ConfigError> {
    load_from(&layers::<D>(args)?)
}

/// The configuration of a file that sets only what has no default:
/// `node_id` 1, a `state_dir` and `n` peers on loopback (ports 7001 on).
/// Each daemon's tests check with it that its core's `Default` is what
/// the config defaults give.
pub fn load_minimal<D: DaemonConfig>(n: usize) -> Result<Config<D>, ConfigError> {
    let peers: String =
        (1..=n).map(|id| format!("[[peers]]\nid = {id}\naddr = \"127.0.0.1:{}\"\n", 7000 + id)).collect();
    let file = format!("node_id = 1\nstate_dir = \"/var/lib/ftcoord/{}\"\n{peers}", D::NAME);
    load_from(&Figment::from(Toml::string(&file)))
}

/// Extracts and validates a [`Config`] from any figment (tests build one
/// by hand): type errors, unknown keys, a missing node id, the common
/// checks, then [`DaemonConfig::validate`].
///
/// An error about an element of `peers` names it by its id too, when the
/// input has one: `peers[2] (id 3).addr` (the index alone would make the
/// reader count the `[[peers]]` tables, from 0).
pub fn load_from<D: DaemonConfig>(figment: &Figment) -> Result<Config<D>, ConfigError> {
    load_unnamed(figment).map_err(|mut e| {
        if let (Some(key), Ok(input)) = (&e.key, figment.find_value("")) {
            e.key = Some(name_peer(key, &input));
        }
        e
    })
}

/// `peers[2].addr` → `peers[2] (id 3).addr` when `input` gives peer 2 an id.
fn name_peer(key: &str, input: &Value) -> String {
    let path = parse_key(key);
    let (Some("peers"), Some(index)) = (path.first().map(String::as_str), path.get(1)) else {
        return key.to_owned();
    };
    let id = find_tagged(input, &["peers".into(), index.clone(), "id".into()]).and_then(|v| match v {
        // TOML integers are signed; environment ones may be unsigned.
        Value::Num(_, n) => n.to_i128().map(|i| i.to_string()).or_else(|| n.to_u128().map(|u| u.to_string())),
        _ => None,
    });
    match (id, key.strip_prefix(&format!("peers[{index}]"))) {
        (Some(id), Some(rest)) => format!("peers[{index}] (id {id}){rest}"),
        _ => key.to_owned(),
    }
}

fn load_unnamed<D: DaemonConfig>(figment: &Figment) -> Result<Config<D>, ConfigError> {
    let origins = Origins { figment, env_prefix: env_prefix::<D>() };
    let input = figment.find_value("").map_err(|e| origins.convert(e))?;
    let common: CommonConfig = figment.extract().map_err(|e| origins.convert(e))?;
    let daemon: D = figment.extract().map_err(|e| origins.convert(e))?;

    let reserialized = |what: &str, r: Result<Value, figment::Error>| {
        r.map_err(|e| ConfigError::general(format!("{what} configuration cannot be serialized back: {e}")))
    };
    let known_common = reserialized("common", Value::serialize(&common))?;
    let known_daemon = reserialized(D::NAME, Value::serialize(&daemon))?;
    let mut path = Vec::new();
    if let Some(unknown) = find_unknown(&input, &[&known_common, &known_daemon], &mut path) {
        return Err(ConfigError {
            key: Some(render_key(&unknown.path)),
            origin: figment.get_metadata(unknown.tag).map(|md| origins.describe(md, &unknown.path)),
            message: unknown.message,
        });
    }

    for known in [&known_common, &known_daemon] {
        if let Some((path, message)) = find_oversized(known, &mut Vec::new()) {
            return Err(origins.locate(&input, ConfigError::new(render_key(&path), message)));
        }
    }

    if common.node_id == 0 && !figment.contains("node_id") {
        let flag = format!("{}NODE_ID", origins.env_prefix);
        return Err(ConfigError::new(
            "node_id",
            format!("missing: set node_id in the config file, {flag} or --node-id"),
        ));
    }
    common.validate().map_err(|e| origins.locate(&input, e))?;
    if common.state_dir.is_none() {
        let var = format!("{}STATE_DIR", origins.env_prefix);
        return Err(ConfigError::new(
            "state_dir",
            format!("missing: set state_dir (this node's own durable state directory) in the config file or {var}"),
        ));
    }
    check_value(&known_daemon, D::BOUNDS).map_err(|e| origins.locate(&input, e))?;
    daemon.validate(&common).map_err(|e| origins.locate(&input, e))?;
    let config = Config { common, daemon };
    // --check-config must be able to print what was accepted (TOML has no u64 beyond i64::MAX).
    render_toml(&config)?;
    Ok(config)
}

/// Prints `<daemon>: <error>` to stderr and exits with [`EXIT_CONFIG`];
/// passes a success through.
pub fn exit_on_error<T>(r: Result<T, ConfigError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => {
            let program = std::env::args_os()
                .next()
                .and_then(|a| Path::new(&a).file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "ftcoord".to_owned());
            eprintln!("{program}: {e}");
            std::process::exit(EXIT_CONFIG);
        }
    }
}

/// The effective configuration as one TOML document (common and daemon keys
/// merged, listen addresses resolved), for `--check-config`. Loading it back
/// gives the same configuration.
///
/// # Panics
/// If the daemon keys cannot be written as TOML, which [`load`] rules out.
pub fn effective_toml<D: DaemonConfig>(cfg: &Config<D>) -> String {
    render_toml(cfg).unwrap_or_else(|e| panic!("{e}"))
}

fn render_toml<D: DaemonConfig>(cfg: &Config<D>) -> Result<String, ConfigError> {
    let cannot =
        |e: toml::ser::Error| ConfigError::general(format!("the configuration cannot be written as TOML: {e}"));
    let mut common = cfg.common.clone();
    if let (Ok(listen), Ok(client), Ok(metrics)) =
        (common.resolve_listen(), common.resolve_client(), common.resolve_metrics())
    {
        common.listen = Some(listen);
        common.client_listen = Some(client);
        common.metrics_listen = Some(metrics);
    }
    /// Both parts as one document, common keys first, each in declaration order.
    #[derive(Serialize)]
    struct Effective<'a, D> {
        #[serde(flatten)]
        common: &'a CommonConfig,
        #[serde(flatten)]
        daemon: &'a D,
    }
    let body = toml::to_string(&Effective { common: &common, daemon: &cfg.daemon }).map_err(cannot)?;
    Ok(format!("# Effective configuration of {} node {}\n{body}", D::NAME, cfg.common.node_id))
}

/// An input key that neither configuration part knows.
struct Unknown {
    path: Vec<String>,
    tag: Tag,
    message: String,
}

/// Finds the first key in `input` absent from every value in `known` at the
/// same place, recursing into tables and arrays of tables. `known` are the
/// parsed parts serialized back, so struct fields, renamed fields and map
/// entries that were accepted all reappear there.
fn find_unknown(input: &Value, known: &[&Value], path: &mut Vec<String>) -> Option<Unknown> {
    match input {
        Value::Dict(_, dict) => {
            let known_dicts: Vec<&Dict> = known.iter().filter_map(|v| v.as_dict()).collect();
            if known_dicts.is_empty() {
                // Accepted as something other than a table (custom deserializer): nothing to compare.
                return None;
            }
            for (key, value) in dict {
                path.push(key.clone());
                let matches: Vec<&Value> = known_dicts.iter().filter_map(|d| d.get(key)).collect();
                if matches.is_empty() {
                    let candidates: Vec<&str> = known_dicts.iter().flat_map(|d| d.keys()).map(String::as_str).collect();
                    return Some(Unknown {
                        path: path.clone(),
                        tag: value.tag(),
                        message: unknown_message(key, &candidates),
                    });
                }
                if let Some(found) = find_unknown(value, &matches, path) {
                    return Some(found);
                }
                path.pop();
            }
            None
        }
        Value::Array(_, items) => {
            for (i, item) in items.iter().enumerate() {
                path.push(i.to_string());
                let matches: Vec<&Value> = known.iter().filter_map(|v| v.as_array()?.get(i)).collect();
                if let Some(found) = find_unknown(item, &matches, path) {
                    return Some(found);
                }
                path.pop();
            }
            None
        }
        _ => None,
    }
}

/// The first integer in `value` beyond TOML's 64-bit signed range (only the
/// environment can supply one), which `--check-config` could not print.
fn find_oversized(value: &Value, path: &mut Vec<String>) -> Option<(Vec<String>, String)> {
    let mut within = |key: String, v: &Value| {
        path.push(key);
        let found = find_oversized(v, path);
        path.pop();
        found
    };
    match value {
        Value::Num(_, n) => {
            let shown = match (n.to_u128(), n.to_i128()) {
                (Some(u), _) if u > i64::MAX as u128 => u.to_string(),
                (_, Some(i)) if i64::try_from(i).is_err() => i.to_string(),
                _ => return None,
            };
            Some((path.clone(), format!("{shown} is out of range (TOML integers are 64-bit signed)")))
        }
        Value::Dict(_, dict) => dict.iter().find_map(|(k, v)| within(k.clone(), v)),
        Value::Array(_, items) => items.iter().enumerate().find_map(|(i, v)| within(i.to_string(), v)),
        _ => None,
    }
}

/// "unknown key", with the closest known key as a suggestion or else the list of known keys.
fn unknown_message(key: &str, candidates: &[&str]) -> String {
    let closest =
        candidates.iter().map(|c| (edit_distance(key, c), *c)).filter(|(d, c)| *d <= 2.max(c.len() / 4)).min();
    match closest {
        Some((_, c)) => format!("unknown key (did you mean '{c}'?)"),
        None => {
            let mut keys = candidates.to_vec();
            keys.sort_unstable();
            keys.dedup();
            format!("unknown key; expected one of: {}", keys.join(", "))
        }
    }
}

/// Levenshtein distance, for typo suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb)).min(row[j] + 1).min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// `["peers", "0", "addr"]` → `peers[0].addr`.
fn render_key(path: &[String]) -> String {
    let mut out = String::new();
    for segment in path {
        if is_index(segment) {
            out.push_str(&format!("[{segment}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    out
}

/// `peers[0].addr` → `["peers", "0", "addr"]`.
fn parse_key(key: &str) -> Vec<String> {
    key.split(['.', '[', ']']).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

fn is_index(segment: &str) -> bool {
    !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit())
}

/// Names where values came from, in terms an operator recognises.
struct Origins<'a> {
    figment: &'a Figment,
    env_prefix: String,
}

impl Origins<'_> {
    /// A figment error (type mismatch, missing key, unreadable file) as a [`ConfigError`].
    fn convert(&self, e: figment::Error) -> ConfigError {
        let origin = e.metadata.as_ref().map(|md| self.describe(md, &e.path));
        let mut path = e.path.clone();
        let message = match &e.kind {
            Kind::MissingField(field) => {
                path.push(field.to_string());
                "missing: this key is required".to_owned()
            }
            Kind::UnknownField(field, _) => {
                path.push(field.clone());
                "unknown key".to_owned()
            }
            kind => kind.to_string(),
        };
        ConfigError { key: (!path.is_empty()).then(|| render_key(&path)), origin, message }
    }

    /// Fills in the origin of a validation error from the value at its key, if the input has one.
    fn locate(&self, input: &Value, mut e: ConfigError) -> ConfigError {
        if e.origin.is_none() {
            if let Some(key) = &e.key {
                let path = parse_key(key);
                e.origin = find_tagged(input, &path)
                    .and_then(|v| self.figment.get_metadata(v.tag()))
                    .map(|md| self.describe(md, &path));
            }
        }
        e
    }

    /// "/etc/ftcoord/x.toml", "environment variable X_NODE_ID" or "command-line flag --node-id".
    fn describe(&self, md: &Metadata, path: &[String]) -> String {
        if let Some(file) = md.source.as_ref().and_then(|s| s.file_path()) {
            return file.display().to_string();
        }
        if md.name == CLI_SOURCE {
            let flag = path.first().map(|k| k.replace('_', "-")).unwrap_or_default();
            return format!("command-line flag --{flag}");
        }
        if md.name.contains("environment variable") {
            let keys: Vec<String> = path.iter().take_while(|k| !is_index(k)).map(|k| k.to_ascii_uppercase()).collect();
            return if keys.is_empty() {
                format!("{}* environment variables", self.env_prefix)
            } else {
                format!("environment variable {}{}", self.env_prefix, keys.join("__"))
            };
        }
        md.name.to_string()
    }
}

/// The value at `path` in `value`, stepping into tables by key and arrays by index.
fn find_tagged<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, segment| match v {
        Value::Dict(_, d) => d.get(segment),
        Value::Array(_, a) => a.get(segment.parse::<usize>().ok()?),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    use clap::Parser;
    use figment::Jail;

    use super::*;

    /// A daemon with a scalar, a nested table and a map of tables.
    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
    #[serde(default)]
    struct TestD {
        grant_ttl_ms: u64,
        algorithm: String,
        retry: Retry,
        services: BTreeMap<String, Service>,
    }

    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
    #[serde(default)]
    struct Retry {
        backoff_ms: u64,
        attempts: u32,
    }

    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
    struct Service {
        command: String,
    }

    impl Default for TestD {
        fn default() -> Self {
            TestD { grant_ttl_ms: 1000, algorithm: "ring".into(), retry: Retry::default(), services: BTreeMap::new() }
        }
    }

    impl Default for Retry {
        fn default() -> Self {
            Retry { backoff_ms: 100, attempts: 3 }
        }
    }

    impl DaemonConfig for TestD {
        const NAME: &'static str = "testd";

        fn validate(&self, common: &CommonConfig) -> Result<(), ConfigError> {
            if self.grant_ttl_ms <= common.timing.suspect_after_ms {
                return Err(ConfigError::new("grant_ttl_ms", "must exceed timing.suspect_after_ms"));
            }
            Ok(())
        }

        /// `SEED_ID` sets `node_id`; `SEED_PEER` (an address) adds a fourth peer.
        fn env_aliases(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<AliasLayer>, ConfigError> {
            let Some(id) = var("SEED_ID") else { return Ok(None) };
            let id = id.parse().map_err(|_| ConfigError {
                key: Some("node_id".into()),
                origin: Some("environment variable SEED_ID".into()),
                message: format!("`{id}` is not a number"),
            })?;
            let peers = var("SEED_PEER").map(|addr| {
                let mut p: Vec<PeerConfig> =
                    (1..=3).map(|i| PeerConfig { id: i, addr: format!("127.0.0.1:710{i}").parse().unwrap() }).collect();
                p.push(PeerConfig { id: 4, addr: addr.parse().unwrap() });
                p
            });
            Ok(Some(AliasLayer { source: "seed variables SEED_ID".into(), node_id: Some(id), peers }))
        }

        /// A kill row of `grant_ttl_ms + lease_ms` and 1 µs (printed rounded
        /// up) and one without a bound.
        fn worst_cases(&self, common: &CommonConfig) -> Vec<WorstCase> {
            vec![
                WorstCase {
                    row: WorstRow::Kill,
                    bound: Some(Duration::from_micros(1_000 * (self.grant_ttl_ms + common.timing.lease_ms) + 1)),
                    how: "grant_ttl_ms + lease_ms".into(),
                },
                WorstCase { row: WorstRow::FirstGrantWithoutFlag, bound: None, how: "every peer's answer".into() },
            ]
        }
    }

    /// A daemon whose keys are kebab-case.
    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
    #[serde(default, rename_all = "kebab-case")]
    struct KebabD {
        max_hold_ms: u64,
        chaos: Chaos,
    }

    #[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
    #[serde(default, rename_all = "kebab-case")]
    struct Chaos {
        drop_rate: f64,
    }

    impl DaemonConfig for KebabD {
        const NAME: &'static str = "kebabd";
    }

    const PEERS: &str = r#"
[[peers]]
id = 1
addr = "127.0.0.1:7101"

[[peers]]
id = 2
addr = "127.0.0.1:7102"

[[peers]]
id = 3
addr = "127.0.0.1:7103"
"#;

    /// A config file: `top` (top-level keys), `state_dir`, three peers, then `tables`.
    fn file(top: &str, tables: &str) -> String {
        format!("node_id = 1\n{top}\nstate_dir = \"/var/lib/ftcoord/testd\"\n{PEERS}\n{tables}")
    }

    /// Runs `f` in a figment jail (a temporary cwd and restored env vars, one jail at a time).
    #[allow(clippy::result_large_err)] // the closure type is fixed by figment::Jail
    fn jailed(f: impl FnOnce(&mut Jail) -> Result<(), Box<dyn std::error::Error>>) {
        Jail::expect_with(|jail| f(jail).map_err(|e| figment::Error::from(e.to_string())))
    }

    fn args() -> CommonArgs {
        CommonArgs { config: Some("testd.toml".into()), ..CommonArgs::default() }
    }

    fn load_file(jail: &Jail, contents: &str) -> Result<Config<TestD>, ConfigError> {
        jail.create_file("testd.toml", contents).unwrap();
        load::<TestD>(&args())
    }

    fn load_err(jail: &Jail, contents: &str) -> ConfigError {
        load_file(jail, contents).unwrap_err()
    }

    fn assert_err(e: &ConfigError, key: &str, origin: Option<&str>, message_part: &str) {
        assert_eq!(e.key.as_deref(), Some(key), "{e}");
        assert_eq!(e.origin.as_deref(), origin, "{e}");
        assert!(e.message.contains(message_part), "{e:?} lacks {message_part:?}");
    }

    #[test]
    fn defaults() {
        jailed(|jail| {
            let cfg = load_file(jail, &file("", ""))?;
            let c = &cfg.common;
            assert_eq!(c.node_id, 1);
            assert_eq!(c.cluster_id, 1);
            assert_eq!(c.log_format, LogFormat::Text);
            assert_eq!(c.log_level, "info");
            assert_eq!(c.timing, Timing { heartbeat_ms: 50, suspect_after_ms: 250, ..Timing::default() });
            assert_eq!(c.limits, Limits::default());
            assert_eq!((c.listen, c.client_listen, c.metrics_listen), (None, None, None));
            assert_eq!(c.cluster_key_file, None);
            assert_eq!(c.state_dir(), Path::new("/var/lib/ftcoord/testd"));
            assert_eq!(c.listen_addr(), "127.0.0.1:7101".parse().unwrap());
            assert_eq!(c.client_addr(), "127.0.0.1:7201".parse().unwrap());
            assert_eq!(c.metrics_addr(), "127.0.0.1:9101".parse().unwrap());
            assert_eq!(c.membership().ids().map(|n| n.0).collect::<Vec<_>>(), [1, 2, 3]);
            assert_eq!(c.node(), NodeId(1));
            assert_eq!(cfg.daemon, TestD::default());
            Ok(())
        });
    }

    #[test]
    fn file_overrides_defaults() {
        jailed(|jail| {
            let top = r#"cluster_id = 7
listen = "0.0.0.0:7101"
client_listen = "127.0.0.1:8000"
log_format = "json"
log_level = "debug,wire=trace"
grant_ttl_ms = 5000
algorithm = "queue""#;
            let tables = r#"
[timing]
heartbeat_ms = 20

[limits]
max_clients = 8

[retry]
attempts = 9

[services.echo]
command = "echo"
"#;
            let cfg = load_file(jail, &file(top, tables))?;
            let c = &cfg.common;
            assert_eq!(c.cluster_id, 7);
            assert_eq!(c.listen_addr(), "0.0.0.0:7101".parse().unwrap());
            assert_eq!(c.client_addr(), "127.0.0.1:8000".parse().unwrap());
            assert_eq!(c.metrics_addr(), "127.0.0.1:9101".parse().unwrap());
            assert_eq!(c.log_format, LogFormat::Json);
            assert_eq!(c.log_level, "debug,wire=trace");
            assert_eq!(c.state_dir.as_deref(), Some(Path::new("/var/lib/ftcoord/testd")));
            assert_eq!(c.timing, Timing { heartbeat_ms: 20, suspect_after_ms: 250, ..Timing::default() });
            assert_eq!(c.limits.max_clients, 8);
            assert_eq!(c.limits.max_connections, 256);
            let d = &cfg.daemon;
            assert_eq!((d.grant_ttl_ms, d.algorithm.as_str()), (5000, "queue"));
            assert_eq!(d.retry, Retry { backoff_ms: 100, attempts: 9 });
            assert_eq!(d.services["echo"], Service { command: "echo".into() });
            Ok(())
        });
    }

    #[test]
    fn env_overrides_file() {
        jailed(|jail| {
            jail.set_env("TESTD_CLUSTER_ID", 9);
            jail.set_env("TESTD_NODE_ID", 2);
            jail.set_env("TESTD_ALGORITHM", "queue");
            let cfg = load_file(jail, &file("cluster_id = 7", ""))?;
            assert_eq!(cfg.common.cluster_id, 9);
            assert_eq!(cfg.common.node_id, 2);
            assert_eq!(cfg.common.listen_addr(), "127.0.0.1:7102".parse().unwrap());
            assert_eq!(cfg.daemon.algorithm, "queue");
            Ok(())
        });
    }

    #[test]
    fn alias_variables_sit_between_the_file_and_the_prefixed_ones() {
        jailed(|jail| {
            jail.set_env("SEED_ID", 2);
            jail.set_env("SEED_PEER", "127.0.0.9:7104");
            let cfg = load_file(jail, &file("", ""))?;
            assert_eq!(cfg.common.node_id, 2, "the alias beats the file");
            assert_eq!(cfg.common.peers.len(), 4, "the alias's peers replace the file's");
            assert_eq!(cfg.common.listen_addr(), "127.0.0.1:7102".parse().unwrap());
            jail.set_env("TESTD_NODE_ID", 4);
            let cfg = load::<TestD>(&args())?;
            assert_eq!(cfg.common.node_id, 4, "the prefixed variable beats the alias");
            assert_eq!(cfg.common.listen_addr(), "127.0.0.9:7104".parse().unwrap());
            Ok(())
        });
    }

    #[test]
    fn alias_errors_name_their_variable_and_a_bad_alias_value_names_its_layer() {
        jailed(|jail| {
            jail.set_env("SEED_ID", "x");
            let e = load_err(jail, &file("", ""));
            assert_err(&e, "node_id", Some("environment variable SEED_ID"), "`x` is not a number");
            jail.set_env("SEED_ID", 9);
            let e = load_err(jail, &file("", ""));
            assert_err(&e, "node_id", Some("seed variables SEED_ID"), "9");
            Ok(())
        });
    }

    #[test]
    fn cli_overrides_env() {
        jailed(|jail| {
            jail.create_file("testd.toml", &file("", ""))?;
            jail.set_env("TESTD_NODE_ID", 2);
            jail.set_env("TESTD_LOG_FORMAT", "text");
            let args = CommonArgs {
                node_id: Some(3),
                listen: Some("0.0.0.0:7103".parse().unwrap()),
                client_listen: Some("127.0.0.1:6003".parse().unwrap()),
                metrics_listen: Some("127.0.0.1:6103".parse().unwrap()),
                log_format: Some(LogFormat::Json),
                ..args()
            };
            let c = load::<TestD>(&args)?.common;
            assert_eq!(c.node_id, 3);
            assert_eq!(c.listen_addr(), "0.0.0.0:7103".parse().unwrap());
            assert_eq!(c.client_addr(), "127.0.0.1:6003".parse().unwrap());
            assert_eq!(c.metrics_addr(), "127.0.0.1:6103".parse().unwrap());
            assert_eq!(c.log_format, LogFormat::Json);
            Ok(())
        });
    }

    #[test]
    fn nested_env_with_double_underscore() {
        jailed(|jail| {
            jail.set_env("TESTD_TIMING__HEARTBEAT_MS", 20);
            jail.set_env("TESTD_LIMITS__MAX_CLIENTS", 5);
            jail.set_env("TESTD_RETRY__BACKOFF_MS", 7);
            let cfg = load_file(jail, &file("", "[timing]\nheartbeat_ms = 40\nsuspect_after_ms = 200\n"))?;
            assert_eq!(cfg.common.timing, Timing { heartbeat_ms: 20, suspect_after_ms: 200, ..Timing::default() });
            assert_eq!(cfg.common.limits.max_clients, 5);
            assert_eq!(cfg.daemon.retry, Retry { backoff_ms: 7, attempts: 3 });
            Ok(())
        });
    }

    #[test]
    fn env_only_without_a_file() {
        jailed(|jail| {
            jail.set_env("TESTD_NODE_ID", 1);
            jail.set_env("TESTD_PEERS", r#"[{id = 1, addr = "127.0.0.1:7101"}]"#);
            jail.set_env("TESTD_STATE_DIR", "/var/lib/x");
            let cfg = load::<TestD>(&CommonArgs::default())?;
            assert_eq!(cfg.common.state_dir(), Path::new("/var/lib/x"));
            assert_eq!(cfg.common.peers, vec![PeerConfig { id: 1, addr: "127.0.0.1:7101".parse().unwrap() }]);
            Ok(())
        });
    }

    #[test]
    fn common_args_parse_from_the_command_line() {
        #[derive(Parser, Debug)]
        struct Cli {
            #[command(flatten)]
            common: CommonArgs,
        }
        let cli = Cli::try_parse_from([
            "testd",
            "--config",
            "/etc/ftcoord/testd.toml",
            "--node-id",
            "4",
            "--listen",
            "10.0.0.4:7101",
            "--client-listen",
            "127.0.0.1:7201",
            "--metrics-listen",
            "127.0.0.1:9101",
            "--log-format",
            "json",
            "--check-config",
            "--new-cluster",
        ])
        .unwrap();
        let a = cli.common;
        assert_eq!(a.config.as_deref(), Some(Path::new("/etc/ftcoord/testd.toml")));
        assert_eq!(a.node_id, Some(4));
        assert_eq!(a.listen, Some("10.0.0.4:7101".parse().unwrap()));
        assert_eq!(a.log_format, Some(LogFormat::Json));
        assert!(a.check_config);
        assert!(a.new_cluster);
        assert!(!Cli::try_parse_from(["testd"]).unwrap().common.new_cluster);
        assert!(Cli::try_parse_from(["testd", "--log-format", "xml"]).is_err());
    }

    #[test]
    fn node_id_missing_or_zero() {
        jailed(|jail| {
            let e = load_err(jail, PEERS);
            assert_err(&e, "node_id", None, "missing");
            assert!(e.message.contains("TESTD_NODE_ID"), "{e}");

            let e = load_err(jail, &format!("node_id = 0\n{PEERS}"));
            assert_err(&e, "node_id", Some("testd.toml"), "0 is reserved for clients");

            jail.set_env("TESTD_NODE_ID", 0);
            let e = load_err(jail, &file("", ""));
            assert_err(&e, "node_id", Some("environment variable TESTD_NODE_ID"), "0 is reserved for clients");

            let e = load::<TestD>(&CommonArgs { node_id: Some(0), ..args() }).unwrap_err();
            assert_err(&e, "node_id", Some("command-line flag --node-id"), "0 is reserved for clients");
            Ok(())
        });
    }

    #[test]
    fn state_dir_is_required_and_not_empty() {
        jailed(|jail| {
            let e = load_err(jail, &format!("node_id = 1\n{PEERS}"));
            assert_err(&e, "state_dir", None, "missing");
            assert!(e.message.contains("TESTD_STATE_DIR"), "{e}");

            let e = load_err(jail, &format!("node_id = 1\nstate_dir = \"\"\n{PEERS}"));
            assert_err(&e, "state_dir", Some("testd.toml"), "must not be empty");

            jail.set_env("TESTD_STATE_DIR", "/srv/state");
            let cfg = load_file(jail, &format!("node_id = 1\n{PEERS}"))?;
            assert_eq!(cfg.common.state_dir(), Path::new("/srv/state"));
            jail.set_env("TESTD_STATE_DIR", "");
            let e = load_err(jail, &file("", ""));
            assert_err(&e, "state_dir", Some("environment variable TESTD_STATE_DIR"), "must not be empty");
            Ok(())
        });
    }

    #[test]
    fn peers_empty() {
        jailed(|jail| {
            let e = load_err(jail, "node_id = 1\n");
            assert_err(&e, "peers", None, "empty");
            let e = load_err(jail, "node_id = 1\npeers = []\n");
            assert_err(&e, "peers", Some("testd.toml"), "empty");
            Ok(())
        });
    }

    #[test]
    fn peers_duplicate_id_and_addr_and_zero() {
        jailed(|jail| {
            let e = load_err(jail, &file("", "[[peers]]\nid = 2\naddr = \"127.0.0.1:7104\"\n"));
            assert_err(&e, "peers[3] (id 2).id", Some("testd.toml"), "node id 2 appears more than once");

            let e = load_err(jail, &file("", "[[peers]]\nid = 4\naddr = \"127.0.0.1:7102\"\n"));
            assert_err(
                &e,
                "peers[3] (id 4).addr",
                Some("testd.toml"),
                "127.0.0.1:7102 is used by more than one member",
            );

            let e = load_err(jail, &file("", "[[peers]]\nid = 0\naddr = \"127.0.0.1:7104\"\n"));
            assert_err(&e, "peers[3] (id 0).id", Some("testd.toml"), "reserved");
            Ok(())
        });
    }

    #[test]
    fn self_not_in_peers() {
        jailed(|jail| {
            let e = load_err(jail, &format!("node_id = 4\n{PEERS}"));
            assert_err(&e, "node_id", Some("testd.toml"), "4 is not among the peers (ids 1, 2, 3)");
            Ok(())
        });
    }

    #[test]
    fn port_clashes() {
        jailed(|jail| {
            let e = load_err(jail, &file("client_listen = \"127.0.0.1:7101\"", ""));
            assert_err(&e, "client_listen", Some("testd.toml"), "clashes with listen 127.0.0.1:7101 (default)");

            let e = load_err(jail, &file("metrics_listen = \"0.0.0.0:7201\"", ""));
            assert_err(&e, "metrics_listen", Some("testd.toml"), "clashes with client_listen 127.0.0.1:7201 (default)");

            let e = load_err(jail, &file("listen = \"127.0.0.1:9000\"\nmetrics_listen = \"127.0.0.1:9000\"", ""));
            assert_err(&e, "metrics_listen", Some("testd.toml"), "clashes with listen");

            let e = load_err(jail, &file("client_listen = \"127.0.0.1:7102\"", ""));
            assert_err(&e, "client_listen", Some("testd.toml"), "clashes with peer 2's address");

            // Different interfaces on one port do not clash.
            load_file(jail, &file("listen = \"10.0.0.1:7101\"\nclient_listen = \"127.0.0.1:7101\"", ""))?;
            Ok(())
        });
    }

    #[test]
    fn derived_port_out_of_range() {
        jailed(|jail| {
            let e = load_err(jail, &file("listen = \"127.0.0.1:65500\"", ""));
            assert_err(&e, "client_listen", None, "above 65535");
            Ok(())
        });
    }

    #[test]
    fn suspect_must_exceed_heartbeat() {
        jailed(|jail| {
            let e = load_err(jail, &file("", "[timing]\nheartbeat_ms = 300\n"));
            assert_err(&e, "timing.suspect_after_ms", None, "must be greater than timing.heartbeat_ms (300)");

            let e = load_err(jail, &file("", "[timing]\nheartbeat_ms = 100\nsuspect_after_ms = 100\n"));
            assert_err(&e, "timing.suspect_after_ms", Some("testd.toml"), "100 must be greater");

            let e = load_err(jail, &file("", "[timing]\nheartbeat_ms = 0\n"));
            assert_err(&e, "timing.heartbeat_ms", Some("testd.toml"), "0 is out of range: expected 1 to 3600000");
            Ok(())
        });
    }

    #[test]
    fn limits_must_be_positive() {
        jailed(|jail| {
            for key in ["max_frame_bytes", "send_queue_len", "max_connections", "max_clients"] {
                let e = load_err(jail, &file("", &format!("[limits]\n{key} = 0\n")));
                assert_err(&e, &format!("limits.{key}"), Some("testd.toml"), "0 is out of range: expected");
            }
            jail.set_env("TESTD_LIMITS__SEND_QUEUE_LEN", 0);
            let e = load_err(jail, &file("", ""));
            assert_err(
                &e,
                "limits.send_queue_len",
                Some("environment variable TESTD_LIMITS__SEND_QUEUE_LEN"),
                "0 is out of range: expected 1 to 1048576",
            );
            Ok(())
        });
    }

    /// Every bounded key, just outside its range (both ends where the type
    /// allows), with a value from the file, names the key and the range;
    /// huge values (which tokio would panic on) included.
    #[test]
    fn a_table_checks_map_entries_and_floats() {
        #[derive(Serialize)]
        struct T {
            rate: f64,
            services: std::collections::BTreeMap<String, Svc>,
        }
        #[derive(Serialize)]
        struct Svc {
            timeout_ms: u64,
        }
        let table: &[Bound] = &[("rate", 0, 1), ("services.*.timeout_ms", 1, 10), ("absent", 1, 2)];
        let svc = |ms| std::collections::BTreeMap::from([("a".to_owned(), Svc { timeout_ms: ms })]);
        assert_eq!(check_table(&T { rate: 0.5, services: svc(10) }, table), Ok(()));
        let e = check_table(&T { rate: 0.5, services: svc(0) }, table).unwrap_err();
        assert_err(&e, "services.a.timeout_ms", None, "0 is out of range: expected 1 to 10");
        for rate in [1.5, -0.1, f64::NAN] {
            let e = check_table(&T { rate, services: svc(1) }, table).unwrap_err();
            assert_err(&e, "rate", None, &format!("{rate} is out of range: expected 0 to 1"));
        }
    }

    #[test]
    fn every_numeric_key_is_bounded() {
        jailed(|jail| {
            // node_id (a u32, at least 1) has its own tests.
            for (key, min, max) in BOUNDS.iter().filter(|(k, _, _)| k.contains('.')) {
                let (section, name) = key.split_once('.').unwrap_or(("", key));
                let mut bad = vec![max + 1, u64::from(u32::MAX) + 1, 1 << 62];
                if *min > 0 {
                    bad.push(min - 1);
                }
                for v in bad {
                    let body = if section.is_empty() {
                        format!("{name} = {v}\n")
                    } else {
                        format!("[{section}]\n{name} = {v}\n")
                    };
                    let e = load_err(jail, &file("", &body));
                    assert_eq!(e.key.as_deref(), Some(*key), "{key} = {v}: {e:?}");
                }
            }
            Ok(())
        });
    }

    #[test]
    fn peer_idle_timeout_must_exceed_three_suspicion_timeouts() {
        jailed(|jail| {
            let e = load_err(jail, &file("", "[limits]\npeer_idle_timeout_ms = 750\n"));
            assert_err(
                &e,
                "limits.peer_idle_timeout_ms",
                Some("testd.toml"),
                "750 must be above 3 × timing.suspect_after_ms (750)",
            );
            let cfg = load_file(jail, &file("", "[limits]\npeer_idle_timeout_ms = 751\n"))?;
            assert_eq!(cfg.common.limits.peer_idle_timeout_ms, 751);
            Ok(())
        });
    }

    #[test]
    fn bad_log_level() {
        jailed(|jail| {
            let e = load_err(jail, &file("log_level = \"wire=[\"", ""));
            assert_err(&e, "log_level", Some("testd.toml"), "not a valid tracing filter");
            // Valid EnvFilter syntax (target `loud` at trace), but nothing
            // else would ever be logged: a mistyped level.
            let e = load_err(jail, &file("log_level = \"loud\"", ""));
            assert_err(&e, "log_level", Some("testd.toml"), "\"loud\" is not a level");
            assert!(e.to_string().starts_with("key 'log_level' in testd.toml: "), "{e}");
            let e = load_err(jail, &file("log_level = \"info,loud\"", ""));
            assert_err(&e, "log_level", Some("testd.toml"), "\"loud\" is not a level");
            let e = load_err(jail, &file("log_level = \"\"", ""));
            assert_err(&e, "log_level", Some("testd.toml"), "empty");
            for good in [
                "trace",
                "DEBUG",
                "info",
                "warn",
                "error",
                "off",
                "info,wire=debug",
                "wire=trace",
                "warn,runtime[join]=debug",
            ] {
                let cfg = load_file(jail, &file(&format!("log_level = {good:?}"), ""))?;
                assert_eq!(cfg.common.log_level, good);
            }
            Ok(())
        });
    }

    #[test]
    fn cluster_key_file_checks() {
        jailed(|jail| {
            let dir = jail.directory().to_owned();
            let with_key = |name: &str| file(&format!("cluster_key_file = {:?}", dir.join(name)), "");
            let chmod = |name: &str, mode: u32| {
                std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(mode)).unwrap()
            };

            let e = load_err(jail, &with_key("missing.key"));
            assert_err(&e, "cluster_key_file", Some("testd.toml"), "cannot read");

            jail.create_binary("raw.key", &[7u8; 32])?;
            chmod("raw.key", 0o600);
            load_file(jail, &with_key("raw.key"))?;

            jail.create_file("hex.key", &format!("{}\n", "ab".repeat(32)))?;
            chmod("hex.key", 0o400);
            load_file(jail, &with_key("hex.key"))?;

            jail.create_binary("short.key", &[7u8; 31])?;
            chmod("short.key", 0o600);
            let e = load_err(jail, &with_key("short.key"));
            assert_err(&e, "cluster_key_file", Some("testd.toml"), "32 raw bytes or 64 hex digits");

            jail.create_file("nothex.key", &"zz".repeat(32))?;
            chmod("nothex.key", 0o600);
            let e = load_err(jail, &with_key("nothex.key"));
            assert_err(&e, "cluster_key_file", Some("testd.toml"), "64 hex digits");

            chmod("raw.key", 0o640);
            let e = load_err(jail, &with_key("raw.key"));
            assert_err(&e, "cluster_key_file", Some("testd.toml"), "mode 0640");
            chmod("raw.key", 0o604);
            let e = load_err(jail, &with_key("raw.key"));
            assert_err(&e, "cluster_key_file", Some("testd.toml"), "group or others");
            Ok(())
        });
    }

    #[test]
    fn daemon_validation_runs_after_common() {
        jailed(|jail| {
            let e = load_err(jail, &file("grant_ttl_ms = 100", ""));
            assert_err(&e, "grant_ttl_ms", Some("testd.toml"), "must exceed timing.suspect_after_ms");
            jail.set_env("TESTD_GRANT_TTL_MS", 200);
            let e = load_err(jail, &file("", ""));
            assert_err(&e, "grant_ttl_ms", Some("environment variable TESTD_GRANT_TTL_MS"), "must exceed");
            Ok(())
        });
    }

    #[test]
    fn unknown_key_at_top_level() {
        jailed(|jail| {
            let e = load_err(jail, &file("node_idd = 3", ""));
            assert_err(&e, "node_idd", Some("testd.toml"), "did you mean 'node_id'?");
            assert_eq!(e.to_string(), "key 'node_idd' in testd.toml: unknown key (did you mean 'node_id'?)");

            let e = load_err(jail, &file("frobnicate = true", ""));
            assert_err(&e, "frobnicate", Some("testd.toml"), "expected one of: algorithm, client_listen");
            Ok(())
        });
    }

    #[test]
    fn unknown_key_nested() {
        jailed(|jail| {
            let e = load_err(jail, &file("", "[timing]\nheartbeat_msx = 3\n"));
            assert_err(&e, "timing.heartbeat_msx", Some("testd.toml"), "did you mean 'heartbeat_ms'?");

            let e = load_err(jail, &file("", "[retry]\nattempt = 3\n"));
            assert_err(&e, "retry.attempt", Some("testd.toml"), "did you mean 'attempts'?");

            let e = load_err(jail, &file("", "[services.echo]\ncommand = \"echo\"\ncmd = \"x\"\n"));
            assert_err(&e, "services.echo.cmd", Some("testd.toml"), "unknown key");
            Ok(())
        });
    }

    #[test]
    fn unknown_key_in_peers() {
        jailed(|jail| {
            let e = load_err(jail, &file("", "[[peers]]\nid = 4\naddr = \"127.0.0.1:7104\"\nadr = \"x\"\n"));
            assert_err(&e, "peers[3] (id 4).adr", Some("testd.toml"), "did you mean 'addr'?");
            Ok(())
        });
    }

    #[test]
    fn unknown_key_from_env() {
        jailed(|jail| {
            jail.set_env("TESTD_TIMING__HEARTBEAT_MSX", 3);
            let e = load_err(jail, &file("", ""));
            assert_err(
                &e,
                "timing.heartbeat_msx",
                Some("environment variable TESTD_TIMING__HEARTBEAT_MSX"),
                "did you mean 'heartbeat_ms'?",
            );
            assert_eq!(
                e.to_string(),
                "key 'timing.heartbeat_msx' in environment variable TESTD_TIMING__HEARTBEAT_MSX: \
                 unknown key (did you mean 'heartbeat_ms'?)"
            );
            Ok(())
        });
        jailed(|jail| {
            jail.set_env("TESTD_LOG", "debug");
            let e = load_err(jail, &file("", ""));
            assert_err(&e, "log", Some("environment variable TESTD_LOG"), "unknown key");
            Ok(())
        });
    }

    #[test]
    fn wrong_type_names_key_and_source() {
        jailed(|jail| {
            let e = load_err(jail, &file("", "[timing]\nheartbeat_ms = \"x\"\n"));
            assert_eq!(
                e.to_string(),
                "key 'timing.heartbeat_ms' in testd.toml: invalid type: found string \"x\", expected u64"
            );

            let e = load_err(jail, &file("", "[[peers]]\nid = 4\naddr = \"nowhere\"\n"));
            assert_err(&e, "peers[3] (id 4).addr", Some("testd.toml"), "invalid socket address");
            assert!(e.to_string().starts_with("key 'peers[3] (id 4).addr' in testd.toml: "), "{e}");

            let e = load_err(jail, &file("log_format = \"xml\"", ""));
            assert_err(&e, "log_format", Some("testd.toml"), "xml");

            let e = load_err(jail, &file("", "[[peers]]\nid = 4\n"));
            assert_err(&e, "peers[3] (id 4).addr", Some("testd.toml"), "missing");

            jail.set_env("TESTD_CLUSTER_ID", "abc");
            let e = load_err(jail, &file("", ""));
            assert_err(&e, "cluster_id", Some("environment variable TESTD_CLUSTER_ID"), "invalid type");
            Ok(())
        });
    }

    #[test]
    fn unreadable_or_malformed_file() {
        jailed(|jail| {
            let e =
                load::<TestD>(&CommonArgs { config: Some("absent.toml".into()), ..CommonArgs::default() }).unwrap_err();
            assert_eq!(e.key, None);
            assert_eq!(e.origin.as_deref(), Some("absent.toml"));
            assert!(e.message.contains("cannot read config file"), "{e}");

            let e = load_err(jail, "node_id = = 1\n");
            assert!(e.to_string().contains("testd.toml"), "{e}");
            Ok(())
        });
    }

    #[test]
    fn daemon_keys_with_renames_and_maps_are_accepted() {
        jailed(|jail| {
            jail.create_file(
                "kebabd.toml",
                &file("max-hold-ms = 30", "[chaos]\ndrop-rate = 0.5\n\n[services.a]\ncommand = \"x\"\n"),
            )?;
            let args = CommonArgs { config: Some("kebabd.toml".into()), ..CommonArgs::default() };
            // `services` belongs to TestD, not KebabD.
            let e = load::<KebabD>(&args).unwrap_err();
            assert_err(&e, "services", Some("kebabd.toml"), "unknown key");

            jail.create_file("kebabd.toml", &file("max-hold-ms = 30", "[chaos]\ndrop-rate = 0.5\n"))?;
            let cfg = load::<KebabD>(&args)?;
            assert_eq!(cfg.daemon, KebabD { max_hold_ms: 30, chaos: Chaos { drop_rate: 0.5 } });

            jail.create_file("kebabd.toml", &file("max_hold_ms = 30", ""))?;
            let e = load::<KebabD>(&args).unwrap_err();
            assert_err(&e, "max_hold_ms", Some("kebabd.toml"), "did you mean 'max-hold-ms'?");

            let two = "[services.a]\ncommand = \"a\"\n\n[services.b]\ncommand = \"b\"\n";
            let cfg = load_file(jail, &file("", two))?;
            assert_eq!(cfg.daemon.services.keys().collect::<Vec<_>>(), ["a", "b"]);
            Ok(())
        });
    }

    #[test]
    fn effective_toml_round_trips() {
        jailed(|jail| {
            jail.set_env("TESTD_RETRY__ATTEMPTS", 5);
            let top = "cluster_id = 3\ngrant_ttl_ms = 900";
            let tables = "[timing]\nheartbeat_ms = 25\n\n[services.echo]\ncommand = \"echo\"\n";
            let cfg = load_file(jail, &file(top, tables))?;
            let text = effective_toml(&cfg);
            assert!(text.contains("listen = \"127.0.0.1:7101\""), "{text}");
            assert!(text.contains("client_listen = \"127.0.0.1:7201\""), "{text}");
            assert!(text.contains("metrics_listen = \"127.0.0.1:9101\""), "{text}");
            assert!(text.contains("attempts = 5"), "{text}");

            jail.clear_env();
            jail.create_file("effective.toml", &text)?;
            let again = load::<TestD>(&CommonArgs { config: Some("effective.toml".into()), ..CommonArgs::default() })?;
            let mut resolved = cfg.common.clone();
            resolved.listen = Some(cfg.common.listen_addr());
            resolved.client_listen = Some(cfg.common.client_addr());
            resolved.metrics_listen = Some(cfg.common.metrics_addr());
            assert_eq!(again.common, resolved);
            assert_eq!(again.daemon, cfg.daemon);
            assert_eq!(effective_toml(&again), text);
            Ok(())
        });
    }

    /// `--check-config`'s worst cases follow the effective configuration
    /// as comments: the output still loads, to the same configuration.
    #[test]
    fn worst_cases_are_comments_after_the_effective_configuration() {
        jailed(|jail| {
            let cfg = load_file(jail, &file("grant_ttl_ms = 900", ""))?;
            let rows = worst_cases_toml(&cfg);
            assert!(rows.contains("N = 3"), "{rows}");
            assert!(
                rows.contains("holder's daemon killed -> next grant") && rows.contains("1001 ms"),
                "rounded up: {rows}"
            );
            assert!(rows.contains("unbounded  = every peer's answer"), "{rows}");
            assert!(rows.lines().all(|l| l.is_empty() || l.starts_with('#')), "{rows}");
            let text = effective_toml(&cfg) + &rows;
            jail.create_file("effective.toml", &text)?;
            let again = load::<TestD>(&CommonArgs { config: Some("effective.toml".into()), ..CommonArgs::default() })?;
            assert_eq!(again.daemon, cfg.daemon);
            let kebab = Config { common: cfg.common.clone(), daemon: KebabD::default() };
            assert_eq!(worst_cases_toml(&kebab), "", "no rows, no text");
            Ok(())
        });
    }

    #[test]
    fn load_from_a_hand_built_figment() {
        let figment =
            Figment::new().merge(Toml::string(&file("", ""))).merge(Serialized::default("timing.heartbeat_ms", 10));
        let cfg = load_from::<TestD>(&figment).unwrap();
        assert_eq!(cfg.common.timing.heartbeat_ms, 10);
    }

    #[test]
    fn error_display_forms() {
        let e = |key: Option<&str>, origin: Option<&str>| ConfigError {
            key: key.map(Into::into),
            origin: origin.map(Into::into),
            message: "bad".into(),
        };
        assert_eq!(e(Some("a.b"), Some("/etc/x.toml")).to_string(), "key 'a.b' in /etc/x.toml: bad");
        assert_eq!(e(Some("a.b"), None).to_string(), "key 'a.b': bad");
        assert_eq!(e(None, Some("/etc/x.toml")).to_string(), "/etc/x.toml: bad");
        assert_eq!(e(None, None).to_string(), "bad");
    }

    #[test]
    fn key_paths_render_and_parse() {
        let path: Vec<String> = ["peers", "3", "addr"].map(String::from).to_vec();
        assert_eq!(render_key(&path), "peers[3].addr");
        assert_eq!(parse_key("peers[3].addr"), path);
        assert_eq!(edit_distance("heartbeat_msx", "heartbeat_ms"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn integers_beyond_toml_range_are_rejected() {
        jailed(|jail| {
            jail.set_env("TESTD_RETRY__BACKOFF_MS", u64::MAX);
            let e = load_err(jail, &file("", ""));
            assert_err(
                &e,
                "retry.backoff_ms",
                Some("environment variable TESTD_RETRY__BACKOFF_MS"),
                "18446744073709551615 is out of range",
            );
            Ok(())
        });
    }
}

//! A whole daemon's life, the same for all four: config, logging, metrics,
//! transports, client API, systemd notify, signals, the driver loop, exit
//! status. A daemon's `main.rs` only says which core to build.

use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ftcore::{Context, Incarnation, Protocol};
use std::sync::Arc;
use timer::{Clock, RealClock};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use wire::{ClusterKey, LinkStats, TcpTransport, Transport, TransportConfig, UdpTransport};

use crate::config::{self, CommonArgs, Config, DaemonConfig, Limits, EXIT_CONFIG};
use crate::driver::{Driver, EventHook};
use crate::metrics::Metrics;
use crate::notify::Notifier;
use crate::state::{self, NodeState, Started};
use crate::{client_api, logging};

/// Why a daemon stopped at run time (exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The metrics exporter could not start.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::MetricsError),
    /// The peer transport could not bind.
    #[error("cannot listen for peers: {0}")]
    Transport(#[from] wire::TransportError),
    /// The client API could not bind.
    #[error("cannot listen for clients on {addr}: {source}")]
    ClientListen {
        /// The configured `client_listen`.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The core refused its settings.
    #[error("cannot start the protocol: {0}")]
    Core(String),
    /// The node's state could not be stored (it must not go on speaking).
    #[error("cannot store the node's state: {0}")]
    Store(String),
    /// The signal handlers could not be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
}

/// Exit status for a failure at run time (a port already taken, …).
pub const EXIT_RUNTIME: u8 = 1;

/// Which transport the protocol runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportKind {
    /// Reliable, ordered, reconnecting (ringd, ntmutexd, electd).
    Tcp,
    /// Datagrams (tokenwatchd).
    Udp,
}

/// Derives the core's settings from the daemon's config (already
/// validated; the core validates its own settings once more when it
/// starts, with the same typed error).
pub type CoreConfig<D, P> = fn(&Config<D>) -> <P as Protocol>::Config;

/// How to make one daemon out of the shared runtime.
pub struct DaemonSpec<D: DaemonConfig, P: Protocol> {
    /// Metric name prefix (`ntmutex`, `ringd`, …).
    pub metrics_prefix: &'static str,
    /// TCP or UDP between peers.
    pub transport: TransportKind,
    /// The core's settings.
    pub core_config: CoreConfig<D, P>,
    /// Turns the core's events into metrics and logs.
    pub on_event: EventHook<P>,
    /// Declares the daemon's own metrics once at start (counters at 0, so
    /// dashboards and alerts see them before the first event).
    pub declare: fn(&Metrics),
}

impl<D: DaemonConfig, P: Protocol> std::fmt::Debug for DaemonSpec<D, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonSpec").field("metrics_prefix", &self.metrics_prefix).finish_non_exhaustive()
    }
}

/// A daemon's whole `main`: parses the common flags (`--help` and
/// `--version` use `about` and `version`), then [`run`]s.
pub fn main<D: DaemonConfig, P: Protocol + Send + 'static>(
    about: &'static str,
    version: &'static str,
    spec: DaemonSpec<D, P>,
) -> ExitCode {
    use clap::{Args, FromArgMatches};
    // The about text goes on after the flags: `CommonArgs`'s own doc would
    // otherwise replace it.
    // `--config`'s example names this daemon's own file.
    let example = format!("TOML configuration file (e.g. /etc/ftcoord/{}.toml)", D::NAME);
    let cmd = CommonArgs::augment_args(clap::Command::new(D::NAME))
        .version(version)
        .about(about)
        .mut_arg("config", |a| a.help(example));
    let args = CommonArgs::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit());
    run(&args, spec)
}

/// Runs a daemon to completion and returns its exit status: 0 after a
/// clean shutdown, 2 for a bad config, 1 for a failure at run time.
pub fn run<D: DaemonConfig, P: Protocol + Send + 'static>(args: &CommonArgs, spec: DaemonSpec<D, P>) -> ExitCode {
    let cfg = config::exit_on_error(config::load::<D>(args));
    if args.check_config {
        print!("{}{}", config::effective_toml(&cfg), config::worst_cases_toml(&cfg));
        return ExitCode::SUCCESS;
    }
    logging::init(cfg.common.log_format, &cfg.common.log_level);
    let mut cfg = cfg;
    let nofile = raise_nofile();
    let (limits, warning) = fit_to_nofile(cfg.common.limits, cfg.common.peers.len(), nofile);
    if let Some(w) = warning {
        tracing::warn!("{w}");
    }
    cfg.common.limits = limits;
    let key = match cfg.common.cluster_key_file.as_ref().map(ClusterKey::load).transpose() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("{}: key 'cluster_key_file': {e}", D::NAME);
            return ExitCode::from(EXIT_CONFIG as u8);
        }
    };
    // Durable state before any socket: the directory's lock, the state file
    // and this life's incarnation, stored before the node speaks.
    let wall_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let state = match state::start::<P::Durable>(cfg.common.state_dir(), D::NAME, wall_ms) {
        Ok(s) => s,
        Err(e) => {
            say_fatal(D::NAME, &e);
            return ExitCode::from(if e.is_config_problem() { EXIT_CONFIG as u8 } else { EXIT_RUNTIME });
        }
    };
    tracing::info!(
        state_file = %state.dir.state_file().display(),
        incarnation = state.incarnation,
        stored = ?state.stored_incarnation,
        new_cluster = args.new_cluster,
        "state loaded and incarnation stored"
    );
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}: cannot start the async runtime: {e}", D::NAME);
            return ExitCode::from(EXIT_RUNTIME);
        }
    };
    match runtime.block_on(serve(cfg, key, spec, state, args.new_cluster)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            say_fatal(D::NAME, &e);
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

/// Says once why the daemon stops: as a plain `NAME: error` line on stderr
/// (where the log goes too: logging it as well printed it twice), or as a
/// log event when the log is JSON (a shipper reads one object per line).
fn say_fatal(name: &str, e: &dyn std::fmt::Display) {
    if let Some(line) = fatal_line(name, e, logging::current_format()) {
        eprintln!("{line}");
    } else {
        tracing::error!("{e}");
    }
}

/// The plain line [`say_fatal`] prints, `None` when it logs instead.
fn fatal_line(name: &str, e: &dyn std::fmt::Display, format: Option<logging::LogFormat>) -> Option<String> {
    let json = format == Some(logging::LogFormat::Json) && tracing::enabled!(tracing::Level::ERROR);
    (!json).then(|| format!("{name}: {e}"))
}

async fn serve<D: DaemonConfig, P: Protocol + Send + 'static>(
    cfg: Config<D>,
    key: Option<ClusterKey>,
    spec: DaemonSpec<D, P>,
    // Holds the state directory's lock until the daemon exits.
    state: Started<P::Durable>,
    new_cluster: bool,
) -> Result<(), DaemonError> {
    let common = &cfg.common;
    let me = common.node();
    if key.is_none() {
        tracing::warn!("no cluster_key_file configured: peer traffic is unauthenticated");
    }
    let metrics = Metrics::install(spec.metrics_prefix, common.metrics_addr())?;
    (spec.declare)(&metrics);

    let clock = RealClock::new();
    let incarnation = Incarnation(state.incarnation);
    metrics.incarnation(incarnation.0);

    let membership = common.membership();
    let mut tcfg = TransportConfig::new(me, common.listen_addr(), membership.clone(), common.cluster_id);
    tcfg.incarnation = incarnation;
    tcfg.key = key;
    tcfg.max_frame = common.limits.max_frame_bytes;
    tcfg.queue_len = common.limits.send_queue_len;
    tcfg.max_connections = common.limits.max_connections;
    tcfg.handshake_timeout = Duration::from_millis(common.limits.handshake_timeout_ms);
    tcfg.idle_timeout = Duration::from_millis(common.limits.peer_idle_timeout_ms);
    tcfg.accept_backoff = Duration::from_millis(common.limits.accept_backoff_ms);
    let peer_stats = Arc::new(LinkStats::new(common.limits.log_burst_per_s));
    tcfg.stats = peer_stats.clone();
    tcfg.chaos = cfg.daemon.chaos();
    if let Some(c) = tcfg.chaos {
        tracing::warn!(
            drop_rate = c.drop_rate,
            dup_rate = c.dup_rate,
            delay_ms = c.delay.as_millis() as u64,
            "CHAOS IS ON: outgoing peer datagrams are dropped, duplicated and delayed on purpose (chaos.* keys)"
        );
    }
    // Small: the transport keeps an inbox per peer and merges them in
    // turn, so what waits here is all another peer's message waits behind.
    let (peer_tx, peer_rx) = mpsc::channel(PEER_CHANNEL);
    let transport: Box<dyn Transport<P::Msg>> = match spec.transport {
        TransportKind::Tcp => Box::new(TcpTransport::bind(tcfg, peer_tx).await?),
        TransportKind::Udp => Box::new(UdpTransport::bind(tcfg, peer_tx).await?),
    };

    let stop = CancellationToken::new();
    let (client_tx, client_rx) = mpsc::channel(4096);
    let client_stats = Arc::new(LinkStats::new(common.limits.log_burst_per_s));
    let client_limits = client_api::ClientLimits {
        max_clients: common.limits.max_clients,
        max_frame: common.limits.max_frame_bytes,
        credit: common.limits.client_credit,
        accept_backoff: Duration::from_millis(common.limits.accept_backoff_ms),
    };
    let (client_addr, client_task) = client_api::serve::<P::Request, P::Reply>(
        common.client_addr(),
        client_limits,
        client_stats.clone(),
        client_tx,
        stop.clone(),
    )
    .await
    .map_err(|source| DaemonError::ClientListen { addr: common.client_addr(), source })?;

    let Started { dir, core: stored_core, .. } = state;
    let ctx = Context {
        me,
        incarnation,
        membership: membership.clone(),
        now: clock.now(),
        seed: incarnation.0 ^ (u64::from(me.0) << 48),
        config: (spec.core_config)(&cfg),
        stored: stored_core.clone(),
        new_cluster,
    };
    let core = P::start(ctx).map_err(|e| DaemonError::Core(e.to_string()))?;

    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone())?;

    tracing::info!(
        node = me.0,
        incarnation = incarnation.0,
        peer = %transport.local_addr(),
        client = %client_addr,
        metrics = %common.metrics_addr(),
        "{} listening; joining",
        D::NAME
    );
    // READY=1 comes from the driver once the core has joined.
    let notifier = Notifier::from_env();
    let leave_grace = (common.timing.suspect_after() * 4).max(Duration::from_secs(1));
    Driver {
        core,
        clock,
        transport,
        peers: peer_rx,
        clients: client_rx,
        metrics,
        peer_stats,
        client_stats,
        on_event: spec.on_event,
        membership,
        notifier,
        shutdown,
        leave_grace,
        // The directory (and its lock) lives as long as the driver: the
        // core's Persist outputs and any new life are written here, fsynced,
        // before what follows them is sent.
        persist: Box::new(move |inc, core| {
            dir.store(&NodeState { incarnation: inc.0, core: core.cloned() }).map_err(|e| e.to_string())
        }),
        stored: (incarnation, stored_core),
        jobs: crate::driver::Jobs::new(crate::supervisor::supervisor_path()),
    }
    .run()
    .await
    .map_err(DaemonError::Store)?;
    stop.cancel();
    let _ = client_task.await;
    Ok(())
}

/// The driver's channel of peer messages and rejections (see `serve`).
const PEER_CHANNEL: usize = 64;

/// Descriptors kept for everything but connections: listeners, the state
/// file and its directory, the metrics endpoint, logs, the runtime.
const FD_RESERVE: usize = 64;

/// Raises the soft open-file limit to the hard one; returns the limit in
/// force (`None` if it cannot be read).
fn raise_nofile() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let wanted = rustix::process::Rlimit { current: lim.maximum, maximum: lim.maximum };
        match setrlimit(Resource::Nofile, wanted) {
            Ok(()) => lim = getrlimit(Resource::Nofile),
            Err(e) => tracing::warn!("cannot raise the open-file limit to its hard limit: {e}"),
        }
    }
    // `None` (unlimited) counts as plenty.
    Some(lim.current.unwrap_or(u64::MAX))
}

/// Clamps the connection limits so that every connection they allow, each
/// peer's outgoing link and [`FD_RESERVE`] fit in `nofile` descriptors:
/// client slots go first, then unauthenticated peer slots (keeping one per
/// peer). Returns the limits and, if they changed, a warning naming them.
pub fn fit_to_nofile(mut limits: Limits, peers: usize, nofile: Option<u64>) -> (Limits, Option<String>) {
    let Some(nofile) = nofile else { return (limits, None) };
    let nofile = usize::try_from(nofile).unwrap_or(usize::MAX);
    // Each peer: one outgoing link, one authenticated incoming one.
    let fixed = FD_RESERVE.saturating_add(peers.saturating_mul(2));
    let need = fixed.saturating_add(limits.max_clients).saturating_add(limits.max_connections);
    if need <= nofile {
        return (limits, None);
    }
    let (clients, conns) = (limits.max_clients, limits.max_connections);
    let room = nofile.saturating_sub(fixed);
    limits.max_connections = conns.min((room / 4).max(peers.max(1)));
    limits.max_clients = clients.min(room.saturating_sub(limits.max_connections)).max(1);
    let warning = format!(
        "open-file limit {nofile} is too low for limits.max_clients = {clients} and limits.max_connections = {conns} \
         ({need} descriptors with {fixed} kept for peers and files): using max_clients = {} and \
         max_connections = {}; raise LimitNOFILE= to serve more",
        limits.max_clients, limits.max_connections
    );
    (limits, Some(warning))
}

/// SIGTERM or SIGINT cancel `token` (a second signal exits at once).
fn spawn_signal_handler(token: CancellationToken) -> Result<(), DaemonError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(DaemonError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(DaemonError::Signals)?;
    tokio::spawn(async move {
        let mut seen = false;
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            if seen {
                std::process::exit(0);
            }
            seen = true;
            token.cancel();
        }
    });
    Ok(())
}

#[cfg(test)]
mod nofile_tests {
    use super::*;

    #[test]
    fn a_fatal_error_is_said_once_as_a_plain_line_unless_the_log_is_json() {
        let e = "cannot listen for peers: 127.0.0.1:7101: Address in use";
        assert_eq!(
            fatal_line("hbringd", &e, Some(logging::LogFormat::Text)).as_deref(),
            Some("hbringd: cannot listen for peers: 127.0.0.1:7101: Address in use")
        );
        assert!(fatal_line("hbringd", &e, None).is_some());
    }

    #[test]
    fn limits_that_fit_are_kept() {
        let l = Limits::default();
        assert_eq!(fit_to_nofile(l, 4, Some(20_000)), (l, None));
        assert_eq!(fit_to_nofile(l, 4, None), (l, None));
        // 64 + 2·4 + 256 + 1024 = 1352 exactly.
        assert_eq!(fit_to_nofile(l, 4, Some(1352)), (l, None));
    }

    #[test]
    fn a_low_limit_clamps_clients_then_connections_and_says_so() {
        let l = Limits::default();
        let (got, warning) = fit_to_nofile(l, 2, Some(1024));
        // Room 1024 − 68 = 956: connections keep 239 (a quarter), clients 717.
        assert_eq!((got.max_connections, got.max_clients), (239, 717));
        let w = warning.unwrap();
        assert!(w.contains("open-file limit 1024") && w.contains("max_clients = 717"), "{w}");
        let (got, _) = fit_to_nofile(l, 2, Some(128));
        assert_eq!((got.max_connections, got.max_clients), (15, 45));
        assert!(68 + got.max_connections + got.max_clients <= 128);
        // Hopelessly low: one slot each, never zero.
        let (got, _) = fit_to_nofile(l, 2, Some(10));
        assert_eq!((got.max_connections, got.max_clients), (2, 1));
    }
}

//! `ntmutexd`: a cluster-wide mutex daemon (see the crate docs).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use ntmutexd::{NtNode, NtmutexdConfig};
use runtime::config::CommonArgs;
use runtime::daemon::{self, DaemonSpec, TransportKind};

/// A cluster-wide mutex: Naimi-Trehel with COMMIT and M1/M2/M3 recovery.
/// Clients use `ftctl lock -- CMD` against `client_listen`.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> ExitCode {
    let args = Args::parse();
    daemon::run::<NtmutexdConfig, NtNode>(
        &args.common,
        DaemonSpec {
            metrics_prefix: "ntmutex",
            transport: TransportKind::Tcp,
            build: Box::new(|cfg, ctx| {
                NtNode::new(cfg.daemon.core(&cfg.common), &ctx.membership, ctx.me, ctx.incarnation, ctx.now)
            }),
            on_event: Box::new(ntmutexd::metrics::record),
        },
    )
}

//! `tokenwatchd`: a token ring over lossy UDP (see the crate docs).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use runtime::daemon::{self, DaemonSpec, TransportKind};
use tokenwatchd::{TokenwatchdConfig, TwNode};

fn main() -> ExitCode {
    daemon::main::<TokenwatchdConfig, TwNode>(
        "A token ring over lossy UDP whose token is never lost or duplicated: token passing \
         counter, ACK with TTL, bypass and regeneration by a majority-promised Claim. Clients \
         use `ftctl lock -- CMD` against client_listen.",
        env!("FTCOORD_VERSION"),
        DaemonSpec {
            metrics_prefix: "tokenwatch",
            transport: TransportKind::Udp,
            core_config: |cfg| cfg.daemon.core(&cfg.common),
            on_event: Box::new(tokenwatchd::metrics::record),
            declare: tokenwatchd::metrics::declare,
        },
    )
}

//! `ringd`: a ring of replicas with least-loaded lookup and token services
//! (see the crate docs).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use ringd::{RdNode, RingdConfig};
use runtime::daemon::{self, DaemonSpec, TransportKind};

fn main() -> ExitCode {
    daemon::main::<RingdConfig, RdNode>(
        "A ring of replicas: ring repair on the heartbeat ring, one token regenerated only by a \
         census a majority promised, least-loaded lookup, and services (token services under a \
         majority lease and a fence). Clients use `ftctl lookup` and `ftctl exec SERVICE ARGS` \
         against client_listen.",
        env!("FTCOORD_VERSION"),
        DaemonSpec {
            metrics_prefix: "ringd",
            transport: TransportKind::Tcp,
            core_config: |cfg| cfg.daemon.core(&cfg.common),
            on_event: Box::new(ringd::metrics::record),
            declare: ringd::metrics::declare,
        },
    )
}

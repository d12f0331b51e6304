//! `electd`: ring leader election and a FIFO coordinator (see the crate docs).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use electd::{ElNode, ElectdConfig};
use runtime::daemon::{self, DaemonSpec, TransportKind};

fn main() -> ExitCode {
    daemon::main::<ElectdConfig, ElNode>(
        "Ring leader election (relay or alive-list) with durable terms, pre-votes and a quorum \
         lease, and a FIFO coordinator that grants fenced leases. `ftctl leader` shows the \
         coordinator; clients use `ftctl lock -- CMD` against client_listen.",
        env!("FTCOORD_VERSION"),
        DaemonSpec {
            metrics_prefix: "electd",
            transport: TransportKind::Tcp,
            core_config: |cfg| cfg.daemon.core(&cfg.common),
            on_event: Box::new(electd::metrics::record),
            declare: electd::metrics::declare,
        },
    )
}

//! `ntmutexd`: a cluster-wide mutex daemon (see the crate docs).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use ntmutexd::{NtNode, NtmutexdConfig};
use runtime::daemon::{self, DaemonSpec, TransportKind};

fn main() -> ExitCode {
    daemon::main::<NtmutexdConfig, NtNode>(
        "A cluster-wide mutex: Naimi-Trehel with COMMIT and M1/M2/M3 recovery. \
         Clients use `ftctl lock -- CMD` against client_listen.",
        env!("FTCOORD_VERSION"),
        DaemonSpec {
            metrics_prefix: "ntmutex",
            transport: TransportKind::Tcp,
            core_config: |cfg| cfg.daemon.core(&cfg.common),
            on_event: Box::new(ntmutexd::metrics::record),
            declare: ntmutexd::metrics::declare,
        },
    )
}

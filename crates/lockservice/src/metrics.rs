//! The lock service's events as metrics and log lines, for every daemon
//! that serves the lock API (ntmutexd, tokenwatchd, electd).

use std::time::Duration;

use ftcore::ClientId;
use timer::Instant;

use crate::{LockEvent, ReleaseHow};

/// One event of each kind (every [`ReleaseHow`] too), for the daemons'
/// tests that every metric recorded is declared.
pub fn examples() -> Vec<LockEvent> {
    let client = ClientId(1);
    let fence = crate::fence(2, 3);
    let mut v = vec![
        LockEvent::Granted { client, fence, waited: Duration::from_millis(5), lease_until: Instant::ZERO },
        LockEvent::Renewed { client, fence, lease_until: Instant::ZERO },
        LockEvent::TimedOut { client, waited: Duration::from_millis(7) },
        LockEvent::Revoking { client, fence },
    ];
    for how in
        [ReleaseHow::Released, ReleaseHow::Disconnected, ReleaseHow::Revoked, ReleaseHow::Expired, ReleaseHow::Lost]
    {
        v.push(LockEvent::Released { client, fence, held: Duration::from_millis(9), how });
    }
    v
}

/// Records `e` as the lock service's metrics (`runtime::metrics::LOCKS`
/// and `FENCES`, each named by `name`: the daemon's prefix added) and log
/// lines: grants (`cs_entries_total`, `token_wait_seconds`, the fence
/// gauges), holds (`hold_seconds`), lost locks and timed-out waits.
pub fn record(e: &LockEvent, name: impl Fn(&'static str) -> String) {
    match e {
        LockEvent::Granted { fence, waited, .. } => {
            metrics::counter!(name("cs_entries_total")).increment(1);
            metrics::histogram!(name("token_wait_seconds")).record(waited.as_secs_f64());
            // Exact below 2^53 (interfaces.md); `ftctl status --json`
            // has the exact value.
            let (epoch, counter) = crate::fence_parts(*fence);
            metrics::gauge!(name("fence_epoch")).set(epoch as f64);
            metrics::gauge!(name("fence_seq")).set(counter as f64);
        }
        LockEvent::Released { client, held, how, .. } => {
            metrics::histogram!(name("hold_seconds")).record(held.as_secs_f64());
            // A revocation was already counted when its LockLost went out.
            match how {
                ReleaseHow::Lost => metrics::counter!(name("lock_lost_total")).increment(1),
                ReleaseHow::Expired => {
                    tracing::warn!(%client, "a hold's lease ran out without a renewal");
                    metrics::counter!(name("lock_lost_total")).increment(1);
                }
                ReleaseHow::Released | ReleaseHow::Disconnected | ReleaseHow::Revoked => {}
            }
        }
        // The client got the new deadline; nothing to count.
        LockEvent::Renewed { .. } => {}
        LockEvent::TimedOut { .. } => metrics::counter!(name("acquire_timeouts_total")).increment(1),
        LockEvent::Revoking { client, .. } => {
            tracing::warn!(%client, "hold exceeded max_hold_ms: revoking");
            metrics::counter!(name("lock_lost_total")).increment(1);
        }
    }
}

//! Cross-process tests live in `tests/`; the harness they use is `ftlab`'s
//! library (the same code `ftlab up` runs clusters with).
#![forbid(unsafe_code)]

pub use ftlab::*;

pub mod records;

use std::time::Duration;

use lockservice::{LockReply, LockRequest};

/// One lock and release through node `id` of a lock daemon (ntmutexd,
/// tokenwatchd), waiting at most `timeout` for the grant: the fence, or
/// what came instead.
pub fn lock_once(c: &Cluster, id: u32, timeout: Duration) -> Result<u128, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    rt.block_on(async {
        let mut cl =
            client::Client::<LockRequest, LockReply>::connect(c.node(id).client).await.map_err(|e| e.to_string())?;
        let ms = timeout.as_millis() as u64;
        match cl.call(LockRequest::Acquire { timeout_ms: ms }, timeout + Duration::from_secs(1)).await {
            Ok(LockReply::Granted { fence, .. }) => {
                let _ = cl.call(LockRequest::Release, Duration::from_secs(5)).await;
                Ok(fence)
            }
            other => Err(format!("{other:?}")),
        }
    })
}

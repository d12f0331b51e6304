//! Cross-process tests live in `tests/`; the harness they use is `ftlab`'s
//! library (the same code `ftlab up` runs clusters with).
#![forbid(unsafe_code)]

pub use ftlab::*;

pub mod records;

use std::io::Read;
use std::net::TcpStream;
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

/// Waits (at most 3 s) until the other end has closed `s`: a read returns
/// EOF or an error. Panics if it is still open then.
pub fn assert_closed(mut s: TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(3))).expect("set a read timeout");
    let mut buf = [0u8; 64];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => continue,
        }
    }
}

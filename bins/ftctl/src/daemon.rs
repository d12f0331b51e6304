//! Connecting to a daemon's client API, with errors that say what to do.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
/// A connection speaking the lock API. `Status` works on it against any
/// daemon: the runtime answers it before the request types matter.
pub use client::lock::LockClient;
use client::{Client, ClientError};
use ftcore::Message;

/// How long a connection attempt may take (a filtered port never answers).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const HINT: &str = "(is the daemon running? set --addr or FTCTL_ADDR)";

/// Connects to `addr` (`HOST:PORT`).
pub async fn connect(addr: &str) -> Result<LockClient> {
    connect_as(addr).await
}

/// Connects to `addr` (`HOST:PORT`), speaking requests `R` and replies `P`.
pub async fn connect_as<R: Message, P: Message>(addr: &str) -> Result<Client<R, P>> {
    let sock = resolve(addr).await?;
    match tokio::time::timeout(CONNECT_TIMEOUT, Client::connect(sock)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(ClientError::Connect { source, .. })) => {
            bail!("cannot connect to {addr}: {} {HINT}", os_message(&source))
        }
        Ok(Err(e)) => bail!("cannot connect to {addr}: {e}"),
        Err(_) => bail!("cannot connect to {addr}: no answer within {CONNECT_TIMEOUT:?} {HINT}"),
    }
}

async fn resolve(addr: &str) -> Result<SocketAddr> {
    if let Ok(sock) = addr.parse() {
        return Ok(sock);
    }
    tokio::net::lookup_host(addr)
        .await
        .with_context(|| format!("bad address `{addr}` (expected HOST:PORT, like 127.0.0.1:7201)"))?
        .next()
        .ok_or_else(|| anyhow!("`{addr}` resolves to no address"))
}

/// An OS error without its " (os error N)" suffix.
pub fn os_message(e: &io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_lose_their_number() {
        let e = io::Error::from_raw_os_error(111);
        assert_eq!(os_message(&e), "Connection refused");
        assert_eq!(os_message(&io::Error::other("plain")), "plain");
    }

    #[tokio::test]
    async fn addresses_need_a_port() {
        let e = resolve("localhost").await.unwrap_err();
        assert!(format!("{e:#}").contains("expected HOST:PORT"), "{e:#}");
        assert_eq!(resolve("127.0.0.1:7201").await.unwrap(), SocketAddr::from(([127, 0, 0, 1], 7201)));
    }
}

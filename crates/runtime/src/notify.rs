//! The systemd notify protocol (`sd_notify`), written out by hand: one
//! datagram per state change to the socket named by `NOTIFY_SOCKET`.
//!
//! The driver sends `READY=1` once listening and joined, `STATUS=` on role
//! changes, `WATCHDOG=1` every [`Notifier::watchdog_interval`], and
//! `STOPPING=1` on shutdown. Outside systemd there is no socket and
//! [`Notifier::from_env`] returns `None`.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// A connection to the service manager's notify socket.
#[derive(Clone, Debug)]
pub struct Notifier {
    socket: std::sync::Arc<UnixDatagram>,
    addr: SocketAddr,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// The notifier systemd asked for through `NOTIFY_SOCKET`, with the
    /// watchdog period from `WATCHDOG_USEC` when `WATCHDOG_PID` is unset or
    /// names this process. `None` when not run under systemd `Type=notify`
    /// or when the socket cannot be set up (logged).
    pub fn from_env() -> Option<Notifier> {
        let socket = std::env::var("NOTIFY_SOCKET").ok().filter(|s| !s.is_empty())?;
        let for_us = match std::env::var("WATCHDOG_PID") {
            Ok(pid) => pid.trim().parse::<u32>().ok() == Some(std::process::id()),
            Err(_) => true,
        };
        let watchdog_usec =
            if for_us { std::env::var("WATCHDOG_USEC").ok().and_then(|v| v.trim().parse::<u64>().ok()) } else { None };
        match Notifier::new(&socket, watchdog_usec) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(socket = %socket, error = %e, "cannot use NOTIFY_SOCKET; systemd will not hear from us");
                None
            }
        }
    }

    /// A notifier sending to `socket`: a path, or `@name` for an abstract
    /// socket. `watchdog_usec` is the manager's watchdog timeout (0 or
    /// `None`: no watchdog).
    pub fn new(socket: impl AsRef<str>, watchdog_usec: Option<u64>) -> io::Result<Notifier> {
        let name = socket.as_ref();
        let addr = if let Some(abstract_name) = name.strip_prefix('@') {
            abstract_addr(abstract_name)?
        } else if name.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty notify socket name"));
        } else {
            SocketAddr::from_pathname(name)?
        };
        let socket = UnixDatagram::unbound()?;
        // A full manager queue must not stall the driver: fail the send instead.
        socket.set_nonblocking(true)?;
        // Half the manager's timeout, as systemd recommends, kept between
        // 1 ms and a day: nonsense in WATCHDOG_USEC (1, 2^64−1) must not
        // stop the daemon (a zero or overflowing timer period panics).
        let watchdog = watchdog_usec
            .filter(|us| *us > 0)
            .map(|us| Duration::from_micros(us / 2).clamp(Duration::from_millis(1), Duration::from_secs(86_400)));
        Ok(Notifier { socket: std::sync::Arc::new(socket), addr, watchdog })
    }

    /// Tells the manager start-up is finished (`READY=1`).
    pub fn ready(&self) -> io::Result<()> {
        self.send("READY=1")
    }

    /// Sets the one-line status shown by `systemctl status` (`STATUS=…`).
    /// Newlines would end the assignment, so they become spaces.
    pub fn status(&self, status: &str) -> io::Result<()> {
        self.send(&format!("STATUS={}", status.replace(['\n', '\r'], " ")))
    }

    /// Tells the manager a graceful shutdown has begun (`STOPPING=1`).
    pub fn stopping(&self) -> io::Result<()> {
        self.send("STOPPING=1")
    }

    /// Keeps the watchdog from firing (`WATCHDOG=1`).
    pub fn watchdog(&self) -> io::Result<()> {
        self.send("WATCHDOG=1")
    }

    /// How often to call [`watchdog`](Self::watchdog): half the manager's
    /// timeout, as systemd recommends. `None` when no watchdog is armed.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    fn send(&self, state: &str) -> io::Result<()> {
        let sent = self.socket.send_to_addr(state.as_bytes(), &self.addr)?;
        if sent == state.len() {
            Ok(())
        } else {
            Err(io::Error::new(io::ErrorKind::WriteZero, "notify datagram truncated"))
        }
    }
}

#[cfg(target_os = "linux")]
fn abstract_addr(name: &str) -> io::Result<SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    SocketAddr::from_abstract_name(name)
}

#[cfg(not(target_os = "linux"))]
fn abstract_addr(_name: &str) -> io::Result<SocketAddr> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "abstract notify sockets exist only on Linux"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound receiving socket standing in for systemd.
    struct Manager {
        _dir: tempfile::TempDir,
        path: std::path::PathBuf,
        socket: UnixDatagram,
    }

    impl Manager {
        fn new() -> Manager {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("notify.sock");
            let socket = UnixDatagram::bind(&path).unwrap();
            socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            Manager { _dir: dir, path, socket }
        }

        fn name(&self) -> &str {
            self.path.to_str().unwrap()
        }

        fn recv(&self) -> String {
            let mut buf = [0u8; 512];
            let n = self.socket.recv(&mut buf).unwrap();
            String::from_utf8(buf[..n].to_vec()).unwrap()
        }
    }

    #[test]
    fn sends_each_state_as_one_datagram() {
        let manager = Manager::new();
        let n = Notifier::new(manager.name(), None).unwrap();
        n.ready().unwrap();
        n.status("token holder").unwrap();
        n.watchdog().unwrap();
        n.stopping().unwrap();
        assert_eq!(manager.recv(), "READY=1");
        assert_eq!(manager.recv(), "STATUS=token holder");
        assert_eq!(manager.recv(), "WATCHDOG=1");
        assert_eq!(manager.recv(), "STOPPING=1");
        assert_eq!(n.watchdog_interval(), None);
    }

    #[test]
    fn status_newlines_cannot_inject_assignments() {
        let manager = Manager::new();
        let n = Notifier::new(manager.name(), None).unwrap();
        n.status("a\nREADY=1").unwrap();
        assert_eq!(manager.recv(), "STATUS=a READY=1");
    }

    #[test]
    fn watchdog_interval_is_half_the_timeout() {
        let manager = Manager::new();
        assert_eq!(
            Notifier::new(manager.name(), Some(2_000_000)).unwrap().watchdog_interval(),
            Some(Duration::from_secs(1))
        );
        assert_eq!(Notifier::new(manager.name(), Some(0)).unwrap().watchdog_interval(), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("ftcoord-notify-test-{}", std::process::id());
        let socket = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Notifier::new(format!("@{name}"), None).unwrap().ready().unwrap();
        let mut buf = [0u8; 64];
        let n = socket.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn errors_are_returned() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("nobody-listens.sock");
        let n = Notifier::new(gone.to_str().unwrap(), None).unwrap();
        assert!(n.ready().is_err());
        assert!(Notifier::new("", None).is_err());
    }

    #[test]
    #[allow(clippy::result_large_err)] // the closure type is fixed by figment::Jail
    fn from_env_reads_socket_and_watchdog() {
        let manager = Manager::new();
        figment::Jail::expect_with(|jail| {
            jail.clear_env();
            assert!(Notifier::from_env().is_none());

            jail.set_env("NOTIFY_SOCKET", manager.name());
            let n = Notifier::from_env().expect("notifier");
            assert_eq!(n.watchdog_interval(), None);
            n.ready().unwrap();
            assert_eq!(manager.recv(), "READY=1");

            jail.set_env("WATCHDOG_USEC", 3_000_000);
            assert_eq!(Notifier::from_env().unwrap().watchdog_interval(), Some(Duration::from_millis(1500)));
            jail.set_env("WATCHDOG_PID", std::process::id());
            assert_eq!(Notifier::from_env().unwrap().watchdog_interval(), Some(Duration::from_millis(1500)));
            // Meant for another process (e.g. our parent): not ours to ping.
            jail.set_env("WATCHDOG_PID", std::process::id().wrapping_add(1));
            assert_eq!(Notifier::from_env().unwrap().watchdog_interval(), None);
            Ok(())
        });
    }

    #[test]
    fn nonsense_watchdog_periods_are_clamped() {
        let m = Manager::new();
        let period = |us| Notifier::new(m.path.to_str().unwrap(), us).unwrap().watchdog_interval();
        assert_eq!(period(Some(1)), Some(Duration::from_millis(1)));
        assert_eq!(period(Some(u64::MAX)), Some(Duration::from_secs(86_400)));
        assert_eq!(period(Some(0)), None);
        assert_eq!(period(Some(4_000_000)), Some(Duration::from_secs(2)));
    }
}

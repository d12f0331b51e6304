//! `--against etcd`: a local single-member etcd (the `etcd` on PATH, in a
//! scratch directory, on free loopback ports) and the same contended lock
//! workload as ntmutexd's, through etcd's v3 JSON gateway over plain
//! HTTP/1.1: each client grants itself a lease, then `lock` (name, lease)
//! → hold nothing → `unlock` (key), again and again. A hold is recorded
//! from the `lock` reply read to the `unlock` sent, fenced by the reply's
//! header revision (it grows with every grant), so the same checks apply.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use ftlab::workload::{Clock, Hold};
use lockservice::LockName;

/// The lock every client contends for.
const LOCK_NAME: &str = "ftlab-bench";
/// How long one HTTP request may take (a contended `lock` waits for every
/// holder before it).
const REQUEST_DEADLINE: Duration = Duration::from_secs(30);
/// How long etcd has to start answering.
const START_WITHIN: Duration = Duration::from_secs(30);
/// The longest response read.
const MAX_BODY: usize = 1 << 20;

/// The `etcd` on PATH, or why there is none.
pub fn find() -> Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join("etcd");
        if p.is_file() {
            return Ok(p);
        }
    }
    bail!(
        "--against etcd: no `etcd` on PATH, so nothing was compared (install etcd, e.g. \
         `apt-get install etcd-server` on Debian, or put its binary on PATH)"
    )
}

/// A running single-member etcd, killed when dropped (its scratch
/// directory removed).
#[derive(Debug)]
pub struct Etcd {
    child: Child,
    /// The client URL's address.
    pub addr: SocketAddr,
    /// `etcd --version`'s first line.
    pub version: String,
    dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts `bin` on free ports and waits until it answers.
    pub fn start(bin: &std::path::Path) -> Result<Etcd> {
        let version = Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| {
                let out = String::from_utf8_lossy(&o.stdout).into_owned();
                let first = out.lines().next().unwrap_or("").trim();
                // `etcd Version: 3.4.23` → `etcd 3.4.23`.
                format!("etcd {}", first.rsplit(':').next().unwrap_or(first).trim())
            })
            .unwrap_or_else(|_| "etcd".into());
        let dir = tempfile::Builder::new().prefix("ftlab-etcd-").tempdir()?;
        let ports = ftlab::free_ports(2);
        let client = format!("http://127.0.0.1:{}", ports[0]);
        let peer = format!("http://127.0.0.1:{}", ports[1]);
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let child = Command::new(bin)
            .arg("--name=ftlab")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=ftlab={peer}"))
            .arg("--initial-cluster-state=new")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", bin.display()))?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, ports[0]));
        let mut e = Etcd { child, addr, version, dir };
        let ready = ftlab::wait_until(START_WITHIN, || {
            Http::connect(addr).and_then(|mut h| h.post("/v3/maintenance/status", "{}")).is_ok()
        });
        if !ready {
            let _ = e.child.kill();
            bail!("etcd did not answer on {addr} within {START_WITHIN:?}; its log:\n{}", e.log());
        }
        Ok(e)
    }

    /// etcd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One keep-alive HTTP/1.1 connection with deadlines.
#[derive(Debug)]
struct Http {
    conn: BufReader<TcpStream>,
    host: SocketAddr,
    /// The server said `Connection: close`.
    closed: bool,
}

impl Http {
    fn connect(addr: SocketAddr) -> Result<Http> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(REQUEST_DEADLINE))?;
        s.set_write_timeout(Some(REQUEST_DEADLINE))?;
        Ok(Http { conn: BufReader::new(s), host: addr, closed: false })
    }

    /// POSTs a JSON `body` to `path` and returns the response body of a
    /// 200 (Err otherwise, with what etcd said).
    fn post(&mut self, path: &str, body: &str) -> Result<String> {
        if self.closed {
            bail!("the server closed the connection");
        }
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.host,
            body.len()
        );
        self.conn.get_mut().write_all(req.as_bytes())?;
        let mut line = String::new();
        self.conn.read_line(&mut line)?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("not an HTTP response: {line:?}"))?;
        let (mut length, mut chunked) = (None, false);
        loop {
            line.clear();
            if self.conn.read_line(&mut line)? == 0 {
                bail!("connection closed in the response headers");
            }
            let h = line.trim_end();
            if h.is_empty() {
                break;
            }
            let Some((k, v)) = h.split_once(':') else { continue };
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            match k.as_str() {
                "content-length" => length = Some(v.parse::<usize>()?),
                "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
                "connection" => self.closed |= v.eq_ignore_ascii_case("close"),
                _ => {}
            }
        }
        let body = if chunked {
            let mut body = Vec::new();
            loop {
                line.clear();
                self.conn.read_line(&mut line)?;
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| anyhow!("bad chunk size {line:?}"))?;
                if body.len() + size > MAX_BODY {
                    bail!("response over {MAX_BODY} bytes");
                }
                let at = body.len();
                body.resize(at + size + 2, 0);
                self.conn.read_exact(&mut body[at..])?;
                body.truncate(at + size);
                if size == 0 {
                    break;
                }
            }
            body
        } else {
            let n = length.ok_or_else(|| anyhow!("response without Content-Length"))?;
            if n > MAX_BODY {
                bail!("response over {MAX_BODY} bytes");
            }
            let mut body = vec![0; n];
            self.conn.read_exact(&mut body)?;
            body
        };
        let body = String::from_utf8_lossy(&body).into_owned();
        if status != 200 {
            bail!("{path} answered {status}: {body}");
        }
        if body.contains("\"error\"") {
            bail!("{path} answered {body}");
        }
        Ok(body)
    }
}

/// The string value of `"field":"…"` in a flat JSON text.
fn field<'a>(json: &'a str, name: &str) -> Option<&'a str> {
    let at = json.find(&format!("\"{name}\":\""))? + name.len() + 4;
    let rest = &json[at..];
    Some(&rest[..rest.find('"')?])
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// What the etcd clients recorded.
#[derive(Debug, Default)]
pub struct LockRun {
    pub holds: Vec<Hold>,
    /// (client, when, why) of every failed request.
    pub failures: Vec<(String, u128, String)>,
    /// The measured window (the run's clock, ns).
    pub t0: u128,
    pub t1: u128,
}

/// `clients` lock clients against `etcd` for `duration`, measured from the
/// first grant on.
pub fn run_locks(etcd: &Etcd, clients: usize, duration: Duration) -> Result<LockRun> {
    let clock = Clock::start();
    let stop = Arc::new(AtomicBool::new(false));
    let grants = Arc::new(AtomicU64::new(0));
    // A lease outlives the run: no keep-alive needed.
    let ttl = duration.as_secs() + 120;
    let threads: Vec<_> = (0..clients)
        .map(|i| {
            let (stop, grants, addr) = (stop.clone(), grants.clone(), etcd.addr);
            std::thread::spawn(move || client(format!("etcd{}", i + 1), addr, ttl, clock, &stop, &grants))
        })
        .collect();
    let first = ftlab::wait_until(START_WITHIN, || grants.load(Ordering::Relaxed) > 0);
    let t0 = clock.now();
    if first {
        std::thread::sleep(duration);
    }
    let t1 = clock.now();
    stop.store(true, Ordering::Relaxed);
    let mut run = LockRun { t0, t1, ..LockRun::default() };
    for t in threads {
        let (holds, failures) = t.join().map_err(|_| anyhow!("an etcd client panicked"))?;
        run.holds.extend(holds);
        run.failures.extend(failures);
    }
    if !first {
        let why = run.failures.first().map_or("no answer".to_string(), |f| f.2.clone());
        bail!("no etcd client was granted the lock within {START_WITHIN:?}: {why}");
    }
    Ok(run)
}

type ClientRecords = (Vec<Hold>, Vec<(String, u128, String)>);

/// One client: a lease, then lock → unlock until stopped.
fn client(
    name: String,
    addr: SocketAddr,
    ttl: u64,
    clock: Clock,
    stop: &AtomicBool,
    grants: &AtomicU64,
) -> ClientRecords {
    let (mut holds, mut failures) = (Vec::new(), Vec::new());
    let lock_name = base64(LOCK_NAME.as_bytes());
    let mut conn: Option<Http> = None;
    let mut lease: Option<String> = None;
    while !stop.load(Ordering::Relaxed) {
        let mut once = || -> Result<()> {
            let h = match conn.as_mut() {
                Some(h) if !h.closed => h,
                _ => conn.insert(Http::connect(addr)?),
            };
            let id = match &lease {
                Some(id) => id.clone(),
                None => {
                    let r = h.post("/v3/lease/grant", &format!("{{\"TTL\":{ttl}}}"))?;
                    let id = field(&r, "ID").ok_or_else(|| anyhow!("lease/grant answered {r}"))?.to_string();
                    lease.insert(id).clone()
                }
            };
            let asked = clock.now();
            let r = h.post("/v3/lock/lock", &format!("{{\"name\":\"{lock_name}\",\"lease\":\"{id}\"}}"))?;
            let start = clock.now();
            let end = clock.now();
            let key = field(&r, "key").ok_or_else(|| anyhow!("lock answered {r}"))?.to_string();
            let fence: u128 = field(&r, "revision")
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| anyhow!("lock answered no header revision: {r}"))?;
            holds.push(Hold {
                client: name.clone(),
                lock: LockName::unnamed(),
                fence,
                asked: Some(asked),
                start,
                end: Some(end),
            });
            grants.fetch_add(1, Ordering::Relaxed);
            h.post("/v3/lock/unlock", &format!("{{\"key\":\"{key}\"}}"))?;
            Ok(())
        };
        if let Err(e) = once() {
            failures.push((name.clone(), clock.now(), format!("{e:#}")));
            // Whatever this lease may still hold goes with it.
            if let Some(id) = lease.take() {
                let _ =
                    Http::connect(addr).and_then(|mut h| h.post("/v3/lease/revoke", &format!("{{\"ID\":\"{id}\"}}")));
            }
            conn = None;
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    (holds, failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"bench"), "YmVuY2g=");
    }

    #[test]
    fn fields_are_found() {
        let r = r#"{"header":{"cluster_id":"1","revision":"42","raft_term":"2"},"key":"YmVu"}"#;
        assert_eq!(field(r, "revision"), Some("42"));
        assert_eq!(field(r, "key"), Some("YmVu"));
        assert_eq!(field(r, "ID"), None);
    }
}

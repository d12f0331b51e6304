//! `ftctl lookup` and `ftctl exec`: ringd's least-loaded replica, and a
//! service run there (ringd.md, Lookup and Services).
//!
//! Both first ask the daemon for its status and go on only if it is ringd:
//! the client API carries no name of its own, and another daemon could
//! read a ringd request as one of its own (a `LookUp` has the shape of a
//! lock daemon's `Acquire`). `exec` also checks that the replica the
//! lookup chose is the one answering at the address it gave.
//!
//! A token service's request id makes retries safe: `token_lost` is
//! retried here with the same id, and the id is printed with every failure
//! after which the outcome is unknown, for `--request-id`.
//!
//! What each outcome prints and exits with is decided by pure functions,
//! tested on their own; the JSON is written by hand as `status` does.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use client::ring::{fresh_request_id, ExecError, Outcome, RingConnection, RingReply, RingRequest, ServiceResult};
use client::ClientError;

use crate::status::push_str;
use crate::{daemon, exit};

/// How many times `token_lost` is retried with the same request id.
pub const TOKEN_LOST_RETRIES: u32 = 5;
/// The pause before each of those retries.
pub const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// What `ftctl exec` was asked to do.
#[derive(Debug)]
pub struct ExecArgs {
    /// The replica to run on (no lookup), `HOST:PORT`.
    pub on: Option<String>,
    /// The whole exec (lookup, execute, retries) ends by then.
    pub timeout: Duration,
    /// The request id to use (a retry of an earlier exec); fresh if `None`.
    pub request_id: Option<u64>,
    /// The service's name.
    pub service: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// `--timeout` for lookup and exec: a duration above 0.
pub fn positive(text: &str) -> Result<Duration, String> {
    match client::duration::parse(text)? {
        d if d.is_zero() => Err("must be above 0".to_string()),
        d => Ok(d),
    }
}

/// A connection to a ringd replica whose status said so.
struct Replica {
    conn: RingConnection,
    /// Its node id.
    node: u32,
}

/// Time left until `deadline`, `None` once it has passed.
fn left(deadline: Instant) -> Option<Duration> {
    Some(deadline.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
}

/// Connects to `addr` and checks that a ringd replica answers there.
async fn connect_ringd(addr: &str, deadline: Instant) -> Result<Replica> {
    let mut conn: RingConnection = daemon::connect_as(addr).await?;
    let wait = left(deadline).ok_or_else(|| no_answer(addr, "status"))?;
    let status = tokio::time::timeout(wait, conn.status())
        .await
        .map_err(|_| no_answer(addr, "status"))?
        .with_context(|| format!("status from {addr}"))?;
    if status.daemon != "ringd" {
        bail!(
            "{addr} is {} (node {}), not ringd: `ftctl lookup` and `ftctl exec` talk to ringd replicas",
            status.daemon,
            status.node.0
        );
    }
    Ok(Replica { conn, node: status.node.0 })
}

/// An error meaning "no answer in time" (exit 75), recognised by [`exit_of_error`].
#[derive(Debug)]
struct NoAnswer {
    addr: String,
    what: &'static str,
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} sent no {} within --timeout", self.addr, self.what)
    }
}

impl std::error::Error for NoAnswer {}

fn no_answer(addr: &str, what: &'static str) -> anyhow::Error {
    NoAnswer { addr: addr.to_string(), what }.into()
}

/// The exit status for an error of `run_lookup` / `run_exec`: 75 for no
/// answer in time, 1 for the rest.
pub fn exit_of_error(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<NoAnswer>().is_some() {
        exit::TIMED_OUT
    } else {
        exit::ERROR
    }
}

/// One lookup over `r`: (replica, address, load).
async fn look_up(r: &mut Replica, addr: &str, deadline: Instant) -> Result<(u32, String, u32)> {
    let id = fresh_request_id();
    let wait = left(deadline).ok_or_else(|| no_answer(addr, "lookup answer"))?;
    match r.conn.call(RingRequest::LookUp { request_id: id }, wait).await {
        Ok(RingReply::LookedUp { request_id, replica, address, load }) if request_id == id => {
            Ok((replica.0, address, load))
        }
        Ok(other) => bail!("{addr} answered a lookup with {other:?}"),
        Err(ClientError::Timeout(_)) => Err(no_answer(addr, "lookup answer")),
        Err(e) => Err(anyhow::Error::new(e).context(format!("lookup through {addr}"))),
    }
}

/// `ftctl lookup`: prints the least-loaded replica.
pub async fn run_lookup(addr: &str, json: bool, timeout: Duration) -> Result<u8> {
    let deadline = Instant::now() + timeout;
    let mut r = connect_ringd(addr, deadline).await?;
    let (replica, address, load) = look_up(&mut r, addr, deadline).await?;
    println!("{}", if json { lookup_json(replica, &address, load) } else { render_lookup(replica, &address, load) });
    Ok(exit::OK)
}

/// `replica 3 127.0.0.1:7803 load 0`.
pub fn render_lookup(replica: u32, address: &str, load: u32) -> String {
    format!("replica {replica} {address} load {load}")
}

/// `{"replica":3,"address":"127.0.0.1:7803","load":0}`.
pub fn lookup_json(replica: u32, address: &str, load: u32) -> String {
    let mut out = format!("{{\"replica\":{replica},\"address\":");
    push_str(&mut out, address);
    let _ = write!(out, ",\"load\":{load}}}");
    out
}

/// How an exec's requests ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The replica answered this outcome (after the retries, for `token_lost`).
    Answered(Outcome),
    /// No answer within the timeout: the outcome is unknown.
    NoAnswer,
}

/// `ftctl exec`: runs the service and prints its output; the exit status.
pub async fn run_exec(addr: &str, json: bool, a: &ExecArgs) -> Result<u8> {
    let deadline = Instant::now() + a.timeout;
    let (replica, target, mut conn) = match &a.on {
        Some(on) => {
            let r = connect_ringd(on, deadline).await?;
            (r.node, on.clone(), r.conn)
        }
        None => {
            let mut r = connect_ringd(addr, deadline).await?;
            let (replica, address, _load) = look_up(&mut r, addr, deadline).await?;
            drop(r);
            let chosen = connect_ringd(&address, deadline)
                .await
                .with_context(|| format!("replica {replica}, chosen by the lookup through {addr}"))?;
            if chosen.node != replica {
                // A client_listen on loopback (the default) names this host's
                // replica on every host: the service would run elsewhere.
                bail!(
                    "the lookup through {addr} chose replica {replica} at {address}, but replica {} answers there: \
                     replica {replica}'s client_listen cannot be reached from here (use --on, or give the replicas \
                     client addresses that clients can reach)",
                    chosen.node
                );
            }
            (replica, address, chosen.conn)
        }
    };
    let request_id = a.request_id.unwrap_or_else(fresh_request_id);
    let place = format!("{} on replica {replica} ({target})", a.service);
    let mut retries = 0;
    let ended = loop {
        let Some(wait) = left(deadline) else { break Ended::NoAnswer };
        let req = RingRequest::Execute { request_id, service: a.service.clone(), args: a.args.clone() };
        match conn.call(req, wait).await {
            Ok(RingReply::Executed { request_id: got, outcome }) if got == request_id => {
                if outcome == Err(ExecError::TokenLost) && retries < TOKEN_LOST_RETRIES {
                    retries += 1;
                    tokio::time::sleep(RETRY_PAUSE.min(deadline.saturating_duration_since(Instant::now()))).await;
                    continue;
                }
                break Ended::Answered(outcome);
            }
            Ok(other) => {
                bail!("{place}: unexpected answer {other:?} (request_id {request_id}: the outcome is unknown)")
            }
            Err(ClientError::Timeout(_)) => break Ended::NoAnswer,
            Err(e) => {
                return Err(
                    anyhow::Error::new(e).context(format!("{place}: request_id {request_id}: the outcome is unknown"))
                )
            }
        }
    };
    let (code, stdout, stderr) = report(&ended, request_id, replica, &place, retries, a.timeout, json);
    print!("{stdout}");
    if let Some(message) = stderr {
        eprintln!("ftctl: {message}");
    }
    Ok(code)
}

/// What an exec prints (stdout, and a message for stderr) and exits with.
pub fn report(
    ended: &Ended,
    request_id: u64,
    replica: u32,
    place: &str,
    retries: u32,
    timeout: Duration,
    json: bool,
) -> (u8, String, Option<String>) {
    match ended {
        Ended::Answered(Ok(r)) => {
            let stdout = if json {
                format!("{}\n", result_json(request_id, replica, r))
            } else if r.output.is_empty() {
                String::new()
            } else {
                format!("{}\n", r.output)
            };
            (u8::try_from(r.status).unwrap_or(exit::ERROR), stdout, None)
        }
        Ended::Answered(Err(e)) => {
            let tried = if *e == ExecError::TokenLost { format!("; retried {retries} times") } else { String::new() };
            let message = format!("{place}: {e} (request_id {request_id}{tried})");
            let stdout =
                if json { format!("{}\n", error_json(e.label(), &e.to_string(), request_id)) } else { String::new() };
            (exit_of_exec_error(e), stdout, Some(message))
        }
        Ended::NoAnswer => {
            let what = format!("no answer within {timeout:?}; the outcome is unknown");
            let message = format!("{place}: {what} (request_id {request_id})");
            let stdout = if json { format!("{}\n", error_json("no_answer", &what, request_id)) } else { String::new() };
            (exit::TIMED_OUT, stdout, Some(message))
        }
    }
}

/// The exit status for a service error (see `EXEC_HELP`).
pub fn exit_of_exec_error(e: &ExecError) -> u8 {
    match e {
        ExecError::UnknownService(_) | ExecError::BadArguments(_) => exit::USAGE,
        ExecError::TimedOut | ExecError::Leaving | ExecError::NoQuorum | ExecError::TokenLost | ExecError::Busy => {
            exit::TIMED_OUT
        }
        ExecError::Spawn(_) => exit::CANNOT_EXECUTE,
    }
}

/// `{"request_id":7,"replica":3,"output":"a b","status":0,"fence":null}`
/// (`fence` a decimal string when present: a u128 is no JSON number).
pub fn result_json(request_id: u64, replica: u32, r: &ServiceResult) -> String {
    let mut out = format!("{{\"request_id\":{request_id},\"replica\":{replica},\"output\":");
    push_str(&mut out, &r.output);
    let fence = r.fence.map_or_else(|| "null".to_string(), |f| format!("\"{f}\""));
    let _ = write!(out, ",\"status\":{},\"fence\":{fence}}}", r.status);
    out
}

/// `{"error":"token_lost","message":"…","request_id":7}`.
pub fn error_json(label: &str, message: &str, request_id: u64) -> String {
    let mut out = String::from("{\"error\":");
    push_str(&mut out, label);
    out.push_str(",\"message\":");
    push_str(&mut out, message);
    let _ = write!(out, ",\"request_id\":{request_id}}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    fn result(output: &str, status: i32, fence: Option<u128>) -> Outcome {
        Ok(ServiceResult { output: output.into(), status, fence })
    }

    fn answered(o: Outcome, json: bool) -> (u8, String, Option<String>) {
        report(&Ended::Answered(o), 7, 3, "echo on replica 3 (127.0.0.1:7803)", 0, T, json)
    }

    #[test]
    fn lookup_text_and_json_have_the_exact_shape() {
        assert_eq!(render_lookup(3, "127.0.0.1:7803", 0), "replica 3 127.0.0.1:7803 load 0");
        assert_eq!(lookup_json(3, "127.0.0.1:7803", 0), r#"{"replica":3,"address":"127.0.0.1:7803","load":0}"#);
        assert_eq!(lookup_json(12, "h\"x:1", 4), r#"{"replica":12,"address":"h\"x:1","load":4}"#);
    }

    #[test]
    fn results_print_the_output_and_exit_with_the_status() {
        assert_eq!(answered(result("a b", 0, None), false), (0, "a b\n".into(), None));
        assert_eq!(answered(result("", 0, None), false), (0, String::new(), None));
        // kv.get of a missing key.
        assert_eq!(answered(result("", 1, Some(5)), false), (1, String::new(), None));
        assert_eq!(answered(result("x", 255, None), false).0, 255);
        assert_eq!(answered(result("x", 256, None), false).0, exit::ERROR);
        assert_eq!(answered(result("x", -1, None), false).0, exit::ERROR);
    }

    #[test]
    fn result_json_has_the_exact_shape() {
        let fence = (7u128 << 64) | 12;
        assert_eq!(
            answered(result("42", 0, Some(fence)), true),
            (
                0,
                format!("{{\"request_id\":7,\"replica\":3,\"output\":\"42\",\"status\":0,\"fence\":\"{fence}\"}}\n"),
                None
            )
        );
        assert_eq!(
            answered(result("a \"b\"\n", 0, None), true).1,
            "{\"request_id\":7,\"replica\":3,\"output\":\"a \\\"b\\\"\\n\",\"status\":0,\"fence\":null}\n"
        );
        assert_eq!(
            result_json(u64::MAX, 1, &ServiceResult { output: String::new(), status: 1, fence: Some(u128::MAX) }),
            format!(
                r#"{{"request_id":18446744073709551615,"replica":1,"output":"","status":1,"fence":"{}"}}"#,
                u128::MAX
            )
        );
    }

    #[test]
    fn service_errors_map_to_exit_statuses() {
        let code = |e: ExecError| exit_of_exec_error(&e);
        assert_eq!(code(ExecError::UnknownService("x".into())), 64);
        assert_eq!(code(ExecError::BadArguments("usage".into())), 64);
        for e in [ExecError::TimedOut, ExecError::Leaving, ExecError::NoQuorum, ExecError::TokenLost, ExecError::Busy] {
            assert_eq!(code(e), 75);
        }
        assert_eq!(code(ExecError::Spawn("ENOENT".into())), 126);
    }

    #[test]
    fn service_errors_print_a_message_and_json() {
        assert_eq!(
            report(&Ended::Answered(Err(ExecError::TokenLost)), 7, 3, "counter.incr on replica 3 (a:1)", 5, T, false),
            (
                75,
                String::new(),
                Some(
                    "counter.incr on replica 3 (a:1): token_lost: retry with the same request_id \
                     (request_id 7; retried 5 times)"
                        .into()
                )
            )
        );
        let (code, stdout, message) = answered(Err(ExecError::UnknownService("nope".into())), true);
        assert_eq!(code, 64);
        assert_eq!(stdout, "{\"error\":\"unknown_service\",\"message\":\"unknown service `nope`\",\"request_id\":7}\n");
        assert_eq!(
            message.as_deref(),
            Some("echo on replica 3 (127.0.0.1:7803): unknown service `nope` (request_id 7)")
        );
        assert_eq!(
            answered(Err(ExecError::TokenLost), true).1,
            "{\"error\":\"token_lost\",\"message\":\"token_lost: retry with the same request_id\",\"request_id\":7}\n"
        );
    }

    #[test]
    fn no_answer_is_a_temporary_failure_with_the_request_id() {
        let (code, stdout, message) = report(&Ended::NoAnswer, 9, 2, "sleep on replica 2 (a:1)", 0, T, true);
        assert_eq!(code, 75);
        assert_eq!(
            stdout,
            "{\"error\":\"no_answer\",\"message\":\"no answer within 30s; the outcome is unknown\",\"request_id\":9}\n"
        );
        assert_eq!(
            message.as_deref(),
            Some("sleep on replica 2 (a:1): no answer within 30s; the outcome is unknown (request_id 9)")
        );
        assert_eq!(exit_of_error(&no_answer("a:1", "status")), 75);
        assert_eq!(exit_of_error(&anyhow::anyhow!("refused")), 1);
    }

    #[test]
    fn timeouts_must_be_above_zero() {
        assert_eq!(positive("5s"), Ok(Duration::from_secs(5)));
        assert!(positive("0").is_err());
        assert!(positive("0ms").is_err());
        assert!(positive("5").is_err());
    }
}

//! The cluster-wide locks of ntmutexd, tokenwatchd and electd, held as a
//! lease (reliability.md, Pauses and leases; `ftctl lock` is built on it).
//!
//! [`lock`] (the unnamed lock) and [`lock_named`] (a named one,
//! named-locks.md) connect, ask and wait; a grant is a [`LockGuard`] that
//! keeps the connection (the daemon releases a hold whose client goes away,
//! so dropping the guard releases too, just later than
//! [`LockGuard::release`]). One connection waits for or holds one lock.
//! electd serves named locks; ntmutexd, tokenwatchd and ringd refuse them
//! (see [`refuses_names`]). [`list_locks`] asks a node which locks it knows
//! (`ftctl locks`).
//!
//! Replies do not repeat the name (the connection is bound to it): the
//! guard knows it ([`LockGuard::name`]), and the errors [`lock_named`]
//! builds say it ([`lock_label`]).
//!
//! A grant is a lease: it ends at [`LockGuard::lease_until`], an absolute
//! CLOCK_MONOTONIC instant on this host (the daemon's host: compare it with
//! [`timer::monotonic_now`]), unless a `Renewed` from the daemon moves it.
//! Stop using the protected resource by then. [`LockGuard::lost`] resolves
//! when the hold ends without the client asking: `LockLost` from the
//! daemon, the connection closing or failing, or the lease's end passing
//! without a renewal. Race the protected work against it:
//!
//! ```no_run
//! # async fn demo() -> Result<(), client::ClientError> {
//! use std::time::Duration;
//!
//! let addr = "127.0.0.1:7201".parse().unwrap();
//! let Some(mut guard) = client::lock::lock(addr, Duration::from_secs(10)).await? else {
//!     return Ok(()); // not obtained within 10 s
//! };
//! let work = async { /* write with guard's fence */ };
//! tokio::select! {
//!     () = work => { let _ = guard.release().await; }
//!     why = guard.lost() => eprintln!("lock lost: {why}; stop using the resource"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The guard only learns of renewals while something reads the connection
//! ([`LockGuard::lost`] or [`LockGuard::next_event`]): a caller that never
//! does sees its lease end at the grant's first `lease_until`.
//!
//! A pause of the caller itself (or of this host) cannot be covered by any
//! lease: pass [`LockGuard::fence`] to whatever the lock protects, so that
//! it can refuse a late writer.

use std::net::SocketAddr;
use std::time::Duration;

use ftcore::Message;
use lockservice::{LockInfo, LockName, LockReply, LockRequest};
use timer::{monotonic_now, Instant};

use crate::{Client, ClientError};

/// A connection speaking the lock API.
pub type LockClient = Client<LockRequest, LockReply>;

/// How long past the caller's timeout [`acquire`] waits for the daemon's
/// own answer (`TimedOut`) before giving up on it.
pub const ANSWER_GRACE: Duration = Duration::from_secs(2);
/// How long [`LockGuard::release`] waits for `Released`.
pub const RELEASE_WAIT: Duration = Duration::from_secs(2);
/// How long sending a `Release` may take when not waiting for the answer.
const SEND_WAIT: Duration = Duration::from_secs(1);
/// How long [`list_locks`] waits for the daemon's `Locks`.
pub const LIST_WAIT: Duration = Duration::from_secs(5);

/// What every daemon that serves no named locks says when refusing one
/// (lockservice's one-lock queue: ntmutexd, tokenwatchd, ringd).
const NO_NAMES_PHRASE: &str = "named locks are not supported";

/// Whether a refusal's `reason` says the daemon serves no named locks (as
/// opposed to a refusal of this request: a full queue, too many locks, the
/// daemon leaving).
pub fn refuses_names(reason: &str) -> bool {
    reason.contains(NO_NAMES_PHRASE)
}

/// The lock as messages name it: `lock` for the unnamed lock (the messages
/// of a single-lock cluster stay as they were), ``lock `NAME` `` for a
/// named one.
pub fn lock_label(name: &LockName) -> String {
    if name.is_unnamed() {
        "lock".to_string()
    } else {
        format!("lock `{}`", name.as_str())
    }
}

/// The request that asks for lock `name`: `Acquire` for the unnamed lock
/// (what every daemon understands), `AcquireNamed` for a named one.
pub fn acquire_request(name: &LockName, timeout: Duration) -> LockRequest {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    if name.is_unnamed() {
        LockRequest::Acquire { timeout_ms }
    } else {
        LockRequest::AcquireNamed { name: name.clone(), timeout_ms }
    }
}

/// A grant: the fence and the end of its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The fencing token (interfaces.md, Fences).
    pub fence: u128,
    /// The lease ends at this CLOCK_MONOTONIC instant of this host.
    pub lease_until: Instant,
}

/// What the daemon answered to `Acquire` (or `AcquireNamed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The lock is the caller's (check that the lease has not already ended).
    Granted(Grant),
    /// Not granted within the timeout asked for.
    TimedOut,
    /// The request was refused and changed nothing.
    Refused(String),
    /// The wait ended with `LockLost` (the daemon lost the token or left).
    Lost(String),
}

/// What the first reply to `Acquire` means: an error for a failed
/// connection and for a reply that answers no `Acquire` (the daemon may
/// speak another API).
pub fn on_answer(reply: Result<LockReply, ClientError>) -> Result<Answer, ClientError> {
    match reply? {
        LockReply::Granted { fence, lease_until_us } => {
            Ok(Answer::Granted(Grant { fence, lease_until: Instant::from_micros(lease_until_us) }))
        }
        LockReply::TimedOut => Ok(Answer::TimedOut),
        LockReply::Refused { reason } => Ok(Answer::Refused(reason)),
        LockReply::LockLost { reason } => Ok(Answer::Lost(reason)),
        LockReply::Released => Err(ClientError::Unexpected("`released` in answer to a lock request".into())),
        LockReply::Renewed { .. } => Err(ClientError::Unexpected("`renewed` before any grant".into())),
        LockReply::Locks { .. } => Err(ClientError::Unexpected("`locks` in answer to a lock request".into())),
        LockReply::Leader { .. } => Err(ClientError::Unexpected("`leader` in answer to a lock request".into())),
    }
}

/// Sends `Acquire` on `client` (waiting at most `timeout` for the lock; 0:
/// only if it can be had within one request round trip) and returns the
/// answer. A daemon's error response becomes `Answer::Refused`; no answer
/// within `timeout` plus [`ANSWER_GRACE`] is `ClientError::Timeout`, after
/// which the caller should send `Release` (or close the connection).
pub async fn acquire(client: &mut LockClient, timeout: Duration) -> Result<Answer, ClientError> {
    acquire_named(client, &LockName::unnamed(), timeout).await
}

/// [`acquire`] for lock `name` (`AcquireNamed`; `Acquire` for the unnamed
/// lock). A daemon that serves no names answers `Answer::Refused` with a
/// reason that [`refuses_names`]; an older daemon closes the connection
/// (`ClientError::Closed`).
pub async fn acquire_named(client: &mut LockClient, name: &LockName, timeout: Duration) -> Result<Answer, ClientError> {
    ask(client, acquire_request(name, timeout), timeout).await
}

/// Sends `request`, a request answered as an acquire is (an acquire of
/// any lock, or a campaign: [`crate::elect::campaign`]) whose wait ends at
/// `timeout`, and returns the answer: [`acquire_named`] for any such
/// request. A daemon's error response becomes `Answer::Refused`; no answer
/// within `timeout` plus [`ANSWER_GRACE`] is `ClientError::Timeout`, after
/// which the caller should send `Release` (or close the connection).
pub async fn ask(client: &mut LockClient, request: LockRequest, timeout: Duration) -> Result<Answer, ClientError> {
    client.send(request).await?;
    let within = timeout.saturating_add(ANSWER_GRACE);
    match tokio::time::timeout(within, client.recv()).await {
        Err(_) => Err(ClientError::Timeout(within)),
        Ok(Err(ClientError::Refused(reason))) => Ok(Answer::Refused(reason)),
        Ok(reply) => on_answer(reply),
    }
}

/// Connects to the daemon at `addr` (its `client_listen`) and waits at
/// most `timeout` for the lock: `Ok(None)` if it was not granted in time.
///
/// The daemon refusing (or reporting the lock lost while waiting) is
/// `ClientError::Refused`; no answer at all within `timeout` plus
/// [`ANSWER_GRACE`] is `ClientError::Timeout`. A grant whose lease had
/// already ended when it arrived is returned as a guard whose
/// [`lost`](LockGuard::lost) resolves at once: check
/// [`lease_left`](LockGuard::lease_left) before starting work.
pub async fn lock(addr: SocketAddr, timeout: Duration) -> Result<Option<LockGuard>, ClientError> {
    lock_named(addr, &LockName::unnamed(), timeout).await
}

/// [`lock`] for lock `name` ([`LockName::unnamed`] is [`lock`] itself).
/// A refusal names the lock (``lock `db`: too many locks ...``); a daemon
/// that serves no names refuses with a reason that [`refuses_names`].
pub async fn lock_named(
    addr: SocketAddr,
    name: &LockName,
    timeout: Duration,
) -> Result<Option<LockGuard>, ClientError> {
    // The unnamed lock's refusals stay the daemon's words alone.
    let label = (!name.is_unnamed()).then(|| lock_label(name));
    take_at(addr, acquire_request(name, timeout), name, label.as_deref(), timeout).await
}

/// Connects to `addr`, sends `request` (answered as an acquire is) and
/// returns the grant as a guard of `name`, `None` if the daemon answered
/// that the wait ended first; refusals and losses while waiting are
/// `ClientError::Refused` whose reason starts with `label` when there is
/// one (``lock `db`: …``, ``election `web` lost while waiting: …``).
pub(crate) async fn take_at(
    addr: SocketAddr,
    request: LockRequest,
    name: &LockName,
    label: Option<&str>,
    timeout: Duration,
) -> Result<Option<LockGuard>, ClientError> {
    let mut client = LockClient::connect(addr).await?;
    match ask(&mut client, request, timeout).await {
        Ok(Answer::Granted(grant)) => Ok(Some(LockGuard::named(client, name.clone(), grant))),
        Ok(Answer::TimedOut) => Ok(None),
        Ok(Answer::Refused(reason)) => match label {
            None => Err(ClientError::Refused(reason)),
            Some(label) => Err(ClientError::Refused(format!("{label}: {reason}"))),
        },
        Ok(Answer::Lost(reason)) => {
            let label = label.unwrap_or("lock");
            Err(ClientError::Refused(format!("{label} lost while waiting: {reason}")))
        }
        Err(e) => {
            if matches!(e, ClientError::Timeout(_)) {
                let _ = tokio::time::timeout(SEND_WAIT, client.send(LockRequest::Release)).await;
            }
            Err(e)
        }
    }
}

/// Asks the daemon on `client` which locks its node knows (`ListLocks`),
/// waiting at most `wait` for the answer: the locks listed (the most
/// waited-for first, at most [`lockservice::MAX_LISTED`]) and how many the
/// node knows in all (more than listed when over that). Changes nothing;
/// the connection may still acquire afterwards. A daemon that predates
/// `ListLocks` closes the connection (`ClientError::Closed`).
pub async fn list(client: &mut LockClient, wait: Duration) -> Result<(Vec<LockInfo>, u64), ClientError> {
    match client.call(LockRequest::ListLocks, wait).await? {
        LockReply::Locks { locks, known } => Ok((locks, known)),
        LockReply::Refused { reason } => Err(ClientError::Refused(reason)),
        other => {
            let kind = <LockReply as Message>::kind_name(other.kind()).unwrap_or("?");
            Err(ClientError::Unexpected(format!("`{kind}` in answer to a list of locks")))
        }
    }
}

/// Connects to the daemon at `addr` and [`list`]s its node's locks, waiting
/// at most [`LIST_WAIT`].
pub async fn list_locks(addr: SocketAddr) -> Result<(Vec<LockInfo>, u64), ClientError> {
    let mut client = LockClient::connect(addr).await?;
    list(&mut client, LIST_WAIT).await
}

/// Why a hold ended without the client asking.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LostReason {
    /// The daemon ended it (`LockLost`: revoked after `max_hold`, the
    /// token lost or superseded; or `Released` unasked).
    #[error("{0}")]
    Revoked(String),
    /// The connection to the daemon closed or failed.
    #[error("{0}")]
    Disconnected(String),
    /// The lease ended at this instant without a renewal.
    #[error("the lease {} without a renewal", lease_phrase(*.0, monotonic_now()))]
    LeaseExpired(Instant),
}

/// When a lease ending at `until` ends, seen at `now` (both CLOCK_MONOTONIC
/// instants of this host), for messages: `ends in 80 ms`, `ended 3 ms
/// ago`, `ends now` (a raw monotonic instant means nothing to a reader).
pub fn lease_phrase(until: Instant, now: Instant) -> String {
    let left = until.saturating_since(now);
    let past = now.saturating_since(until);
    if !left.is_zero() {
        format!("ends in {}", crate::duration::show(left))
    } else if !past.is_zero() {
        format!("ended {} ago", crate::duration::show(past))
    } else {
        "ends now".to_string()
    }
}

/// Something that happened to a hold ([`LockGuard::next_event`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HoldEvent {
    /// The lease now ends at this instant.
    Renewed(Instant),
    /// A reply that changes nothing (a stray answer to an earlier request,
    /// a daemon's error response); this says what it was.
    Ignored(String),
    /// The hold has ended.
    Lost(LostReason),
}

/// What a message from the daemon means while the lock is held (the lease
/// deadline is the caller's business).
pub fn on_hold_reply(reply: Result<LockReply, ClientError>) -> HoldEvent {
    match reply {
        Ok(LockReply::Renewed { lease_until_us }) => HoldEvent::Renewed(Instant::from_micros(lease_until_us)),
        Ok(LockReply::LockLost { reason }) => HoldEvent::Lost(LostReason::Revoked(reason)),
        Ok(LockReply::Released) => {
            HoldEvent::Lost(LostReason::Revoked("the daemon released the lock unasked".to_string()))
        }
        Err(ClientError::Closed) => {
            HoldEvent::Lost(LostReason::Disconnected("the daemon closed the connection".to_string()))
        }
        Err(ClientError::Refused(reason)) => HoldEvent::Ignored(format!("the daemon said: {reason}")),
        Err(e) => HoldEvent::Lost(LostReason::Disconnected(format!("connection to the daemon failed: {e}"))),
        Ok(
            other @ (LockReply::Granted { .. }
            | LockReply::TimedOut
            | LockReply::Refused { .. }
            | LockReply::Locks { .. }
            | LockReply::Leader { .. }),
        ) => HoldEvent::Ignored(format!("ignoring an unexpected reply while holding the lock: {other:?}")),
    }
}

/// Why [`LockGuard::release`] could not confirm a clean release.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The hold had already ended before the release (the protected work
    /// may have run partly unprotected).
    #[error("the lock was lost before the release: {0}")]
    Lost(LostReason),
    /// The daemon refused the release.
    #[error("release refused: {0}")]
    Refused(String),
    /// No `Released` came back (the daemon releases a hold whose client
    /// goes away, so dropping the guard still releases it).
    #[error("no release confirmation: {0}")]
    NoConfirmation(ClientError),
}

/// A cluster-wide lock, held: its name, the connection it was granted on,
/// its fence, and its lease.
#[derive(Debug)]
pub struct LockGuard {
    client: LockClient,
    name: LockName,
    fence: u128,
    lease_until: Instant,
    lost: Option<LostReason>,
}

impl LockGuard {
    /// The guard of `grant` of the unnamed lock, received on `client`
    /// (after [`acquire`]).
    pub fn new(client: LockClient, grant: Grant) -> Self {
        Self::named(client, LockName::unnamed(), grant)
    }

    /// The guard of `grant` of lock `name`, received on `client` (after
    /// [`acquire_named`]).
    pub fn named(client: LockClient, name: LockName, grant: Grant) -> Self {
        LockGuard { client, name, fence: grant.fence, lease_until: grant.lease_until, lost: None }
    }

    /// The lock held ([`LockName::unnamed`] for the unnamed lock; its
    /// `Display` is `(unnamed)`). [`LostReason`] and [`ReleaseError`] say
    /// why, this says which: ``format!("{} lost: {why}", lock_label(guard.name()))``.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The fencing token: larger than any granted before anywhere in the
    /// cluster; hand it to what the lock protects.
    pub fn fence(&self) -> u128 {
        self.fence
    }

    /// The end of the lease, a CLOCK_MONOTONIC instant of this host (the
    /// scale of [`timer::monotonic_now`]), as last moved by a `Renewed`
    /// that [`next_event`](Self::next_event) or [`lost`](Self::lost) read.
    pub fn lease_until(&self) -> Instant {
        self.lease_until
    }

    /// How long the lease lasts from now: zero once it has ended.
    pub fn lease_left(&self) -> Duration {
        self.lease_until.saturating_since(monotonic_now())
    }

    /// Why the hold ended, if [`next_event`](Self::next_event) has seen it end.
    pub fn lost_reason(&self) -> Option<&LostReason> {
        self.lost.as_ref()
    }

    /// The next thing that happens to the hold: a renewal (applied to
    /// [`lease_until`](Self::lease_until)), an ignored reply, or its end.
    /// Once it has ended, returns that end again at once. A `Renewed` that
    /// arrives after the lease's end does not revive it.
    ///
    /// Cancel-safe: a reply is applied as soon as it has been read.
    pub async fn next_event(&mut self) -> HoldEvent {
        if let Some(lost) = &self.lost {
            return HoldEvent::Lost(lost.clone());
        }
        let left = self.lease_left();
        let mut event = if left.is_zero() {
            HoldEvent::Lost(LostReason::LeaseExpired(self.lease_until))
        } else {
            tokio::select! {
                // A reply and the deadline together: the reply, checked below.
                biased;
                reply = self.client.recv() => on_hold_reply(reply),
                () = tokio::time::sleep(left) => HoldEvent::Lost(LostReason::LeaseExpired(self.lease_until)),
            }
        };
        if !matches!(event, HoldEvent::Lost(_)) && self.lease_left().is_zero() {
            // Read too late (this process was paused or busy): the lease
            // ended before the renewal was seen.
            event = HoldEvent::Lost(LostReason::LeaseExpired(self.lease_until));
        }
        match &event {
            HoldEvent::Renewed(until) => self.lease_until = *until,
            HoldEvent::Lost(why) => self.lost = Some(why.clone()),
            HoldEvent::Ignored(_) => {}
        }
        event
    }

    /// Resolves when the hold ends without the client asking: `LockLost`,
    /// the daemon gone, or the lease's end passed without a renewal.
    /// Applies renewals meanwhile. Cancel-safe.
    pub async fn lost(&mut self) -> LostReason {
        loop {
            if let HoldEvent::Lost(why) = self.next_event().await {
                return why;
            }
        }
    }

    /// Gives the lock back and waits (at most [`RELEASE_WAIT`]) for the
    /// daemon's confirmation. `Err(Lost)` if the hold had already ended
    /// (as far as this guard has seen, or its lease has passed): the work
    /// done under it may not have been protected to the end.
    pub async fn release(mut self) -> Result<(), ReleaseError> {
        let ended = self
            .lost
            .take()
            .or_else(|| self.lease_left().is_zero().then_some(LostReason::LeaseExpired(self.lease_until)));
        if let Some(why) = ended {
            // The daemon may not know yet: tell it, without waiting.
            let _ = tokio::time::timeout(SEND_WAIT, self.client.send(LockRequest::Release)).await;
            return Err(ReleaseError::Lost(why));
        }
        let client = &mut self.client;
        let ask = async {
            client.send(LockRequest::Release).await.map_err(ReleaseError::NoConfirmation)?;
            loop {
                match client.recv().await {
                    Ok(LockReply::Released) => return Ok(()),
                    Ok(LockReply::LockLost { reason }) => return Err(ReleaseError::Lost(LostReason::Revoked(reason))),
                    Ok(LockReply::Refused { reason }) | Err(ClientError::Refused(reason)) => {
                        return Err(ReleaseError::Refused(reason))
                    }
                    // A renewal or a stray reply to an earlier request.
                    Ok(
                        LockReply::Renewed { .. }
                        | LockReply::Granted { .. }
                        | LockReply::TimedOut
                        | LockReply::Locks { .. }
                        | LockReply::Leader { .. },
                    ) => {}
                    Err(e) => return Err(ReleaseError::NoConfirmation(e)),
                }
            }
        };
        tokio::time::timeout(RELEASE_WAIT, ask)
            .await
            .unwrap_or(Err(ReleaseError::NoConfirmation(ClientError::Timeout(RELEASE_WAIT))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{fake_daemon, Conn, STEP};

    /// CLOCK_MONOTONIC `d` from now, in microseconds.
    fn in_us(d: Duration) -> u64 {
        (monotonic_now() + d).as_micros()
    }

    /// Expects `Acquire{timeout_ms}` and grants fence 7 with a lease of `lease`.
    async fn grant(conn: &mut Conn, timeout_ms: u64, lease: Duration) {
        assert_eq!(conn.recv().await, Some(LockRequest::Acquire { timeout_ms }));
        conn.send(LockReply::Granted { fence: 7, lease_until_us: in_us(lease) }).await;
    }

    async fn granted(addr: SocketAddr) -> LockGuard {
        lock(addr, Duration::from_secs(1)).await.unwrap().expect("granted")
    }

    #[tokio::test]
    async fn a_grant_gives_fence_and_lease_and_releases() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let addr = fake_daemon(|mut conn| async move {
            grant(&mut conn, 1000, Duration::from_secs(30)).await;
            assert_eq!(conn.recv().await, Some(LockRequest::Release));
            conn.send(LockReply::Released).await;
            tx.send(()).unwrap();
        })
        .await;
        let guard = granted(addr).await;
        assert_eq!(guard.fence(), 7);
        assert!(guard.lease_left() > Duration::from_secs(29), "{:?}", guard.lease_left());
        assert!(guard.lease_until() > monotonic_now());
        guard.release().await.unwrap();
        rx.await.unwrap();
    }

    #[tokio::test]
    async fn timed_out_is_none_and_refused_is_an_error() {
        let addr = fake_daemon(|mut conn| async move {
            assert_eq!(conn.recv().await, Some(LockRequest::Acquire { timeout_ms: 0 }));
            conn.send(LockReply::TimedOut).await;
        })
        .await;
        assert!(lock(addr, Duration::ZERO).await.unwrap().is_none());

        let addr = fake_daemon(|mut conn| async move {
            let _ = conn.recv().await;
            conn.send(LockReply::Refused { reason: "local queue full".into() }).await;
        })
        .await;
        let e = lock(addr, Duration::ZERO).await.unwrap_err();
        assert!(matches!(&e, ClientError::Refused(r) if r == "local queue full"), "{e:?}");
    }

    #[tokio::test]
    async fn renewals_move_the_lease_and_lock_lost_ends_it() {
        let (renewed_tx, renewed_rx) = tokio::sync::oneshot::channel();
        let far = in_us(Duration::from_secs(60));
        let addr = fake_daemon(move |mut conn| async move {
            grant(&mut conn, 1000, Duration::from_millis(300)).await;
            conn.send(LockReply::Renewed { lease_until_us: far }).await;
            renewed_rx.await.unwrap();
            conn.send(LockReply::LockLost { reason: "token lost".into() }).await;
            // Kept open: the loss is the daemon's word, not a closed connection.
            let _ = conn.recv().await;
        })
        .await;
        let mut guard = granted(addr).await;
        assert_eq!(guard.next_event().await, HoldEvent::Renewed(Instant::from_micros(far)));
        assert_eq!(guard.lease_until(), Instant::from_micros(far));
        renewed_tx.send(()).unwrap();
        // Past the first lease's end: the renewal keeps it.
        let why = tokio::time::timeout(STEP, guard.lost()).await.unwrap();
        assert_eq!(why, LostReason::Revoked("token lost".into()));
        assert_eq!(guard.lost_reason(), Some(&why));
        // Once lost, lost for good.
        assert_eq!(guard.next_event().await, HoldEvent::Lost(why.clone()));
        assert!(matches!(guard.release().await, Err(ReleaseError::Lost(r)) if r == why));
    }

    #[tokio::test]
    async fn the_lease_expires_without_a_renewal() {
        let addr = fake_daemon(|mut conn| async move {
            grant(&mut conn, 1000, Duration::from_millis(150)).await;
            let _ = conn.recv().await;
        })
        .await;
        let mut guard = granted(addr).await;
        let until = guard.lease_until();
        let why = tokio::time::timeout(STEP, guard.lost()).await.unwrap();
        assert_eq!(why, LostReason::LeaseExpired(until));
        assert!(monotonic_now() >= until, "lost before the lease's end");
        let text = why.to_string();
        assert!(text.starts_with("the lease ended ") || text.starts_with("the lease ends now"), "{text}");
        assert!(text.ends_with(" without a renewal"), "{text}");
    }

    #[test]
    fn lease_phrases_are_durations_not_instants() {
        let at = |ms: u64| Instant::from_micros(715_251_923 + ms * 1000);
        assert_eq!(lease_phrase(at(80), at(0)), "ends in 80 ms");
        assert_eq!(lease_phrase(at(0), at(3)), "ended 3 ms ago");
        assert_eq!(lease_phrase(at(0), at(0)), "ends now");
        assert_eq!(lease_phrase(at(2_500), at(0)), "ends in 2.5 s");
    }

    #[tokio::test]
    async fn a_grant_already_expired_is_lost_at_once() {
        let addr = fake_daemon(|mut conn| async move {
            let _ = conn.recv().await;
            let past = monotonic_now().as_micros().saturating_sub(1);
            conn.send(LockReply::Granted { fence: 3, lease_until_us: past }).await;
            let _ = conn.recv().await;
        })
        .await;
        let mut guard = granted(addr).await;
        assert_eq!(guard.lease_left(), Duration::ZERO);
        let why = tokio::time::timeout(Duration::from_millis(50), guard.lost()).await.expect("not at once");
        assert!(matches!(why, LostReason::LeaseExpired(_)), "{why:?}");
    }

    #[tokio::test]
    async fn a_renewal_read_after_the_lease_ended_does_not_revive_it() {
        let addr = fake_daemon(|mut conn| async move {
            grant(&mut conn, 1000, Duration::from_millis(50)).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            conn.send(LockReply::Renewed { lease_until_us: in_us(Duration::from_secs(60)) }).await;
            let _ = conn.recv().await;
        })
        .await;
        let mut guard = granted(addr).await;
        // Nobody reads until the renewal has arrived and the lease has ended.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(matches!(guard.next_event().await, HoldEvent::Lost(LostReason::LeaseExpired(_))));
    }

    #[tokio::test]
    async fn a_closed_connection_is_a_lost_lock() {
        let addr = fake_daemon(|mut conn| async move {
            grant(&mut conn, 1000, Duration::from_secs(30)).await;
            drop(conn);
        })
        .await;
        let mut guard = granted(addr).await;
        let why = tokio::time::timeout(STEP, guard.lost()).await.unwrap();
        assert_eq!(why, LostReason::Disconnected("the daemon closed the connection".into()));
    }

    #[tokio::test]
    async fn stray_replies_are_ignored_and_release_waits_past_them() {
        let addr = fake_daemon(|mut conn| async move {
            grant(&mut conn, 1000, Duration::from_secs(30)).await;
            conn.send(LockReply::TimedOut).await;
            assert_eq!(conn.recv().await, Some(LockRequest::Release));
            conn.send(LockReply::Renewed { lease_until_us: in_us(Duration::from_secs(30)) }).await;
            conn.send(LockReply::Refused { reason: "not held".into() }).await;
        })
        .await;
        let mut guard = granted(addr).await;
        assert!(matches!(guard.next_event().await, HoldEvent::Ignored(_)));
        assert!(matches!(guard.release().await, Err(ReleaseError::Refused(r)) if r == "not held"));
    }

    #[tokio::test]
    async fn a_missing_release_confirmation_is_reported() {
        let addr = fake_daemon(|mut conn| async move {
            grant(&mut conn, 1000, Duration::from_secs(30)).await;
            assert_eq!(conn.recv().await, Some(LockRequest::Release));
            let _ = conn.recv().await;
        })
        .await;
        let guard = granted(addr).await;
        let e = guard.release().await.unwrap_err();
        assert!(matches!(e, ReleaseError::NoConfirmation(ClientError::Timeout(_))), "{e:?}");
        assert!(e.to_string().starts_with("no release confirmation"), "{e}");
    }

    fn name(s: &str) -> LockName {
        LockName::parse(s).unwrap()
    }

    #[tokio::test]
    async fn a_named_lock_is_asked_by_name_and_the_guard_knows_it() {
        let addr = fake_daemon(|mut conn| async move {
            assert_eq!(
                conn.recv().await,
                Some(LockRequest::AcquireNamed { name: name("db/migrate-1"), timeout_ms: 1000 })
            );
            conn.send(LockReply::Granted { fence: 11, lease_until_us: in_us(Duration::from_secs(30)) }).await;
            assert_eq!(conn.recv().await, Some(LockRequest::Release));
            conn.send(LockReply::Released).await;
        })
        .await;
        let guard = lock_named(addr, &name("db/migrate-1"), Duration::from_secs(1)).await.unwrap().expect("granted");
        assert_eq!(guard.name(), &name("db/migrate-1"));
        assert_eq!(guard.fence(), 11);
        guard.release().await.unwrap();
    }

    #[tokio::test]
    async fn the_unnamed_lock_is_asked_with_acquire() {
        let addr = fake_daemon(|mut conn| async move {
            grant(&mut conn, 1000, Duration::from_secs(30)).await;
            let _ = conn.recv().await;
        })
        .await;
        let guard = lock_named(addr, &LockName::unnamed(), Duration::from_secs(1)).await.unwrap().expect("granted");
        assert!(guard.name().is_unnamed());
        assert_eq!(guard.name().to_string(), "(unnamed)");
        // `lock` is the unnamed lock too.
        let addr = fake_daemon(|mut conn| async move {
            grant(&mut conn, 1000, Duration::from_secs(30)).await;
            let _ = conn.recv().await;
        })
        .await;
        assert!(granted(addr).await.name().is_unnamed());
    }

    #[tokio::test]
    async fn refusals_and_losses_of_a_named_lock_name_it() {
        let no_names = "this daemon serves one unnamed lock: named locks are not supported (docs/named-locks.md)";
        let addr = fake_daemon(move |mut conn| async move {
            let _ = conn.recv().await;
            conn.send(LockReply::Refused { reason: no_names.into() }).await;
        })
        .await;
        let e = lock_named(addr, &name("jobs"), Duration::ZERO).await.unwrap_err();
        let ClientError::Refused(reason) = &e else { panic!("{e:?}") };
        assert_eq!(reason, &format!("lock `jobs`: {no_names}"));
        assert!(refuses_names(reason), "{reason}");

        let addr = fake_daemon(|mut conn| async move {
            let _ = conn.recv().await;
            conn.send(LockReply::LockLost { reason: "daemon is shutting down".into() }).await;
        })
        .await;
        let e = lock_named(addr, &name("jobs"), Duration::ZERO).await.unwrap_err();
        assert!(
            matches!(&e, ClientError::Refused(r) if r == "lock `jobs` lost while waiting: daemon is shutting down"),
            "{e:?}"
        );
    }

    #[test]
    fn requests_labels_and_the_no_names_refusal() {
        assert_eq!(
            acquire_request(&LockName::unnamed(), Duration::from_millis(1500)),
            LockRequest::Acquire { timeout_ms: 1500 }
        );
        assert_eq!(
            acquire_request(&name("a.b"), Duration::MAX),
            LockRequest::AcquireNamed { name: name("a.b"), timeout_ms: u64::MAX }
        );
        assert_eq!(lock_label(&LockName::unnamed()), "lock");
        assert_eq!(lock_label(&name("db/x")), "lock `db/x`");
        assert!(refuses_names(
            "tokenwatchd serves one token ring: named locks are not supported (docs/tokenwatchd.md)"
        ));
        assert!(!refuses_names("too many locks: this node knows 10000 (limits.max_locks)"));
        assert!(!refuses_names("queue full"));
    }

    #[tokio::test]
    async fn list_locks_returns_the_locks_and_how_many_are_known() {
        let info = LockInfo { name: name("db"), held_fence: Some(1 << 70), last_fence: Some(1 << 70), waiters: 2 };
        let sent = info.clone();
        let addr = fake_daemon(move |mut conn| async move {
            assert_eq!(conn.recv().await, Some(LockRequest::ListLocks));
            conn.send(LockReply::Locks { locks: vec![sent], known: 300 }).await;
        })
        .await;
        assert_eq!(list_locks(addr).await.unwrap(), (vec![info], 300));

        let addr = fake_daemon(|mut conn| async move {
            let _ = conn.recv().await;
            conn.send(LockReply::Refused { reason: "daemon is shutting down".into() }).await;
        })
        .await;
        let e = list_locks(addr).await.unwrap_err();
        assert!(matches!(&e, ClientError::Refused(r) if r == "daemon is shutting down"), "{e:?}");

        let addr = fake_daemon(|mut conn| async move {
            let _ = conn.recv().await;
            conn.send(LockReply::TimedOut).await;
        })
        .await;
        let e = list_locks(addr).await.unwrap_err();
        assert!(matches!(&e, ClientError::Unexpected(r) if r == "`timed_out` in answer to a list of locks"), "{e:?}");

        // An older daemon hangs up on a request kind it does not know.
        let addr = fake_daemon(|mut conn| async move {
            let _ = conn.recv().await;
        })
        .await;
        assert!(matches!(list_locks(addr).await, Err(ClientError::Closed)));
    }

    #[test]
    fn answers_map_every_reply() {
        assert_eq!(
            on_answer(Ok(LockReply::Granted { fence: 9, lease_until_us: 5 })).unwrap(),
            Answer::Granted(Grant { fence: 9, lease_until: Instant::from_micros(5) })
        );
        assert_eq!(on_answer(Ok(LockReply::TimedOut)).unwrap(), Answer::TimedOut);
        assert_eq!(on_answer(Ok(LockReply::Refused { reason: "r".into() })).unwrap(), Answer::Refused("r".into()));
        assert_eq!(on_answer(Ok(LockReply::LockLost { reason: "l".into() })).unwrap(), Answer::Lost("l".into()));
        assert!(matches!(on_answer(Ok(LockReply::Released)), Err(ClientError::Unexpected(_))));
        assert!(matches!(on_answer(Ok(LockReply::Renewed { lease_until_us: 1 })), Err(ClientError::Unexpected(_))));
        assert!(matches!(on_answer(Err(ClientError::Closed)), Err(ClientError::Closed)));
        assert!(matches!(on_answer(Ok(LockReply::Locks { locks: vec![], known: 0 })), Err(ClientError::Unexpected(_))));
    }

    #[test]
    fn loss_and_disconnection_end_the_hold() {
        let lost = |r| match on_hold_reply(r) {
            HoldEvent::Lost(why) => why,
            other => panic!("{other:?}"),
        };
        assert_eq!(lost(Ok(LockReply::LockLost { reason: "revoked".into() })), LostReason::Revoked("revoked".into()));
        assert_eq!(lost(Err(ClientError::Closed)), LostReason::Disconnected("the daemon closed the connection".into()));
        assert!(matches!(lost(Ok(LockReply::Released)), LostReason::Revoked(_)));
        assert!(matches!(lost(Err(ClientError::Timeout(Duration::from_secs(1)))), LostReason::Disconnected(_)));
    }

    #[test]
    fn renewals_carry_the_new_end_and_stray_replies_are_ignored() {
        assert_eq!(
            on_hold_reply(Ok(LockReply::Renewed { lease_until_us: 42 })),
            HoldEvent::Renewed(Instant::from_micros(42))
        );
        for r in [
            Ok(LockReply::Granted { fence: 7, lease_until_us: 1 }),
            Ok(LockReply::TimedOut),
            Ok(LockReply::Refused { reason: "already held".into() }),
            Err(ClientError::Refused("no".into())),
            Ok(LockReply::Locks { locks: vec![], known: 0 }),
        ] {
            assert!(matches!(on_hold_reply(r), HoldEvent::Ignored(_)));
        }
    }
}

/// The client API's wire bytes of the lock requests (named-locks.md,
/// "Names on the wire"): kinds 0 (`Acquire`) and 1 (`Release`) keep the
/// bytes older clients send; `AcquireNamed` is kind 2, `ListLocks` kind 3.
#[cfg(test)]
mod pinned {
    use lockservice::{LockName, LockRequest};
    use wire::ClientCodec;

    fn body(r: &LockRequest) -> Vec<u8> {
        ClientCodec::<LockRequest, LockRequest>::encode_body(r).expect("encodes").to_vec()
    }

    #[test]
    fn lock_request_bytes_are_pinned() {
        let name = LockName::parse("db").expect("valid");
        let got: Vec<Vec<u8>> = vec![
            body(&LockRequest::Acquire { timeout_ms: 300 }),
            body(&LockRequest::Release),
            body(&LockRequest::AcquireNamed { name, timeout_ms: 300 }),
            body(&LockRequest::ListLocks),
        ];
        // magic "FTCL", version 1, kind (u16, big-endian), postcard body.
        let want: Vec<Vec<u8>> = vec![
            vec![70, 84, 67, 76, 1, 0, 0, 0, 172, 2],
            vec![70, 84, 67, 76, 1, 0, 1, 1],
            vec![70, 84, 67, 76, 1, 0, 2, 2, 2, b'd', b'b', 172, 2],
            vec![70, 84, 67, 76, 1, 0, 3, 3],
        ];
        assert_eq!(got, want);
    }
}

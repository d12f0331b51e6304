//! Elections for applications (docs/elections.md): campaign to lead
//! election NAME with a value, and see who leads (`ftctl elect`).
//!
//! A campaign is a wait for electd's lock `elect:NAME` (the daemon builds
//! that name; the client sends the user name in `Campaign`), answered
//! exactly as an acquire is: [`campaign`] returns the same [`Answer`],
//! [`campaign_at`] the same [`LockGuard`] as [`crate::lock::lock_named`]
//! (its [`name`](LockGuard::name) is NAME, its
//! [`release`](LockGuard::release) resigns). Leadership is a lease like
//! any hold: race the leader's work against [`LockGuard::lost`] and pass
//! [`LockGuard::fence`] on.
//!
//! ```no_run
//! # async fn demo() -> Result<(), client::ClientError> {
//! use client::elect;
//! use lockservice::LockName;
//!
//! let addr = "127.0.0.1:7201".parse().unwrap();
//! let web = LockName::parse("web").unwrap();
//! let Some(mut guard) = elect::campaign_at(addr, &web, "host-a:8080", elect::FOREVER).await? else {
//!     return Ok(()); // not leading within the timeout
//! };
//! let lead = async { /* act as the leader, with guard's fence */ };
//! tokio::select! {
//!     () = lead => { let _ = guard.release().await; } // resign
//!     why = guard.lost() => eprintln!("election `web` lost: {why}"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Who leads: [`observe`] asks once (`Observe { watch: false }`); a
//! [`Watch`] (`Observe { watch: true }`) yields the leader at once, then
//! each change. A watch never goes back: it keeps the last observation it
//! yielded and the highest fence it yielded, across reconnections
//! ([`Watch::reconnect`]), and drops an observation equal to the last or
//! naming a leader whose fence is not above the highest yielded
//! ([`LeaderFilter`]; "no leader" after a leader passes, "no leader" after
//! "no leader" does not).
//!
//! Only electd elects: ntmutexd and tokenwatchd refuse campaigns and
//! observes with a reason that [`refuses_elections`]; a daemon that
//! predates elections closes the connection (`ClientError::Closed`).

use std::net::SocketAddr;
use std::time::Duration;

use ftcore::Message;
use lockservice::{LeaderInfo, LockName, LockReply, LockRequest, MAX_VALUE};

use crate::lock::{ask, take_at, Answer, LockClient, LockGuard, ANSWER_GRACE, RELEASE_WAIT};
use crate::ClientError;

/// A campaign without a deadline: sent as `timeout_ms = u64::MAX`. The
/// daemons add a client's timeout to the time of its arrival with
/// `timer::Instant`'s saturating addition (lockservice's local queue), so
/// that deadline is the end of time and never passes, and a sleep until it
/// is capped at 100 years (`timer::RealClock::to_std`); the client's own
/// wait for the answer ([`crate::lock::ask`]) has no deadline then (tokio's
/// `timeout` sets none when `now + timeout` overflows).
pub const FOREVER: Duration = Duration::MAX;

/// How long the daemon may take to answer an [`observe`] (electd asks its
/// coordinator, again after each `request_timeout`, and answers "no
/// coordinator answered" well within this); [`observe`] waits
/// [`ANSWER_GRACE`] more for that answer.
pub const OBSERVE_WAIT: Duration = Duration::from_secs(5);

/// How long [`Watch::reconnect`] may take to connect.
pub const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// What every daemon that does not elect says when refusing a campaign or
/// an observe (`lockservice`'s one-lock queue: ntmutexd, tokenwatchd).
const NO_ELECTIONS_PHRASE: &str = "elections are served by electd";

/// Whether a refusal's `reason` says the daemon does not elect (as opposed
/// to a refusal of this request: a full queue, too many locks or observed
/// elections, no coordinator answering, the daemon leaving). Such a
/// refusal is final: no retry against that daemon can succeed.
pub fn refuses_elections(reason: &str) -> bool {
    reason.contains(NO_ELECTIONS_PHRASE)
}

/// The election as messages name it: ``election `NAME` ``.
pub fn election_label(name: &LockName) -> String {
    format!("election `{}`", name.as_str())
}

/// Why `value` cannot be a campaigner's value, if it cannot: over
/// [`MAX_VALUE`] bytes (the daemon's own words for it).
pub fn check_value(value: &str) -> Result<(), String> {
    if value.len() > MAX_VALUE {
        return Err(format!("the value has {} bytes, the most is {MAX_VALUE}", value.len()));
    }
    Ok(())
}

/// Why `name` cannot be an election, if it cannot: the unnamed lock, or an
/// election's own lock name (`elect:…`), which no [`LockName::parse`] makes.
fn check_name(name: &LockName) -> Result<(), String> {
    if name.is_unnamed() || name.is_election() {
        return Err(format!("invalid election name {:?}: a name is 1-128 bytes of A-Z a-z 0-9 . _ / -", name.as_str()));
    }
    Ok(())
}

/// The request that campaigns in election `name` with `value`, waiting at
/// most `timeout` ([`FOREVER`]: `u64::MAX` ms).
pub fn campaign_request(name: &LockName, value: &str, timeout: Duration) -> LockRequest {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    LockRequest::Campaign { name: name.clone(), value: value.to_owned(), timeout_ms }
}

/// Sends `Campaign` on `client` (waiting at most `timeout` to lead; 0: only
/// if nobody leads now; [`FOREVER`]) and returns the answer, as
/// [`crate::lock::acquire_named`] does for a lock: `Granted` (this client
/// leads: hold it as [`LockGuard::named`]`(client, name, grant)`),
/// `TimedOut`, `Refused` (a daemon that does not elect: the reason
/// [`refuses_elections`]), `Lost`. A name that is no election's or a value
/// over [`MAX_VALUE`] bytes is `Answer::Refused` without anything sent. No
/// answer within `timeout` plus [`ANSWER_GRACE`] is `ClientError::Timeout`,
/// after which the caller should send `Release` (or close the connection).
pub async fn campaign(
    client: &mut LockClient,
    name: &LockName,
    value: &str,
    timeout: Duration,
) -> Result<Answer, ClientError> {
    if let Err(why) = check_name(name).and_then(|()| check_value(value)) {
        return Ok(Answer::Refused(why));
    }
    ask(client, campaign_request(name, value, timeout), timeout).await
}

/// Connects to the daemon at `addr` and campaigns in election `name` with
/// `value`, waiting at most `timeout` ([`FOREVER`]) to lead: `Ok(None)` if
/// the daemon answered that the wait ended first. The guard's name is
/// `name`; refusals and losses while waiting name the election
/// (``election `web`: …``, ``election `web` lost while waiting: …``) and
/// are `ClientError::Refused`, a daemon that does not elect included
/// ([`refuses_elections`] holds for the reason).
pub async fn campaign_at(
    addr: SocketAddr,
    name: &LockName,
    value: &str,
    timeout: Duration,
) -> Result<Option<LockGuard>, ClientError> {
    let label = election_label(name);
    if let Err(why) = check_name(name).and_then(|()| check_value(value)) {
        return Err(ClientError::Refused(format!("{label}: {why}")));
    }
    take_at(addr, campaign_request(name, value, timeout), name, Some(&label), timeout).await
}

/// What the daemon's reply to an observe of election `name` means: its
/// leader (`None`: nobody leads). A refusal is `ClientError::Refused` with
/// the daemon's reason; a `Leader` of another election and any other reply
/// are `ClientError::Unexpected`.
pub fn on_observed(reply: Result<LockReply, ClientError>, name: &LockName) -> Result<Option<LeaderInfo>, ClientError> {
    match reply? {
        LockReply::Leader { name: of, leader } if of == *name => Ok(leader),
        LockReply::Leader { name: of, .. } => Err(ClientError::Unexpected(format!(
            "the leader of election `{}` in answer to an observe of `{}`",
            of.as_str(),
            name.as_str()
        ))),
        LockReply::Refused { reason } => Err(ClientError::Refused(reason)),
        other => {
            let kind = <LockReply as Message>::kind_name(other.kind()).unwrap_or("?");
            Err(ClientError::Unexpected(format!("`{kind}` in answer to an observe")))
        }
    }
}

/// Asks the daemon on `client` once who leads election `name`
/// (`Observe { watch: false }`), waiting at most [`OBSERVE_WAIT`] plus
/// [`ANSWER_GRACE`]: the leader, or `None` if nobody leads. A refusal is
/// `ClientError::Refused` with the daemon's reason (one that
/// [`refuses_elections`], or "no coordinator answered: …": no leader is
/// known *either way*, which is not "no leader").
pub async fn observe(client: &mut LockClient, name: &LockName) -> Result<Option<LeaderInfo>, ClientError> {
    check_name(name).map_err(ClientError::Refused)?;
    let within = OBSERVE_WAIT.saturating_add(ANSWER_GRACE);
    let reply = client.call(LockRequest::Observe { name: name.clone(), watch: false }, within).await;
    on_observed(reply, name)
}

/// Connects to the daemon at `addr` and [`observe`]s election `name` once.
pub async fn observe_at(addr: SocketAddr, name: &LockName) -> Result<Option<LeaderInfo>, ClientError> {
    let mut client = LockClient::connect(addr).await?;
    observe(&mut client, name).await
}

/// The order a watch keeps: passes on an observation only if it is news
/// (see [`pass`](Self::pass)), so that a watcher never goes back to an
/// older leader, whatever order the observations arrive in (a push raced
/// by a reconnection's answer, a daemon's stale answer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderFilter {
    /// The last observation passed on (`None`: none yet).
    last: Option<Option<LeaderInfo>>,
    /// The highest fence of a leader passed on.
    max_fence: Option<u128>,
}

impl LeaderFilter {
    /// A filter that has passed nothing on.
    pub fn new() -> Self {
        Self::default()
    }

    /// `Some(observation)` if it is news, which it then records; `None` if
    /// it is dropped. News is the first observation; a leader whose fence
    /// is above every fence passed on; "no leader" after a leader. Dropped:
    /// an observation equal to the last, a leader whose fence is not above
    /// the highest passed on (an older leader, or the same leadership
    /// again), "no leader" after "no leader".
    pub fn pass(&mut self, observation: Option<LeaderInfo>) -> Option<Option<LeaderInfo>> {
        let news = match (&self.last, &observation) {
            (None, _) => true,
            (Some(last), now) if last == now => false,
            (Some(_), None) => true,
            (Some(_), Some(leader)) => self.max_fence.is_none_or(|max| leader.fence > max),
        };
        if !news {
            return None;
        }
        if let Some(leader) = &observation {
            self.max_fence = Some(self.max_fence.map_or(leader.fence, |max| max.max(leader.fence)));
        }
        self.last = Some(observation.clone());
        Some(observation)
    }

    /// The last observation passed on (`None`: none yet).
    pub fn last(&self) -> Option<&Option<LeaderInfo>> {
        self.last.as_ref()
    }

    /// The highest fence of a leader passed on.
    pub fn max_fence(&self) -> Option<u128> {
        self.max_fence
    }
}

/// A watch of election `name` (`Observe { watch: true }`): [`next`] yields
/// the leader at once, then each change, through a [`LeaderFilter`] that
/// the watch keeps for its whole life, reconnections included.
///
/// When the connection fails (`next` returns an error other than a
/// refusal that [`refuses_elections`]), the watch is disconnected: call
/// [`reconnect`](Self::reconnect) (after a pause of your choosing) and go
/// on with `next`; the daemon answers the new watch with the current state,
/// yielded only if it is news. A change made while disconnected is seen
/// in that answer (the last state is never missed; intermediate ones may
/// be).
///
/// ```no_run
/// # async fn demo() -> Result<(), client::ClientError> {
/// use client::elect::Watch;
/// use lockservice::LockName;
///
/// let addr = "127.0.0.1:7201".parse().unwrap();
/// let mut watch = Watch::start(addr, &LockName::parse("web").unwrap()).await?;
/// loop {
///     match watch.next().await {
///         Ok(Some(leader)) => println!("leader: node {}, value {}", leader.node, leader.value),
///         Ok(None) => println!("no leader"),
///         Err(e) => {
///             eprintln!("watch lost: {e}");
///             tokio::time::sleep(std::time::Duration::from_millis(100)).await;
///             let _ = watch.reconnect().await;
///         }
///     }
/// }
/// # }
/// ```
///
/// [`next`]: Self::next
#[derive(Debug)]
pub struct Watch {
    addr: SocketAddr,
    name: LockName,
    /// The connection watching (`None`: lost, until [`reconnect`](Self::reconnect)).
    client: Option<LockClient>,
    filter: LeaderFilter,
}

/// [`Watch::start`]: connects to `addr` and watches election `name`.
pub async fn watch(addr: SocketAddr, name: &LockName) -> Result<Watch, ClientError> {
    Watch::start(addr, name).await
}

impl Watch {
    /// Connects to the daemon at `addr` and starts watching election `name`.
    pub async fn start(addr: SocketAddr, name: &LockName) -> Result<Watch, ClientError> {
        let client = LockClient::connect(addr).await?;
        Watch::over(client, name).await
    }

    /// Starts watching election `name` on `client` (a fresh connection: a
    /// watching connection does nothing else); reconnections go to the
    /// address it is connected to.
    pub async fn over(mut client: LockClient, name: &LockName) -> Result<Watch, ClientError> {
        check_name(name).map_err(ClientError::Refused)?;
        client.send(LockRequest::Observe { name: name.clone(), watch: true }).await?;
        Ok(Watch { addr: client.addr(), name: name.clone(), client: Some(client), filter: LeaderFilter::new() })
    }

    /// The election watched.
    pub fn name(&self) -> &LockName {
        &self.name
    }

    /// The daemon's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the watch has a connection (until an error from
    /// [`next`](Self::next); again after [`reconnect`](Self::reconnect)).
    pub fn is_connected(&self) -> bool {
        self.client.is_some()
    }

    /// The observations passed on so far ([`LeaderFilter::last`] and
    /// [`LeaderFilter::max_fence`]).
    pub fn filter(&self) -> &LeaderFilter {
        &self.filter
    }

    /// The next observation that is news: the leader (`None`: nobody
    /// leads). Waits as long as it takes (a daemon between coordinators
    /// answers once one does). A `Leader` of another election, and one
    /// that is no news, are skipped.
    ///
    /// Errors: the daemon refused the watch (`Refused`, with its reason),
    /// closed the connection (`Closed`: a daemon that predates elections
    /// does that at once), or answered something else (`Unexpected`); the
    /// watch is then disconnected (`Closed` on every call until
    /// [`reconnect`](Self::reconnect)). Cancel-safe: an observation is
    /// recorded only as it is returned.
    pub async fn next(&mut self) -> Result<Option<LeaderInfo>, ClientError> {
        loop {
            let Some(client) = self.client.as_mut() else {
                return Err(ClientError::Closed);
            };
            let reply = client.recv().await;
            let observed = match reply {
                Ok(LockReply::Leader { name, leader }) if name == self.name => Ok(leader),
                // Not this watch's: nothing about this election.
                Ok(LockReply::Leader { .. }) => continue,
                Ok(LockReply::Released) => {
                    Err(ClientError::Unexpected("the daemon ended the watch (`released`)".into()))
                }
                other => on_observed(other, &self.name),
            };
            match observed {
                Ok(leader) => {
                    if let Some(news) = self.filter.pass(leader) {
                        return Ok(news);
                    }
                }
                Err(e) => {
                    self.client = None;
                    return Err(e);
                }
            }
        }
    }

    /// Connects again (at most [`CONNECT_WAIT`]) and watches again, keeping
    /// the filter: the daemon's answer (the current state) is yielded by
    /// [`next`](Self::next) only if it is news. Replaces any connection the
    /// watch still has.
    pub async fn reconnect(&mut self) -> Result<(), ClientError> {
        self.client = None;
        let mut client = tokio::time::timeout(CONNECT_WAIT, LockClient::connect(self.addr))
            .await
            .map_err(|_| ClientError::Timeout(CONNECT_WAIT))??;
        client.send(LockRequest::Observe { name: self.name.clone(), watch: true }).await?;
        self.client = Some(client);
        Ok(())
    }

    /// Ends the watch: sends `Release` and waits (at most [`RELEASE_WAIT`])
    /// for `Released`, skipping observations still in flight. Closing the
    /// connection (dropping the watch) ends it too.
    pub async fn stop(mut self) -> Result<(), ClientError> {
        let Some(mut client) = self.client.take() else {
            return Ok(());
        };
        let ask = async {
            client.send(LockRequest::Release).await?;
            loop {
                match client.recv().await? {
                    LockReply::Released => return Ok(()),
                    LockReply::Refused { reason } => return Err(ClientError::Refused(reason)),
                    _ => {}
                }
            }
        };
        tokio::time::timeout(RELEASE_WAIT, ask).await.unwrap_or(Err(ClientError::Timeout(RELEASE_WAIT)))
    }
}

#[cfg(test)]
mod tests;

//! The clients' side of a cluster, run inside this process: lock clients
//! and ringd `counter.incr` clients that record what they were told, with
//! one clock, and the safety checks over those records. `ftlab demo`,
//! `ftlab chaos` and `ftlab bench` drive clusters with these; the checks
//! are the ones the real-process tests apply to `ftctl`'s records.
//!
//! A lock client's hold is what it saw: from the `Granted` it read to the
//! `Release` it sent, or to the moment it learnt the lock was gone
//! (`LockLost`, or its connection closing: its daemon died), and never
//! past its lease's end (`lease_until`, moved by each `Renewed` read in
//! time), at which it stops on its own. Inside the daemon's own grant, so
//! an overlap of two records is an overlap of two grants.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::ring::{ExecError, RingClient};
use client::{Client, ClientError};
use lockservice::{LockName, LockReply, LockRequest};

/// The one clock every record of a run is read from: nanoseconds since the
/// run began (monotonic).
#[derive(Clone, Copy, Debug)]
pub struct Clock(Instant);

impl Clock {
    /// A clock starting now.
    pub fn start() -> Clock {
        Clock(Instant::now())
    }

    /// Nanoseconds since the clock started.
    pub fn now(&self) -> u128 {
        self.0.elapsed().as_nanos()
    }

    /// This clock's reading at `mono_us`, a CLOCK_MONOTONIC time in µs
    /// (`timer::monotonic_now`, the daemons' `lease_until_us`).
    pub fn at_monotonic(&self, mono_us: u64) -> u128 {
        // The monotonic clock first: a preemption between the two reads
        // can only move the result later.
        let mono_now = u128::from(timer::monotonic_now().as_micros());
        let now = self.now();
        let (then, mono_now) = (u128::from(mono_us) * 1_000, mono_now * 1_000);
        (now + then).saturating_sub(mono_now)
    }
}

/// One grant as a client recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The client's name.
    pub client: String,
    /// The lock it held ([`LockName::unnamed`] for the unnamed lock).
    pub lock: LockName,
    /// The fence it held.
    pub fence: u128,
    /// When it sent the request that this grant answered (ns, the run's
    /// clock); None where unknown (`ftctl`'s records).
    pub asked: Option<u128>,
    /// When it learnt it held the lock (ns, the run's clock).
    pub start: u128,
    /// When its hold ended; None when it was stopped before it recorded
    /// an end (a killed `ftctl` CMD).
    pub end: Option<u128>,
}

/// Per lock (each name, and the unnamed lock, on its own): mutual
/// exclusion over the lock's complete holds, and its fences strictly
/// increasing in order of start time over all of its holds. Holds of two
/// different locks may overlap, and their fences are not compared: the
/// guarantee is per name (electd draws every name's fences from one
/// counter per office, so its fences are also unique across names, which
/// tests/tests/electd_named.rs checks; ntmutexd's design keeps them per
/// name).
/// Err says which two records break it, after ``lock `NAME`: `` for a
/// named lock.
pub fn check_exclusion_and_fences(holds: &[Hold]) -> Result<(), String> {
    let mut by_lock: BTreeMap<&LockName, Vec<&Hold>> = BTreeMap::new();
    for h in holds {
        by_lock.entry(&h.lock).or_default().push(h);
    }
    for (lock, mut sorted) in by_lock {
        sorted.sort_by_key(|h| h.start);
        let mut prev: Option<&Hold> = None;
        let broken = |why: String| {
            if lock.is_unnamed() {
                why
            } else {
                format!("lock `{}`: {why}", lock.as_str())
            }
        };
        for h in sorted.iter().filter(|h| h.end.is_some()) {
            if let Some(p) = prev {
                let p_end = p.end.expect("complete");
                if p_end >= h.start {
                    return Err(broken(format!("overlapping holds: {p:?} and {h:?} (overlap {} ns)", p_end - h.start)));
                }
            }
            prev = Some(h);
        }
        for w in sorted.windows(2) {
            if w[0].fence >= w[1].fence {
                return Err(broken(format!("fences not increasing in start order: {:?} then {:?}", w[0], w[1])));
            }
        }
    }
    Ok(())
}

/// What a client was told, beside its holds or results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A hold ended without the client asking (`LockLost`, or the
    /// connection closed while holding).
    Lost { client: String, at: u128, why: String },
    /// An acquire or an execute failed (timed out, refused, no daemon).
    Failed { client: String, at: u128, why: String },
}

/// One acknowledged `counter.incr`, as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    /// The client's name.
    pub client: String,
    /// When the client first sent the request (a retry keeps it), ns.
    pub sent: u128,
    /// When the acknowledgement arrived, ns.
    pub at: u128,
    /// The counter's value after this increment.
    pub value: u64,
    /// The fence it ran under.
    pub fence: u128,
}

/// The records of one run's clients, shared with their tasks.
#[derive(Debug, Default)]
pub struct Records {
    /// Every hold (lock clients).
    pub holds: Vec<Hold>,
    /// Every acknowledged `counter.incr`.
    pub acks: Vec<Ack>,
    /// Failures and losses.
    pub events: Vec<Event>,
    /// The holds going on now: client → (fence, start, lock). A hold is
    /// in `holds` once it has ended.
    pub holding: BTreeMap<String, (u128, u128, LockName)>,
}

impl Records {
    /// Start times of the holds that began after `since` (ns).
    pub fn holds_after(&self, since: u128) -> impl Iterator<Item = &Hold> {
        self.holds.iter().filter(move |h| h.start > since)
    }

    /// When service was restored after an event at `since`: the first
    /// hold that began after it, or the first acknowledgement of an
    /// increment sent after it.
    pub fn first_service_after(&self, since: u128) -> Option<u128> {
        let hold = self.holds.iter().chain(&self.current()).map(|h| h.start).filter(|s| *s > since).min();
        let ack = self.acks.iter().filter(|a| a.sent > since).map(|a| a.at).min();
        hold.into_iter().chain(ack).min()
    }

    /// The holds going on now, as holds without an end.
    fn current(&self) -> Vec<Hold> {
        self.holding
            .iter()
            .map(|(client, (fence, start, lock))| Hold {
                client: client.clone(),
                lock: lock.clone(),
                fence: *fence,
                asked: None,
                start: *start,
                end: None,
            })
            .collect()
    }

    /// The highest epoch (or term) of any fence a client has seen: the
    /// fence's upper 64 bits (interfaces.md packs `epoch·2⁶⁴ + counter`).
    pub fn max_epoch(&self) -> u64 {
        let fences = self.holds.iter().map(|h| h.fence).chain(self.holding.values().map(|(f, _, _)| *f));
        fences.chain(self.acks.iter().map(|a| a.fence)).map(|f| (f >> 64) as u64).max().unwrap_or(0)
    }

    /// When service was first given under an epoch (or term) above
    /// `epoch`: a grant's start or an increment's acknowledgement.
    pub fn first_service_above(&self, epoch: u64) -> Option<u128> {
        let above = |f: u128| (f >> 64) as u64 > epoch;
        let hold = self.holds.iter().chain(&self.current()).filter(|h| above(h.fence)).map(|h| h.start).min();
        let ack = self.acks.iter().filter(|a| above(a.fence)).map(|a| a.at).min();
        hold.into_iter().chain(ack).min()
    }
}

/// Every acknowledged increment is present: no two acknowledgements share
/// a value (an acknowledged result lost would let a later increment
/// return its value again), each value is in 1..=`final_value` (the
/// counter read at the end), and values increase with fences.
pub fn check_acks(acks: &[Ack], final_value: u64) -> Result<(), String> {
    let mut by_value: BTreeMap<u64, &Ack> = BTreeMap::new();
    for a in acks {
        if let Some(prev) = by_value.insert(a.value, a) {
            return Err(format!(
                "value {} acknowledged twice: {prev:?} and {a:?} (an acknowledged result was lost)",
                a.value
            ));
        }
        if a.value == 0 || a.value > final_value {
            return Err(format!(
                "acknowledged value {} not in 1..={final_value}, the counter at the end: {a:?}",
                a.value
            ));
        }
    }
    let mut by_fence: Vec<&Ack> = acks.iter().collect();
    by_fence.sort_by_key(|a| a.fence);
    for w in by_fence.windows(2) {
        if w[0].value >= w[1].value {
            return Err(format!("a later fence returned a smaller value: {:?} then {:?}", w[0], w[1]));
        }
    }
    Ok(())
}

/// Clients running until [`Load::stop`].
#[derive(Debug)]
pub struct Load {
    stop: Arc<AtomicBool>,
    records: Arc<Mutex<Records>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How long a client waits for a grant or a result before it gives up and
/// tries again.
const PATIENCE: Duration = Duration::from_secs(10);

/// Pause after a failure (no daemon there, refused) before trying again.
const BACKOFF: Duration = Duration::from_millis(50);

impl Load {
    /// No clients yet.
    pub fn new() -> Load {
        Load { stop: Arc::new(AtomicBool::new(false)), records: Arc::default(), tasks: Vec::new() }
    }

    /// A lock client named `name` on the daemon at `addr`: acquire, hold
    /// for `hold`, release, again, until stopped. Must be called inside a
    /// tokio runtime.
    pub fn lock_client(&mut self, name: String, addr: SocketAddr, hold: Duration, clock: Clock) {
        self.named_lock_client(name, addr, LockName::unnamed(), hold, clock);
    }

    /// [`Load::lock_client`] for lock `lock` (`AcquireNamed`; `Acquire`
    /// for the unnamed lock).
    pub fn named_lock_client(&mut self, name: String, addr: SocketAddr, lock: LockName, hold: Duration, clock: Clock) {
        let (stop, records) = (self.stop.clone(), self.records.clone());
        self.tasks.push(tokio::spawn(async move {
            // One connection for as long as it works, as a program using
            // the client library would keep it.
            let mut conn: Option<LockConnection> = None;
            while !stop.load(Ordering::Relaxed) {
                if let Err(why) = lock_once(&name, addr, &lock, &mut conn, hold, clock, &records).await {
                    conn = None;
                    fail(&records, &name, clock, why);
                    tokio::time::sleep(BACKOFF).await;
                }
            }
        }));
    }

    /// A lock client named `name` that takes the lock once through `addr`
    /// and holds it for `hold` (or until it learns it lost it). Inside a
    /// tokio runtime.
    pub fn hold_once(&mut self, name: String, addr: SocketAddr, hold: Duration, clock: Clock) {
        self.hold_once_named(name, addr, LockName::unnamed(), hold, clock);
    }

    /// [`Load::hold_once`] for lock `lock`.
    pub fn hold_once_named(&mut self, name: String, addr: SocketAddr, lock: LockName, hold: Duration, clock: Clock) {
        let records = self.records.clone();
        self.tasks.push(tokio::spawn(async move {
            if let Err(why) = lock_once(&name, addr, &lock, &mut None, hold, clock, &records).await {
                fail(&records, &name, clock, why);
            }
        }));
    }

    /// A ringd client named `name`: `counter.incr COUNTER` again and
    /// again, until stopped, on the first replica of `addrs` that answers
    /// (the next one after a failure; a retry keeps its `request_id`).
    /// Must be called inside a tokio runtime.
    pub fn incr_client(&mut self, name: String, addrs: Vec<SocketAddr>, counter: String, clock: Clock) {
        let (stop, records) = (self.stop.clone(), self.records.clone());
        self.tasks.push(tokio::spawn(async move {
            let mut conn: Option<RingClient> = None;
            let mut retry: Option<(u64, u128)> = None;
            let mut at = 0;
            while !stop.load(Ordering::Relaxed) {
                let c = match conn.as_mut() {
                    Some(c) => c,
                    None => match RingClient::connect(addrs[at % addrs.len()]).await {
                        Ok(c) => conn.insert(c),
                        Err(e) => {
                            fail(&records, &name, clock, format!("connect: {e}"));
                            at += 1;
                            tokio::time::sleep(BACKOFF).await;
                            continue;
                        }
                    },
                };
                let args = [counter.clone()];
                let (id, sent) = retry.unwrap_or_else(|| (c.next_request_id(), clock.now()));
                match c.execute_as(id, "counter.incr", &args, PATIENCE).await {
                    Ok(Ok(r)) => {
                        retry = None;
                        match r.output.trim().parse::<u64>() {
                            Ok(value) => records.lock().expect("records").acks.push(Ack {
                                client: name.clone(),
                                sent,
                                at: clock.now(),
                                value,
                                fence: r.fence.unwrap_or(0),
                            }),
                            Err(_) => fail(&records, &name, clock, format!("counter.incr said {:?}", r.output)),
                        }
                    }
                    Ok(Err(e)) => {
                        // TokenLost: the same request_id again (applied at
                        // most once); anything else: a new request.
                        retry = matches!(e, ExecError::TokenLost).then_some((id, sent));
                        fail(&records, &name, clock, e.to_string());
                        tokio::time::sleep(BACKOFF).await;
                    }
                    Err(e) => {
                        // The replica died or did not answer: another
                        // connection, the same request (idempotent).
                        retry = Some((id, sent));
                        conn = None;
                        at += 1;
                        fail(&records, &name, clock, e.to_string());
                        tokio::time::sleep(BACKOFF).await;
                    }
                }
            }
        }));
    }

    /// A copy of the records so far.
    pub fn snapshot(&self) -> Records {
        let r = self.records.lock().expect("records");
        Records { holds: r.holds.clone(), acks: r.acks.clone(), events: r.events.clone(), holding: r.holding.clone() }
    }

    /// Stops the clients (each finishes what it is doing, at most
    /// [`PATIENCE`]; one still holding then is stopped, its hold kept
    /// without an end) and returns every record.
    pub async fn stop(self) -> Records {
        self.stop.store(true, Ordering::Relaxed);
        for mut t in self.tasks {
            if tokio::time::timeout(PATIENCE + Duration::from_secs(1), &mut t).await.is_err() {
                t.abort();
            }
        }
        let mut r = std::mem::take(&mut *self.records.lock().expect("records"));
        let open = r.current();
        r.holds.extend(open);
        r.holding.clear();
        r
    }
}

impl Default for Load {
    fn default() -> Self {
        Load::new()
    }
}

fn fail(records: &Mutex<Records>, name: &str, clock: Clock, why: String) {
    records.lock().expect("records").events.push(Event::Failed { client: name.to_string(), at: clock.now(), why });
}

/// A lock client's connection to its daemon.
type LockConnection = Client<LockRequest, LockReply>;

/// One acquire of `lock` → hold → release on `conn` (connected first if
/// None; set back to None when the connection cannot be used again). Err:
/// no grant.
async fn lock_once(
    name: &str,
    addr: SocketAddr,
    lock: &LockName,
    conn: &mut Option<LockConnection>,
    hold: Duration,
    clock: Clock,
    records: &Mutex<Records>,
) -> Result<(), String> {
    let c = match conn {
        Some(c) => c,
        None => conn.insert(LockConnection::connect(addr).await.map_err(|e| e.to_string())?),
    };
    let asked = clock.now();
    let request = client::lock::acquire_request(lock, PATIENCE);
    let (fence, mut lease_until_us) = match c.call(request, PATIENCE + Duration::from_secs(1)).await {
        Ok(LockReply::Granted { fence, lease_until_us }) => (fence, lease_until_us),
        Ok(other) => return Err(format!("acquire answered {other:?}")),
        Err(e) => return Err(e.to_string()),
    };
    let start = clock.now();
    records.lock().expect("records").holding.insert(name.to_string(), (fence, start, lock.clone()));
    // Hold, as `ftctl lock` runs CMD: until `hold` has passed, the lease
    // runs out (each Renewed moves it), or a LockLost or a close is read.
    let done = tokio::time::Instant::now() + hold;
    let lost = loop {
        // An empty critical section ends here: a zero-length sleep would
        // wait for tokio's next 1 ms timer tick.
        if tokio::time::Instant::now() >= done {
            break None;
        }
        let lease_left = Duration::from_micros(lease_until_us.saturating_sub(timer::monotonic_now().as_micros()));
        let lease_end = tokio::time::Instant::now() + lease_left;
        tokio::select! {
            () = tokio::time::sleep_until(done), if done <= lease_end => break None,
            () = tokio::time::sleep_until(lease_end) => break Some("lease expired".to_string()),
            r = c.recv() => match r {
                // A renewal read after the lease ran out restarts nothing
                // (as the client library: `LeaseExpired`): the client had
                // stopped at lease_until.
                Ok(LockReply::Renewed { .. }) if timer::monotonic_now().as_micros() >= lease_until_us => {
                    break Some("lease expired (a renewal read after it)".to_string())
                }
                Ok(LockReply::Renewed { lease_until_us: until }) => lease_until_us = lease_until_us.max(until),
                Ok(LockReply::LockLost { reason }) => break Some(reason),
                Ok(other) => break Some(format!("unexpected {other:?} while holding")),
                Err(ClientError::Closed) => break Some("connection closed while holding".to_string()),
                Err(e) => break Some(e.to_string()),
            },
        }
    };
    // The client waits asleep above and acts on nothing after its lease
    // ends, so its hold ends at `lease_until` at the latest, however late
    // the wake-up that tells it so: tokio's timers fire up to a tick late,
    // a `LockLost` is read when the task next runs, and the daemon moves
    // the lock on once `lease_until` has passed (reliability.md). A grant
    // read after its own lease ended is a hold of no length.
    let end = clock.now().min(clock.at_monotonic(lease_until_us)).max(start);
    {
        let mut r = records.lock().expect("records");
        r.holding.remove(name);
        r.holds.push(Hold {
            client: name.to_string(),
            lock: lock.clone(),
            fence,
            asked: Some(asked),
            start,
            end: Some(end),
        });
        if let Some(why) = lost {
            r.events.push(Event::Lost { client: name.to_string(), at: end, why });
            *conn = None;
            return Ok(());
        }
    }
    // The release: its answer (`Released`) must come before the next
    // acquire on this connection; a connection that fails here is dropped,
    // which releases too.
    match c.call(LockRequest::Release, PATIENCE).await {
        Ok(LockReply::Released) => {}
        _ => *conn = None,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_monotonic_time_reads_on_the_runs_clock() {
        let clock = Clock::start();
        std::thread::sleep(Duration::from_millis(5));
        let before = clock.now();
        let mono = timer::monotonic_now().as_micros();
        let at = clock.at_monotonic(mono - 2_000);
        let after = clock.now();
        // 2 ms before the moment `mono` was read (within 100 µs: the two
        // clocks are read one after the other, and the thread may be
        // preempted between), not 2 µs or 2 s.
        assert!(at + 2_000_000 + 100_000 >= before && at + 2_000_000 <= after + 100_000, "{before} {at} {after}");
    }

    fn hold(client: &str, fence: u128, start: u128, end: u128) -> Hold {
        Hold { client: client.into(), lock: LockName::unnamed(), fence, asked: None, start, end: Some(end) }
    }

    fn named(lock: &str, client: &str, fence: u128, start: u128, end: u128) -> Hold {
        Hold { lock: LockName::parse(lock).unwrap(), ..hold(client, fence, start, end) }
    }

    #[test]
    fn disjoint_holds_with_increasing_fences_pass() {
        assert_eq!(check_exclusion_and_fences(&[hold("a", 1, 0, 10), hold("b", 2, 11, 20)]), Ok(()));
    }

    #[test]
    fn an_overlap_is_found() {
        let e = check_exclusion_and_fences(&[hold("a", 1, 0, 10), hold("b", 2, 10, 20)]).unwrap_err();
        assert!(e.starts_with("overlapping holds"), "{e}");
    }

    #[test]
    fn a_smaller_fence_later_is_found() {
        let e = check_exclusion_and_fences(&[hold("a", 2, 0, 10), hold("b", 1, 11, 20)]).unwrap_err();
        assert!(e.starts_with("fences not increasing"), "{e}");
    }

    #[test]
    fn an_incomplete_hold_counts_for_fences_only() {
        let open = Hold { end: None, ..hold("a", 1, 0, 0) };
        assert_eq!(check_exclusion_and_fences(&[open.clone(), hold("b", 2, 5, 20)]), Ok(()));
        assert!(check_exclusion_and_fences(&[open, hold("b", 1, 5, 20)]).is_err());
    }

    #[test]
    fn two_names_may_be_held_at_once() {
        // a holds `x` over 0–10 while b holds `y` over 5–15, and the
        // unnamed lock is held meanwhile too: three locks, no overlap in
        // any one.
        let holds = [named("x", "a", 1, 0, 10), named("y", "b", 2, 5, 15), hold("c", 3, 2, 12)];
        assert_eq!(check_exclusion_and_fences(&holds), Ok(()));
    }

    #[test]
    fn two_holds_of_one_name_overlapping_are_found() {
        let holds = [named("x", "a", 1, 0, 10), named("y", "c", 2, 0, 30), named("x", "b", 3, 5, 15)];
        let e = check_exclusion_and_fences(&holds).unwrap_err();
        assert!(e.starts_with("lock `x`: overlapping holds"), "{e}");
        // The unnamed lock's message is as it always was.
        let e = check_exclusion_and_fences(&[hold("a", 1, 0, 10), hold("b", 2, 5, 15)]).unwrap_err();
        assert!(e.starts_with("overlapping holds"), "{e}");
    }

    #[test]
    fn fences_are_judged_within_a_name() {
        // `y` starts after `x` with a lower fence: fine, another name.
        let ok = [named("x", "a", 10, 0, 10), named("y", "b", 3, 20, 30), named("x", "a", 11, 40, 50)];
        assert_eq!(check_exclusion_and_fences(&ok), Ok(()));
        // Within `x`, a fence falling: found, whatever `y` holds.
        let bad = [named("x", "a", 10, 0, 10), named("y", "b", 3, 20, 30), named("x", "a", 9, 40, 50)];
        let e = check_exclusion_and_fences(&bad).unwrap_err();
        assert!(e.starts_with("lock `x`: fences not increasing"), "{e}");
        // A named lock and the unnamed one are two locks as well.
        let mixed = [named("x", "a", 10, 0, 10), hold("b", 1, 20, 30)];
        assert_eq!(check_exclusion_and_fences(&mixed), Ok(()));
    }

    #[test]
    fn acks_must_be_distinct_present_and_ordered_by_fence() {
        let a = |value: u64, fence: u128| Ack { client: "c".into(), sent: 0, at: 0, value, fence };
        assert_eq!(check_acks(&[a(1, 10), a(2, 11)], 2), Ok(()));
        assert!(check_acks(&[a(1, 10), a(1, 11)], 2).unwrap_err().contains("twice"));
        assert!(check_acks(&[a(1, 10), a(3, 11)], 2).unwrap_err().contains("not in"));
        assert!(check_acks(&[a(2, 10), a(1, 11)], 2).unwrap_err().contains("smaller value"));
    }
}

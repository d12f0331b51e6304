//! Services (ringd.md, Services): `Execute`, the built-ins, and token
//! services run in order under the owner's lease, each under its own fence
//! (epoch, seq), answered only once the successor has acked the token that
//! carries the result (or at once when alone). A repeated `request_id`
//! returns the stored outcome.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use api::ring::{ExecError, Outcome, RingReply, ServiceResult};
use ftcore::{ClientId, JobCommand, JobEnd};
use timer::Instant;

use super::{Job, Pending, RdEvent, RdNode, RdRule, Role};

/// Longest `sleep`.
const MAX_SLEEP_MS: u64 = 3_600_000;

/// Most bytes of keys and values in the token's shared state: with
/// [`crate::msg::MAX_RESULTS`] stored results of at most
/// [`crate::msg::MAX_STORED_OUTPUT`] bytes, the token fits in one frame of
/// [`MIN_FRAME`] bytes (`limits.max_frame_bytes` may not be lower).
pub const MAX_STATE_BYTES: usize = 16 * 1024;

/// Longest key or value in the shared state, in bytes.
pub const MAX_VALUE_LEN: usize = 256;

/// The least `limits.max_frame_bytes` ringd runs with.
pub const MIN_FRAME: usize = 64 * 1024;

/// Whether `service` is a built-in token service.
pub fn is_token_service(service: &str) -> bool {
    matches!(service, "counter.incr" | "counter.get" | "kv.put" | "kv.get")
}

/// Whether `service` is a built-in (no configured service may take its name).
pub fn is_builtin(service: &str) -> bool {
    matches!(service, "echo" | "sleep") || is_token_service(service)
}

/// Most bytes of a command service's stdout returned.
pub const MAX_OUTPUT: usize = 64 * 1024;

/// A command service running here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct RunningJob {
    client: ClientId,
    request_id: u64,
    service: String,
    /// Its fence, for a token service.
    fence: Option<u128>,
    /// `timeout_ms` after its start: no deadline goes past it.
    limit: Instant,
    /// Killed because the token was lost: answered `token_lost`.
    lost: bool,
}

impl RunningJob {
    /// What it ended with (`end` at `now`).
    fn outcome(&self, now: Instant, end: JobEnd) -> Outcome {
        match end {
            _ if self.lost => Err(ExecError::TokenLost),
            JobEnd::Exited { status, stdout } => Ok(ServiceResult { output: stdout, status, fence: self.fence }),
            JobEnd::Signalled { signal, stdout } => {
                Ok(ServiceResult { output: stdout, status: 128 + signal, fence: self.fence })
            }
            JobEnd::Killed { .. } if now >= self.limit => Err(ExecError::TimedOut),
            // Killed at its lease's end: the token's lease was lost.
            JobEnd::Killed { deadline: true, .. } if self.fence.is_some() => Err(ExecError::TokenLost),
            JobEnd::Killed { .. } => Err(ExecError::TimedOut),
            JobEnd::Failed(e) => Err(ExecError::Spawn(e)),
        }
    }
}

/// The services' state: token services queued for the token, results
/// waiting for the successor's ack, and what runs here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct Services {
    /// Token services waiting for the token, in order.
    token_queue: VecDeque<Job>,
    /// Results waiting for the successor's TokenAck of the token carrying
    /// them.
    awaiting_ack: Vec<Pending>,
    /// Running non-token services (`sleep`): when each ends.
    sleeping: BTreeMap<(Instant, u64), (ClientId, u64)>,
    /// Running command services, by job id.
    jobs: BTreeMap<u64, RunningJob>,
    /// The token service running under the owned token, if any (its job).
    token_job: Option<u64>,
}

impl Services {
    /// Load: services running here plus token services queued.
    pub(super) fn load(&self) -> usize {
        self.sleeping.len() + self.jobs.len() + self.token_queue.len()
    }

    /// How many services run here (sleeps and commands).
    pub(super) fn running(&self) -> usize {
        self.sleeping.len() + self.jobs.len()
    }

    /// Whether no command runs here.
    pub(super) fn no_jobs(&self) -> bool {
        self.jobs.is_empty()
    }

    /// How many token services are queued.
    pub(super) fn queued(&self) -> usize {
        self.token_queue.len()
    }

    /// Whether token services are queued.
    pub(super) fn has_queued(&self) -> bool {
        !self.token_queue.is_empty()
    }

    /// Whether a token service runs under the owned token.
    pub(super) fn token_job_runs(&self) -> bool {
        self.token_job.is_some()
    }

    /// The queued token services, taken out (to be answered).
    pub(super) fn take_queue(&mut self) -> VecDeque<Job> {
        std::mem::take(&mut self.token_queue)
    }

    /// The results waiting for an ack, taken out (to be answered).
    pub(super) fn take_awaiting(&mut self) -> Vec<Pending> {
        std::mem::take(&mut self.awaiting_ack)
    }

    /// Keeps the results waiting for an ack that `keep` says still wait;
    /// the others, taken out, in order.
    pub(super) fn keep_awaiting(&mut self, keep: impl Fn(&Pending) -> bool) -> Vec<Pending> {
        let (kept, dropped) = std::mem::take(&mut self.awaiting_ack).into_iter().partition(|p| keep(p));
        self.awaiting_ack = kept;
        dropped
    }

    /// `client` is gone: nothing is answered to it.
    pub(super) fn forget_client(&mut self, client: ClientId) {
        self.token_queue.retain(|j| j.client != client);
        self.awaiting_ack.retain(|p| p.client != client);
        self.sleeping.retain(|_, (c, _)| *c != client);
    }

    /// Queues `job` for the token: whether it is the first queued.
    fn queue(&mut self, job: Job) -> bool {
        self.token_queue.push_back(job);
        self.token_queue.len() == 1
    }

    /// Whether a queued token service may start (none runs).
    fn one_to_run(&self) -> bool {
        !self.token_queue.is_empty() && self.token_job.is_none()
    }

    /// The next queued token service.
    fn next_queued(&mut self) -> Option<Job> {
        self.token_queue.pop_front()
    }

    /// `job` goes back to the head of the queue.
    fn requeue(&mut self, job: Job) {
        self.token_queue.push_front(job);
    }

    /// A `sleep` of `client`'s `request_id`, job `id`, ends at `until`.
    fn sleep(&mut self, until: Instant, id: u64, client: ClientId, request_id: u64) {
        self.sleeping.insert((until, id), (client, request_id));
    }

    /// The next `sleep` to end.
    fn next_wake(&self) -> Option<Instant> {
        self.sleeping.keys().next().map(|(t, _)| *t)
    }

    /// The first `sleep` ended by `now`, taken out: whom to answer.
    fn woken(&mut self, now: Instant) -> Option<(ClientId, u64)> {
        let (&(t, id), _) = self.sleeping.iter().next()?;
        if t > now {
            return None;
        }
        self.sleeping.remove(&(t, id))
    }

    /// Command `id` started (`token`: the token service).
    fn started(&mut self, id: u64, job: RunningJob, token: bool) {
        self.jobs.insert(id, job);
        if token {
            self.token_job = Some(id);
        }
    }

    /// The token service still running (not killed): its id and itself.
    fn live_token_job(&self) -> Option<(u64, &RunningJob)> {
        let id = self.token_job?;
        self.jobs.get(&id).filter(|j| !j.lost).map(|j| (id, j))
    }

    /// The token service, if one runs, is to be killed (answered
    /// `token_lost` when it ends): its id.
    fn kill_token_job(&mut self) -> Option<u64> {
        let id = self.token_job?;
        let j = self.jobs.get_mut(&id).filter(|j| !j.lost)?;
        j.lost = true;
        Some(id)
    }

    /// Command `id` ended: it, and whether it was the token service.
    fn ended(&mut self, id: u64) -> Option<(RunningJob, bool)> {
        let j = self.jobs.remove(&id)?;
        let token = self.token_job == Some(id);
        if token {
            self.token_job = None;
        }
        Some((j, token))
    }

    /// A token service's result waits for the successor's ack.
    fn await_ack(&mut self, p: Pending) {
        self.awaiting_ack.push(p);
    }
}

fn packed(fence: (u64, u64)) -> u128 {
    (u128::from(fence.0) << 64) | u128::from(fence.1)
}

/// The (epoch, seq) a [`packed`] fence holds.
fn unpacked(fence: u128) -> (u64, u64) {
    ((fence >> 64) as u64, fence as u64)
}

fn ok(output: String, fence: Option<u128>) -> Outcome {
    Ok(ServiceResult { output, status: 0, fence })
}

fn bad(msg: &str) -> Outcome {
    Err(ExecError::BadArguments(msg.to_string()))
}

/// Runs a built-in token service on the token's shared state.
pub fn run_builtin(state: &mut BTreeMap<String, String>, service: &str, args: &[String], fence: u128) -> Outcome {
    let long = args.iter().any(|a| a.len() > MAX_VALUE_LEN);
    if long {
        return bad("an argument is longer than 256 bytes");
    }
    let used: usize = state.iter().map(|(k, v)| k.len() + v.len()).sum();
    let full = used + args.iter().map(String::len).sum::<usize>() + 16 > MAX_STATE_BYTES;
    match (service, args) {
        ("counter.incr", [name]) | ("counter.incr", [name, _]) => {
            let by = match args.get(1).map(|b| b.parse::<i64>()) {
                None => 1,
                Some(Ok(b)) => b,
                Some(Err(_)) => return bad("counter.incr NAME [BY]: BY must be an integer"),
            };
            let key = format!("counter:{name}");
            let old = state.get(&key).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
            let Some(new) = old.checked_add(by) else { return bad("counter.incr: the counter would overflow") };
            if full && !state.contains_key(&key) {
                return bad("the shared state is full (16 KiB)");
            }
            state.insert(key, new.to_string());
            ok(new.to_string(), Some(fence))
        }
        ("counter.get", [name]) => {
            let v = state.get(&format!("counter:{name}")).cloned().unwrap_or_else(|| "0".into());
            ok(v, Some(fence))
        }
        ("kv.put", [key, value]) => {
            let key = format!("kv:{key}");
            if full {
                return bad("the shared state is full (16 KiB)");
            }
            state.insert(key, value.clone());
            ok(value.clone(), Some(fence))
        }
        ("kv.get", [key]) => match state.get(&format!("kv:{key}")) {
            Some(v) => ok(v.clone(), Some(fence)),
            None => Ok(ServiceResult { output: String::new(), status: 1, fence: Some(fence) }),
        },
        ("counter.incr", _) => bad("usage: counter.incr NAME [BY]"),
        ("counter.get", _) => bad("usage: counter.get NAME"),
        ("kv.put", _) => bad("usage: kv.put KEY VALUE"),
        ("kv.get", _) => bad("usage: kv.get KEY"),
        (other, _) => Err(ExecError::UnknownService(other.to_string())),
    }
}

impl RdNode {
    /// Answers a client's Execute and counts it.
    pub(super) fn answer(&mut self, client: ClientId, request_id: u64, service: &str, outcome: Outcome) {
        let label = match &outcome {
            Ok(_) => "ok",
            Err(e) => e.label(),
        };
        self.out.event(RdEvent::Executed { service: service.to_string(), outcome: label });
        self.out.reply(client, RingReply::Executed { request_id, outcome });
    }

    pub(super) fn on_execute(
        &mut self,
        now: Instant,
        client: ClientId,
        request_id: u64,
        service: String,
        args: Vec<String>,
    ) {
        if self.leaving {
            return self.answer(client, request_id, &service, Err(ExecError::Leaving));
        }
        match service.as_str() {
            "echo" => self.answer(client, request_id, &service, ok(args.join(" "), None)),
            "sleep" if self.services.running() >= self.cfg.workers => {
                self.answer(client, request_id, &service, Err(ExecError::Busy))
            }
            "sleep" => match args.as_slice() {
                [ms] => match ms.parse::<u64>() {
                    Ok(ms) if ms <= MAX_SLEEP_MS => {
                        let id = self.fresh_id();
                        self.services.sleep(now + Duration::from_millis(ms), id, client, request_id);
                    }
                    _ => self.answer(client, request_id, &service, bad("sleep MS: MS must be 0..=3600000")),
                },
                _ => self.answer(client, request_id, &service, bad("usage: sleep MS")),
            },
            s if is_token_service(s) => {
                // Check the arguments before queueing (on a scratch state).
                if let Err(e) = run_builtin(&mut BTreeMap::new(), s, &args, 0) {
                    return self.answer(client, request_id, &service, Err(e));
                }
                self.queue_for_token(Job { client, request_id, service, args });
            }
            s if self.cfg.services.contains_key(s) => {
                let spec = self.cfg.services[s].clone();
                if spec.needs_token {
                    return self.queue_for_token(Job { client, request_id, service, args });
                }
                if self.services.running() >= self.cfg.workers {
                    return self.answer(client, request_id, &service, Err(ExecError::Busy));
                }
                let id = self.fresh_id();
                let limit = now + spec.timeout;
                let argv = spec.command.iter().chain(args.iter()).cloned().collect();
                self.out.job(JobCommand::Start { id, argv, fence: None, deadline: limit, max_output: MAX_OUTPUT });
                let job = RunningJob { client, request_id, service, fence: None, limit, lost: false };
                self.services.started(id, job, false);
            }
            _ => {
                let e = ExecError::UnknownService(service.clone());
                self.answer(client, request_id, &service, Err(e))
            }
        }
    }

    /// Queues a token service for the token: refused in a minority or
    /// when the queue is full; the first one queued tells the peers
    /// (`want`).
    fn queue_for_token(&mut self, job: Job) {
        let refused = if self.in_minority() {
            Some(ExecError::NoQuorum)
        } else if self.services.queued() >= self.cfg.max_queue {
            Some(ExecError::Busy)
        } else {
            None
        };
        if let Some(e) = refused {
            return self.answer(job.client, job.request_id, &job.service, Err(e));
        }
        if self.services.queue(job) {
            self.want();
        }
    }

    /// Starts a configured token service under the owned token's fence,
    /// until the lease's end (never past `timeout_ms`).
    fn start_token_job(&mut self, job: Job, fence: (u64, u64), lease_until: Instant, now: Instant) {
        let Some(spec) = self.cfg.services.get(&job.service).cloned() else { return };
        let id = self.fresh_id();
        let limit = now + spec.timeout;
        let deadline = if self.cfg.rules.on(RdRule::MajorityLease) { lease_until.min(limit) } else { limit };
        let argv = spec.command.iter().chain(job.args.iter()).cloned().collect();
        let fence = Some(packed(fence));
        self.out.job(JobCommand::Start { id, argv, fence, deadline, max_output: MAX_OUTPUT });
        let running = RunningJob {
            client: job.client,
            request_id: job.request_id,
            service: job.service,
            fence,
            limit,
            lost: false,
        };
        self.services.started(id, running, true);
    }

    /// The lease moved: the running token service may run until its new
    /// end (never past its `timeout_ms`).
    pub(super) fn extend_token_job(&mut self) {
        let (Some((id, j)), Some(until)) = (self.services.live_token_job(), self.lease.valid_until) else { return };
        if self.cfg.rules.off(RdRule::MajorityLease) {
            return;
        }
        let deadline = until.min(j.limit);
        self.out.job(JobCommand::Extend { id, deadline });
    }

    /// The fence of the token service running here (not yet killed), if
    /// any.
    pub(super) fn running_token_fence(&self) -> Option<(u64, u64)> {
        let (_, j) = self.services.live_token_job()?;
        j.fence.map(unpacked)
    }

    /// The token is no longer owned: its running service is killed and
    /// answered `token_lost` when it ends.
    pub(super) fn kill_token_job(&mut self) {
        if let Some(id) = self.services.kill_token_job() {
            self.out.job(JobCommand::Kill { id });
        }
    }

    pub(super) fn on_job_end(&mut self, now: Instant, id: u64, end: JobEnd) {
        let Some((j, token_job)) = self.services.ended(id) else { return };
        if matches!(end, JobEnd::Killed { deadline: true, .. }) {
            self.out.event(RdEvent::SupervisorKilled { service: j.service.clone() });
        }
        let outcome = j.outcome(now, end);
        if !token_job {
            return self.answer(j.client, j.request_id, &j.service, outcome);
        }
        let owned = self.owns_token();
        if !owned || outcome.is_err() && !matches!(outcome, Err(ExecError::Spawn(_))) {
            // Not recorded: a retry runs it again.
            return self.answer(j.client, j.request_id, &j.service, outcome);
        }
        if let Some(h) = self.held.as_mut() {
            h.token.record(j.request_id, outcome.clone());
        }
        self.finish(j.client, j.request_id, j.service, outcome);
    }

    /// A token service's outcome: answered once the successor has acked the
    /// token carrying it (at once when alone).
    fn finish(&mut self, client: ClientId, request_id: u64, service: String, outcome: Outcome) {
        if self.successor().is_none() || self.cfg.rules.off(RdRule::AnswerAfterAck) {
            self.answer(client, request_id, &service, outcome);
        } else {
            self.services.await_ack(Pending { client, request_id, service, outcome });
        }
    }

    /// Runs queued token services while the token is owned and the lease
    /// valid (asking for one first).
    pub(super) fn run_queued(&mut self, now: Instant) {
        while self.owns_token() && self.services.one_to_run() {
            // (A minority's queue was answered `no_quorum` before the visit:
            // `after_input`, `refuse_in_minority`.)
            if self.cfg.rules.on(RdRule::MajorityLease) && !self.lease.valid(now) {
                self.ensure_lease(now);
                if !self.lease.valid(now) {
                    return;
                }
            }
            // (safety) Token services run only under a majority lease.
            ftcore::invariant!(
                self.cfg.rules,
                self.lease.valid(now),
                "n{}: a token service would run at {now:?} without a valid lease",
                self.me.0
            );
            let Some(job) = self.services.next_queued() else { return };
            let lease_until = self.lease.valid_until.unwrap_or(now);
            let Some(h) = self.held.as_mut() else { return };
            let Role::Owned { since, ran } = h.role else { return };
            let outcome = if let Some(o) = h.token.result_of(job.request_id) {
                o.clone()
            } else {
                if ran {
                    let next = super::token::next_seq(h.token.seq, self.cfg.rules);
                    let Some(next) = next else {
                        // ringd.md, Fence: no seq left in this epoch.
                        self.services.requeue(job);
                        self.stop_owning(now, true);
                        return;
                    };
                    h.token.seq = next;
                }
                h.role = Role::Owned { since, ran: true };
                let fence = h.token.id();
                self.out.event(RdEvent::Ran {
                    fence,
                    service: job.service.clone(),
                    request_id: job.request_id,
                    lease_until,
                });
                if self.cfg.services.contains_key(&job.service) {
                    self.start_token_job(job, fence, lease_until, now);
                    return;
                }
                let outcome = run_builtin(&mut h.token.state, &job.service, &job.args, packed(fence));
                h.token.record(job.request_id, outcome.clone());
                outcome
            };
            // Alone, no second copy exists: answered at once.
            self.finish(job.client, job.request_id, job.service, outcome);
        }
    }

    /// This replica's ring is a minority: queued token services are
    /// answered `no_quorum`, and results still waiting for a second copy
    /// `token_lost` (a retry with the same request id gets the stored
    /// outcome if the token kept it).
    pub(super) fn refuse_in_minority(&mut self) {
        for job in self.services.take_queue() {
            self.answer(job.client, job.request_id, &job.service, Err(ExecError::NoQuorum));
        }
        for p in self.services.take_awaiting() {
            self.answer(p.client, p.request_id, &p.service, Err(ExecError::TokenLost));
        }
    }

    pub(super) fn services_deadline(&self) -> Option<Instant> {
        self.services.next_wake()
    }

    pub(super) fn services_timeout(&mut self, now: Instant) {
        while let Some((client, request_id)) = self.services.woken(now) {
            self.answer(client, request_id, "sleep", ok(String::new(), None));
        }
    }
}

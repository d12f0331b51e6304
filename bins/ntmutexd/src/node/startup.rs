//! Start-up: the Hello handshake that tells a new life whether the cluster
//! is running (then it knows nothing and rebuilds through M3) or starting
//! (then a majority bootstraps the first token). ntmutexd.md, "Base
//! algorithm" and "Durability".

use super::*;

impl NtNode {
    pub(super) fn finish_join(&mut self, now: Instant, bootstrap: bool) {
        let deferred = match std::mem::replace(&mut self.phase, Phase::Running) {
            Phase::Joining { deferred, .. } => deferred,
            Phase::Running => Vec::new(),
        };
        self.timers.cancel(Timer::Join);
        if bootstrap {
            let holder = *self.members.iter().min().expect("at least one member");
            if holder == self.me {
                let epoch = self.next_proposal(now) & !((1 << SLOT_BITS) - 1) | self.slot(self.me);
                self.set_epoch(epoch);
                self.token = Some(Token { epoch, counter: 0 });
                self.position = Some(0);
                self.last = Last::Root;
                self.out.event(NtEvent::HasToken(true));
            } else {
                self.last = Last::Parent(holder);
            }
        } else {
            // (safety) A new life of a running cluster knows nothing: it
            // answers DeadEnd and makes its first request through M3.
            self.last = Last::Unknown;
        }
        self.out.event(NtEvent::Joined { bootstrap });
        for (from, inc, msg) in deferred {
            self.handle_message(now, from, inc, msg);
        }
    }

    pub(super) fn on_join_timer(&mut self, now: Instant) {
        let Phase::Joining { fresh, running_seen, .. } = &self.phase else { return };
        if *running_seen {
            self.finish_join(now, false);
        } else if fresh.len() > self.members.len() / 2 {
            self.finish_join(now, true);
        } else {
            // No majority heard from yet: keep asking (a minority must not
            // create a token of its own).
            self.broadcast(Body::Hello);
            self.timers.set(Timer::Join, now + self.cfg.t_msg * 2);
        }
    }

    /// Before the handshake is over only Hello and HelloAck are handled;
    /// everything else waits until we know whether we are a new life of a
    /// running cluster.
    pub(super) fn on_message_while_joining(&mut self, now: Instant, from: NodeId, inc: Incarnation, msg: Msg) {
        let Phase::Joining { fresh, running_seen, deferred } = &mut self.phase else { return };
        match msg.body {
            Body::Hello => {
                fresh.insert(from);
                self.send(from, Body::HelloAck { running: false });
            }
            Body::HelloAck { running } => {
                if running {
                    *running_seen = true;
                } else {
                    fresh.insert(from);
                }
                let done = *running_seen || fresh.len() == self.members.len();
                let bootstrap = !*running_seen;
                if done {
                    self.finish_join(now, bootstrap);
                }
            }
            // Everything else waits until we know whether we are a
            // new life of a running cluster.
            _ => deferred.push((from, inc, msg)),
        }
    }
}

//! Configured membership and one node's live view of the ring.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::{Incarnation, NodeId};

/// A configured member: its id and peer-protocol address.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// The member's id.
    pub id: NodeId,
    /// Where its peer protocol listens.
    pub addr: SocketAddr,
}

/// Why a configured membership is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    /// No members were configured.
    #[error("no members configured")]
    Empty,
    /// Node id 0 is reserved (clients use it).
    #[error("node id 0 is reserved; ids start at 1")]
    ZeroId,
    /// Two members share an id.
    #[error("node id {0} appears more than once")]
    DuplicateId(u32),
    /// Two members share an address.
    #[error("address {0} is used by more than one member")]
    DuplicateAddr(SocketAddr),
    /// The local node is not among the members.
    #[error("this node's id {0} is not among the configured members")]
    SelfMissing(u32),
}

/// The configured members in ring order (each one's successor is the next
/// in the list, the last one's is the first). Fixed for the life of a
/// daemon.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Membership {
    members: Vec<Member>,
}

impl Membership {
    /// Checks and adopts a configured member list.
    pub fn new(members: Vec<Member>) -> Result<Self, MembershipError> {
        if members.is_empty() {
            return Err(MembershipError::Empty);
        }
        for (i, m) in members.iter().enumerate() {
            if m.id.0 == 0 {
                return Err(MembershipError::ZeroId);
            }
            if members[..i].iter().any(|o| o.id == m.id) {
                return Err(MembershipError::DuplicateId(m.id.0));
            }
            if members[..i].iter().any(|o| o.addr == m.addr) {
                return Err(MembershipError::DuplicateAddr(m.addr));
            }
        }
        Ok(Membership { members })
    }

    /// A membership of ids `1..=n` with placeholder loopback addresses, for
    /// tests and the simulator.
    pub fn of_size(n: u32) -> Self {
        let members = (1..=n)
            .map(|i| Member { id: NodeId(i), addr: SocketAddr::from(([127, 0, 0, 1], 20_000 + i as u16)) })
            .collect();
        Membership::new(members).expect("ids 1..=n are valid")
    }

    /// Fails unless `me` is a member.
    pub fn require(&self, me: NodeId) -> Result<(), MembershipError> {
        if self.contains(me) {
            Ok(())
        } else {
            Err(MembershipError::SelfMissing(me.0))
        }
    }

    /// Number of configured members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a membership has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Members in ring order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// Ids in ring order.
    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.members.iter().map(|m| m.id)
    }

    /// Whether `id` is configured.
    pub fn contains(&self, id: NodeId) -> bool {
        self.position(id).is_some()
    }

    /// Index of `id` in ring order.
    pub fn position(&self, id: NodeId) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    /// The configured address of `id`.
    pub fn addr(&self, id: NodeId) -> Option<SocketAddr> {
        self.members.iter().find(|m| m.id == id).map(|m| m.addr)
    }

    /// The id configured at `addr`.
    pub fn id_at(&self, addr: SocketAddr) -> Option<NodeId> {
        self.members.iter().find(|m| m.addr == addr).map(|m| m.id)
    }

    /// The smallest number of members that is more than half.
    pub fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }
}

/// Whether a node is believed alive or dead in a given life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Status {
    /// Believed to be running.
    Alive,
    /// Suspected or known to have failed (in that incarnation).
    Dead,
}

/// What is believed of one node. Ordered so that merging is taking the
/// maximum: a later life beats an earlier one, and within one life `Dead`
/// beats `Alive` (an excluded life never comes back; the node rejoins with a
/// new incarnation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Liveness {
    /// The life this belief is about. `Incarnation(0)`: never heard from.
    pub incarnation: Incarnation,
    /// Alive or dead in that life.
    pub status: Status,
}

impl Liveness {
    /// Alive in life `inc`.
    pub fn alive(inc: Incarnation) -> Self {
        Liveness { incarnation: inc, status: Status::Alive }
    }

    /// Dead in life `inc`.
    pub fn dead(inc: Incarnation) -> Self {
        Liveness { incarnation: inc, status: Status::Dead }
    }
}

/// What a message from a peer says about the sender, given the view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// From a life older than the one known: ignore the message.
    Stale,
    /// From a life this view has declared dead: the sender must rejoin.
    Excluded,
    /// From the known, live life.
    Current,
    /// From a newer life than known (a restart, or first contact when the
    /// previous incarnation is 0). The view now holds the new life as alive.
    NewLife {
        /// What was believed before.
        previous: Liveness,
    },
    /// Not a configured member.
    Unknown,
}

/// One node's view of the ring: configured order plus a [`Liveness`] per
/// member. The local node is always alive in its own view.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RingView {
    me: usize,
    ids: Vec<NodeId>,
    states: Vec<Liveness>,
    /// `(id, position)` sorted by id: O(log N) lookups at a thousand nodes.
    index: Vec<(NodeId, usize)>,
    /// XOR of every entry's hash, kept up to date on each change.
    digest: u64,
}

/// One entry's contribution to [`RingView::digest`]. Alive entries hash
/// without their incarnation: that nodes agree on who is alive and on which
/// lives are dead is what must converge; an alive node's exact life is
/// learned on contact (and restarts are reported), so views that differ
/// only in it need no exchange — at a thousand nodes, that would be a
/// flood of views at start-up, when nobody has heard from anybody yet.
fn entry_hash(id: NodeId, l: Liveness) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let inc = match l.status {
        Status::Alive => [0xff; 8],
        Status::Dead => l.incarnation.0.to_le_bytes(),
    };
    for b in id.0.to_le_bytes().into_iter().chain(inc) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // Finalise (SplitMix64) so that XOR-combining entries does not cancel
    // structure.
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

impl RingView {
    /// A view in which `me` (in life `inc`) knows nothing yet: every other
    /// member is presumed alive, incarnation unknown.
    pub fn new(membership: &Membership, me: NodeId, inc: Incarnation) -> Result<Self, MembershipError> {
        let me_pos = membership.position(me).ok_or(MembershipError::SelfMissing(me.0))?;
        let ids: Vec<NodeId> = membership.ids().collect();
        let mut states = vec![Liveness::alive(Incarnation(0)); ids.len()];
        states[me_pos] = Liveness::alive(inc);
        let digest = ids.iter().zip(&states).fold(0, |d, (id, l)| d ^ entry_hash(*id, *l));
        let mut index: Vec<(NodeId, usize)> = ids.iter().copied().zip(0..).collect();
        index.sort_unstable();
        Ok(RingView { me: me_pos, ids, states, index, digest })
    }

    /// The local node.
    pub fn me(&self) -> NodeId {
        self.ids[self.me]
    }

    /// The local node's current life.
    pub fn my_incarnation(&self) -> Incarnation {
        self.states[self.me].incarnation
    }

    /// Moves the local node to a newer life (after learning it was
    /// excluded). Returns the new incarnation.
    pub fn rejoin(&mut self) -> Incarnation {
        let inc = self.states[self.me].incarnation.next();
        self.set(self.me, Liveness::alive(inc));
        inc
    }

    /// Moves the local node to a life above `known` (a peer knows a life
    /// of ours at least that new: our clock was behind, or our disk was
    /// replaced). Returns the new incarnation; unchanged if already above.
    pub fn rejoin_above(&mut self, known: Incarnation) -> Incarnation {
        let mine = self.states[self.me].incarnation;
        if mine > known {
            return mine;
        }
        let inc = known.next();
        self.set(self.me, Liveness::alive(inc));
        inc
    }

    /// Presumes every other member alive again in the life last known of
    /// it, as a restarted node presumes everyone alive: the only change
    /// that takes a view back. For a node that was itself declared dead
    /// (and has just moved to a new life): the deaths it saw while cut off
    /// are no evidence the rest of the ring shares, and excluding live
    /// peers on their strength makes them rejoin in turn. A member that
    /// is dead is suspected again, or its death learned again from a
    /// peer's view, within a heartbeat or a `suspect_after`. Returns how
    /// many members changed.
    pub fn presume_alive(&mut self) -> usize {
        let dead: Vec<usize> =
            (0..self.states.len()).filter(|p| *p != self.me && self.states[*p].status == Status::Dead).collect();
        for p in &dead {
            self.set(*p, Liveness::alive(self.states[*p].incarnation));
        }
        dead.len()
    }

    /// Number of configured members.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Always false.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Configured ids in ring order.
    pub fn ids(&self) -> &[NodeId] {
        &self.ids
    }

    fn pos(&self, id: NodeId) -> Option<usize> {
        self.index.binary_search_by_key(&id, |(i, _)| *i).ok().map(|k| self.index[k].1)
    }

    /// What is believed of `id`.
    pub fn liveness(&self, id: NodeId) -> Option<Liveness> {
        self.pos(id).map(|p| self.states[p])
    }

    /// Whether `id` is believed alive.
    pub fn is_alive(&self, id: NodeId) -> bool {
        self.liveness(id).is_some_and(|l| l.status == Status::Alive)
    }

    /// Live members in ring order, starting after the local node and ending
    /// with it.
    pub fn alive_from_me(&self) -> Vec<NodeId> {
        let n = self.ids.len();
        (1..=n)
            .map(|k| (self.me + k) % n)
            .filter(|p| self.states[*p].status == Status::Alive)
            .map(|p| self.ids[p])
            .collect()
    }

    /// Number of members believed alive (the local node included).
    pub fn alive_count(&self) -> usize {
        self.states.iter().filter(|s| s.status == Status::Alive).count()
    }

    /// Whether the members believed alive (the local node included) are a
    /// majority of the configured ones.
    pub fn holds_a_majority(&self) -> bool {
        self.alive_count() > self.len() / 2
    }

    /// The first live member after `id` in ring order (`id` itself need not
    /// be alive). `None` if no other member is alive.
    pub fn successor_of(&self, id: NodeId) -> Option<NodeId> {
        let p = self.pos(id)?;
        let n = self.ids.len();
        (1..n).map(|k| (p + k) % n).find(|q| self.states[*q].status == Status::Alive).map(|q| self.ids[q])
    }

    /// The first live member before `id` in ring order.
    pub fn predecessor_of(&self, id: NodeId) -> Option<NodeId> {
        let p = self.pos(id)?;
        let n = self.ids.len();
        (1..n).map(|k| (p + n - k) % n).find(|q| self.states[*q].status == Status::Alive).map(|q| self.ids[q])
    }

    /// The local node's live successor (`None` when it is alone).
    pub fn successor(&self) -> Option<NodeId> {
        self.successor_of(self.me())
    }

    /// The local node's live predecessor (`None` when it is alone).
    pub fn predecessor(&self) -> Option<NodeId> {
        self.predecessor_of(self.me())
    }

    /// Members strictly between the local node and its live successor in
    /// configured order: all dead. The local node probes them so that a
    /// wrongly excluded or restarted member finds its way back.
    pub fn dead_gap_after_me(&self) -> Vec<NodeId> {
        let n = self.ids.len();
        (1..n)
            .map(|k| (self.me + k) % n)
            .take_while(|q| self.states[*q].status == Status::Dead)
            .map(|q| self.ids[q])
            .collect()
    }

    /// Merges a report about `id`. Returns true if the view changed. A
    /// report that the local node is dead is ignored here: the caller
    /// decides to [`rejoin`](Self::rejoin).
    pub fn merge(&mut self, id: NodeId, report: Liveness) -> bool {
        let Some(p) = self.pos(id) else { return false };
        if p == self.me || report <= self.states[p] {
            return false;
        }
        self.set(p, report);
        true
    }

    /// Marks `id` dead in life `inc` (or in its known life, if that is
    /// newer than `inc`, nothing changes). Returns true if the view changed.
    pub fn mark_dead(&mut self, id: NodeId, inc: Incarnation) -> bool {
        self.merge(id, Liveness::dead(inc))
    }

    /// Marks `id` dead in whatever life the view knows of it.
    pub fn suspect(&mut self, id: NodeId) -> Option<Liveness> {
        let l = self.liveness(id)?;
        let dead = Liveness::dead(l.incarnation);
        self.merge(id, dead).then_some(dead)
    }

    /// Classifies a message from `id` in life `inc` and records a newer life.
    pub fn observe(&mut self, id: NodeId, inc: Incarnation) -> Observation {
        let Some(p) = self.pos(id) else { return Observation::Unknown };
        let known = self.states[p];
        if p == self.me {
            // A message claiming to be from ourselves: only our own life is current.
            return if inc == known.incarnation { Observation::Current } else { Observation::Stale };
        }
        match inc.cmp(&known.incarnation) {
            std::cmp::Ordering::Less => Observation::Stale,
            std::cmp::Ordering::Equal if known.status == Status::Dead => Observation::Excluded,
            std::cmp::Ordering::Equal => Observation::Current,
            std::cmp::Ordering::Greater => {
                self.set(p, Liveness::alive(inc));
                Observation::NewLife { previous: known }
            }
        }
    }

    /// A digest of who is alive and which lives are dead: two views with
    /// equal digests almost surely agree on both. O(1): kept up to date on
    /// every change, so it can ride on every heartbeat.
    pub fn digest(&self) -> u64 {
        self.digest
    }

    fn set(&mut self, p: usize, l: Liveness) {
        self.digest ^= entry_hash(self.ids[p], self.states[p]) ^ entry_hash(self.ids[p], l);
        self.states[p] = l;
    }

    /// Every member's liveness in ring order (for gossip and status).
    pub fn entries(&self) -> impl Iterator<Item = (NodeId, Liveness)> + '_ {
        self.ids.iter().copied().zip(self.states.iter().copied())
    }
}

#[cfg(test)]
mod tests;

//! The registry's bookkeeping, shared by the TCP server and the in-process pools.

use super::proto::{FromRegistry, PoolEvent, MAX_ELECTIONS, MAX_ELECTION_NAME};
use crate::node::{NodeId, Reach};
use crossbeam_channel::{Sender, TrySendError};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Messages queued for one member before it counts as unresponsive.
pub const MEMBER_QUEUE: usize = 10_000;

struct Member {
    id: NodeId,
    tx: Sender<FromRegistry>,
    last_seen: Instant,
    death_timeout: Duration,
}

#[derive(Default)]
struct PoolState {
    size: Option<u32>,
    members: BTreeMap<u32, Member>,
    gone: usize,
    elections: HashMap<String, u32>,
    closed: bool,
    /// Every rank given out so far.
    used: std::collections::HashSet<u32>,
    /// One more than the highest rank ever given out: ranks are never reused, so a rank that
    /// died or left can never be mistaken for a newcomer.
    next_rank: u32,
}

/// What a join asks for.
#[derive(Clone)]
pub struct JoinRequest {
    /// Pool name.
    pub pool: String,
    /// Closed-pool size.
    pub size: Option<u32>,
    /// Requested rank.
    pub rank: Option<u32>,
    /// Host.
    pub host: String,
    /// Location.
    pub location: String,
    /// Port address.
    pub address: String,
    /// How nodes on its host reach it.
    pub local: Reach,
    /// Heartbeat silence that means death.
    pub death_timeout: Duration,
    /// Join only a closed pool that is full already (refused with [`NOT_RUNNING_YET`] before).
    pub running: bool,
}

/// Part of the reason a join that asks for a running pool is refused before the pool is full:
/// the node may try again.
pub const NOT_RUNNING_YET: &str = "is not running yet";

/// All pools a registry serves.
#[derive(Default)]
pub struct RegistryState {
    pools: HashMap<String, PoolState>,
}

/// A node just admitted to a pool, which the others have not yet been told of (see
/// [`RegistryState::admit`]).
pub struct Admitted {
    /// The node's id.
    pub id: NodeId,
    /// Its answer: its id and the pool's members, itself among them.
    pub welcome: FromRegistry,
    /// The pool's members, when this node's join filled it.
    closed: Option<Vec<NodeId>>,
}

impl RegistryState {
    /// Admits a node, welcomes it, tells the others, and closes the pool when it is full.
    /// Returns the new id, or why the join is refused.
    pub fn join(&mut self, req: JoinRequest, tx: Sender<FromRegistry>) -> Result<NodeId, String> {
        let admitted = self.admit(req, tx.clone())?;
        let _ = tx.try_send(admitted.welcome.clone());
        self.announce(&admitted);
        Ok(admitted.id)
    }

    /// Tells a pool's other members that `admitted` joined it, and every member that the pool
    /// is closed where its join filled it. The server calls this once the node has its answer,
    /// so that nobody acts on a join whose node is still waiting for it.
    pub fn announce(&mut self, admitted: &Admitted) {
        let id = &admitted.id;
        let Some(p) = self.pools.get(id.pool()) else {
            return;
        };
        for m in p.members.values().filter(|m| m.id != *id) {
            let _ =
                m.tx.try_send(FromRegistry::Event(PoolEvent::Joined(id.clone())));
        }
        if let Some(members) = &admitted.closed {
            for m in p.members.values() {
                let _ =
                    m.tx.try_send(FromRegistry::Event(PoolEvent::Closed(members.clone())));
            }
        }
    }

    /// Admits a node: assigns its rank and makes it a member (closing the pool when it is
    /// full), without telling anyone; [`announce`](RegistryState::announce) then tells the
    /// others. Returns the node's answer, or why the join is refused.
    pub fn admit(
        &mut self,
        req: JoinRequest,
        tx: Sender<FromRegistry>,
    ) -> Result<Admitted, String> {
        let pool = req.pool.clone();
        let admitted = self.admit_into(req, tx);
        // A refused join leaves no pool behind that no node has joined (none was given a
        // rank): it would keep the size the refused node asked for, and refuse the next launch
        // under that name.
        if admitted.is_err() && self.pools.get(&pool).is_some_and(|p| p.used.is_empty()) {
            self.pools.remove(&pool);
        }
        admitted
    }

    /// [`admit`](RegistryState::admit), which may leave an empty pool behind when it refuses.
    fn admit_into(
        &mut self,
        req: JoinRequest,
        tx: Sender<FromRegistry>,
    ) -> Result<Admitted, String> {
        if req.running
            && !self
                .pools
                .get(&req.pool)
                .is_some_and(|p| p.closed && p.size.is_some())
        {
            return Err(format!(
                "pool '{}' {NOT_RUNNING_YET}: a node asking to join it running waits until it \
                 is full",
                req.pool
            ));
        }
        let p = self.pools.entry(req.pool.clone()).or_default();
        // A node that names no size may join a closed pool once it is full: it grows the
        // running pool (`ipl-run --join`), with a rank above every rank given out so far.
        let late = p.size.is_some() && req.size.is_none();
        match (p.size, req.size) {
            (None, s) if p.members.is_empty() && p.gone == 0 => p.size = s,
            (Some(n), None) if !p.closed => {
                return Err(format!(
                    "pool '{}' is still filling ({} of {n} joined); a node without a pool size \
                     may join it only once it is full",
                    req.pool,
                    p.members.len() + p.gone
                ))
            }
            (Some(_), None) => {}
            (a, b) if a != b => {
                return Err(format!(
                    "pool '{}' has size {:?} but the node asked for {:?}",
                    req.pool, a, b
                ))
            }
            _ => {}
        }
        if p.closed && !late {
            return Err(format!("pool '{}' is closed", req.pool));
        }
        if late && req.rank.is_some() {
            return Err(format!(
                "pool '{}' is full: a node joining it later gets its rank from the registry \
                 and cannot ask for one",
                req.pool
            ));
        }
        let rank = match req.rank {
            Some(r) => {
                if p.members.contains_key(&r) {
                    return Err(format!("rank {r} of pool '{}' is taken", req.pool));
                }
                if p.used.contains(&r) {
                    return Err(format!(
                        "rank {r} of pool '{}' belonged to a node that has gone",
                        req.pool
                    ));
                }
                if p.size.is_some_and(|s| r >= s) {
                    return Err(format!(
                        "rank {r} is outside pool '{}' of size {}",
                        req.pool,
                        p.size.unwrap_or(0)
                    ));
                }
                r
            }
            None => match p.size {
                Some(_) if late => p.next_rank,
                // A closed pool fills the ranks its launcher did not ask for.
                Some(_) => (0..)
                    .find(|r| !p.members.contains_key(r) && !p.used.contains(r))
                    .expect("ranks are unbounded"),
                None => p.next_rank,
            },
        };
        // The last rank is never given out, so that the next one is always a number.
        let Some(after) = rank.checked_add(1) else {
            return Err(format!(
                "rank {rank} of pool '{}' is beyond the last a pool can give out ({})",
                req.pool,
                u32::MAX - 1
            ));
        };
        p.used.insert(rank);
        p.next_rank = p.next_rank.max(after);
        let id = NodeId::new(
            &req.pool,
            rank,
            &req.host,
            &req.location,
            &req.address,
            req.local,
        );
        let mut members: Vec<NodeId> = p.members.values().map(|m| m.id.clone()).collect();
        members.push(id.clone());
        members.sort();
        let welcome = FromRegistry::Welcome {
            me: id.clone(),
            members: members.clone(),
        };
        p.members.insert(
            rank,
            Member {
                id: id.clone(),
                tx,
                last_seen: Instant::now(),
                death_timeout: req.death_timeout,
            },
        );
        let mut closed = None;
        if !p.closed && p.size == Some(p.members.len() as u32 + p.gone as u32) && p.gone == 0 {
            p.closed = true;
            closed = Some(members);
        }
        tracing::debug!(node = %id, "joined");
        Ok(Admitted {
            id,
            welcome,
            closed,
        })
    }

    /// Runs election `name` for member `rank` of `pool` and answers it.
    pub fn elect(&mut self, pool: &str, rank: u32, name: &str) {
        let Some(p) = self.pools.get_mut(pool) else {
            return;
        };
        let refusal = if name.is_empty() || name.len() > MAX_ELECTION_NAME {
            Some(format!(
                "its name is {} bytes, and must be 1 to {MAX_ELECTION_NAME}",
                name.len()
            ))
        } else if !p.elections.contains_key(name) && p.elections.len() >= MAX_ELECTIONS {
            Some(format!(
                "the pool holds {MAX_ELECTIONS} elections, the most a registry keeps"
            ))
        } else {
            None
        };
        if let Some(why) = refusal {
            if let Some(m) = p.members.get(&rank) {
                tracing::warn!(node = %m.id, "election refused: {why}");
                let _ = m.tx.try_send(FromRegistry::ElectionRefused {
                    name: name.chars().take(MAX_ELECTION_NAME).collect(),
                    why,
                });
            }
            return;
        }
        let winner_rank = *p.elections.entry(name.to_owned()).or_insert(rank);
        let winner = match p.members.get(&winner_rank) {
            Some(m) => m.id.clone(),
            None => {
                p.elections.insert(name.to_owned(), rank);
                match p.members.get(&rank) {
                    Some(m) => m.id.clone(),
                    None => return,
                }
            }
        };
        if let Some(m) = p.members.get(&rank) {
            let _ = m.tx.try_send(FromRegistry::Elected {
                name: name.to_owned(),
                winner,
            });
        }
    }

    /// Answers member `rank` with the current winner of election `name`, without standing.
    pub fn lookup(&mut self, pool: &str, rank: u32, name: &str) {
        let Some(p) = self.pools.get(pool) else {
            return;
        };
        let winner = p
            .elections
            .get(name)
            .and_then(|w| p.members.get(w))
            .map(|m| m.id.clone());
        if let Some(m) = p.members.get(&rank) {
            let _ = m.tx.try_send(match winner {
                Some(winner) => FromRegistry::Elected {
                    name: name.to_owned(),
                    winner,
                },
                None => FromRegistry::NoWinner(name.to_owned()),
            });
        }
    }

    /// Records a heartbeat.
    pub fn heartbeat(&mut self, pool: &str, rank: u32) {
        if let Some(m) = self
            .pools
            .get_mut(pool)
            .and_then(|p| p.members.get_mut(&rank))
        {
            m.last_seen = Instant::now();
        }
    }

    /// Removes a member that left (`died == false`) or died, telling the others and vacating the
    /// elections it held.
    pub fn remove(&mut self, pool: &str, rank: u32, died: bool) {
        let Some(p) = self.pools.get_mut(pool) else {
            return;
        };
        let Some(m) = p.members.remove(&rank) else {
            return;
        };
        p.gone += 1;
        p.elections.retain(|_, r| *r != rank);
        if died {
            tracing::warn!(node = %m.id, "declared dead");
        } else {
            tracing::debug!(node = %m.id, "left");
        }
        let ev = if died {
            PoolEvent::Died(m.id.clone())
        } else {
            PoolEvent::Left(m.id.clone())
        };
        let mut unresponsive = Vec::new();
        for (r, other) in &p.members {
            if let Err(TrySendError::Full(_)) = other.tx.try_send(FromRegistry::Event(ev.clone())) {
                unresponsive.push(*r);
            }
        }
        if p.members.is_empty() {
            self.pools.remove(pool);
        }
        for r in unresponsive {
            self.remove(pool, r, true);
        }
    }

    /// Number of members of `pool` now.
    pub fn member_count(&self, pool: &str) -> usize {
        self.pools.get(pool).map_or(0, |p| p.members.len())
    }

    /// Members whose heartbeats stopped longer ago than their death timeout.
    pub fn expired(&self) -> Vec<(String, u32)> {
        let now = Instant::now();
        self.pools
            .iter()
            .flat_map(|(name, p)| {
                p.members
                    .iter()
                    .filter(move |(_, m)| now.duration_since(m.last_seen) > m.death_timeout)
                    .map(move |(r, _)| (name.clone(), *r))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(rank: Option<u32>) -> JoinRequest {
        JoinRequest {
            pool: "p".into(),
            size: Some(2),
            rank,
            host: "h".into(),
            location: "l".into(),
            address: "a".into(),
            local: Default::default(),
            death_timeout: Duration::from_secs(1),
            running: false,
        }
    }

    /// A join to a pool of `size` (open without one) asking for `rank`.
    fn open_req(pool: &str, size: Option<u32>, rank: Option<u32>) -> JoinRequest {
        JoinRequest {
            pool: pool.into(),
            size,
            ..req(rank)
        }
    }

    /// The highest ranks of an open pool: the last is refused, and no two members ever share
    /// one, where `rank + 1` used to overflow.
    #[test]
    fn the_last_rank_is_refused_and_ranks_near_it_are_never_shared() {
        let mut s = RegistryState::default();
        let (tx, _rx) = crossbeam_channel::bounded(100);
        let e = s.join(open_req("p", None, Some(u32::MAX)), tx).unwrap_err();
        assert!(e.contains("beyond the last"), "{e}");
        let mut ranks = Vec::new();
        let mut keep = Vec::new();
        for rank in [Some(u32::MAX - 1), None, None] {
            let (tx, rx) = crossbeam_channel::bounded(100);
            keep.push(rx);
            if let Ok(id) = s.join(open_req("p", None, rank), tx) {
                ranks.push(id.rank());
            }
        }
        assert_eq!(ranks, vec![u32::MAX - 1]);
        assert_eq!(s.member_count("p"), 1);
    }

    /// A refused join leaves no pool behind: the next launch under the name, with another
    /// size, is admitted, and refused joins under many names keep nothing.
    #[test]
    fn a_refused_join_does_not_keep_the_pool_it_made() {
        let mut s = RegistryState::default();
        let (tx, _r1) = crossbeam_channel::bounded(100);
        assert!(s.join(open_req("job", Some(2), Some(5)), tx).is_err());
        let (tx, _r2) = crossbeam_channel::bounded(100);
        let r = s.join(open_req("job", Some(3), Some(0)), tx);
        assert!(r.is_ok(), "refused: {:?}", r.err());
        for i in 0..100 {
            let (tx, _r) = crossbeam_channel::bounded(1);
            assert!(s
                .join(open_req(&format!("junk{i}"), Some(1), Some(9)), tx)
                .is_err());
        }
        assert_eq!(s.pools.len(), 1);
    }

    /// The registry keeps a bounded number of bounded election names: an overlong name and a
    /// name past the pool's limit are refused with an answer, names already held still answer,
    /// and a winner's departure makes room again.
    #[test]
    fn elections_are_bounded_in_length_and_number() {
        let mut s = RegistryState::default();
        let (t0, r0) = crossbeam_channel::bounded(MAX_ELECTIONS + 100);
        let a = s.join(open_req("job", None, None), t0).unwrap();
        let (t1, _r1) = crossbeam_channel::bounded(100);
        let b = s.join(open_req("job", None, None), t1).unwrap();
        assert_eq!((a.rank(), b.rank()), (0, 1));
        r0.try_iter().for_each(drop);
        let refused = |r: &crossbeam_channel::Receiver<FromRegistry>| {
            r.try_iter()
                .filter(|m| matches!(m, FromRegistry::ElectionRefused { .. }))
                .count()
        };
        s.elect("job", 0, &"x".repeat(MAX_ELECTION_NAME + 1));
        s.elect("job", 0, "");
        assert_eq!(refused(&r0), 2);
        for i in 0..MAX_ELECTIONS {
            s.elect("job", 1, &format!("e{i}"));
        }
        s.elect("job", 0, "one too many");
        assert_eq!(refused(&r0), 1);
        s.elect("job", 0, "e7");
        let answers: Vec<_> = r0.try_iter().collect();
        assert!(
            matches!(&answers[..], [FromRegistry::Elected { name, .. }] if name == "e7"),
            "{answers:?}"
        );
        assert_eq!(s.pools["job"].elections.len(), MAX_ELECTIONS);
        s.remove("job", 1, false);
        s.elect("job", 0, "one too many");
        assert!(r0
            .try_iter()
            .any(|m| matches!(m, FromRegistry::Elected { winner, .. } if winner == a)));
    }

    #[test]
    fn ranks_elections_and_closing() {
        let mut s = RegistryState::default();
        let (t0, r0) = crossbeam_channel::bounded(100);
        let (t1, r1) = crossbeam_channel::bounded(100);
        let a = s.join(req(Some(1)), t0).unwrap();
        assert_eq!(a.rank(), 1);
        assert!(s.join(req(Some(1)), t1.clone()).is_err());
        assert!(s.join(req(Some(5)), t1.clone()).is_err());
        let b = s.join(req(None), t1).unwrap();
        assert_eq!(b.rank(), 0);
        let closed: Vec<_> = r0
            .try_iter()
            .filter_map(|m| match m {
                FromRegistry::Event(PoolEvent::Closed(v)) => Some(v),
                _ => None,
            })
            .collect();
        assert_eq!(closed, vec![vec![b.clone(), a.clone()]]);
        s.elect("p", 1, "master");
        s.elect("p", 0, "master");
        let won: Vec<_> = r1
            .try_iter()
            .filter_map(|m| match m {
                FromRegistry::Elected { winner, .. } => Some(winner),
                _ => None,
            })
            .collect();
        assert_eq!(won, vec![a.clone()]);
        s.remove("p", 1, true);
        s.elect("p", 0, "master");
        let after: Vec<_> = r1.try_iter().collect();
        assert!(after
            .iter()
            .any(|m| matches!(m, FromRegistry::Event(PoolEvent::Died(d)) if *d == a)));
        assert!(after
            .iter()
            .any(|m| matches!(m, FromRegistry::Elected { winner, .. } if *winner == b)));
    }

    /// No member hears of a join, nor of the pool it fills closing, before it is announced;
    /// then the others hear of the join, and everyone of the closing.
    #[test]
    fn nobody_hears_of_a_join_before_it_is_announced() {
        let mut s = RegistryState::default();
        let (t0, r0) = crossbeam_channel::bounded(100);
        let (t1, r1) = crossbeam_channel::bounded(100);
        let a = s.join(req(Some(0)), t0).unwrap();
        assert!(matches!(r0.try_recv(), Ok(FromRegistry::Welcome { .. })));
        let admitted = s.admit(req(Some(1)), t1).unwrap();
        let b = admitted.id.clone();
        let both = [a.clone(), b.clone()];
        let FromRegistry::Welcome { me, members } = &admitted.welcome else {
            panic!("not a welcome");
        };
        assert!(*me == b && *members == both);
        assert!(r0.try_recv().is_err(), "rank 0 heard of the join early");
        assert!(
            r1.try_recv().is_err(),
            "the welcome is for the server to write"
        );
        s.announce(&admitted);
        let to_a: Vec<_> = r0.try_iter().collect();
        assert!(matches!(&to_a[..], [
            FromRegistry::Event(PoolEvent::Joined(j)),
            FromRegistry::Event(PoolEvent::Closed(all)),
        ] if *j == b && *all == both));
        let to_b: Vec<_> = r1.try_iter().collect();
        let [FromRegistry::Event(PoolEvent::Closed(all))] = &to_b[..] else {
            panic!("rank 1 got {} messages, not the closing", to_b.len());
        };
        assert_eq!(*all, both);
    }
}

#[cfg(test)]
mod open_pool_tests {
    use super::*;

    #[test]
    fn open_pools_never_reuse_ranks() {
        let mut s = RegistryState::default();
        let join = |s: &mut RegistryState, rank| {
            let (tx, rx) = crossbeam_channel::bounded(100);
            std::mem::forget(rx);
            s.join(
                JoinRequest {
                    pool: "open".into(),
                    size: None,
                    rank,
                    host: "h".into(),
                    location: "l".into(),
                    address: "a".into(),
                    local: Default::default(),
                    death_timeout: Duration::from_secs(1),
                    running: false,
                },
                tx,
            )
        };
        let a = join(&mut s, None).unwrap();
        let b = join(&mut s, None).unwrap();
        assert_eq!((a.rank(), b.rank()), (0, 1));
        s.remove("open", 0, false);
        let c = join(&mut s, None).unwrap();
        assert_eq!(c.rank(), 2);
        assert!(join(&mut s, Some(0)).is_err());
    }

    #[test]
    fn a_full_closed_pool_grows_by_nodes_without_a_size() {
        let mut s = RegistryState::default();
        let join = |s: &mut RegistryState, size, rank| {
            let (tx, rx) = crossbeam_channel::bounded(100);
            let r = s.join(
                JoinRequest {
                    pool: "grow".into(),
                    size,
                    rank,
                    host: "h".into(),
                    location: "l".into(),
                    address: "a".into(),
                    local: Default::default(),
                    death_timeout: Duration::from_secs(1),
                    running: false,
                },
                tx,
            );
            (r, rx)
        };
        let (a, events) = join(&mut s, Some(2), Some(0));
        assert_eq!(a.unwrap().rank(), 0);
        // Not yet: the pool is filling.
        let e = join(&mut s, None, None).0.unwrap_err();
        assert!(e.contains("still filling (1 of 2"), "{e}");
        assert_eq!(join(&mut s, Some(2), Some(1)).0.unwrap().rank(), 1);
        // Full: a node with the size is refused, one without it grows the pool.
        assert!(join(&mut s, Some(2), None)
            .0
            .unwrap_err()
            .contains("closed"));
        let e = join(&mut s, None, Some(7)).0.unwrap_err();
        assert!(e.contains("cannot ask for one"), "{e}");
        let (c, welcome) = join(&mut s, None, None);
        let c = c.unwrap();
        assert_eq!(c.rank(), 2);
        match welcome.try_recv() {
            Ok(FromRegistry::Welcome { members, .. }) => assert_eq!(members.len(), 3),
            other => panic!("expected a welcome, got {other:?}"),
        }
        // The first member heard of the pool closing once, and then of the newcomer.
        let seen: Vec<FromRegistry> = events.try_iter().collect();
        let closes = seen
            .iter()
            .filter(|m| matches!(m, FromRegistry::Event(PoolEvent::Closed(_))))
            .count();
        assert_eq!(closes, 1);
        assert!(seen
            .iter()
            .any(|m| matches!(m, FromRegistry::Event(PoolEvent::Joined(n)) if *n == c)));
    }
}

//! Groups: subsets of the processes with their own pids, supersteps and collectives, made by
//! [`Bsp::split`] (MPI's `Comm_split`).
//!
//! A group is a [`Bsp`] handle like the whole machine's: the same calls, pids `0..nprocs()`
//! of its own, and supersteps and collective operations numbered on their own. Its messages
//! carry the group's id, which every member derives from the parent's id, the split's
//! sequence number and the color, so that no messages are exchanged to agree on it. The
//! connections are the process's one [`ipl::Mesh`], shared by all its handles; what arrives
//! for a group is kept apart until that group asks for it, so supersteps and collectives of
//! different groups, and of the whole machine, interleave freely. The handles of one process
//! may be moved to different threads; they take turns at the connections (a handle that waits
//! holds them for at most one [`Options::wait_slice`](crate::Options::wait_slice) at a time,
//! and files what it receives for the others).
//!
//! # Calling group operations in different orders
//!
//! Within one group, every member must call the group's operations in the same order (as
//! for the whole machine); calling different operations at the same point is an
//! [`Error::CollectiveMismatch`](crate::Error::CollectiveMismatch) naming both. Across
//! groups, one process may wait in an operation of group A for a peer that is itself waiting
//! in an operation of group B (or of the whole machine) for the first: neither can go on. When
//! the peer's message of B reaches the waiting process, B's operation cannot end without it
//! (every process contributes to its result: `sync`, all-reduce, all-gather, all-to-all,
//! reduce-scatter, total exchange, split), and the waiting thread is the one that runs B's
//! operations here (it started B's last one), the wait ends with `CollectiveMismatch` naming
//! both operations and both groups. Other crossings cannot be told from a slow peer (the
//! peer's message may not pass the waiting process, the peer's operation could end without
//! it, or another thread of this process may yet start it); set
//! [`Options::sync_timeout`](crate::Options::sync_timeout) to bound such waits.

use crate::collective::Call;
use crate::error::Result;
use crate::op;
use crate::superstep::Bsp;
use crate::wire;

/// Mixes the parent's group id, the split's sequence number and the color into the id of a
/// new group (splitmix64); never 0, the whole machine's id.
fn group_id(parent: u64, seq: u64, color: usize) -> u64 {
    let mut z = parent
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(seq)
        .rotate_left(29)
        ^ (color as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9)
        ^ 0x2545_f491_4f6c_dd1d;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.max(1)
}

impl Bsp {
    /// Splits the processes of this handle into groups: the processes that pass the same
    /// `color` form one group, ranked by `key` (ties by their pid here). Every process of this
    /// handle must call it; each gets the handle of its own group, with its own
    /// [`pid`](Bsp::pid) and [`nprocs`](Bsp::nprocs), supersteps, collectives and remote
    /// memory, which do not disturb the other groups or this handle's supersteps. Groups nest:
    /// a group can be split again.
    ///
    /// ```
    /// # fn main() -> bsp::Result<()> {
    /// let r = bsp::run_local(5, |bsp| {
    ///     let me = bsp.pid();
    ///     // Evens and odds, ranked in reverse.
    ///     let mut half = bsp.split(me % 2, usize::MAX - me)?;
    ///     let members = half.nprocs();
    ///     let prefix: u64 = half.scan(me as u64, bsp::Op::Sum)?;
    ///     // A superstep of the group, and one of the whole machine after it.
    ///     half.send((half.pid() + 1) % members, &me)?;
    ///     half.sync()?;
    ///     let (_, from) = half.recv::<usize>()?.expect("a packet");
    ///     let total = bsp.all_reduce(1u32, bsp::Op::Sum)?;
    ///     Ok((half.pid(), members, prefix, from, total))
    /// })?;
    /// // pid 4 is the first even process by key, then 2, then 0.
    /// assert_eq!(r[4], (0, 3, 4, 0, 5));
    /// assert_eq!(r[0], (2, 3, 6, 2, 5));
    /// assert_eq!(r[3], (0, 2, 3, 1, 5));
    /// # Ok(())
    /// # }
    /// ```
    pub fn split(&mut self, color: usize, key: usize) -> Result<Bsp> {
        let call = self.begin(op::SPLIT, 0);
        let mine: Vec<u8> = [color as u64, key as u64]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut item = Vec::new();
        super::collective::put_raw_item(&mine, wire::native_flag(), &mut item);
        let all = self.bruck_gather(&call, item)?;
        let mut same: Vec<(u64, usize)> = Vec::new();
        for (pid, (flags, bytes)) in all.into_iter().enumerate() {
            let v = crate::collective::numbers_from::<u64>(
                &bytes,
                wire::payload_swapped(flags),
                Some(2),
            )
            .map_err(|why| self.payload_error(&call, pid, why))?;
            if v[0] == color as u64 {
                same.push((v[1], pid));
            }
        }
        same.sort_unstable();
        Ok(self.group(&call, color, &same))
    }

    /// The handle of the group of `members` (key, pid here) made by split `call`.
    fn group(&self, call: &Call, color: usize, members: &[(u64, usize)]) -> Bsp {
        let id = group_id(self.comm, call.seq, color);
        let pid = members
            .iter()
            .position(|&(_, p)| p == self.pid)
            .expect("a process is in its own color's group");
        let world: Vec<usize> = members.iter().map(|&(_, p)| self.world_pid(p)).collect();
        tracing::debug!(
            pid = self.pid,
            group = format_args!("{id:016x}"),
            members = ?world,
            "joined a group"
        );
        self.net().join_comm(id, world.clone());
        Bsp::handle(
            self.shared_net(),
            self.ibis().clone(),
            self.options().clone(),
            id,
            world,
            pid,
        )
    }

    /// The pids, in the whole machine, of this handle's processes, by their pid here.
    pub fn world_pids(&self) -> &[usize] {
        &self.members
    }
}

#[cfg(test)]
mod tests {
    use super::group_id;

    #[test]
    fn group_ids_differ_by_parent_split_and_color_and_are_never_zero() {
        let ids = [
            group_id(0, 0, 0),
            group_id(0, 0, 1),
            group_id(0, 1, 0),
            group_id(group_id(0, 0, 0), 0, 0),
        ];
        for (i, a) in ids.iter().enumerate() {
            assert_ne!(*a, 0);
            for b in &ids[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}

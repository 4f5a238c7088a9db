//! How many processors the processes of a pool on this host share, for deciding whether they
//! crowd it (see `PoolInner::crowded`).
//!
//! Not `std::thread::available_parallelism`: that counts the processors this process may run
//! on, and launchers bind each process to its own few (`mpirun` binds each of two ranks to one
//! core of its own, Slurm's `--cpu-bind` does the same), so two processes bound to two
//! different cores would each see one processor and count themselves crowded, when neither
//! shares a processor with the other. What the processes of a host share is the processor set
//! of their control group (the cpuset a container or a Slurm allocation gives them), or,
//! without one, every online processor of the host.

use std::path::Path;

/// The processors the processes of this host may share: the CPUs of this process's cgroup
/// cpuset, else the host's online CPUs, else (neither readable) the CPUs this process may run
/// on. At least 1.
pub(crate) fn shared_by_host() -> usize {
    cgroup_cpuset()
        .or_else(online)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// The number of CPUs in this process's cgroup cpuset (cgroup v2, or v1's cpuset controller),
/// if the files say.
fn cgroup_cpuset() -> Option<usize> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    for line in membership.lines() {
        // "hierarchy-ID:controllers:path"; v2 is "0::path", v1's cpuset names its controller.
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let (mount, name) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "cpuset.cpus.effective")
        } else if controllers.split(',').any(|c| c == "cpuset") {
            ("/sys/fs/cgroup/cpuset", "cpuset.effective_cpus")
        } else {
            continue;
        };
        // The group's own directory; in a container that mounts its own group as the root of
        // the hierarchy without a cgroup namespace, the path names a directory the container
        // does not see, and the root of the mount is the group.
        let own = Path::new(mount)
            .join(path.trim_start_matches('/'))
            .join(name);
        for file in [own, Path::new(mount).join(name)] {
            if let Some(n) = std::fs::read_to_string(file)
                .ok()
                .and_then(|s| count_cpu_list(&s))
            {
                return Some(n);
            }
        }
    }
    None
}

/// The host's online CPUs.
fn online() -> Option<usize> {
    // SAFETY: sysconf only reads the system's configuration.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// The number of CPUs in a kernel CPU list such as `0-3,8,10-11` (`None` if it is empty or
/// not such a list, or names an absurd number).
fn count_cpu_list(list: &str) -> Option<usize> {
    /// More CPUs than any machine has: a list claiming more is not believed.
    const MOST: usize = 1 << 20;
    let list = list.trim();
    if list.is_empty() {
        return None;
    }
    let mut total = 0usize;
    for part in list.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (
                lo.trim().parse::<usize>().ok()?,
                hi.trim().parse::<usize>().ok()?,
            ),
            None => {
                let cpu = part.trim().parse::<usize>().ok()?;
                (cpu, cpu)
            }
        };
        if hi < lo || hi >= MOST {
            return None;
        }
        total += hi - lo + 1;
    }
    (total > 0 && total <= MOST).then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list("0-1\n"), Some(2));
        assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
        assert_eq!(count_cpu_list(" 4-4 "), Some(1));
    }

    #[test]
    fn malformed_cpu_lists_are_not_believed() {
        for bad in [
            "",
            "\n",
            "x",
            "3-1",
            "0-",
            "-2",
            "0,,1",
            "0-18446744073709551615",
            "1-2-3",
        ] {
            assert_eq!(count_cpu_list(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn binding_a_thread_to_one_processor_does_not_shrink_the_host() {
        let host = shared_by_host();
        if host < 2 {
            return; // nothing to narrow on a one-processor machine
        }
        // Bound the way `mpirun` binds a rank: to one core, the first this process may use.
        let narrowed = std::thread::spawn(|| {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            // SAFETY: a zeroed cpu_set_t is a valid empty set; both sets are passed by
            // reference with their size, and CPU_ISSET reads within the set.
            unsafe {
                let mut allowed: libc::cpu_set_t = std::mem::zeroed();
                assert_eq!(libc::sched_getaffinity(0, size, &mut allowed), 0);
                let first = (0..libc::CPU_SETSIZE as usize)
                    .find(|&cpu| libc::CPU_ISSET(cpu, &allowed))
                    .expect("this thread may run on some CPU");
                let mut one: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(first, &mut one);
                assert_eq!(
                    libc::sched_setaffinity(0, size, &one),
                    0,
                    "binding the thread to CPU {first}"
                );
            }
            (
                std::thread::available_parallelism().map_or(0, |n| n.get()),
                shared_by_host(),
            )
        })
        .join()
        .unwrap();
        assert_eq!(narrowed, (1, host));
    }

    #[test]
    fn the_host_has_at_least_the_processors_this_process_may_use() {
        // A binding narrows what this process may use, never what the host's processes share.
        let mine = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(shared_by_host() >= mine, "{} < {mine}", shared_by_host());
    }
}

//! Pools started by parallel launchers: OpenMPI's `mpirun`, Slurm's `srun`, and other PMIx or
//! PMI launchers.
//!
//! Such a launcher starts every rank itself and tells each its rank, the job size and the job in
//! environment variables of its own. [`Launcher::detect`] reads them; [`Config::from_env`] turns
//! them into a pool when no `IPL_POOL`, `IPL_POOL_SIZE` or `IPL_RANK` is set:
//!
//! - the pool is named after the job (`slurm-<job>.<step>`, `openmpi-<job>`), its size and each
//!   process's rank are the launcher's;
//! - rank 0 runs the registry inside itself, listening on all addresses at a port derived from
//!   the job id (10000 to 29999, the same in every rank);
//! - the others find it at `IPL_SERVER` when that is set, otherwise on rank 0's host as the
//!   launcher's environment names it: `127.0.0.1` when every rank runs on one host; under Slurm
//!   the first host of the step's node list (`SLURM_STEP_NODELIST`, where the default block
//!   distribution puts rank 0); under OpenMPI 3 and 4 the host running `mpirun`, from the
//!   addresses in `OMPI_MCA_orte_hnp_uri` (its by-slot mapping puts rank 0 on the first host
//!   of the allocation, which is where `mpirun` runs in a batch job and on a workstation);
//! - the pool secret is `IPL_SECRET`, or else derived from the job id. A derived secret keeps
//!   apart the pools of different jobs, but it is no secret against other users of the cluster,
//!   who can see job ids: set `IPL_SECRET` in the environment the launcher passes on
//!   (`mpirun -x IPL_SECRET`, `srun` passes the whole environment) where that matters.
//!
//! Rank 0 checks that the registry address is one of its own and fails at once, naming the
//! variable to set, when the launcher placed it elsewhere.
//!
//! [`Config::from_env`]: crate::Config::from_env

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};

/// Lowest port a registry port derived from a job id can have.
pub const JOB_PORT_BASE: u16 = 10_000;
/// Number of ports derived job ports are spread over (below the usual ephemeral range).
pub const JOB_PORT_RANGE: u16 = 20_000;
/// Largest job a launcher may report.
const MAX_SIZE: u32 = 1_000_000;

/// Which launcher started this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherKind {
    /// OpenMPI's `mpirun` (`OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`).
    OpenMpi,
    /// Slurm's `srun` (`SLURM_PROCID`, `SLURM_STEP_ID`, ...).
    Slurm,
    /// A PMIx launcher that is neither of the above (`PMIX_RANK`, `PMIX_NAMESPACE`).
    Pmix,
    /// A PMI-1 launcher such as MPICH's Hydra (`PMI_RANK`, `PMI_SIZE`).
    Pmi,
}

impl LauncherKind {
    /// The launcher's name as used in pool names and messages.
    pub fn name(self) -> &'static str {
        match self {
            LauncherKind::OpenMpi => "openmpi",
            LauncherKind::Slurm => "slurm",
            LauncherKind::Pmix => "pmix",
            LauncherKind::Pmi => "pmi",
        }
    }
}

/// What the environment says about the launcher that started this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    /// Which launcher.
    pub kind: LauncherKind,
    /// This process's rank, `0..size`.
    pub rank: u32,
    /// Number of ranks in the job (step).
    pub size: u32,
    /// The job (and step) as the launcher names it, unique per launch; None where the launcher
    /// puts no job id in the environment (PMI).
    pub job: Option<String>,
    /// Where the other ranks find rank 0's registry: host names or addresses, to be tried in
    /// this order. Empty where the environment does not say (then `IPL_SERVER` is needed).
    pub registry_hosts: Vec<String>,
    /// Number of hosts the ranks run on, where the launcher says.
    pub hosts: Option<u32>,
    /// Which variables [`Launcher::registry_hosts`] came from, for messages.
    pub registry_source: String,
    /// The launcher's name for this process's host, where it gives one (`SLURMD_NODENAME`).
    pub this_host: Option<String>,
}

impl Launcher {
    /// Reads the launcher variables through `get`. `Ok(None)` when no launcher started this
    /// process; an error names the variable when a launcher's variables are present but absurd
    /// (a rank outside the job, a size of zero, text where a number belongs).
    ///
    /// When several launchers' variables are present, the innermost wins: `mpirun` inside a
    /// Slurm allocation leaves the allocation's `SLURM_*` variables in place, so OpenMPI's are
    /// read first; Slurm's count only with a step id, since a batch script also has
    /// `SLURM_PROCID` (0) without being one rank of many.
    pub fn detect(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<Launcher>> {
        if let Some(r) = get("OMPI_COMM_WORLD_RANK") {
            return openmpi(get, &r).map(Some);
        }
        let step = get("SLURM_STEP_ID").or_else(|| get("SLURM_STEPID"));
        if let (Some(r), Some(step)) = (get("SLURM_PROCID"), step) {
            return slurm(get, &r, &step).map(Some);
        }
        if let Some(r) = get("PMIX_RANK") {
            return Err(Error::config(
                "PMIX_RANK",
                format!(
                    "rank {r} of a PMIx launcher that puts no job size in the environment; \
                     set IPL_POOL_SIZE, IPL_RANK and IPL_SERVER for each process"
                ),
            ));
        }
        if let Some(r) = get("PMI_RANK") {
            let size = count(get, &["PMI_SIZE"])?;
            let rank = rank_of("PMI_RANK", &r, size)?;
            let all_local = get("MPI_LOCALNRANKS")
                .and_then(|s| s.trim().parse::<u32>().ok())
                .is_some_and(|n| n == size);
            return Ok(Some(Launcher {
                kind: LauncherKind::Pmi,
                rank,
                size,
                job: None,
                registry_hosts: if all_local {
                    vec!["127.0.0.1".into()]
                } else {
                    Vec::new()
                },
                hosts: all_local.then_some(1),
                registry_source: "MPI_LOCALNRANKS".into(),
                this_host: None,
            }));
        }
        Ok(None)
    }

    /// The key a pool's name, port and derived secret come from: the job id, or the registry
    /// address where the launcher gives no job id.
    pub fn job_key(&self, server: Option<&str>) -> Result<String> {
        match (&self.job, server) {
            (Some(j), _) => Ok(format!("{}-{j}", self.kind.name())),
            (None, Some(s)) => Ok(format!("{}-{s}", self.kind.name())),
            (None, None) => Err(Error::config(
                "IPL_SERVER",
                format!(
                    "the {} launcher gives no job id and no registry host; set IPL_SERVER=host:port \
                     (rank 0's host and a free port) for every process",
                    self.kind.name()
                ),
            )),
        }
    }
}

/// The registry port of the job `key`: 10000 to 29999, the same in every rank.
pub fn job_port(key: &str) -> u16 {
    let h = Sha256::digest(format!("ipl registry port\0{key}").as_bytes());
    JOB_PORT_BASE + u16::from_be_bytes([h[0], h[1]]) % JOB_PORT_RANGE
}

/// The pool secret derived from the job `key`: keeps different jobs' pools apart, but anyone
/// who knows the job id can compute it.
pub fn job_secret(key: &str) -> String {
    let h = Sha256::digest(format!("ipl pool secret\0{key}").as_bytes());
    h[..16].iter().map(|b| format!("{b:02x}")).collect()
}

fn openmpi(get: &dyn Fn(&str) -> Option<String>, r: &str) -> Result<Launcher> {
    let size = count(get, &["OMPI_COMM_WORLD_SIZE"])?;
    let rank = rank_of("OMPI_COMM_WORLD_RANK", r, size)?;
    let hnp = get("OMPI_MCA_orte_hnp_uri");
    let job = get("OMPI_MCA_ess_base_jobid")
        .or_else(|| get("PMIX_NAMESPACE"))
        .or_else(|| get("OMPI_MCA_orte_ess_jobid"))
        .or_else(|| {
            hnp.as_deref()
                .and_then(|u| u.split(';').next())
                .map(str::to_owned)
        })
        .filter(|j| !j.trim().is_empty())
        .ok_or_else(|| {
            Error::config(
                "OMPI_MCA_ess_base_jobid",
                "OMPI_COMM_WORLD_RANK is set but no job id (OMPI_MCA_ess_base_jobid or \
                 PMIX_NAMESPACE) is; set IPL_POOL, IPL_POOL_SIZE, IPL_RANK and IPL_SERVER instead",
            )
        })?;
    let local = optional_count(get, "OMPI_COMM_WORLD_LOCAL_SIZE")?;
    let nodes = optional_count(get, "OMPI_MCA_orte_num_nodes")?;
    let all_local = local == Some(size);
    let (registry_hosts, source) = if all_local {
        (vec!["127.0.0.1".to_string()], "OMPI_COMM_WORLD_LOCAL_SIZE")
    } else {
        let hosts = hnp.as_deref().map(hnp_addresses).unwrap_or_default();
        (hosts, "OMPI_MCA_orte_hnp_uri (the host running mpirun)")
    };
    Ok(Launcher {
        kind: LauncherKind::OpenMpi,
        rank,
        size,
        job: Some(job.trim().to_owned()),
        registry_hosts,
        hosts: if all_local { Some(1) } else { nodes },
        registry_source: source.into(),
        this_host: None,
    })
}

fn slurm(get: &dyn Fn(&str) -> Option<String>, r: &str, step: &str) -> Result<Launcher> {
    let size = count(
        get,
        &["SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"],
    )?;
    let rank = rank_of("SLURM_PROCID", r, size)?;
    let job = get("SLURM_JOB_ID")
        .or_else(|| get("SLURM_JOBID"))
        .filter(|j| !j.trim().is_empty())
        .ok_or_else(|| {
            Error::config(
                "SLURM_JOB_ID",
                "SLURM_PROCID and SLURM_STEP_ID are set but SLURM_JOB_ID is not",
            )
        })?;
    let mut hosts = None;
    for key in [
        "SLURM_STEP_NUM_NODES",
        "SLURM_JOB_NUM_NODES",
        "SLURM_NNODES",
    ] {
        if let Some(n) = optional_count(get, key)? {
            hosts = Some(n);
            break;
        }
    }
    let list_key = [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ]
    .into_iter()
    .find(|k| get(k).is_some_and(|v| !v.trim().is_empty()));
    let (registry_hosts, source) = if hosts == Some(1) {
        (
            vec!["127.0.0.1".to_string()],
            "SLURM_STEP_NUM_NODES".to_string(),
        )
    } else if let Some(key) = list_key {
        let list = get(key).unwrap_or_default();
        let first = first_host(&list).map_err(|why| Error::config(key, why))?;
        (vec![first], format!("{key} (its first host)"))
    } else {
        (Vec::new(), "SLURM_STEP_NODELIST".to_string())
    };
    Ok(Launcher {
        kind: LauncherKind::Slurm,
        rank,
        size,
        job: Some(format!("{}.{}", job.trim(), step.trim())),
        registry_hosts,
        hosts,
        registry_source: source,
        this_host: get("SLURMD_NODENAME").filter(|h| !h.trim().is_empty()),
    })
}

/// The first of `keys` that is set, as a job size (1 to 1000000).
fn count(get: &dyn Fn(&str) -> Option<String>, keys: &[&str]) -> Result<u32> {
    for key in keys {
        if let Some(n) = optional_count(get, key)? {
            return Ok(n);
        }
    }
    Err(Error::config(
        keys[0],
        format!(
            "the launcher's rank variable is set but not the job size ({})",
            keys.join(", ")
        ),
    ))
}

fn optional_count(get: &dyn Fn(&str) -> Option<String>, key: &str) -> Result<Option<u32>> {
    match get(key) {
        None => Ok(None),
        Some(s) => match s.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_SIZE).contains(&n) => Ok(Some(n)),
            _ => Err(Error::config(
                key,
                format!("'{s}' is not a count between 1 and {MAX_SIZE}"),
            )),
        },
    }
}

fn rank_of(key: &str, s: &str, size: u32) -> Result<u32> {
    match s.trim().parse::<u32>() {
        Ok(r) if r < size => Ok(r),
        Ok(r) => Err(Error::config(
            key,
            format!("rank {r} is outside the job of {size} processes"),
        )),
        Err(_) => Err(Error::config(key, format!("'{s}' is not a rank"))),
    }
}

/// The IPv4 addresses in OpenMPI's contact URI of `mpirun`
/// (`1234.0;tcp://10.0.0.1,192.168.1.5:4567;tcp6://[fd00::2]:4568`), in its order.
pub fn hnp_addresses(uri: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in uri.split(';') {
        let Some(rest) = part.trim().strip_prefix("tcp://") else {
            continue;
        };
        let hosts = rest.rsplit_once(':').map_or(rest, |(h, _)| h);
        for h in hosts.split(',') {
            let h = h.trim();
            if h.parse::<std::net::Ipv4Addr>().is_ok() && !out.iter().any(|o| o == h) {
                out.push(h.to_owned());
            }
        }
    }
    out
}

/// The first host of a Slurm host list such as `node[01-04,07],gpu[1-2]` (`node01`), or why
/// the list is malformed.
pub fn first_host(list: &str) -> std::result::Result<String, String> {
    let list = list.trim();
    // The first entry ends at the first comma outside brackets.
    let mut depth = 0i32;
    let mut end = list.len();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                end = i;
                break;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("'{list}' has unbalanced brackets"));
        }
    }
    let entry = &list[..end];
    let mut host = String::new();
    let mut rest = entry;
    while let Some(open) = rest.find('[') {
        host.push_str(&rest[..open]);
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| format!("'{list}' has unbalanced brackets"))?;
        let inner = &rest[open + 1..close];
        let first = inner.split(',').next().unwrap_or("");
        let start = first.split('-').next().unwrap_or("").trim();
        if start.is_empty() || !start.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("'{list}' has a bad range '[{inner}]'"));
        }
        host.push_str(start);
        rest = &rest[close + 1..];
    }
    if rest.contains(']') {
        return Err(format!("'{list}' has unbalanced brackets"));
    }
    host.push_str(rest);
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(format!("'{list}' does not start with a host name"));
    }
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::lookup as env;

    #[test]
    fn slurm_host_lists() {
        assert_eq!(first_host("node[01-04,07],gpu5").unwrap(), "node01");
        assert_eq!(first_host("rack[2-3]-n[001-010]").unwrap(), "rack2-n001");
        assert_eq!(first_host("vm").unwrap(), "vm");
        assert_eq!(first_host("a,b[1-2]").unwrap(), "a");
        assert_eq!(first_host("10.1.0.[5-8]").unwrap(), "10.1.0.5");
        for bad in ["", "node[01-04", "node]1[", "node[x-y]", "[]", "a b"] {
            assert!(first_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn openmpi_contact_addresses() {
        assert_eq!(
            hnp_addresses("1258225664.0;tcp://192.0.2.2:52413;tcp6://[fd00::2]:59019"),
            ["192.0.2.2"]
        );
        assert_eq!(
            hnp_addresses("1.0;tcp://10.0.0.1,192.168.1.5:4567"),
            ["10.0.0.1", "192.168.1.5"]
        );
        assert!(hnp_addresses("garbage").is_empty());
    }

    #[test]
    fn srun_environment() {
        let l = Launcher::detect(&env(&[
            ("SLURM_PROCID", "2"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_ID", "4711"),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_STEP_NUM_NODES", "2"),
            ("SLURM_STEP_NODELIST", "n[3-4]"),
            ("SLURMD_NODENAME", "n4"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(l.kind, LauncherKind::Slurm);
        assert_eq!((l.rank, l.size), (2, 4));
        assert_eq!(l.job.as_deref(), Some("4711.0"));
        assert_eq!(l.registry_hosts, ["n3"]);
        assert_eq!(l.this_host.as_deref(), Some("n4"));
        // One node: loopback, whatever the node is called.
        let l = Launcher::detect(&env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_STEPID", "3"),
            ("SLURM_JOBID", "9"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_NNODES", "1"),
            ("SLURM_NODELIST", "somewhere"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(l.registry_hosts, ["127.0.0.1"]);
        assert_eq!(l.job.as_deref(), Some("9.3"));
    }

    #[test]
    fn a_batch_script_is_not_a_rank() {
        let l = Launcher::detect(&env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_JOB_ID", "4711"),
            ("SLURM_NTASKS", "8"),
        ]))
        .unwrap();
        assert_eq!(l, None);
        assert_eq!(Launcher::detect(&env(&[])).unwrap(), None);
    }

    #[test]
    fn mpirun_environment_wins_over_the_allocation() {
        let l = Launcher::detect(&env(&[
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_MCA_ess_base_jobid", "1258225665"),
            ("OMPI_MCA_orte_num_nodes", "2"),
            (
                "OMPI_MCA_orte_hnp_uri",
                "1258225664.0;tcp://10.0.0.1,10.1.0.1:52413",
            ),
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_ID", "5"),
            ("SLURM_NTASKS", "1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(l.kind, LauncherKind::OpenMpi);
        assert_eq!((l.rank, l.size, l.hosts), (1, 4, Some(2)));
        assert_eq!(l.registry_hosts, ["10.0.0.1", "10.1.0.1"]);
        assert_eq!(l.job.as_deref(), Some("1258225665"));
    }

    #[test]
    fn absurd_values_name_the_variable() {
        for (vars, key) in [
            (
                vec![("OMPI_COMM_WORLD_RANK", "4"), ("OMPI_COMM_WORLD_SIZE", "4")],
                "OMPI_COMM_WORLD_RANK",
            ),
            (
                vec![("OMPI_COMM_WORLD_RANK", "x"), ("OMPI_COMM_WORLD_SIZE", "4")],
                "OMPI_COMM_WORLD_RANK",
            ),
            (
                vec![("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "0")],
                "OMPI_COMM_WORLD_SIZE",
            ),
            (vec![("OMPI_COMM_WORLD_RANK", "0")], "OMPI_COMM_WORLD_SIZE"),
            (
                vec![("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "2")],
                "OMPI_MCA_ess_base_jobid",
            ),
            (
                vec![
                    ("SLURM_PROCID", "-1"),
                    ("SLURM_STEP_ID", "0"),
                    ("SLURM_JOB_ID", "1"),
                    ("SLURM_NTASKS", "2"),
                ],
                "SLURM_PROCID",
            ),
            (
                vec![
                    ("SLURM_PROCID", "0"),
                    ("SLURM_STEP_ID", "0"),
                    ("SLURM_JOB_ID", "1"),
                    ("SLURM_NTASKS", "99999999999"),
                ],
                "SLURM_NTASKS",
            ),
            (
                vec![
                    ("SLURM_PROCID", "0"),
                    ("SLURM_STEP_ID", "0"),
                    ("SLURM_NTASKS", "2"),
                ],
                "SLURM_JOB_ID",
            ),
            (
                vec![
                    ("SLURM_PROCID", "0"),
                    ("SLURM_STEP_ID", "0"),
                    ("SLURM_JOB_ID", "1"),
                    ("SLURM_NTASKS", "2"),
                    ("SLURM_STEP_NODELIST", "n[1-"),
                ],
                "SLURM_STEP_NODELIST",
            ),
            (vec![("PMI_RANK", "3"), ("PMI_SIZE", "2")], "PMI_RANK"),
            (vec![("PMIX_RANK", "0")], "PMIX_RANK"),
        ] {
            let e = Launcher::detect(&env(&vars)).unwrap_err().to_string();
            assert!(e.contains(key), "{vars:?}: {e}");
        }
    }

    #[test]
    fn ports_and_secrets_follow_the_job() {
        let (a, b) = (job_port("slurm-1.0"), job_port("slurm-1.1"));
        assert!((JOB_PORT_BASE..JOB_PORT_BASE + JOB_PORT_RANGE).contains(&a));
        assert_eq!(a, job_port("slurm-1.0"));
        assert_ne!(job_secret("slurm-1.0"), job_secret("slurm-1.1"));
        assert_eq!(job_secret("x").len(), 32);
        // Different steps of one job are different pools; their ports differ by chance only,
        // so only check that the function depends on its input at all.
        assert!((0..20).any(|i| job_port(&format!("j{i}")) != b));
    }
}

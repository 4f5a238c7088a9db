//! Whether a run computed the right answer, judged against the sequential baseline of its
//! sweep: a run with another answer is an error, never a speedup.
//!
//! Apps whose parallel output is bit-identical to the sequential one on any process count
//! ([`AppSpec::exact_across_processes`]) must report the same checksum. Barnes-Hut is
//! bit-identical on one process only: more processes build other trees, so forces differ
//! within the method's approximation and final positions by a little; beyond P = 1 its runs
//! are compared within the bounds [`barnes_hut`] derives from the physics. An app that is
//! neither exact nor has bounds here is compared at P = 1 only, and its other points say so.

use crate::apps::AppSpec;
use crate::store::RunRecord;
use serde_json::Value;

/// The verdict on one run.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The same answer as the sequential baseline (within the app's bounds).
    Agrees,
    /// Another answer: what differs.
    Differs(String),
    /// Nothing to compare against, or nothing comparable reported: why.
    Unverified(String),
}

/// Bounds for an app whose parallel answers are not bit-identical: compares the result line
/// of a run with the sequential baseline's.
type Bounds = fn(seq: &Value, run: &Value) -> Verdict;

/// The apps compared within bounds beyond one process.
const BOUNDS: [(&str, Bounds); 1] = [("barnes-hut", barnes_hut)];

/// Judges `run` (a successful run) against `seq`, the sequential baseline of its app in the
/// same sweep. An app the harness does not know is held to equal checksums.
pub fn verdict(seq: &RunRecord, run: &RunRecord) -> Verdict {
    match crate::apps::find(&run.app) {
        Ok(spec) => verdict_for(spec, seq, run),
        Err(_) => same_checksum(seq, run),
    }
}

/// [`verdict`] for a run of `spec`.
pub fn verdict_for(spec: &AppSpec, seq: &RunRecord, run: &RunRecord) -> Verdict {
    if run.nodes <= 1 || spec.exact_across_processes {
        return same_checksum(seq, run);
    }
    let Some(bounds) = BOUNDS
        .iter()
        .find(|(name, _)| *name == spec.name)
        .map(|(_, b)| b)
    else {
        return Verdict::Unverified(format!(
            "{} is not bit-identical beyond one process and has no bounds to compare within",
            spec.name
        ));
    };
    match (&seq.result, &run.result) {
        (Some(s), Some(r)) => bounds(s, r),
        _ => Verdict::Unverified("no result line to compare".into()),
    }
}

fn same_checksum(seq: &RunRecord, run: &RunRecord) -> Verdict {
    match (&seq.checksum, &run.checksum) {
        (None, _) => Verdict::Unverified("the sequential baseline reports no checksum".into()),
        (Some(s), Some(r)) if s == r => Verdict::Agrees,
        (Some(s), Some(r)) => Verdict::Differs(format!("checksum {r}, sequential {s}")),
        (Some(s), None) => Verdict::Differs(format!("no checksum, sequential {s}")),
    }
}

/// True where `diff` is not within `bound`: also where either is not finite (energies near
/// the largest double make the bound infinite, and nothing compares above infinity), so that
/// figures that cannot be checked are not taken as agreeing.
fn exceeds(diff: f64, bound: f64) -> bool {
    !(diff.is_finite() && bound.is_finite() && diff <= bound)
}

fn number(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64().filter(|x| x.is_finite())
}

fn vector(v: &Value, key: &str) -> Option<[f64; 3]> {
    let a = v.get(key)?.as_array()?;
    match a.as_slice() {
        [x, y, z] => Some([x.as_f64()?, y.as_f64()?, z.as_f64()?]),
        _ => None,
    }
}

/// Relative rounding of sums over up to 10^7 terms taken in another order (n x 2^-53).
const REORDERED_SUM: f64 = 1e-9;

/// Barnes-Hut beyond one process, against the sequential run of the same bodies.
///
/// The two runs integrate the same initial bodies with the same leapfrog step, softening and
/// opening angle; they differ only in which cells their trees open, i.e. in the force
/// approximation error, which has the same size in both but not the same value. What that
/// allows, quantity by quantity:
///
/// - **Bodies and total mass**: none are created or lost, so the count is equal and the mass
///   equal up to the rounding of a sum taken in another order (1e-9 relative).
/// - **Energy**: the exact dynamics conserve it; a run's energy error comes from the time step
///   and the force approximation, and the sequential run's own change `|E1 - E0|` measures its
///   size for this problem. The parallel run's final energy must lie within 4 times that of
///   the sequential one's (the leapfrog error oscillates, so one sample can be small; measured
///   ratios were 0.01 to 1.9), and at least within 1e-5 of |E0| (measured differences up to
///   8e-6 of |E0| on 128 to 10,000 bodies, P = 2 and 4, to t = 4). Exact pair sums
///   (`direct`) of the same initial bodies agree to rounding. Tree potentials (`tree`, the
///   default above 10,000 bodies) of two trees differ by the monopole approximation, whose
///   relative error grows as the square of the opening angle theta: measured up to 1.5e-4 of
///   |E0| at theta 0.5 (30,000 bodies) and 1e-3 at theta 1.0 (3000 bodies), i.e. at most
///   1e-3 theta^2. Both the initial and the final energies may then differ by 4e-3 theta^2
///   |E0| more.
/// - **Positions**: the centre of mass and the mass-weighted rms displacement (how far the
///   bodies moved) each differ between the runs by at most the mass-weighted rms distance
///   between their final positions (Cauchy-Schwarz, the triangle inequality). The bodies
///   drift apart far more slowly than they move: measured, that distance was below 2.2e-4 of
///   the displacement on 3000 bodies up to t = 4 (40 to 160 steps). A bound of 5% of the
///   sequential displacement leaves two orders of magnitude for longer runs, and catches
///   bodies that were not advanced, advanced twice, or swapped between processes.
///
/// A baseline without these fields (a binary older than them) leaves the run unverified.
pub fn barnes_hut(seq: &Value, run: &Value) -> Verdict {
    let mut problems = Vec::new();
    let mut missing = Vec::new();

    match (number(seq, "bodies"), number(run, "bodies")) {
        (Some(s), Some(r)) if s != r => problems.push(format!("{r} bodies, sequential {s}")),
        (Some(_), None) => problems.push("reports no body count".into()),
        (None, _) => missing.push("bodies"),
        _ => {}
    }
    match (number(seq, "total_mass"), number(run, "total_mass")) {
        (Some(s), Some(r)) if exceeds((r - s).abs(), REORDERED_SUM * s.abs()) => {
            problems.push(format!("total mass {r}, sequential {s}"))
        }
        (Some(_), None) => problems.push("reports no total mass".into()),
        (None, _) => missing.push("total_mass"),
        _ => {}
    }

    let energies = (
        number(seq, "energy_start"),
        number(seq, "energy_end"),
        number(run, "energy_start"),
        number(run, "energy_end"),
    );
    match energies {
        (Some(s0), Some(s1), Some(r0), Some(r1)) => {
            let scale = s0.abs();
            let exact = seq.get("energy_method").and_then(Value::as_str) == Some("direct")
                && run.get("energy_method").and_then(Value::as_str) == Some("direct");
            let approximation = if exact {
                0.0
            } else {
                // The opening angle the runs used; the widest the CLI allows where unknown.
                let theta = seq
                    .get("parameters")
                    .and_then(|p| number(p, "theta"))
                    .unwrap_or(1.0);
                4e-3 * theta * theta * scale
            };
            let start_bound = approximation + REORDERED_SUM * scale;
            let start_diff = (r0 - s0).abs();
            if exceeds(start_diff, start_bound) {
                problems.push(format!(
                    "initial energy {r0}, sequential {s0} (differ by {start_diff:.3e}, \
                     bound {start_bound:.3e})"
                ));
            }
            let change = (s1 - s0).abs();
            let end_bound = (4.0 * change).max(1e-5 * scale) + approximation;
            let end_diff = (r1 - s1).abs();
            if exceeds(end_diff, end_bound) {
                problems.push(format!(
                    "final energy {r1}, sequential {s1} (differ by {end_diff:.3e}, bound \
                     {end_bound:.3e} from the sequential change {change:.3e})"
                ));
            }
        }
        (Some(_), Some(_), _, _) => problems.push("reports no energies".into()),
        _ => missing.push("energy_start/energy_end"),
    }

    match (
        number(seq, "displacement_rms"),
        vector(seq, "center_of_mass"),
        number(run, "displacement_rms"),
        vector(run, "center_of_mass"),
    ) {
        (Some(sd), Some(sc), Some(rd), Some(rc)) => {
            let bound = 0.05 * sd;
            let com = ((rc[0] - sc[0]).powi(2) + (rc[1] - sc[1]).powi(2) + (rc[2] - sc[2]).powi(2))
                .sqrt();
            if exceeds(com, bound) {
                problems.push(format!(
                    "centre of mass {com:.3e} from the sequential one (bound {bound:.3e}, 5% of \
                     the displacement {sd:.3e})"
                ));
            }
            if exceeds((rd - sd).abs(), bound) {
                problems.push(format!(
                    "bodies moved {rd:.4e} (rms), sequential {sd:.4e} (bound {bound:.3e})"
                ));
            }
        }
        (Some(_), Some(_), _, _) => {
            problems.push("reports no centre of mass or displacement".into())
        }
        _ => missing.push("center_of_mass/displacement_rms"),
    }

    if !problems.is_empty() {
        Verdict::Differs(problems.join("; "))
    } else if !missing.is_empty() {
        Verdict::Unverified(format!(
            "the sequential baseline reports no {} to compare within bounds",
            missing.join(", ")
        ))
    } else {
        Verdict::Agrees
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Version;
    use serde_json::json;

    /// Figures of a 3000-body run to t = 1 (sequential, then two processes).
    fn lines() -> (Value, Value) {
        let seq = json!({
            "bodies": 3000, "total_mass": 1.0000000000000007,
            "energy_method": "direct",
            "energy_start": -0.2591663039266581, "energy_end": -0.2591523729557812,
            "center_of_mass": [1.0e-4, -2.0e-4, 3.0e-5], "displacement_rms": 0.6636077512345154,
        });
        let mut par = seq.clone();
        par["total_mass"] = json!(0.9999999999999998);
        par["energy_start"] = json!(-0.25916630392665907);
        par["energy_end"] = json!(-0.25915192916167973);
        par["center_of_mass"] = json!([1.1e-4, -1.9e-4, 2.0e-5]);
        par["displacement_rms"] = json!(0.6636084);
        (seq, par)
    }

    #[test]
    fn barnes_hut_within_bounds_agrees() {
        let (seq, par) = lines();
        assert_eq!(barnes_hut(&seq, &par), Verdict::Agrees);
    }

    /// Energies so large that the bounds come out infinite cannot be checked, so they do not
    /// agree: `inf > inf` is false, and the final energy used to pass whatever it was.
    #[test]
    fn energies_whose_bounds_overflow_do_not_agree() {
        let (mut seq, mut par) = lines();
        seq["energy_start"] = json!(1e308);
        seq["energy_end"] = json!(-1e308);
        par["energy_start"] = json!(1e308);
        par["energy_end"] = json!(5.0);
        match barnes_hut(&seq, &par) {
            Verdict::Differs(why) => assert!(why.contains("final energy 5"), "{why}"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn tree_energies_may_differ_by_the_approximation() {
        // 30,000 bodies to t = 1, theta 0.5, tree energies: sequential, then P = 4
        // (results/apps-20261123-0132-barnes-hut).
        let seq = json!({
            "parameters": {"theta": 0.5}, "energy_method": "tree",
            "energy_start": -0.2516998209154091, "energy_end": -0.25170522719874944,
        });
        let mut par = seq.clone();
        par["energy_start"] = json!(-0.25168688359542263);
        par["energy_end"] = json!(-0.2517419797408145);
        // Energies agree; the positions are not reported by this older binary.
        assert!(matches!(barnes_hut(&seq, &par), Verdict::Unverified(_)));
        // Exact sums must agree to rounding.
        let (mut seq, mut par) = (seq, par);
        seq["energy_method"] = json!("direct");
        par["energy_method"] = json!("direct");
        assert!(matches!(barnes_hut(&seq, &par), Verdict::Differs(_)));
    }

    #[test]
    fn barnes_hut_outside_bounds_differs() {
        let (seq, good) = lines();
        let wrong = |key: &str, v: Value, want: &str| {
            let mut par = good.clone();
            par[key] = v;
            match barnes_hut(&seq, &par) {
                Verdict::Differs(why) => assert!(why.contains(want), "{key}: {why}"),
                other => panic!("{key}: {other:?}"),
            }
        };
        wrong("bodies", json!(2999), "2999 bodies");
        wrong("total_mass", json!(0.9996666), "total mass");
        // A run whose bodies did not move keeps its initial energy: caught by the positions.
        wrong("displacement_rms", json!(0.0), "bodies moved");
        wrong("center_of_mass", json!([0.05, 0.0, 0.0]), "centre of mass");
        wrong("energy_end", json!(-0.2590), "final energy");
        wrong("energy_start", json!(-0.2591663), "initial energy");
        wrong("displacement_rms", json!(null), "no centre of mass");
    }

    #[test]
    fn exact_apps_compare_checksums_and_old_baselines_are_unverified() {
        let spec = crate::apps::find("sor").unwrap();
        let mut seq = RunRecord::ok("sor", Version::Sequential, 1, 1, 2.0);
        let mut run = RunRecord::ok("sor", Version::Parallel, 4, 1, 1.0);
        assert!(matches!(
            verdict_for(spec, &seq, &run),
            Verdict::Unverified(_)
        ));
        seq.checksum = Some("ab".into());
        run.checksum = Some("ab".into());
        assert_eq!(verdict_for(spec, &seq, &run), Verdict::Agrees);
        run.checksum = Some("cd".into());
        assert_eq!(
            verdict_for(spec, &seq, &run),
            Verdict::Differs("checksum cd, sequential ab".into())
        );
        let bh = crate::apps::find("barnes-hut").unwrap();
        seq.result = Some(json!({"checksum": 1.5}));
        run.result = Some(json!({"checksum": 1.6}));
        assert!(matches!(
            verdict_for(bh, &seq, &run),
            Verdict::Unverified(_)
        ));
        // One process: bit-identical, whatever the bounds.
        run.nodes = 1;
        assert!(matches!(verdict_for(bh, &seq, &run), Verdict::Differs(_)));
    }
}

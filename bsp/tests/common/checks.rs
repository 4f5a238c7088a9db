//! Every collective and group operation against a sequential computation. Inputs are
//! functions of the pid, so every process computes what the sequential program would and
//! compares. Run by threads and by real processes alike.

use bsp::{Bsp, Op};

/// Concatenates decimal numbers: associative, not commutative (`cat(12, 3) = 123`).
fn cat(a: u64, b: u64) -> u64 {
    let mut shift = 10;
    while shift <= b {
        shift *= 10;
    }
    a.wrapping_mul(shift).wrapping_add(b)
}

/// A value of pid `pid` for element `j`: 1..=9, so that `cat` of up to 8 stays exact.
fn digit(pid: usize, j: usize) -> u64 {
    ((pid + j) % 9 + 1) as u64
}

/// A float of pid `pid` for element `j`, integral so that sums are exact in any order.
fn float(pid: usize, j: usize) -> f64 {
    ((pid * 7 + j * 3) % 1000) as f64 - 250.0
}

fn fold_cat(pids: impl Iterator<Item = usize>, j: usize) -> u64 {
    pids.map(|i| digit(i, j)).reduce(cat).unwrap_or(0)
}

/// Checks every collective with `n` values per process (vectors of `n` where a collective
/// takes vectors). Panics on a wrong result.
pub fn collectives(bsp: &mut Bsp, n: usize) -> bsp::Result<()> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    let floats: Vec<f64> = (0..n).map(|j| float(me, j)).collect();
    let digits: Vec<u64> = (0..n).map(|j| digit(me, j)).collect();
    let seq_sum = |j: usize, upto: usize| (0..upto).map(|i| float(i, j)).sum::<f64>();

    // scatter and scatter_slice, from two roots.
    for root in [0, p - 1] {
        let values = (me == root).then(|| {
            (0..p)
                .map(|d| vec![format!("{root}->{d}"); n.min(50)])
                .collect()
        });
        let got: Vec<String> = bsp.scatter(root, values)?;
        assert_eq!(got, vec![format!("{root}->{me}"); n.min(50)]);
        let all: Vec<u64> = (0..n * p).map(|i| i as u64 * 3 + root as u64).collect();
        let part = bsp.scatter_slice(root, (me == root).then_some(&all[..]))?;
        assert_eq!(
            part,
            &all[me * n..(me + 1) * n],
            "scatter_slice from {root}"
        );
    }

    // all_gather and all_gather_slice.
    let words = bsp.all_gather(&(me, format!("w{me}"), vec![me as u8; me % 3]))?;
    let want: Vec<_> = (0..p)
        .map(|i| (i, format!("w{i}"), vec![i as u8; i % 3]))
        .collect();
    assert_eq!(words, want);
    let all = bsp.all_gather_slice(&floats)?;
    let want: Vec<f64> = (0..p)
        .flat_map(|i| (0..n).map(move |j| float(i, j)))
        .collect();
    assert_eq!(all, want);

    // scan and exscan, of numbers, slices and serde values, with a non-commutative operation.
    let pre = bsp.scan(digit(me, 0), Op::Custom(cat))?;
    assert_eq!(pre, fold_cat(0..=me, 0));
    let ex = bsp.exscan(digit(me, 0), Op::Custom(cat))?;
    assert_eq!(ex, (me > 0).then(|| fold_cat(0..me, 0)));
    let mut v = digits.clone();
    bsp.scan_slice(&mut v, Op::Custom(cat))?;
    assert!(
        (0..n).all(|j| v[j] == fold_cat(0..=me, j)),
        "scan_slice at pid {me}"
    );
    let mut v = digits.clone();
    let changed = bsp.exscan_slice(&mut v, Op::Custom(cat))?;
    assert_eq!(changed, me > 0);
    if me > 0 {
        assert!(
            (0..n).all(|j| v[j] == fold_cat(0..me, j)),
            "exscan_slice at pid {me}"
        );
    } else {
        assert_eq!(v, digits);
    }
    let mut v = floats.clone();
    bsp.scan_slice(&mut v, Op::Sum)?;
    assert!(
        (0..n).all(|j| v[j] == seq_sum(j, me + 1)),
        "float scan at pid {me}"
    );
    let mut v = floats.clone();
    let changed = bsp.exscan_slice(&mut v, Op::Sum)?;
    assert_eq!(changed, me > 0);
    if me > 0 {
        assert!(
            (0..n).all(|j| v[j] == seq_sum(j, me)),
            "float exscan at pid {me}"
        );
    } else {
        assert_eq!(v, floats);
    }
    let s = bsp.scan_with(vec![me], |mut a, b| {
        a.extend(b);
        a
    })?;
    assert_eq!(s, (0..=me).collect::<Vec<_>>());
    let s = bsp.exscan_with(me.to_string(), |a, b| format!("{a},{b}"))?;
    let want = (0..me).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    assert_eq!(s, (me > 0).then_some(want));

    // reduce to every root (at most 3 of them for large inputs).
    let roots: Vec<usize> = if n > 1000 {
        vec![0, p / 2, p - 1]
    } else {
        (0..p).collect()
    };
    for root in roots {
        let r = bsp.reduce(root, digit(me, 0), Op::Custom(cat))?;
        assert_eq!(
            r,
            (me == root).then(|| fold_cat(0..p, 0)),
            "reduce to {root}"
        );
        let r = bsp.reduce_slice(root, &floats, Op::Sum)?;
        if me == root {
            let r = r.expect("the root has the result");
            assert!(
                (0..n).all(|j| r[j] == seq_sum(j, p)),
                "reduce_slice to {root}"
            );
        } else {
            assert_eq!(r, None);
        }
        let r = bsp.reduce_with(root, vec![me as u32], |mut a, b| {
            a.extend(b);
            a
        })?;
        assert_eq!(r, (me == root).then(|| (0..p as u32).collect()));
    }
    let m = bsp.reduce(p - 1, me as i64 - 3, Op::Min)?;
    assert_eq!(m, (me == p - 1).then_some(-3));

    // reduce_scatter: part d has (d % 3) * n / 2 + 1 values (some parts larger than others).
    let counts: Vec<usize> = (0..p).map(|d| (d % 3) * n / 2 + 1).collect();
    let total: usize = counts.iter().sum();
    let start: usize = counts[..me].iter().sum();
    let values: Vec<u64> = (0..total).map(|j| digit(me, j)).collect();
    let got = bsp.reduce_scatter(&values, &counts, Op::Custom(cat))?;
    let want: Vec<u64> = (start..start + counts[me])
        .map(|j| fold_cat(0..p, j))
        .collect();
    assert_eq!(got, want, "reduce_scatter at pid {me}");
    let fvalues: Vec<f64> = (0..total).map(|j| float(me, j)).collect();
    let got = bsp.reduce_scatter(&fvalues, &counts, Op::Max)?;
    let want: Vec<f64> = (start..start + counts[me])
        .map(|j| (0..p).map(|i| float(i, j)).fold(f64::MIN, f64::max))
        .collect();
    assert_eq!(got, want);
    let strings: Vec<String> = (0..total).map(|j| format!("{me}:{j}")).collect();
    let got = bsp.reduce_scatter_with(strings, &counts, |a, b| format!("{a} {b}"))?;
    let want: Vec<String> = (start..start + counts[me])
        .map(|j| {
            (0..p)
                .map(|i| format!("{i}:{j}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(got, want);

    // all_to_all with vectors of different lengths per destination, and of serde values.
    let len = |s: usize, d: usize| (s + 2 * d) % 3 * n / 2 + (s + d) % 2;
    let value = |s: usize, d: usize, j: usize| (s * 1_000_003 + d * 1009 + j) as u32;
    let send: Vec<Vec<u32>> = (0..p)
        .map(|d| (0..len(me, d)).map(|j| value(me, d, j)).collect())
        .collect();
    let got = bsp.all_to_all(&send)?;
    for (s, v) in got.iter().enumerate() {
        let want: Vec<u32> = (0..len(s, me)).map(|j| value(s, me, j)).collect();
        assert_eq!(v, &want, "all_to_all from {s} at {me}");
    }
    // The same into vectors kept from an earlier call: longer than p, each holding stale
    // values that must not survive.
    let mut kept: Vec<Vec<u32>> = (0..p + 2).map(|i| vec![7; i * 3 + 1]).collect();
    for _ in 0..2 {
        bsp.all_to_all_into(&send, &mut kept)?;
        assert_eq!(kept, got, "all_to_all_into at {me}");
    }
    let got = bsp.all_to_all_with((0..p).map(|d| format!("{me}->{d}")).collect())?;
    assert_eq!(
        got,
        (0..p).map(|s| format!("{s}->{me}")).collect::<Vec<_>>()
    );

    // The existing ones next to them, for the bit-identical result on every process.
    let mut v = digits.clone();
    bsp.all_reduce_slice(&mut v, Op::Custom(cat))?;
    assert!(
        (0..n).all(|j| v[j] == fold_cat(0..p, j)),
        "all_reduce_slice at pid {me}"
    );
    let mut v = floats.clone();
    bsp.all_reduce_slice(&mut v, Op::Sum)?;
    assert!(
        (0..n).all(|j| v[j] == seq_sum(j, p)),
        "float all_reduce_slice at pid {me}"
    );
    let sum = bsp.all_reduce(0.1 * (me as f64 + 1.0), Op::Sum)?;
    let sums = bsp.all_gather(&sum.to_bits())?;
    assert!(
        sums.iter().all(|b| *b == sum.to_bits()),
        "not bit-identical: {sums:?}"
    );
    Ok(())
}

/// Checks groups: splits into 2 and 3 colors, a nested split, group supersteps between
/// supersteps of the whole machine, group collectives. Panics on a wrong result.
pub fn groups(bsp: &mut Bsp) -> bsp::Result<()> {
    let (me, p) = (bsp.pid(), bsp.nprocs());
    for colors in [2, 3] {
        // Ranked in reverse by key.
        let mut g = bsp.split(me % colors, p - me)?;
        let members: Vec<usize> = (0..p).rev().filter(|i| i % colors == me % colors).collect();
        assert_eq!(g.world_pids(), &members[..]);
        assert_eq!(g.nprocs(), members.len());
        assert_eq!(members[g.pid()], me);
        let gp = g.nprocs();

        // A whole-machine packet sent before the group's superstep is read after the
        // machine's sync, not the group's.
        bsp.send((me + 1) % p, &(me as u64))?;
        let to = members[(g.pid() + 1) % gp];
        g.send((g.pid() + 1) % gp, &format!("g{me}"))?;
        g.sync()?;
        let from = members[(g.pid() + gp - 1) % gp];
        assert_eq!(
            g.recv::<String>()?,
            Some(((g.pid() + gp - 1) % gp, format!("g{from}")))
        );
        assert_eq!(g.recv::<String>()?, None);
        assert_eq!(
            bsp.recv::<u64>()?,
            None,
            "the group's sync delivered a machine packet"
        );
        bsp.sync()?;
        assert_eq!(
            bsp.recv::<u64>()?,
            Some(((me + p - 1) % p, ((me + p - 1) % p) as u64))
        );
        let _ = to;

        // Group collectives against the members.
        let sum = g.all_reduce(me as u64, Op::Sum)?;
        assert_eq!(sum, members.iter().map(|&i| i as u64).sum::<u64>());
        let all = g.all_gather(&me)?;
        assert_eq!(all, members);
        let pre = g.scan(1u32, Op::Sum)?;
        assert_eq!(pre as usize, g.pid() + 1);
        let b: usize = g.broadcast(0, (g.pid() == 0).then_some(me))?;
        assert_eq!(b, members[0]);
        // Supersteps of the group and the machine alternate.
        for round in 0..3u32 {
            g.send(0, &round)?;
            g.sync()?;
            bsp.sync()?;
            if g.pid() == 0 {
                let mut n = 0;
                while let Some((_, r)) = g.recv::<u32>()? {
                    assert_eq!(r, round);
                    n += 1;
                }
                assert_eq!(n, gp);
            }
        }
        assert_eq!(g.superstep(), 4);
    }

    // Nested: halves, then halves of the halves.
    let mut half = bsp.split(usize::from(me >= p / 2), me)?;
    let mut quarter = half.split(half.pid() % 2, half.pid())?;
    let hm = half.world_pids().to_vec();
    let qm: Vec<usize> = hm
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == half.pid() % 2)
        .map(|(_, &w)| w)
        .collect();
    assert_eq!(quarter.world_pids(), &qm[..]);
    let q = quarter.all_reduce_with(vec![me], |mut a, b| {
        a.extend(b);
        a
    })?;
    assert_eq!(q, qm);
    let h = half.all_gather(&me)?;
    assert_eq!(h, hm);
    quarter.sync()?;
    half.sync()?;
    bsp.sync()?;
    Ok(())
}

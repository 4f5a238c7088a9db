//! A node that sends back a result no correct node sends, one that does not decode, one its
//! type's `Deserialize` refuses as inconsistent, or one that its task's `check_output` finds
//! does not answer the task, is named in the error the run fails with; the job's task (or its
//! parent, which would trip over the result) is not blamed.
//!
//! The thief here is an ordinary satin node; what makes it a rogue is the output type, whose
//! `Serialize` forges what it writes. Only an output that travels to another node is
//! serialized, so the master computes its own outputs as usual.

mod common;

use common::{offer_until, on_nodes, Layout, LIMIT};
use ipl::Driver;
use satin::{Context, Error, Inlining, Runtime, Task};
use serde::{Deserialize, Serialize, Serializer};

/// What the output's `Serialize` writes instead of the output.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
enum Forgery {
    /// A variant index no `Forgery` has: the bytes do not decode.
    Garbage,
    /// An odd value, which [`Even`]'s check refuses: the bytes decode to an inconsistent value.
    Odd,
    /// Another even value than the task asked for: consistent in itself, but not the task's
    /// answer, which [`Bait::check_output`] sees.
    Other,
}

/// An even number, checked when decoded.
#[derive(Debug, Deserialize)]
#[serde(try_from = "EvenWire")]
struct Even {
    mode: Forgery,
    value: u64,
}

#[derive(Deserialize)]
struct EvenWire {
    mode: Forgery,
    value: u64,
}

impl TryFrom<EvenWire> for Even {
    type Error = String;

    fn try_from(w: EvenWire) -> Result<Even, String> {
        if w.value % 2 != 0 {
            return Err(format!("{} is odd", w.value));
        }
        Ok(Even {
            mode: w.mode,
            value: w.value,
        })
    }
}

impl Serialize for Even {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.mode {
            Forgery::Garbage => (77u32, self.value).serialize(s),
            Forgery::Odd => (self.mode, self.value + 1).serialize(s),
            Forgery::Other => (self.mode, self.value + 2).serialize(s),
        }
    }
}

/// Computed by the thief, whose result comes back forged; its output is `want`.
#[derive(Serialize, Deserialize)]
struct Bait {
    mode: Forgery,
    want: u64,
}

impl Task for Bait {
    type Output = Even;
    fn run(self, _cx: &mut Context) -> Even {
        Even {
            mode: self.mode,
            value: self.want,
        }
    }

    const CHECKS_OUTPUT: bool = true;

    fn check_output(&self, output: &Even) -> Result<(), String> {
        if output.value != self.want {
            return Err(format!("{} is not {}", output.value, self.want));
        }
        Ok(())
    }
}
satin::register!(Bait);

/// The root: spawns the bait and keeps it on offer until the run fails or the bait's output
/// comes, which must be what the bait was asked for. The master has one worker, busy here,
/// so only the thief can take the bait.
#[derive(Serialize, Deserialize)]
struct Lure(Forgery);

impl Task for Lure {
    type Output = u64;
    fn run(self, cx: &mut Context) -> u64 {
        let want = 2;
        let bait = cx.spawn(Bait { mode: self.0, want });
        if !offer_until(cx, LIMIT, "the run did not fail in time", || {
            bait.is_ready()
        }) {
            cx.sync();
            return 0;
        }
        let got = bait.take().value;
        assert_eq!(got, want, "the bait's output");
        got
    }
}
satin::register!(Lure);

/// Runs a [`Lure`] on a master and one thief; the master's error and the thief's name.
fn forged(mode: Forgery) -> (Error, String) {
    let out = on_nodes(Layout::new(Driver::Inproc, 2, 1), move |ibis| {
        let me = ibis.id().to_string();
        let rt = Runtime::in_pool(ibis).threads(1).inlining(Inlining::OFF);
        (me, rt.run(Lure(mode)))
    });
    let thief = out[1].0.clone();
    assert!(out[1].1.is_err(), "the thief's run: {:?}", out[1].1);
    match &out[0].1 {
        Err(e) => (e.clone(), thief),
        Ok(v) => panic!("the master's run succeeded with {v:?}"),
    }
}

fn assert_blames(e: &Error, thief: &str) {
    match e {
        Error::BadResult { node, task, .. } => {
            assert_eq!(node, thief, "{e}");
            assert!(task.ends_with("Bait"), "{e}");
        }
        other => panic!("expected a bad result from {thief}, got: {other}"),
    }
    assert!(e.to_string().contains(thief), "{e}");
}

#[test]
fn a_result_that_does_not_decode_names_the_node_that_sent_it() {
    let (e, thief) = forged(Forgery::Garbage);
    assert_blames(&e, &thief);
}

#[test]
fn a_result_its_type_refuses_names_the_node_that_sent_it() {
    let (e, thief) = forged(Forgery::Odd);
    assert_blames(&e, &thief);
    // The type's own words, not only that it refused.
    assert!(e.to_string().contains("3 is odd"), "{e}");
}

#[test]
fn a_result_its_task_refuses_names_the_node_that_sent_it() {
    let (e, thief) = forged(Forgery::Other);
    assert_blames(&e, &thief);
    assert!(e.to_string().contains("4 is not 2"), "{e}");
}

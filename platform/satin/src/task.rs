//! The unit of work: a task that may spawn children and sync on them.

use serde::{de::DeserializeOwned, Serialize};

use crate::Context;

/// A node of a divide-and-conquer computation.
///
/// A task is plain data (it must be serializable, because a stolen task may travel to another
/// process) plus a [`run`](Task::run) method that computes its output, spawning children through
/// the [`Context`] and syncing on them. Register every task type with [`register!`](crate::register)
/// so that other processes can decode it.
pub trait Task: Serialize + DeserializeOwned + Send + 'static {
    /// What the task computes; travels back to the parent, possibly from another process.
    type Output: Serialize + DeserializeOwned + Send + 'static;

    /// Computes the output. Children spawned with [`Context::spawn`] and not yet synced when this
    /// returns are synced implicitly before the output is delivered.
    ///
    /// The context's lifetime is this run: handles to the children cannot outlive it. An
    /// implementation may leave it elided, `cx: &mut satin::Context`.
    fn run(self, cx: &mut Context<'_>) -> Self::Output;

    /// Whether outputs of this task computed in another process go through
    /// [`check_output`](Task::check_output). Off unless a type sets it: the check decodes the
    /// job's task bytes again, once per output received.
    const CHECKS_OUTPUT: bool = false;

    /// Checks an output of this task that was computed in another process (received from
    /// its thief, or kept from a node that died) before the task's parent takes it, for what
    /// the output's `Deserialize` cannot see on its own: that it answers this task (a tile of
    /// an image covers the task's tile, say). Called only when
    /// [`CHECKS_OUTPUT`](Task::CHECKS_OUTPUT) is true, never for outputs computed in this
    /// process.
    ///
    /// # Errors
    /// What is wrong with the output, in words. A refused output is treated as one that does
    /// not decode: one from a thief fails the run with
    /// [`Error::BadResult`](crate::Error::BadResult) naming the node that sent it.
    fn check_output(&self, output: &Self::Output) -> Result<(), String> {
        let _ = output;
        Ok(())
    }
}

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
}

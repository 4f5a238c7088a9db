//! The ways a run, or a hook of the distributed layer, can fail.

/// Why a run, or a call into the [`remote`](crate::remote) hooks, failed.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A runtime setting (from the builder or the environment) cannot be used.
    #[error("invalid runtime setting: {0}")]
    Config(String),

    /// The runtime was configured with `threads(0)`.
    #[error("a runtime needs at least one worker thread, but threads(0) was given")]
    NoThreads,

    /// A task panicked. The run was cancelled: every other task of it was aborted.
    #[error("task `{task}` panicked: {message}")]
    TaskPanicked {
        /// Rust type name of the task that panicked.
        task: &'static str,
        /// The panic message, or a note that it was not text.
        message: String,
    },

    /// The operating system refused to start a worker thread.
    #[error("could not start worker thread {index}: {source}")]
    ThreadStart {
        /// Index of the worker that could not be started.
        index: usize,
        /// What the operating system said.
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },

    /// [`Runtime::run`](crate::Runtime::run) was called from one of the runtime's own workers,
    /// which would leave that worker blocked on itself.
    #[error("Runtime::run was called from a worker of the same runtime; spawn the task with Context::spawn instead")]
    NestedRun,

    /// The runtime was shut down before the work could be done.
    #[error("the runtime has shut down")]
    ShutDown,

    /// The run was cancelled from outside (see [`remote::RemoteRoot::abort`](crate::remote::RemoteRoot::abort))
    /// before its root task produced a result.
    #[error("the run was aborted before its root task finished")]
    Aborted,

    /// A job had to be encoded, but its task type was never passed to [`register!`](crate::register).
    #[error("task type `{0}` is not registered; add `satin::register!(...)` for it")]
    Unregistered(&'static str),

    /// Serialized work named a task type that no [`register!`](crate::register) in this program knows.
    #[error("no task type is registered under the name `{0}`")]
    UnknownTaskName(String),

    /// Two registrations disagree: one name for two types, or one type under two names.
    #[error("conflicting task registrations: {0}")]
    Registration(String),

    /// A task or its output could not be serialized.
    #[error("could not encode the {what} of task `{task}`: {reason}")]
    Encode {
        /// Type name of the task.
        task: &'static str,
        /// `"task"` or `"output"`.
        what: &'static str,
        /// What the encoder reported.
        reason: String,
    },

    /// Bytes meant to hold a task or its output did not decode.
    #[error("could not decode the {what} of task `{task}`: {reason}")]
    Decode {
        /// Type name (or registered name) of the task.
        task: &'static str,
        /// `"task"` or `"output"`.
        what: &'static str,
        /// What the decoder reported.
        reason: String,
    },

    /// Another node sent back the output of a job that does not decode, that the output
    /// type's `Deserialize` refuses as inconsistent, or that the task type's
    /// [`check_output`](crate::Task::check_output) refuses: no correct node sends that, so the
    /// node is named, not the task. The run fails.
    #[error("{node} sent a result of task `{task}` that is refused: {reason}")]
    BadResult {
        /// The node that sent the result, as the port library names it.
        node: String,
        /// Type name of the task.
        task: &'static str,
        /// What the decoder reported.
        reason: String,
    },

    /// Work shipped to another process failed there, or its result never came back.
    #[error("remote execution failed: {0}")]
    Remote(String),

    /// A member of the pool that a run cannot do without (the master) died or left while the
    /// run was in progress; the run ends on every node with this error.
    #[error("{node} failed during the run: {reason}")]
    NodeFailed {
        /// The node that failed, as the port library names it (`node3@clusterA (address)`).
        node: String,
        /// What was observed: that it died, or left.
        reason: String,
    },

    /// The port library failed on this node (creating ports, connecting, sending).
    #[error("on {node}: {what}: {source}")]
    Pool {
        /// This node.
        node: String,
        /// What the runtime was doing.
        what: String,
        /// The port library's error.
        #[source]
        source: std::sync::Arc<ipl::Error>,
    },

    /// This node has left its pool (see [`PoolRuntime::leave`](crate::PoolRuntime::leave)):
    /// it takes part in no further run.
    #[error("{node} has left the pool and takes part in no further run")]
    Left {
        /// This node.
        node: String,
    },

    /// The root task failed on the master node; the other nodes of a distributed run return
    /// this, with the master's error as text.
    #[error("the run failed on the master {master}: {reason}")]
    RunFailed {
        /// The master node.
        master: String,
        /// The master's error.
        reason: String,
    },
}

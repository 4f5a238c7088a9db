//! The public entry point: configure a runtime, run a root task on it.

use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::codec;
use crate::inlining::Inlining;
use crate::remote::Remote;
use crate::root::{self, Latch};
use crate::scheduler::Scheduler;
use crate::stats::Stats;
use crate::worker::Worker;
use crate::{Error, Task};

/// Default stack size of worker threads: tasks recurse, and stolen jobs nest on top of waiting
/// frames, so workers get more than the usual 2 MiB.
const DEFAULT_STACK: usize = 16 << 20;

/// The most worker threads one runtime starts: far above any machine's cores, and a bound on
/// what an absurd `threads(n)` allocates before its threads would fail to start.
pub const MAX_THREADS: usize = 4096;

/// The smallest stack a worker thread gets: what the runtime's own frames (the worker's loop,
/// a steal, a job run on top of a waiting frame) need in an unoptimized build, with room for
/// a few levels of tasks. Below it a worker overflows its stack before the first task is
/// done, and a stack overflow ends the whole process.
pub const MIN_STACK_SIZE: usize = 256 << 10;

/// The largest stack a worker thread gets (1 GiB): beyond any task tree's need, and where the
/// operating system's refusal ("Invalid argument") would not name the setting.
pub const MAX_STACK_SIZE: usize = 1 << 30;

/// A set of worker threads that run task trees.
///
/// Configure it with the builder methods, then call [`run`](Runtime::run) as often as needed;
/// the workers start at the first run and stop when the runtime is dropped.
///
/// ```
/// # #[derive(serde::Serialize, serde::Deserialize)]
/// # struct Sum(Vec<u64>);
/// # impl satin::Task for Sum {
/// #     type Output = u64;
/// #     fn run(self, _cx: &mut satin::Context) -> u64 { self.0.iter().sum() }
/// # }
/// let rt = satin::Runtime::local().threads(2);
/// assert_eq!(rt.run(Sum(vec![1, 2, 3]))?, 6);
/// assert_eq!(rt.stats().jobs_executed, 1);
/// # Ok::<(), satin::Error>(())
/// ```
pub struct Runtime {
    threads: usize,
    stack_size: usize,
    /// None: `SATIN_INLINING`, else the default.
    inlining: Option<Inlining>,
    started: Mutex<Option<Started>>,
}

struct Started {
    sched: Arc<Scheduler>,
    handles: Vec<JoinHandle<()>>,
}

impl Runtime {
    /// A runtime of threads in this process only, by default one per available core.
    pub fn local() -> Runtime {
        Runtime {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            stack_size: DEFAULT_STACK,
            inlining: None,
            started: Mutex::new(None),
        }
    }

    /// Sets the number of worker threads (at least 1; `0` makes every run fail with
    /// [`Error::NoThreads`], and more than [`MAX_THREADS`] with [`Error::Config`]).
    pub fn threads(mut self, n: usize) -> Runtime {
        self.threads = n;
        self
    }

    /// Sets when spawns run their child at once instead of queueing it (see [`Inlining`]).
    /// Without this call, `SATIN_INLINING` decides, and without that [`Inlining::DEFAULT`].
    pub fn inlining(mut self, inlining: Inlining) -> Runtime {
        self.inlining = Some(inlining);
        self
    }

    /// Sets the stack size of each worker thread, in bytes: from [`MIN_STACK_SIZE`] to
    /// [`MAX_STACK_SIZE`], or every run fails with [`Error::Config`].
    pub fn stack_size(mut self, bytes: usize) -> Runtime {
        self.stack_size = bytes;
        self
    }

    /// The configured number of worker threads.
    pub fn num_threads(&self) -> usize {
        self.threads
    }

    /// Starts the worker threads now rather than at the first run.
    pub fn start(&self) -> Result<(), Error> {
        self.scheduler().map(drop)
    }

    pub(crate) fn scheduler(&self) -> Result<Arc<Scheduler>, Error> {
        let mut started = self.started.lock();
        if let Some(s) = started.as_ref() {
            return Ok(Arc::clone(&s.sched));
        }
        if self.threads == 0 {
            return Err(Error::NoThreads);
        }
        if self.threads > MAX_THREADS {
            return Err(Error::Config(format!(
                "threads({}): at most {MAX_THREADS} worker threads",
                self.threads
            )));
        }
        if self.stack_size < MIN_STACK_SIZE {
            return Err(Error::Config(format!(
                "stack_size({}): a worker thread needs a stack of at least {MIN_STACK_SIZE} bytes",
                self.stack_size
            )));
        }
        if self.stack_size > MAX_STACK_SIZE {
            return Err(Error::Config(format!(
                "stack_size({}): a worker thread's stack is at most {MAX_STACK_SIZE} bytes",
                self.stack_size
            )));
        }
        // Conflicting registrations would break distributed runs; report them at once.
        codec::table()?;
        let inlining = match self.inlining {
            Some(i) => i,
            None => Inlining::from_env()
                .map_err(Error::Config)?
                .unwrap_or_default(),
        };
        let (sched, handles) = Scheduler::start(self.threads, self.stack_size, inlining)?;
        *started = Some(Started {
            sched: Arc::clone(&sched),
            handles,
        });
        Ok(sched)
    }

    /// Runs `task` as the root of a task tree and returns its output.
    ///
    /// The calling thread waits; the workers do the work. If any task of the tree panics, all
    /// others are cancelled and the run returns [`Error::TaskPanicked`] naming the task. With
    /// the environment variable `SATIN_STATS=1` the run's statistics are printed to stderr;
    /// `SATIN_STATS` set to anything but `0` or `1` fails the run with [`Error::Config`].
    pub fn run<T: Task>(&self, task: T) -> Result<T::Output, Error> {
        let sched = self.scheduler()?;
        if Worker::current().is_some_and(|w| Arc::ptr_eq(&w.sched, &sched)) {
            return Err(Error::NestedRun);
        }
        let report = stats_from_env()?;
        let before = sched.stats();
        let latch = Arc::new(Latch::new());
        let setter = Arc::clone(&latch);
        root::submit(&sched, task, move |result| setter.set(result));
        let result = latch.wait();
        if report {
            eprintln!("{}", sched.stats().since(&before));
        }
        result
    }

    /// Everything the runtime's workers have done since they started.
    pub fn stats(&self) -> Stats {
        self.started
            .lock()
            .as_ref()
            .map(|s| s.sched.stats())
            .unwrap_or_default()
    }

    /// The hooks for a distributed layer (see [`remote`](crate::remote)); starts the workers.
    pub fn remote(&self) -> Result<Remote, Error> {
        Ok(Remote {
            sched: self.scheduler()?,
        })
    }
}

impl Default for Runtime {
    fn default() -> Self {
        Runtime::local()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(s) = self.started.get_mut().take() {
            s.sched.stop(s.handles);
        }
    }
}

/// Whether `SATIN_STATS` asks a run to print its statistics: unset, empty or `0` no, `1` yes.
///
/// # Errors
/// [`Error::Config`] naming the variable and the value for any other value.
pub(crate) fn stats_from_env() -> Result<bool, Error> {
    ipl::config::switch_from_env("SATIN_STATS")
        .map(|on| on.unwrap_or(false))
        .map_err(|e| Error::Config(e.to_string()))
}

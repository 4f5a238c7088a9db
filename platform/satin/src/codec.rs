//! Task types by stable name, so that work serialized in one process can be decoded in another.
//!
//! [`register!`](crate::register) submits a [`Registration`] to a program-wide list (collected
//! by the `inventory` crate before `main` runs); the list is turned into lookup tables on first
//! use. Tasks and outputs travel as postcard bytes.

use std::any::TypeId;
use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};

use crate::root::{self, RootState};
use crate::scheduler::Scheduler;
use crate::{Error, Task};

/// Receives the serialized output of a root started from serialized input.
pub(crate) type OnOutput = Box<dyn FnOnce(Result<Vec<u8>, Error>) + Send>;
type SubmitFn = fn(&Arc<Scheduler>, &[u8], OnOutput) -> Result<Arc<RootState>, Error>;
type CheckFn = fn(&[u8], &[u8]) -> Result<(), Error>;

/// One registered task type. Built by [`register!`](crate::register); not meant to be used directly.
pub struct Registration {
    name: &'static str,
    type_id: fn() -> TypeId,
    type_name: fn() -> &'static str,
    submit: SubmitFn,
    check_output: CheckFn,
}

inventory::collect!(Registration);

impl Registration {
    /// Describes task type `T` under the stable `name`.
    pub const fn new<T: Task>(name: &'static str) -> Self {
        Registration {
            name,
            type_id: TypeId::of::<T>,
            type_name: std::any::type_name::<T>,
            submit: submit_encoded::<T>,
            check_output: check_encoded::<T>,
        }
    }

    /// The stable name the type is known by in every process.
    pub fn name(&self) -> &'static str {
        self.name
    }

    pub(crate) fn type_id(&self) -> TypeId {
        (self.type_id)()
    }

    pub(crate) fn submit(
        &self,
        sched: &Arc<Scheduler>,
        task: &[u8],
        on_output: OnOutput,
    ) -> Result<Arc<RootState>, Error> {
        (self.submit)(sched, task, on_output)
    }

    /// Whether `output` decodes as the output of the task encoded as `task`, and the task
    /// type's [`Task::check_output`] takes it; a refused output is reported as one that does
    /// not decode.
    pub(crate) fn check_output(&self, task: &[u8], output: &[u8]) -> Result<(), Error> {
        (self.check_output)(task, output)
    }
}

/// [`Registration::check_output`] for task type `T`. The output's and the task's
/// `Deserialize`, `check_output` and `Drop` are user code, so a panic is contained.
fn check_encoded<T: Task>(task: &[u8], output: &[u8]) -> Result<(), Error> {
    let name = std::any::type_name::<T>();
    contain(name, "deserializing or checking its output", || {
        let out: T::Output = decode(output, "output", name)?;
        check_output_of_encoded::<T>(task, &out)
    })
}

/// `task`'s [`Task::check_output`] of `output`, if its type checks outputs
/// ([`Task::CHECKS_OUTPUT`]); a refused output is reported as one that does not decode.
pub(crate) fn check_output<T: Task>(task: &T, output: &T::Output) -> Result<(), Error> {
    if !T::CHECKS_OUTPUT {
        return Ok(());
    }
    task.check_output(output).map_err(|reason| Error::Decode {
        task: std::any::type_name::<T>(),
        what: "output",
        reason,
    })
}

/// [`check_output`] for the task encoded as `task`, which is decoded only if its type checks
/// outputs.
pub(crate) fn check_output_of_encoded<T: Task>(
    task: &[u8],
    output: &T::Output,
) -> Result<(), Error> {
    if !T::CHECKS_OUTPUT {
        return Ok(());
    }
    // These bytes were encoded by a process that ran or gave the task away, so a failure
    // here is not the output's.
    let task: T = postcard::from_bytes(task).map_err(|e| Error::Decode {
        task: std::any::type_name::<T>(),
        what: "task",
        reason: format!(
            "decoding it again to check an output: {}",
            reason::<T>(task, e)
        ),
    })?;
    check_output(&task, output)
}

/// Decodes a task of type `T` and runs it as a root whose output, serialized, goes to
/// `on_output`. The task's `Deserialize` and the output's `Serialize` and `Drop` are user code;
/// a panic in any of them becomes [`Error::TaskPanicked`] instead of unwinding into the caller
/// (a thread of the distributed layer) or the worker.
fn submit_encoded<T: Task>(
    sched: &Arc<Scheduler>,
    bytes: &[u8],
    on_output: OnOutput,
) -> Result<Arc<RootState>, Error> {
    let name = std::any::type_name::<T>();
    let task: T = contain(name, "deserializing it", || decode(bytes, "task", name))?;
    Ok(root::submit(
        sched,
        task,
        move |result: Result<T::Output, Error>| {
            let encoded = result.and_then(|out| {
                contain(name, "serializing or dropping its output", move || {
                    encode(&out, "output", name)
                })
            });
            on_output(encoded)
        },
    ))
}

/// Runs `f`, which calls user code of task type `task`, turning a panic into an error.
pub(crate) fn contain<R>(
    task: &'static str,
    doing: &str,
    f: impl FnOnce() -> Result<R, Error>,
) -> Result<R, Error> {
    panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let message = format!("{doing}: {}", ipl::error::panic_text(payload));
        Err(Error::TaskPanicked { task, message })
    })
}

/// Serializes `value` in the format used for all shipped tasks and outputs.
pub(crate) fn encode<V: serde::Serialize>(
    value: &V,
    what: &'static str,
    task: &'static str,
) -> Result<Vec<u8>, Error> {
    postcard::to_allocvec(value).map_err(|e| Error::Encode {
        task,
        what,
        reason: e.to_string(),
    })
}

/// The inverse of [`encode`]. A value its type's `Deserialize` refuses with a text of its
/// own (`de::Error::custom`, as `#[serde(try_from = ...)]` does) is reported with that text.
pub(crate) fn decode<V: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: &'static str,
    task: &'static str,
) -> Result<V, Error> {
    postcard::from_bytes(bytes).map_err(|e| Error::Decode {
        task,
        what,
        reason: reason::<V>(bytes, e),
    })
}

/// Why `bytes` did not decode as a `V`, given postcard's error `e`. postcard keeps no text
/// of a type's own refusal, so the bytes are decoded again to recover it (see
/// [`refusal`](crate::refusal)): the type's `Deserialize` runs a second time, and only for
/// bytes it refused.
#[cold]
fn reason<V: serde::de::DeserializeOwned>(bytes: &[u8], e: postcard::Error) -> String {
    if e == postcard::Error::SerdeDeCustom {
        if let Some(text) = crate::refusal::custom_text::<V>(bytes) {
            return text;
        }
    }
    e.to_string()
}

pub(crate) struct Table {
    by_name: HashMap<&'static str, &'static Registration>,
    by_type: HashMap<TypeId, &'static Registration>,
}

impl Table {
    fn build() -> Result<Table, String> {
        let mut by_name: HashMap<&'static str, &'static Registration> = HashMap::new();
        let mut by_type: HashMap<TypeId, &'static Registration> = HashMap::new();
        for r in inventory::iter::<Registration> {
            let id = (r.type_id)();
            if let Some(other) = by_name.get(r.name) {
                if (other.type_id)() != id {
                    return Err(format!(
                        "the name `{}` is registered for both `{}` and `{}`",
                        r.name,
                        (other.type_name)(),
                        (r.type_name)()
                    ));
                }
            }
            if let Some(other) = by_type.get(&id) {
                if other.name != r.name {
                    return Err(format!(
                        "type `{}` is registered under two names, `{}` and `{}`",
                        (r.type_name)(),
                        other.name,
                        r.name
                    ));
                }
            }
            by_name.insert(r.name, r);
            by_type.insert(id, r);
        }
        Ok(Table { by_name, by_type })
    }

    pub(crate) fn by_name(&self, name: &str) -> Result<&'static Registration, Error> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| Error::UnknownTaskName(name.to_string()))
    }

    pub(crate) fn name_of(&self, id: TypeId) -> Option<&'static str> {
        self.by_type.get(&id).map(|r| r.name)
    }
}

/// The registration tables, built once per process.
pub(crate) fn table() -> Result<&'static Table, Error> {
    static TABLE: OnceLock<Result<Table, String>> = OnceLock::new();
    TABLE
        .get_or_init(Table::build)
        .as_ref()
        .map_err(|e| Error::Registration(e.clone()))
}

/// The stable name under which task type `T` was registered, if it was.
pub fn registered_name<T: Task>() -> Result<Option<&'static str>, Error> {
    Ok(table()?.name_of(TypeId::of::<T>()))
}

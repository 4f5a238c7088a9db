//! Warnings caused by peers, at most one a second: a flood of bad connections must not become
//! a flood of log lines.

use parking_lot::Mutex;
use std::time::{Duration, Instant};

/// Lets one warning through a second and counts the ones held back.
pub(crate) struct Throttle {
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    pub(crate) const fn new() -> Throttle {
        Throttle {
            state: Mutex::new((None, 0)),
        }
    }

    /// Logs `what` as a warning unless one was logged less than a second ago; the next one
    /// that is logged says how many were held back meanwhile.
    pub(crate) fn warn(&self, what: impl FnOnce() -> String) {
        let mut st = self.state.lock();
        let now = Instant::now();
        if st
            .0
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            st.1 += 1;
            return;
        }
        let held = std::mem::take(&mut st.1);
        st.0 = Some(now);
        drop(st);
        if held > 0 {
            tracing::warn!("{} ({held} more like it in the last second)", what());
        } else {
            tracing::warn!("{}", what());
        }
    }
}

//! Operation codes carried by round messages, so that processes calling different operations
//! at the same point get an error instead of garbage, and their descriptions in such errors.

use crate::number::code_name;

pub(crate) const SYNC: u8 = 1;
pub(crate) const ALL_REDUCE: u8 = 2;
pub(crate) const ALL_REDUCE_WITH: u8 = 3;
pub(crate) const BROADCAST: u8 = 4;
pub(crate) const GATHER: u8 = 5;
pub(crate) const TOTAL_EXCHANGE: u8 = 6;
pub(crate) const GET_REPLY: u8 = 7;
pub(crate) const SCATTER: u8 = 8;
pub(crate) const ALL_GATHER: u8 = 9;
pub(crate) const SCAN: u8 = 10;
pub(crate) const SCAN_WITH: u8 = 11;
pub(crate) const EXSCAN: u8 = 12;
pub(crate) const EXSCAN_WITH: u8 = 13;
pub(crate) const REDUCE: u8 = 14;
pub(crate) const REDUCE_WITH: u8 = 15;
pub(crate) const REDUCE_SCATTER: u8 = 16;
pub(crate) const ALL_TO_ALL: u8 = 17;
pub(crate) const ALL_TO_ALL_WITH: u8 = 18;
pub(crate) const SPLIT: u8 = 19;
/// Setting up the host board, at the whole machine's first operation that could use it (a
/// sync or a small all-reduce, all-gather, reduce-scatter or all-to-all).
pub(crate) const HOST_BOARD: u8 = 20;
/// `all_gather_slice`: apart from the serde `all_gather`, so that its signature can hold
/// the number type and the length, which a mismatch error then names.
pub(crate) const ALL_GATHER_SLICE: u8 = 21;

/// The operation's name, as the API spells it.
pub(crate) fn name(op: u8) -> &'static str {
    match op {
        SYNC => "sync",
        ALL_REDUCE => "all_reduce",
        ALL_REDUCE_WITH => "all_reduce_with",
        BROADCAST => "broadcast",
        GATHER => "gather",
        TOTAL_EXCHANGE => "total_exchange",
        GET_REPLY => "get (reply)",
        SCATTER => "scatter",
        ALL_GATHER => "all_gather",
        SCAN => "scan",
        SCAN_WITH => "scan_with",
        EXSCAN => "exscan",
        EXSCAN_WITH => "exscan_with",
        REDUCE => "reduce",
        REDUCE_WITH => "reduce_with",
        REDUCE_SCATTER => "reduce_scatter",
        ALL_TO_ALL => "all_to_all",
        ALL_TO_ALL_WITH => "all_to_all_with",
        SPLIT => "split",
        HOST_BOARD => "the host board's setup (at the first sync or small collective)",
        ALL_GATHER_SLICE => "all_gather_slice",
        _ => "an unknown operation",
    }
}

/// Whether no process can finish the operation before every process has started it
/// (each result depends on every process's contribution).
pub(crate) fn needs_everyone(op: u8) -> bool {
    matches!(
        op,
        SYNC | ALL_REDUCE
            | ALL_REDUCE_WITH
            | TOTAL_EXCHANGE
            | ALL_GATHER
            | ALL_GATHER_SLICE
            | REDUCE_SCATTER
            | ALL_TO_ALL
            | ALL_TO_ALL_WITH
            | SPLIT
            | HOST_BOARD
    )
}

/// The operation whose sequence number a message of `op` carries: get replies belong to
/// the sync that served them. A process that has ended a sync sends them at once, so they
/// may reach a process still waiting for that sync's last messages.
pub(crate) fn family(op: u8) -> u8 {
    if op == GET_REPLY {
        SYNC
    } else {
        op
    }
}

/// Describes a collective's arguments, as encoded in its signature, for mismatch errors.
pub(crate) fn describe(op: u8, sig: u64) -> String {
    let number = |sig: u64| code_name((sig & 0xff) as u8);
    let reduction = |sig: u64| match (sig >> 8) & 0xff {
        1 => "sum",
        2 => "product",
        3 => "min",
        4 => "max",
        _ => "a user function",
    };
    match op {
        SYNC => format!("{sig} processes"),
        ALL_REDUCE | SCAN | EXSCAN => format!(
            "{} {} values and {}",
            sig >> 16,
            number(sig),
            reduction(sig)
        ),
        REDUCE => format!(
            "{} {} values and {} to root {}",
            (sig >> 16) & 0xffff_ffff,
            number(sig),
            reduction(sig),
            sig >> 48
        ),
        REDUCE_SCATTER => format!(
            "{} values and {} (counts hash {:#x})",
            number(sig),
            reduction(sig),
            sig >> 16
        ),
        ALL_REDUCE_WITH | SCAN_WITH | EXSCAN_WITH | ALL_TO_ALL_WITH | ALL_GATHER => {
            format!("values of type hash {sig:#x}")
        }
        REDUCE_WITH => format!(
            "values of type hash {:#x} to root {}",
            sig >> 16,
            sig & 0xffff
        ),
        BROADCAST | GATHER | SCATTER => format!("root {}", sig & 0xffff_ffff),
        // A count above the number type: the processes, or a slice's length.
        TOTAL_EXCHANGE | ALL_GATHER_SLICE => format!("{} {} values", sig >> 8, number(sig)),
        ALL_TO_ALL => format!("{} values", number(sig)),
        SPLIT => "a color and a key".to_string(),
        _ => format!("signature {sig:#x}"),
    }
}

/// An operation and its arguments, for mismatch errors: "all_reduce with 1 f64 values and sum".
pub(crate) fn describe_call(op: u8, sig: u64) -> String {
    format!("{} with {}", name(op), describe(op, sig))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_describe_arguments() {
        let s = describe(ALL_REDUCE, 10 | 4 << 8 | 3 << 16);
        assert_eq!(s, "3 f64 values and max");
        assert_eq!(describe(BROADCAST, 2), "root 2");
        assert_eq!(describe_call(BROADCAST, 2), "broadcast with root 2");
    }
}

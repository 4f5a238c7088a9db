//! Distribution of the interior rows over processes.

use std::ops::Range;

use thiserror::Error;

/// Why rows could not be distributed.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PartitionError {
    /// More processes than interior rows: some would own no row.
    #[error("cannot give each of {parts} processes a row of a grid with {rows} interior rows")]
    TooManyParts {
        /// Interior rows.
        rows: usize,
        /// Processes asked for.
        parts: usize,
    },
    /// Zero processes.
    #[error("cannot distribute rows over zero processes")]
    NoParts,
}

/// Splits the interior rows `1..=n` into `parts` consecutive blocks whose
/// sizes differ by at most one, larger blocks first. Block `k` belongs to
/// process `k`; the first block borders the top row, the last the bottom.
pub fn row_blocks(n: usize, parts: usize) -> Result<Vec<Range<usize>>, PartitionError> {
    if parts == 0 {
        return Err(PartitionError::NoParts);
    }
    if parts > n {
        return Err(PartitionError::TooManyParts { rows: n, parts });
    }
    let (small, large_count) = (n / parts, n % parts);
    let mut start = 1;
    Ok((0..parts)
        .map(|k| {
            let len = small + usize::from(k < large_count);
            let block = start..start + len;
            start += len;
            block
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_interior_in_order_and_balance() {
        for n in 1..40 {
            for parts in 1..=n.min(9) {
                let blocks = row_blocks(n, parts).unwrap();
                assert_eq!(blocks.len(), parts);
                assert_eq!(blocks[0].start, 1);
                assert_eq!(blocks[parts - 1].end, n + 1);
                for w in blocks.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                    assert!(w[0].len() >= w[1].len());
                }
                let (min, max) = (blocks[parts - 1].len(), blocks[0].len());
                assert!(min >= 1 && max - min <= 1);
            }
        }
    }

    #[test]
    fn impossible_splits_are_errors() {
        assert_eq!(row_blocks(3, 0), Err(PartitionError::NoParts));
        assert_eq!(
            row_blocks(3, 4),
            Err(PartitionError::TooManyParts { rows: 3, parts: 4 })
        );
    }
}

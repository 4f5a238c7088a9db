//! The body-file parser never panics, whatever text it is given, and reads back what the
//! writer wrote.

use barnes_hut::io::{parse_bodies, read_bodies, write_bodies, ReadError};
use proptest::prelude::*;

proptest! {
    #[test]
    fn arbitrary_text_gives_bodies_or_a_line_error(text in ".{0,400}") {
        match parse_bodies(&text) {
            Ok(_) => {}
            Err(ReadError::Line { line, .. }) => prop_assert!(line >= 1 && line <= text.split('\n').count() + 1),
            Err(e) => prop_assert!(false, "unexpected error kind: {}", e),
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = read_bodies(&bytes[..]);
    }

    #[test]
    fn near_valid_files_never_panic(
        count in 0usize..5,
        lines in proptest::collection::vec("[0-9 .eE+\\-a-z#\\t]{0,40}", 0..6),
    ) {
        let text = format!("{count}\n{}", lines.join("\n"));
        let _ = parse_bodies(&text);
    }

    #[test]
    fn written_bodies_read_back(n in 0usize..20, seed in any::<u64>()) {
        let bodies = barnes_hut::plummer::generate(n, seed);
        let mut out = Vec::new();
        write_bodies(&mut out, &bodies).unwrap();
        prop_assert_eq!(read_bodies(&out[..]).unwrap(), bodies);
    }
}

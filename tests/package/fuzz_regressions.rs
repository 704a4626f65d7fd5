//! Every input that ever broke a fuzz target (`fuzz/regressions/<target>/`), and the seed corpus,
//! replayed on the stable toolchain: `make fuzz` finds, this keeps them fixed.
use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut count = 0;
    for dir in ["regressions", "corpus"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            check(&std::fs::read(&path).unwrap());
            count += 1;
        }
    }
    count
}

#[test]
fn the_event_reader_agrees_with_serde_json_on_every_saved_input() {
    assert!(replay("sqs_event", redrive::oracles::sqs_event) > 0);
}

#[test]
fn the_metadata_reads_back_on_every_saved_input() {
    assert!(replay("meta", redrive::oracles::meta) > 0);
}

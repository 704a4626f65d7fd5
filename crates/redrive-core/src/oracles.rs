//! Properties the fuzz targets (`fuzz/`) check on arbitrary input, kept here so that the stable
//! test suite replays every input that ever broke one (`tests/package/fuzz_regressions.rs`).
use crate::envelope::{annotate, Meta, Timestamp, META_VERSION};
use crate::error::ErrorClass;
use redrive_event::{SqsEvent, Text};

/// The event reader: the fast scanner and serde_json agree on every input (the scanner may hand
/// an input over to serde_json, never read it differently), a body kept as the event has it reads
/// as JSON as serde_json reads its text, and every record it yields can be annotated for a retry
/// without a panic.
pub fn sqs_event(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let fast = SqsEvent::parse(text);
    let reference = serde_json::from_str::<SqsEvent<'_>>(text);
    let mut decoded = String::new();
    let in_one_buffer = SqsEvent::from_slice_in(bytes, &mut decoded);
    assert_eq!(
        fast.as_ref().ok(),
        in_one_buffer.as_ref().ok(),
        "read differently with its decoded strings in one buffer: {text:?}"
    );
    match (&fast, &reference) {
        (Ok(fast), Ok(reference)) => {
            assert_eq!(fast, reference, "the scanner read {text:?} differently")
        }
        (Ok(_), Err(error)) => {
            panic!("the scanner accepted {text:?}, which serde_json refuses: {error}")
        }
        (Err(_), _) => {}
    }
    for record in fast.map(|event| event.records).unwrap_or_default() {
        if let Some(body) = &record.body {
            let quoted = body
                .quoted_json()
                .map(redrive_event::quoted_json::from_str::<serde_json::Value>);
            if let Some(Ok(value)) = quoted {
                let text = serde_json::from_str::<serde_json::Value>(body);
                assert_eq!(
                    Some(&value),
                    text.as_ref().ok(),
                    "body {body:?} read differently"
                );
            }
        }
        let meta = match Meta::of(&record) {
            Some(Ok(meta)) => meta,
            _ => Meta {
                v: META_VERSION,
                attempts: 1,
                due_at: None,
                origin_queue_arn: Text::from("arn:aws:sqs:us-east-1:123456789012:q"),
                origin_message_id: Text::from("m"),
                first_failure_at: Timestamp(0),
                last_failure_at: Timestamp(0),
                error_class: ErrorClass::Transient,
                error_kind: Text::from("fuzz"),
                error_message: Text::from("fuzz"),
                reprocess_count: 0,
                redriven_at: None,
                dead_lettered_at: None,
                failed_in: None,
                attributes: None,
            },
        };
        if let Ok(copy) = annotate(&record, meta) {
            assert!(copy.size() <= crate::envelope::MAX_MESSAGE_BYTES);
        }
    }
}

/// The metadata reader: whatever parses as metadata writes back and reads again the same.
pub fn meta(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    if let Ok(meta) = serde_json::from_str::<Meta<'_>>(text) {
        let written = serde_json::to_string(&meta).expect("metadata serialises");
        let again: Meta<'_> = serde_json::from_str(&written)
            .unwrap_or_else(|error| panic!("{written} does not read back: {error}"));
        // Timestamps keep milliseconds only: compare what was written.
        assert_eq!(serde_json::to_string(&again).unwrap(), written);
    }
}

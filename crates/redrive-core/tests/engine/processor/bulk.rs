//! Batch handlers: a failing bulk call bisected, FIFO order kept, transient failures retried whole.
use super::*;

/// Fails a whole call when it contains a poison record, like a bulk insert would.
struct BulkWriter {
    calls: AtomicU32,
}

impl BatchHandler for BulkWriter {
    async fn handle_batch(&self, messages: &[Message<'_>]) -> Result<(), RecordError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match messages.iter().find(|m| m.body() == "poison") {
            Some(m) => Err(RecordError::permanent(
                "constraint_violation",
                format!("row {} violates a constraint", m.id()),
            )),
            None => Ok(()),
        }
    }
}

#[tokio::test]
async fn a_failing_bulk_batch_is_bisected_until_the_poison_records_stand_alone() {
    let processor = processor(RetryPolicy::default());
    let writer = BulkWriter {
        calls: AtomicU32::new(0),
    };
    let records: Vec<_> = (0..16)
        .map(|i| {
            record(
                &format!("m-{i}"),
                if i == 3 || i == 12 { "poison" } else { "ok" },
            )
        })
        .collect();
    let json = event(records);
    let event_ = SqsEvent::parse(&json).unwrap();
    let processed = processor
        .process_batch(&writer, &event_.records, DEADLINE)
        .await
        .unwrap();
    assert!(failures(&processed).is_empty());
    let dead: Vec<String> = processor
        .queue()
        .sent_to(DLQ)
        .iter()
        .map(|m| meta_of(m).origin_message_id.to_string())
        .collect();
    assert_eq!(dead, ["m-3", "m-12"]);
    assert_eq!(processed.report.done, 14);
    // 1 whole + 2 halves + 4 quarters + 4 eighths + 4 singles.
    assert_eq!(writer.calls.load(Ordering::SeqCst), 15);
}

/// Records the bodies each bulk call was handed, and fails a call holding a poison record.
#[derive(Default)]
struct RecordingWriter {
    calls: std::sync::Mutex<Vec<Vec<String>>>,
}

impl BatchHandler for RecordingWriter {
    async fn handle_batch(&self, messages: &[Message<'_>]) -> Result<(), RecordError> {
        self.calls
            .lock()
            .unwrap()
            .push(messages.iter().map(|m| m.id().to_owned()).collect());
        if messages.iter().any(|m| m.body() == "poison") {
            return Err(RecordError::permanent(
                "constraint_violation",
                "a poison row",
            ));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_fifo_bulk_batch_never_hands_over_a_record_after_its_groups_failure() {
    let processor = processor(RetryPolicy::default());
    let writer = RecordingWriter::default();
    let event = event(vec![
        fifo_record("a1", "ok", "A", 1),
        fifo_record("a2", "poison", "A", 1),
        fifo_record("a3", "ok", "A", 1),
        fifo_record("a4", "ok", "A", 1),
        fifo_record("b1", "ok", "B", 1),
    ]);
    let event_ = SqsEvent::parse(&event).unwrap();
    let processed = processor
        .process_batch(&writer, &event_.records, DEADLINE)
        .await
        .unwrap();
    let calls = writer.calls.lock().unwrap().clone();
    let a2_failed_alone = calls
        .iter()
        .position(|call| call == &["a2"])
        .expect("a2 stands alone");
    for call in &calls[a2_failed_alone + 1..] {
        assert!(
            !call.iter().any(|id| id == "a3" || id == "a4"),
            "a3 and a4 handed over after a2 failed: {calls:?}"
        );
    }
    assert_eq!(
        failures(&processed),
        ["a3", "a4"],
        "given back behind their group"
    );
    assert_eq!(processed.report.dead_lettered, 1, "a2");
    assert!(
        calls.iter().any(|call| call.contains(&"b1".to_owned())),
        "B goes on"
    );
}

/// A bulk writer whose database is down: every call fails, whatever it holds.
struct DatabaseDown {
    calls: AtomicU32,
    error: RecordError,
}

impl BatchHandler for DatabaseDown {
    async fn handle_batch(&self, _: &[Message<'_>]) -> Result<(), RecordError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err(self.error.clone())
    }
}

#[tokio::test]
async fn a_bulk_batch_failing_transiently_is_retried_or_deferred_whole_without_halving() {
    for (error, retried, deferred) in [
        (
            RecordError::transient("db_unavailable", "connection refused"),
            16,
            0,
        ),
        (
            RecordError::defer("db_circuit_open", Duration::from_secs(30)),
            0,
            16,
        ),
    ] {
        let processor = processor(RetryPolicy::default());
        let writer = DatabaseDown {
            calls: AtomicU32::new(0),
            error,
        };
        let records: Vec<_> = (0..16).map(|i| record(&format!("m-{i}"), "ok")).collect();
        let json = event(records);
        let event_ = SqsEvent::parse(&json).unwrap();
        let processed = processor
            .process_batch(&writer, &event_.records, DEADLINE)
            .await
            .unwrap();
        assert_eq!(writer.calls.load(Ordering::SeqCst), 1, "one call, not 31");
        assert!(failures(&processed).is_empty());
        assert_eq!(
            (processed.report.retried, processed.report.deferred),
            (retried, deferred)
        );
        assert_eq!(processor.queue().sent_to(SOURCE).len(), 16);
    }
}

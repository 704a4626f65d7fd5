//! The record-fate rules, on an in-memory port: exact batch responses and exact send requests.
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redrive_core::clock::{Clock, ManualClock};
use redrive_core::envelope::OutgoingMessage;
use redrive_core::error::PortError;
use redrive_core::fifo::{
    AttemptLedger, BoxFuture, Counted, Hold, LedgerEntry, MemoryLedger, Release,
};
use redrive_core::lane::{KeyPlace, Position};
use redrive_core::port::{Call, RecordingQueue};
use redrive_core::{
    BatchError, BatchHandler, ErrorClass, Message, Meta, Processed, Processor, ProcessorConfig,
    RecordError, RecordHandler, RetryPolicy, SqsEvent,
};

const NOW: u64 = 1_763_790_000_000;
const DEADLINE: u64 = NOW + 60_000;
const DLQ: &str = "https://sqs.local/123456789012/orders-dlq";
const SOURCE: &str = "https://sqs.local/123456789012/orders";
const ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:orders";

/// Acts on the body: `ok`, `transient`, `permanent`, `panic`, `slow`, `blocking:<ms>`, `hint:<secs>`,
/// `defer:<secs>`.
struct ByBody {
    calls: AtomicU32,
}

impl RecordHandler for ByBody {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let body = message.body();
        match body.split(':').collect::<Vec<_>>().as_slice() {
            ["ok", ..] => Ok(()),
            ["transient", ..] => Err(RecordError::transient(
                "payment_timeout",
                "the payment service timed out",
            )),
            ["permanent", ..] => Err(RecordError::permanent(
                "invalid_order",
                "amount must be positive",
            )),
            ["panic", ..] => panic!("poison order"),
            ["slow", ..] => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
            // Never yields: no timer can cut it off, only the check before the next record.
            ["blocking", millis] => {
                std::thread::sleep(Duration::from_millis(millis.parse().unwrap()));
                Ok(())
            }
            ["hint", secs] => Err(RecordError::transient("throttled", "429")
                .retry_after(Duration::from_secs(secs.parse().unwrap()))),
            ["defer", secs] => Err(RecordError::defer(
                "payments_circuit_open",
                Duration::from_secs(secs.parse().unwrap()),
            )),
            _ => message.json::<serde_json::Value>().map(|_| ()),
        }
    }
}

fn handler() -> ByBody {
    ByBody {
        calls: AtomicU32::new(0),
    }
}

fn processor(retry: RetryPolicy) -> Processor<RecordingQueue> {
    processor_with_dlq(Some(DLQ), retry)
}

fn processor_with_dlq(dlq: Option<&str>, retry: RetryPolicy) -> Processor<RecordingQueue> {
    let config = ProcessorConfig {
        dlq_url: dlq.map(str::to_owned),
        source_queue_url: None,
        retry,
        deadline_margin: Duration::from_secs(2),
        ..ProcessorConfig::default()
    };
    Processor::new(RecordingQueue::default(), config)
        .with_clock(Arc::new(ManualClock::at(NOW)))
        .with_seed(7)
}

/// A processor on the system clock with a 100 ms deadline margin and `concurrency` records at
/// once, and the time now (ms).
fn on_the_real_clock(concurrency: usize) -> (Processor<RecordingQueue>, u64) {
    let config = ProcessorConfig {
        dlq_url: Some(DLQ.into()),
        source_queue_url: Some(SOURCE.into()),
        retry: RetryPolicy::default(),
        deadline_margin: Duration::from_millis(100),
        concurrency: NonZeroUsize::new(concurrency).unwrap(),
        ..ProcessorConfig::default()
    };
    let now = redrive_core::clock::Clock::now_ms(&redrive_core::clock::SystemClock);
    (Processor::new(RecordingQueue::default(), config), now)
}

fn record(id: &str, body: &str) -> serde_json::Value {
    serde_json::json!({
        "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1763789990000"},
        "messageAttributes": {"tenant": {"stringValue": "acme", "dataType": "String"}},
        "md5OfBody": "x", "eventSource": "aws:sqs", "eventSourceARN": ARN, "awsRegion": "eu-west-1"
    })
}

fn event(records: Vec<serde_json::Value>) -> String {
    serde_json::json!({ "Records": records }).to_string()
}

async fn run(
    processor: &Processor<RecordingQueue>,
    handler: &impl RecordHandler,
    json: &str,
) -> Processed {
    let event = SqsEvent::parse(json).unwrap();
    processor
        .process(handler, &event.records, DEADLINE)
        .await
        .unwrap()
}

fn failures(processed: &Processed) -> Vec<String> {
    processed
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

fn meta_of(message: &OutgoingMessage<'_>) -> Meta<'static> {
    let json = message
        .attribute("redrive")
        .expect("redrive attribute")
        .to_owned();
    serde_json::from_str::<Meta<'_>>(&json)
        .unwrap()
        .into_owned()
}

#[tokio::test]
async fn every_record_of_a_mixed_batch_gets_its_fate_and_none_is_given_back() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = event(vec![
        record("m-ok", "ok"),
        record("m-tr", "transient"),
        record("m-pe", "permanent"),
        record("m-pa", "panic"),
    ]);
    let processed = run(&processor, &handler, &json).await;

    assert_eq!(
        failures(&processed),
        Vec::<String>::new(),
        "every send was confirmed"
    );
    let retried = processor.queue().sent_to(SOURCE);
    assert_eq!(retried.len(), 1);
    assert_eq!(&*retried[0].body, "transient");
    assert!(
        retried[0].delay_seconds <= 2,
        "first retry within the full-jitter envelope of 2 s"
    );
    assert_eq!(
        retried[0].attribute("tenant"),
        Some("acme"),
        "original attributes travel"
    );
    let meta = meta_of(&retried[0]);
    assert_eq!(
        (meta.attempts, meta.error_class, &*meta.error_kind),
        (1, ErrorClass::Transient, "payment_timeout")
    );
    assert_eq!(
        (&*meta.origin_message_id, &*meta.origin_queue_arn),
        ("m-tr", ARN)
    );

    let dead = processor.queue().sent_to(DLQ);
    let classes: Vec<_> = dead
        .iter()
        .map(|m| {
            (
                m.body.to_string(),
                meta_of(m).error_class,
                meta_of(m).attempts,
            )
        })
        .collect();
    assert_eq!(
        classes,
        [
            ("permanent".into(), ErrorClass::Permanent, 1),
            ("panic".into(), ErrorClass::Panic, 1)
        ]
    );
    assert_eq!(&*meta_of(&dead[1]).error_message, "poison order");
    assert_eq!(meta_of(&dead[1]).first_failure_at.0, NOW);

    let report = &processed.report;
    assert_eq!(
        (
            report.done,
            report.retried,
            report.dead_lettered,
            report.given_back
        ),
        (1, 1, 2, 0)
    );
    assert_eq!(
        (
            report.transient_errors,
            report.permanent_errors,
            report.panics
        ),
        (1, 1, 1)
    );
    assert_eq!(
        report.sqs_requests, 2,
        "one SendMessageBatch per destination, no deletes"
    );
}

#[tokio::test]
async fn delays_grow_exponentially_inside_the_jitter_envelope_and_attempts_run_out_into_the_dlq() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let mut body = "transient".to_owned();
    let mut redrive_attribute: Option<String> = None;
    for attempt in 1..=5u32 {
        let mut rec = record(&format!("m-{attempt}"), &body);
        if let Some(value) = &redrive_attribute {
            rec["messageAttributes"]["redrive"] =
                serde_json::json!({"stringValue": value, "dataType": "String"});
        }
        let before = processor.queue().calls().len();
        let processed = run(&processor, &handler, &event(vec![rec])).await;
        assert!(failures(&processed).is_empty());
        let Call::Send {
            queue_url,
            messages,
        } = &processor.queue().calls()[before]
        else {
            panic!("a send")
        };
        let meta = meta_of(&messages[0]);
        assert_eq!(meta.attempts, attempt);
        assert_eq!(
            &*meta.origin_message_id, "m-1",
            "the first message id is kept across copies"
        );
        if attempt < 5 {
            assert_eq!(queue_url, SOURCE);
            let ceiling = RetryPolicy::default().ceiling(attempt).as_secs() as u32;
            assert!(
                messages[0].delay_seconds <= ceiling,
                "attempt {attempt}: {} > {ceiling}",
                messages[0].delay_seconds
            );
        } else {
            assert_eq!(queue_url, DLQ, "the fifth failure is the last");
            assert_eq!(meta.error_class, ErrorClass::Transient);
        }
        body = messages[0].body.to_string();
        redrive_attribute = messages[0].attribute("redrive").map(str::to_owned);
    }
}

#[tokio::test]
async fn a_retry_sequence_past_fifteen_minutes_hops_without_spending_attempts() {
    let policy = RetryPolicy {
        backoff: redrive_core::Backoff::Sequence(vec![Duration::from_secs(3600)]),
        max_attempts: 3,
        ..RetryPolicy::default()
    };
    let processor = processor(policy);
    let handler = handler();
    let processed = run(
        &processor,
        &handler,
        &event(vec![record("m-1", "transient")]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    let sent = processor.queue().sent_to(SOURCE);
    assert_eq!(sent[0].delay_seconds, 900, "SQS's longest delay");
    let meta = meta_of(&sent[0]);
    assert_eq!(meta.due_at.map(|t| t.0), Some(NOW + 3_600_000));

    // The copy arrives 900 s later: not due yet, so it hops again, same attempt, handler not called.
    let mut rec = record("m-2", "transient");
    rec["messageAttributes"]["redrive"] = serde_json::json!({"stringValue": sent[0].attribute("redrive").unwrap(), "dataType": "String"});
    let calls_before = handler.calls.load(Ordering::SeqCst);
    let processed = run(&processor, &handler, &event(vec![rec])).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        calls_before,
        "not handled before it is due"
    );
    let hop = &processor.queue().sent_to(SOURCE)[1];
    assert_eq!(hop.delay_seconds, 900);
    assert_eq!(meta_of(hop).attempts, 1);
    assert_eq!(processed.report.deferred, 1);
}

#[tokio::test]
async fn retry_after_hints_and_deferrals_set_the_delay() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = event(vec![record("m-h", "hint:120"), record("m-d", "defer:30")]);
    let processed = run(&processor, &handler, &json).await;
    assert!(failures(&processed).is_empty());
    let sent = processor.queue().sent_to(SOURCE);
    assert_eq!(
        (sent[0].delay_seconds, meta_of(&sent[0]).attempts),
        (120, 1)
    );
    assert_eq!(
        (sent[1].delay_seconds, meta_of(&sent[1]).attempts),
        (30, 0),
        "a deferral spends no attempt"
    );
    assert_eq!(
        (processed.report.retried, processed.report.deferred),
        (1, 1)
    );
}

#[tokio::test]
async fn a_record_deferred_past_the_age_limit_is_dead_lettered_as_transient() {
    let clock = Arc::new(ManualClock::at(NOW));
    let processor = processor(RetryPolicy::default()).with_clock(clock.clone());
    let handler = handler();
    let mut copy = record("m-1", "defer:300");
    let run = |copy: serde_json::Value| {
        let json = event(vec![copy]);
        let (processor, handler, deadline) = (&processor, &handler, clock.now_ms() + 60_000);
        async move {
            let event = SqsEvent::parse(&json).unwrap();
            processor
                .process(handler, &event.records, deadline)
                .await
                .unwrap()
        }
    };
    // Deferred at NOW, then redelivered every five minutes while the downstream stays down.
    for _ in 0..12 {
        let processed = run(copy.clone()).await;
        assert!(failures(&processed).is_empty());
        assert_eq!(processed.report.deferred, 1, "deferred while under an hour");
        let sent = processor.queue().sent_to(SOURCE);
        let latest = sent.last().expect("a deferred copy");
        assert_eq!(meta_of(latest).first_failure_at.0, NOW);
        copy["messageAttributes"]["redrive"] = serde_json::json!({
            "stringValue": latest.attribute("redrive").unwrap(), "dataType": "String"
        });
        clock.advance(300_000);
    }
    let processed = run(copy).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processed.report.dead_lettered, 1);
    let dead = &processor.queue().sent_to(DLQ)[0];
    let meta = meta_of(dead);
    assert_eq!(
        meta.error_class,
        ErrorClass::Transient,
        "the reprocessor may send it home"
    );
    assert_eq!(&*meta.error_kind, "deferred_too_long");
    assert!(
        meta.error_message.contains("payments_circuit_open") && meta.error_message.contains("1h"),
        "{}",
        meta.error_message
    );
    assert_eq!(
        meta.attempts, 0,
        "a deferral spends no attempt, even the last"
    );
    assert_eq!(processor.queue().sent_to(SOURCE).len(), 12);

    // Sent home by the reprocessor after the outage: the age limit counts from the redrive.
    let mut redriven = meta.clone();
    redriven.redriven_at = Some(redrive_core::envelope::Timestamp(clock.now_ms()));
    clock.advance(300_000);
    let mut home = record("m-1", "defer:300");
    home["messageAttributes"]["redrive"] = serde_json::json!({
        "stringValue": serde_json::to_string(&redriven).unwrap(), "dataType": "String"
    });
    let processed = run(home).await;
    assert_eq!(
        (processed.report.deferred, processed.report.dead_lettered),
        (1, 0)
    );
}

/// A permanent failure's dead letter (one attempt spent) moved back by a move task, and failing
/// again: it is recognised as moved back, so the dead letter it becomes counts the round against
/// the reprocess cap; before, only a dead letter with its attempts used up was, and a permanent
/// one went round and round uncounted.
#[tokio::test]
async fn a_permanent_dead_letter_moved_back_counts_against_the_reprocess_cap() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    run(
        &processor,
        &handler,
        &event(vec![record("m-1", "permanent")]),
    )
    .await;
    let dead = meta_of(&processor.queue().sent_to(DLQ)[0]);
    assert_eq!((dead.attempts, dead.reprocess_count), (1, 0));
    let mut moved = record("m-moved", "permanent");
    moved["messageAttributes"]["redrive"] = serde_json::json!({
        "stringValue": serde_json::to_string(&dead).unwrap(), "dataType": "String"
    });
    let processed = run(&processor, &handler, &event(vec![moved])).await;
    assert_eq!(processed.report.dead_lettered, 1);
    let again = meta_of(processor.queue().sent_to(DLQ).last().unwrap());
    assert_eq!((again.attempts, again.reprocess_count), (1, 1));
    assert_eq!(
        again.redriven_at,
        Some(redrive_core::envelope::Timestamp(NOW))
    );
}

#[tokio::test]
async fn a_dead_letter_moved_back_by_sqs_gets_a_fresh_set_of_attempts_and_counts_as_redriven() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let exhausted = Meta {
        attempts: 5,
        ..meta_of(&first_retry_copy(&processor, &handler).await)
    };
    // A move task (`StartMessageMoveTask`) re-sends the dead letter as it is, metadata and all.
    let mut moved = record("m-moved", "transient");
    moved["messageAttributes"]["redrive"] = serde_json::json!({
        "stringValue": serde_json::to_string(&exhausted).unwrap(), "dataType": "String"
    });
    let processed = run(&processor, &handler, &event(vec![moved])).await;
    assert_eq!(
        (processed.report.retried, processed.report.dead_lettered),
        (1, 0),
        "its first failure back home is a retry, not another dead letter"
    );
    let meta = meta_of(processor.queue().sent_to(SOURCE).last().unwrap());
    assert_eq!((meta.attempts, meta.reprocess_count), (1, 1));
    assert_eq!(
        meta.redriven_at,
        Some(redrive_core::envelope::Timestamp(NOW))
    );
    assert_eq!(
        meta.first_failure_at, exhausted.first_failure_at,
        "history kept"
    );
}

/// The copy a first transient failure re-sends.
async fn first_retry_copy(
    processor: &Processor<RecordingQueue>,
    handler: &ByBody,
) -> OutgoingMessage<'static> {
    run(processor, handler, &event(vec![record("m-1", "transient")])).await;
    processor.queue().sent_to(SOURCE).remove(0)
}

#[tokio::test]
async fn a_fair_queue_record_keeps_its_tenant_on_every_copy() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let tenant = |id: &str, body: &str| {
        let mut rec = record(id, body);
        rec["attributes"]["MessageGroupId"] = "tenant-7".into();
        rec
    };
    let json = event(vec![
        tenant("m-retry", "transient"),
        tenant("m-defer", "defer:30"),
        tenant("m-dead", "permanent"),
        record("m-untenanted", "transient"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert!(failures(&processed).is_empty());
    let groups = |queue| -> Vec<Option<String>> {
        processor
            .queue()
            .sent_to(queue)
            .iter()
            .map(|m| m.group_id.as_deref().map(str::to_owned))
            .collect()
    };
    let tenant_7 = Some("tenant-7".to_owned());
    assert_eq!(groups(SOURCE), [tenant_7.clone(), tenant_7.clone(), None]);
    assert_eq!(groups(DLQ), [tenant_7]);
}

#[tokio::test]
async fn every_copy_carries_the_trace_header_of_the_delivery_that_failed() {
    let policy = RetryPolicy {
        backoff: redrive_core::Backoff::Sequence(vec![Duration::from_secs(3600)]),
        ..RetryPolicy::default()
    };
    let processor = processor(policy);
    let handler = handler();
    let traced = |id: &str, body: &str| {
        let mut rec = record(id, body);
        rec["attributes"]["AWSTraceHeader"] = format!(
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;id={id}"
        )
        .into();
        rec
    };
    let json = event(vec![
        traced("m-retry", "transient"),
        traced("m-defer", "defer:30"),
        traced("m-dead", "permanent"),
        record("m-untraced", "transient"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert!(failures(&processed).is_empty());
    let traces = |queue| -> Vec<Option<String>> {
        processor
            .queue()
            .sent_to(queue)
            .iter()
            .map(|m| {
                m.trace_header
                    .as_deref()
                    .map(|h| h.rsplit("id=").next().unwrap().to_owned())
            })
            .collect()
    };
    let id = |id: &str| Some(id.to_owned());
    assert_eq!(traces(SOURCE), [id("m-retry"), id("m-defer"), None]);
    assert_eq!(traces(DLQ), [id("m-dead")]);

    // The retry copy arrives before it is due (the hour-long backoff): the hop it is sent on as
    // carries the header it arrived with.
    let retry = processor.queue().sent_to(SOURCE).remove(0);
    let mut rec = traced("m-hop", "transient");
    rec["messageAttributes"]["redrive"] = serde_json::json!({"stringValue": retry.attribute("redrive").unwrap(), "dataType": "String"});
    let processed = run(&processor, &handler, &event(vec![rec])).await;
    assert_eq!(processed.report.deferred, 1, "a hop");
    assert_eq!(traces(SOURCE)[3], id("m-hop"));
}

#[tokio::test]
async fn a_record_done_on_a_retry_is_counted_for_the_retry_success_rate() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let mut retried = record("m-retried", "ok");
    let copy = first_retry_copy(&processor, &handler).await;
    retried["messageAttributes"]["redrive"] = serde_json::json!({
        "stringValue": copy.attribute("redrive").unwrap(), "dataType": "String"
    });
    let processed = run(
        &processor,
        &handler,
        &event(vec![retried, record("m-first", "ok")]),
    )
    .await;
    assert_eq!(
        (processed.report.done, processed.report.done_after_retry),
        (2, 1)
    );
}

#[tokio::test]
async fn a_refused_entry_or_a_failed_call_gives_the_record_back() {
    let processor = processor(RetryPolicy::default());
    processor.queue().refuse_entries_containing("permanent");
    let handler = handler();
    let json = event(vec![
        record("m-1", "transient"),
        record("m-2", "permanent"),
        record("m-3", "ok"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(failures(&processed), ["m-2"]);
    assert_eq!(processed.report.send_failures, 1);

    let processor = self::processor(RetryPolicy::default());
    processor.queue().fail_calls_to(SOURCE);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(
        failures(&processed),
        ["m-1"],
        "the DLQ send still went through"
    );
}

/// A DLQ call that never answers (a stalled connection; the SDK sets no timeout of its own) must
/// not run the invocation past Lambda's timeout, which would fail the whole batch: the carry-out
/// stops at the deadline less the answer's reserve (200 ms with the 2 s margin), the stalled dead
/// letter is given back and the re-send that was confirmed stands.
#[tokio::test(start_paused = true)]
async fn a_stalled_send_gives_its_record_back_before_the_deadline() {
    let processor = processor(RetryPolicy::default());
    processor.queue().stall_calls_to(DLQ);
    let handler = handler();
    let json = event(vec![
        record("m-1", "transient"),
        record("m-2", "permanent"),
        record("m-3", "ok"),
    ]);
    let started = tokio::time::Instant::now();
    let processed = tokio::time::timeout(
        Duration::from_millis(DEADLINE - NOW),
        run(&processor, &handler, &json),
    )
    .await
    .expect("answered before the Lambda deadline");
    assert_eq!(failures(&processed), ["m-2"]);
    assert_eq!(processed.report.send_failures, 1);
    assert_eq!(processor.queue().sent_to(SOURCE).len(), 1, "m-1's retry");
    let took = started.elapsed();
    assert!(
        took <= Duration::from_millis(DEADLINE - NOW - 200),
        "answered {took:?} after the start, within the deadline less the reserve"
    );
}

#[tokio::test]
async fn sends_are_batched_ten_at_a_time() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let records = (0..25)
        .map(|i| record(&format!("m-{i}"), "permanent"))
        .collect();
    let processed = run(&processor, &handler, &event(records)).await;
    assert!(failures(&processed).is_empty());
    let sizes: Vec<usize> = processor
        .queue()
        .calls()
        .iter()
        .map(|call| match call {
            Call::Send { messages, .. } => messages.len(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(sizes, [10, 10, 5]);
    assert_eq!(processed.report.sqs_requests, 3);
}

#[tokio::test]
async fn a_record_without_message_id_fails_the_whole_batch_with_a_clear_error() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = r#"{"Records":[{"messageId":"m-1","body":"ok"},{"body":"ok"}]}"#;
    let event = SqsEvent::parse(json).unwrap();
    let error = processor
        .process(&handler, &event.records, DEADLINE)
        .await
        .unwrap_err();
    assert!(matches!(error, BatchError::MissingMessageId { index: 1 }));
    assert!(error.to_string().contains("record 1 has no messageId"));
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        0,
        "nothing handled before the batch is refused"
    );
}

#[tokio::test]
async fn a_malformed_body_is_dead_lettered_byte_for_byte() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let body = "{\"orderId\": \"o-1\", \"amount\": 12.5,, \u{e9}";
    let processed = run(&processor, &handler, &event(vec![record("m-1", body)])).await;
    assert!(failures(&processed).is_empty());
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(&*dead[0].body, body);
    let meta = meta_of(&dead[0]);
    assert_eq!(
        (meta.error_class, &*meta.error_kind),
        (ErrorClass::Permanent, "malformed_body")
    );
}

#[tokio::test]
async fn fifo_retries_in_place_and_holds_back_the_rest_of_the_group_only() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let fifo = fifo_record;
    let json = event(vec![
        fifo("a1", "ok", "A", 1),
        fifo("a2", "transient", "A", 2),
        fifo("b1", "ok", "B", 1),
        fifo("a3", "ok", "A", 1),
        fifo("b2", "ok", "B", 1),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(failures(&processed), ["a2", "a3"]);
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        4,
        "a3 is not started after a2 failed"
    );
    let calls = processor.queue().calls();
    assert_eq!(calls.len(), 1, "no re-send on FIFO: {calls:?}");
    let Call::ChangeVisibility { queue_url, changes } = &calls[0] else {
        panic!()
    };
    assert_eq!(queue_url, "https://sqs.local/123456789012/orders.fifo");
    assert_eq!(
        changes[1],
        ("rh-a3".to_owned(), Duration::ZERO),
        "held-back records come back at once, in order"
    );
    assert_eq!(changes[0].0, "rh-a2");
    assert!(
        changes[0].1 <= RetryPolicy::default().ceiling(2),
        "backoff for the second attempt"
    );

    // The receive count is the attempt count on FIFO: the fifth delivery is the last.
    let processor = self::processor(RetryPolicy::default());
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo("a2", "transient", "A", 5)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(meta_of(&processor.queue().sent_to(DLQ)[0]).attempts, 5);
}

/// A FIFO record of group `group`, received `receives` times, first `first_received_ago` ms ago.
fn fifo_record(id: &str, body: &str, group: &str, receives: u32) -> serde_json::Value {
    let mut rec = record(id, body);
    rec["eventSourceARN"] = "arn:aws:sqs:eu-west-1:123456789012:orders.fifo".into();
    rec["attributes"]["MessageGroupId"] = group.into();
    rec["attributes"]["ApproximateReceiveCount"] = receives.to_string().into();
    rec["attributes"]["ApproximateFirstReceiveTimestamp"] = NOW.to_string().into();
    rec
}

#[tokio::test]
async fn with_the_ledger_a_fifo_record_held_back_behind_its_group_keeps_its_attempts() {
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let handler = handler();
    // a1 fails five times in place; a2, behind it in each batch, is received five times untried.
    for receive in 1..=4 {
        let processed = run(
            &processor,
            &handler,
            &event(vec![
                fifo_record("a1", "transient", "A", receive),
                fifo_record("a2", "transient", "A", receive),
            ]),
        )
        .await;
        assert_eq!(failures(&processed), ["a1", "a2"]);
    }
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            fifo_record("a1", "transient", "A", 5),
            fifo_record("a2", "transient", "A", 5),
        ]),
    )
    .await;
    assert_eq!(failures(&processed), ["a2"], "a1's fifth try was its last");
    assert_eq!(processor.queue().sent_to(DLQ).len(), 1);
    // a2's sixth receive is its first try: a transient failure is retried in place, not
    // dead-lettered as SQS's count alone would have it.
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a2", "transient", "A", 6)]),
    )
    .await;
    assert_eq!(failures(&processed), ["a2"]);
    assert_eq!(processed.report.dead_lettered, 0);
    assert_eq!(
        ledger.writes(),
        7,
        "a2's five untried receives, and a1's and a2's first waits at their group's head"
    );
    assert_eq!(
        ledger.reads(),
        5,
        "one read per batch received before: receives 2 to 6"
    );

    // Without the ledger the same delivery is its sixth attempt: dead-lettered.
    let without = self::processor(RetryPolicy::default());
    let processed = run(
        &without,
        &handler,
        &event(vec![fifo_record("a2", "transient", "A", 6)]),
    )
    .await;
    assert_eq!(processed.report.dead_lettered, 1);
}

#[tokio::test]
async fn with_the_ledger_the_happy_path_makes_no_ledger_call() {
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let records = (0..10)
        .map(|n| fifo_record(&format!("m{n}"), "ok", &format!("g{}", n % 3), 1))
        .collect();
    let processed = run(&processor, &handler(), &event(records)).await;
    assert!(failures(&processed).is_empty());
    assert_eq!((ledger.reads(), ledger.writes()), (0, 0));
}

#[tokio::test]
async fn with_the_ledger_a_delivery_past_its_attempts_is_dead_lettered_untried() {
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let handler = handler();
    // Dead-lettered on its fifth receive, its delete lost: the sixth would be a sixth try.
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a1", "ok", "A", 6)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0, "not tried again");
    let meta = meta_of(&processor.queue().sent_to(DLQ)[0]);
    assert_eq!((&*meta.error_kind, meta.attempts), ("attempts_used_up", 5));
    assert_eq!(meta.error_class, ErrorClass::Transient);
}

/// How a [`Scripted`] ledger answers.
enum Script {
    /// It cannot be read (a DynamoDB brownout).
    Fail,
    /// It answers for these ids only (`BatchGetItem`'s `UnprocessedKeys`).
    Only(Vec<&'static str>),
    /// It answers, then an operator releases this head: the release lands between the
    /// consumer's read and its renewal of the hold.
    ThenRelease(&'static str, Release),
    /// It answers reads, and refuses every hold (a throttled `UpdateItem`).
    RefusesHolds,
}

/// A memory ledger whose reads (and holds) go as scripted; other writes go through.
struct Scripted {
    inner: MemoryLedger,
    script: Script,
}

impl AttemptLedger for Scripted {
    fn entries<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Option<LedgerEntry>>, PortError>> {
        Box::pin(async move {
            if let Script::Fail = self.script {
                return Err(PortError::new(
                    "BatchGetItem",
                    "ProvisionedThroughputExceededException",
                ));
            }
            let read = self.inner.entries(message_ids).await?;
            match &self.script {
                Script::Only(answers) => Ok(message_ids
                    .iter()
                    .zip(read)
                    .map(|(id, entry)| entry.filter(|_| answers.contains(id)))
                    .collect()),
                Script::ThenRelease(head, release) => {
                    self.inner.release_hold(head, *release).await?;
                    Ok(read)
                }
                Script::Fail => unreachable!(),
                Script::RefusesHolds => Ok(read),
            }
        })
    }
    fn record_untried<'a>(
        &'a self,
        id: &'a str,
        receive: u32,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        self.inner.record_untried(id, receive)
    }
    fn record_head_wait<'a>(
        &'a self,
        id: &'a str,
        since_ms: u64,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        self.inner.record_head_wait(id, since_ms)
    }
    fn hold<'a>(
        &'a self,
        id: &'a str,
        hold: &'a Hold,
        untried: bool,
    ) -> BoxFuture<'a, Result<bool, PortError>> {
        if let Script::RefusesHolds = self.script {
            return Box::pin(async {
                Err(PortError::new(
                    "UpdateItem",
                    "ProvisionedThroughputExceededException",
                ))
            });
        }
        self.inner.hold(id, hold, untried)
    }
    fn release_hold<'a>(
        &'a self,
        id: &'a str,
        release: Release,
    ) -> BoxFuture<'a, Result<Option<Hold>, PortError>> {
        self.inner.release_hold(id, release)
    }
    fn held(&self) -> BoxFuture<'_, Result<Vec<(String, Hold)>, PortError>> {
        self.inner.held()
    }
    fn clear_hold<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        self.inner.clear_hold(id)
    }
    fn record_parked<'a>(&'a self, message_id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        self.inner.record_parked(message_id)
    }
    fn record_key_left<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
        place: KeyPlace,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        self.inner.record_key_left(key_id, position, place)
    }
    fn record_key_home<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        self.inner.record_key_home(key_id, position)
    }
}

#[tokio::test]
async fn a_ledger_that_cannot_answer_defers_an_untried_record_instead_of_dead_lettering_it() {
    // a1 was received five times, every time held back behind its group: untried. Then the table
    // throttles: SQS's count alone says its attempts are used up.
    let ledger = Arc::new(Scripted {
        inner: MemoryLedger::new(),
        script: Script::Fail,
    });
    for receive in 1..=5 {
        ledger.inner.record_untried("a1", receive).await.unwrap();
    }
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let handler = handler();
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a1", "ok", "A", 6)]),
    )
    .await;
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        0,
        "not tried: its attempts are unknown"
    );
    assert!(
        processor.queue().sent_to(DLQ).is_empty(),
        "not dead-lettered without a try"
    );
    assert_eq!(failures(&processed), ["a1"], "given back to wait in place");
    assert_eq!(processed.report.deferred, 1);
    assert_eq!(
        ledger.inner.entries(&["a1"]).await.unwrap()[0]
            .as_ref()
            .unwrap()
            .untried,
        [1, 2, 3, 4, 5, 6],
        "this receive was untried too"
    );

    // The table answers again: a1 is tried, at its first attempt.
    let answering = Arc::new(Scripted {
        inner: MemoryLedger::new(),
        script: Script::Only(vec!["a1"]),
    });
    for receive in 1..=6 {
        answering.inner.record_untried("a1", receive).await.unwrap();
    }
    let processor = self::processor(RetryPolicy::default()).with_ledger(answering);
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a1", "ok", "A", 7)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_partial_ledger_read_keeps_what_it_read_and_defers_only_what_it_did_not() {
    // a1 and b1 were each received five times untried; the read answers for a1 only.
    let ledger = Arc::new(Scripted {
        inner: MemoryLedger::new(),
        script: Script::Only(vec!["a1"]),
    });
    for receive in 1..=5 {
        ledger.inner.record_untried("a1", receive).await.unwrap();
        ledger.inner.record_untried("b1", receive).await.unwrap();
    }
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let handler = handler();
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            fifo_record("a1", "ok", "A", 6),
            fifo_record("b1", "ok", "B", 6),
        ]),
    )
    .await;
    assert_eq!(
        failures(&processed),
        ["b1"],
        "a1 counted and done; b1 waits for the ledger"
    );
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
    assert!(processor.queue().sent_to(DLQ).is_empty());
}

/// A follower arrives with its head and shares the head's first receive: when the head is
/// dead-lettered at the age limit, the follower's own wait starts then, not at that first receive
/// (which would dead-letter it, and each follower after it, at its first deferral).
#[tokio::test]
async fn a_followers_wait_counts_from_when_it_became_its_groups_head() {
    let clock = Arc::new(ManualClock::at(NOW));
    let ledger = Arc::new(MemoryLedger::new());
    let processor = processor(RetryPolicy::default())
        .with_clock(clock.clone())
        .with_ledger(ledger.clone());
    let handler = handler();
    let deliver = |records: Vec<serde_json::Value>| {
        let json = event(records);
        let (processor, handler, deadline) = (&processor, &handler, clock.now_ms() + 60_000);
        async move {
            let event = SqsEvent::parse(&json).unwrap();
            processor
                .process(handler, &event.records, deadline)
                .await
                .unwrap()
        }
    };
    // a1 and a2 both wait on a downstream that stays down; a2 arrives behind a1 every time.
    let mut receive = 1;
    loop {
        let processed = deliver(vec![
            fifo_record("a1", "defer:30", "A", receive),
            fifo_record("a2", "defer:30", "A", receive),
        ])
        .await;
        if processed.report.dead_lettered > 0 {
            break;
        }
        let calls = processor.queue().calls();
        let Some(Call::ChangeVisibility { changes, .. }) = calls.last() else {
            panic!("{calls:?}")
        };
        clock.advance(u64::try_from(changes[0].1.as_millis()).unwrap());
        receive += 1;
    }
    assert!(clock.now_ms() - NOW >= 3_600_000, "a1 waited out the hour");
    // a2 is the head now, first received with a1 over an hour ago.
    receive += 1;
    let processed = deliver(vec![fifo_record("a2", "defer:30", "A", receive)]).await;
    assert_eq!(
        (processed.report.dead_lettered, processed.report.deferred),
        (0, 1),
        "a2's wait starts now"
    );
    assert_eq!(failures(&processed), ["a2"]);
    let entry = ledger.entries(&["a2"]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert_eq!(entry.head_since_ms, Some(clock.now_ms()));
    // Its own hour later, the age limit holds for it too.
    clock.advance(3_600_000);
    receive += 1;
    let processed = deliver(vec![fifo_record("a2", "defer:30", "A", receive)]).await;
    assert_eq!(processed.report.dead_lettered, 1);
}

#[tokio::test]
async fn a_fifo_deferral_waits_in_place_as_long_as_the_record_has_waited_and_ends_at_the_age_limit()
{
    let clock = Arc::new(ManualClock::at(NOW));
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = processor(RetryPolicy::default())
        .with_clock(clock.clone())
        .with_ledger(ledger.clone());
    let handler = handler();
    let deliver = |receive: u32| {
        let json = event(vec![
            fifo_record("a1", "defer:30", "A", receive),
            fifo_record("a2", "ok", "A", receive),
        ]);
        let (processor, handler, deadline) = (&processor, &handler, clock.now_ms() + 60_000);
        async move {
            let event = SqsEvent::parse(&json).unwrap();
            processor
                .process(handler, &event.records, deadline)
                .await
                .unwrap()
        }
    };
    let mut waits = Vec::new();
    let mut receive = 1;
    loop {
        let processed = deliver(receive).await;
        if processed.report.dead_lettered > 0 {
            assert_eq!(failures(&processed), ["a2"], "held back behind its head");
            break;
        }
        assert_eq!(
            processed.report.deferred, 1,
            "a deferral in place counts for the Deferred alarm"
        );
        let calls = processor.queue().calls();
        let Some(Call::ChangeVisibility { changes, .. }) = calls.last() else {
            panic!("{calls:?}")
        };
        let wait = changes[0].1;
        waits.push(wait.as_secs());
        clock.advance(u64::try_from(wait.as_millis()).unwrap());
        receive += 1;
    }
    // Doubling from the breaker's 30 s to the 1 h limit: 8 receives, not the 120 of fixed waits.
    assert_eq!(waits, [30, 30, 60, 120, 240, 480, 960, 1680]);
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(dead.len(), 1);
    let meta = meta_of(&dead[0]);
    assert_eq!((&*meta.error_kind, meta.attempts), ("deferred_too_long", 0));
    // The deferrals and the holds behind them are untried: in the ledger, not in the attempts.
    let entries: Vec<_> = ledger
        .inner()
        .entries(&["a1", "a2"])
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.expect("read"))
        .collect();
    assert_eq!(entries[0].untried, (1..=8).collect::<Vec<u32>>());
    assert_eq!(entries[1].untried, (1..=9).collect::<Vec<u32>>());
}

/// A processor whose FIFO heads hold their group (for up to three days) in `ledger`.
fn holding(ledger: Arc<dyn AttemptLedger>, clock: Arc<ManualClock>) -> Processor<RecordingQueue> {
    let config = ProcessorConfig {
        dlq_url: Some(DLQ.into()),
        fifo_on_dead_letter: redrive_core::fifo::FifoOnDeadLetter::Hold {
            max_age: Duration::from_secs(3 * 86400),
        },
        ..ProcessorConfig::default()
    };
    Processor::new(RecordingQueue::default(), config)
        .with_clock(clock)
        .with_ledger(ledger)
}

/// A head held on its first receive (no ledger read then: nothing to release yet), then back
/// after its wait while the operator releases it with `release`: that batch in flight read the
/// hold before the release. Returns the processor and its ledger.
async fn released_while_in_flight(release: Release) -> (Processor<RecordingQueue>, Arc<Scripted>) {
    let ledger = Arc::new(Scripted {
        inner: MemoryLedger::new(),
        script: Script::ThenRelease("a1", release),
    });
    let processor = holding(ledger.clone(), Arc::new(ManualClock::at(NOW)));
    let handler = handler();
    let held = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a1", "permanent", "A", 1)]),
    )
    .await;
    assert_eq!(held.report.held, 1);
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a1", "ok", "A", 2)]),
    )
    .await;
    assert_eq!(failures(&processed), ["a1"], "given back, untried");
    (processor, ledger)
}

/// `dlq release` while the head is in flight: the consumer's renewal must not bring the hold back
/// (nor set an 11 h 40 min wait the release undid).
#[tokio::test]
async fn a_release_that_lands_while_the_head_is_in_flight_is_not_undone() {
    let (processor, ledger) = released_while_in_flight(Release::Retry).await;
    assert!(
        ledger.held().await.unwrap().is_empty(),
        "the release stands: {:?}",
        ledger.held().await.unwrap()
    );
    assert_eq!(
        processor.queue().visibility_changes().last(),
        Some(&("rh-a1".to_owned(), Duration::ZERO)),
        "it comes back at once, to be tried with its fresh attempts"
    );
}

/// `dlq release --dead-letter` while the head is in flight: the consumer's renewal must not set an
/// 11 h 40 min wait on a head released to the DLQ; it comes back at once and goes there.
#[tokio::test]
async fn a_release_to_the_dlq_that_lands_while_the_head_is_in_flight_takes_effect_at_once() {
    let (processor, _) = released_while_in_flight(Release::DeadLetter).await;
    assert_eq!(
        processor.queue().visibility_changes().last(),
        Some(&("rh-a1".to_owned(), Duration::ZERO)),
        "it comes back at once"
    );
    assert!(processor.queue().sent_to(DLQ).is_empty());
    // Back: the release to the DLQ is read before anything, and carried out.
    let dead = run(
        &processor,
        &handler(),
        &event(vec![fifo_record("a1", "ok", "A", 3)]),
    )
    .await;
    assert!(failures(&dead).is_empty());
    assert_eq!(processor.queue().sent_to(DLQ).len(), 1);
}

/// A hold the ledger did not write leaves its head where no operator sees it (`dlq held`, the
/// `HeldHeads` gauge): it must not wait there 11 h 40 min, but come back after its queue's
/// visibility timeout to be held again.
#[tokio::test]
async fn a_hold_the_ledger_did_not_write_comes_back_to_be_held_again() {
    let ledger = Arc::new(Scripted {
        inner: MemoryLedger::new(),
        script: Script::RefusesHolds,
    });
    let processor = holding(ledger.clone(), Arc::new(ManualClock::at(NOW)));
    let handler = handler();
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            fifo_record("a1", "permanent", "A", 1),
            fifo_record("a2", "ok", "A", 1),
        ]),
    )
    .await;
    assert_eq!(failures(&processed), ["a1", "a2"], "its group waits");
    assert!(
        processor.queue().sent_to(DLQ).is_empty(),
        "not dead-lettered"
    );
    assert!(ledger.held().await.unwrap().is_empty());
    let waits: Vec<_> = processor
        .queue()
        .visibility_changes()
        .into_iter()
        .filter(|(handle, _)| handle == "rh-a1")
        .collect();
    assert!(
        waits.is_empty(),
        "back after its visibility timeout, not after a wait set for a hold: {waits:?}"
    );
}

/// Issue 43, item 1: the Held alarm watches `HeldHeads`, which every container reports from the
/// ledger at least once a minute while it has batches, so a held group keeps it in ALARM between
/// its head's returns (11 h 40 min apart), whatever other groups do; it falls to 0 once the hold
/// ends. (Before, only a batch that held reported 1, and the next batch of another group 0.)
#[tokio::test]
async fn the_held_heads_gauge_stays_up_while_a_group_is_held_and_falls_when_it_is_released() {
    let ledger = Arc::new(MemoryLedger::new());
    let clock = Arc::new(ManualClock::at(NOW));
    let processor = holding(ledger.clone(), clock.clone());
    let handler = handler();
    let run = |json: String| {
        let (processor, handler, clock) = (&processor, &handler, &clock);
        async move {
            let event = SqsEvent::parse(&json).unwrap();
            let deadline = clock.now_ms() + 60_000;
            let processed = processor
                .process(handler, &event.records, deadline)
                .await
                .unwrap();
            assert!(
                failures(&processed).iter().all(|id| id == "a1"),
                "only a1 fails"
            );
            processed
        }
    };
    let other_group = |n: u32| event(vec![fifo_record(&format!("b{n}"), "ok", "B", 1)]);

    let held = run(event(vec![fifo_record("a1", "permanent", "A", 1)])).await;
    assert_eq!((held.report.held, held.report.held_heads), (1, Some(1)));
    // Within the minute, another group's batch does not ask the ledger again: no figure.
    clock.advance(20_000);
    let quiet = run(other_group(1)).await;
    assert_eq!(quiet.report.held_heads, None);
    // Every minute after, hours before the head comes back, still held.
    for n in 2..5 {
        clock.advance(60_000);
        let later = run(other_group(n)).await;
        assert_eq!((later.report.held, later.report.held_heads), (0, Some(1)));
    }
    ledger.release_hold("a1", Release::Retry).await.unwrap();
    clock.advance(60_000);
    let released = run(other_group(5)).await;
    assert_eq!(released.report.held_heads, Some(0));
}

#[tokio::test]
async fn with_hold_a_head_that_would_be_dead_lettered_holds_its_group_until_an_operator_releases_it(
) {
    use redrive_core::fifo::FifoOnDeadLetter;
    let ledger = Arc::new(MemoryLedger::new());
    let holding = |max_age: Duration| {
        let config = ProcessorConfig {
            dlq_url: Some(DLQ.into()),
            fifo_on_dead_letter: FifoOnDeadLetter::Hold { max_age },
            ..ProcessorConfig::default()
        };
        Processor::new(RecordingQueue::default(), config)
            .with_clock(Arc::new(ManualClock::at(NOW)))
            .with_ledger(ledger.clone())
    };
    let processor = holding(Duration::from_secs(3 * 86400));
    let handler = handler();
    let batch = |receive: u32, head: &str| {
        event(vec![
            fifo_record("a1", head, "A", receive),
            fifo_record("a2", "ok", "A", receive),
            fifo_record("b1", "ok", "B", receive),
        ])
    };
    // A permanent failure: not dead-lettered, the group waits in place; B goes on.
    let processed = run(&processor, &handler, &batch(1, "permanent")).await;
    assert_eq!(failures(&processed), ["a1", "a2"]);
    assert_eq!(
        (processed.report.held, processed.report.dead_lettered),
        (1, 0)
    );
    assert!(processor.queue().sent_to(DLQ).is_empty());
    let Some(Call::ChangeVisibility { changes, .. }) = processor.queue().calls().last().cloned()
    else {
        panic!("a visibility change")
    };
    assert_eq!(
        changes[0],
        (
            "rh-a1".to_owned(),
            redrive_core::SourceQueue::default().max_in_place_wait()
        )
    );
    let held = ledger.held().await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (&*held[0].0, &*held[0].1.error_kind),
        ("a1", "invalid_order")
    );

    // Back after its wait: held again without a try, the failure it was held for kept.
    let calls = handler.calls.load(Ordering::SeqCst);
    let processed = run(&processor, &handler, &batch(2, "ok")).await;
    assert_eq!(failures(&processed), ["a1", "a2"]);
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        calls + 1,
        "b1 only: a1 is not tried"
    );
    let entry = ledger.entries(&["a1"]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert_eq!(
        (
            entry.untried.as_slice(),
            &*entry.hold.as_ref().unwrap().error_kind
        ),
        (&[2][..], "invalid_order")
    );

    // Released to be tried again (the cause is fixed): a fresh set of attempts, and the group
    // goes on in order.
    ledger.release_hold("a1", Release::Retry).await.unwrap();
    let processed = run(&processor, &handler, &batch(3, "ok")).await;
    assert!(failures(&processed).is_empty());
    assert!(ledger.held().await.unwrap().is_empty());

    // Released to the DLQ: dead-lettered as the operator's decision; the group goes on.
    run(
        &processor,
        &handler,
        &event(vec![fifo_record("c1", "permanent", "C", 1)]),
    )
    .await;
    ledger
        .release_hold("c1", Release::DeadLetter)
        .await
        .unwrap();
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            fifo_record("c1", "permanent", "C", 2),
            fifo_record("c2", "ok", "C", 1),
        ]),
    )
    .await;
    // As any head dead-lettered: the rest of the group follows in the next batch.
    assert_eq!(failures(&processed), ["c2"]);
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(&*meta_of(&dead[0]).error_kind, "released_to_dlq");
    assert!(
        ledger.held().await.unwrap().is_empty(),
        "its dead letter confirmed, the hold is over: dlq held no longer lists it"
    );
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("c2", "ok", "C", 2)]),
    )
    .await;
    assert!(failures(&processed).is_empty());

    // A hold older than the hold limit dead-letters its head before the retention drops it.
    let old = holding(Duration::from_secs(3600));
    let mut record = fifo_record("d1", "permanent", "D", 1);
    record["attributes"]["SentTimestamp"] = (NOW - 2 * 3_600_000).to_string().into();
    let processed = run(&old, &handler, &event(vec![record])).await;
    assert_eq!(
        (processed.report.held, processed.report.dead_lettered),
        (0, 1)
    );
}

const LANE: &str = "https://sqs.local/123456789012/orders-held.fifo";
const LANE_ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:orders-held.fifo";

/// Writes down the body of every message it is handed, then acts on it as [`ByBody`] does.
struct Logged {
    inner: ByBody,
    bodies: std::sync::Mutex<Vec<String>>,
}

impl RecordHandler for Logged {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        self.bodies.lock().unwrap().push(message.body().to_owned());
        self.inner.handle(message).await
    }
}

/// A FIFO source record with its `SequenceNumber`.
fn sequenced(id: &str, body: &str, group: &str, receives: u32, sequence: u32) -> serde_json::Value {
    let mut record = fifo_record(id, body, group, receives);
    record["attributes"]["SequenceNumber"] = format!("1884949646046769{sequence:04}").into();
    record
}

/// The lane's delivery `id` (received `receives` times) of a copy sent there.
fn lane_record(copy: &OutgoingMessage<'_>, id: &str, receives: u32) -> serde_json::Value {
    let group = copy.group_id.as_deref().expect("a lane copy has a group");
    let mut record = fifo_record(id, &copy.body, group, receives);
    record["eventSourceARN"] = LANE_ARN.into();
    record["messageAttributes"] = copy
        .attributes
        .iter()
        .map(|(name, value)| (name.to_string(), serde_json::to_value(value).unwrap()))
        .collect::<serde_json::Map<_, _>>()
        .into();
    record
}

/// A processor whose FIFO heads hold their group in the retry lane `LANE`, with `ledger`.
fn laned(ledger: Arc<dyn AttemptLedger>) -> Processor<RecordingQueue> {
    let config = ProcessorConfig {
        dlq_url: Some(DLQ.into()),
        fifo_on_dead_letter: redrive_core::fifo::FifoOnDeadLetter::Hold {
            max_age: Duration::from_secs(3 * 86400),
        },
        lane_url: Some(LANE.into()),
        ..ProcessorConfig::default()
    };
    Processor::new(RecordingQueue::default(), config)
        .with_clock(Arc::new(ManualClock::at(NOW)))
        .with_ledger(ledger)
}

/// Issue 42, item 1: with a retry lane, a head that would hold its group is parked there with its
/// failure and deleted from the source, and the group's later records follow it there untried,
/// in order, so that the source's other groups never queue behind a held group's backlog (SQS
/// looks at the first 120,000 messages of a FIFO queue only). In the lane the head holds its
/// group until an operator releases it; once the lane's records are done, the group runs in its
/// source again, after them. Fails before the lane: the head is held in place in the source.
#[tokio::test]
async fn with_a_lane_a_held_group_waits_there_in_order_and_its_source_goes_on() {
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = laned(ledger.clone());
    let handler = Logged {
        inner: handler(),
        bodies: Default::default(),
    };
    let handled = || handler.bodies.lock().unwrap().clone();

    // a1 fails: parked with its failure, deleted from the source; a2 behind it is given back
    // untried; B goes on.
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            sequenced("a1", "permanent:a1", "A", 1, 1),
            sequenced("a2", "ok:a2", "A", 1, 2),
            sequenced("b1", "ok:b1", "B", 1, 3),
        ]),
    )
    .await;
    assert_eq!(failures(&processed), ["a2"]);
    assert_eq!((processed.report.parked, processed.report.held), (1, 0));
    assert!(processor.queue().sent_to(DLQ).is_empty());
    assert_eq!(handled(), ["permanent:a1", "ok:b1"]);

    // a2 comes back and a3 arrives: both follow a1 to the lane untried, in order; B goes on.
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            sequenced("a2", "ok:a2", "A", 2, 2),
            sequenced("a3", "ok:a3", "A", 1, 4),
            sequenced("b2", "ok:b2", "B", 1, 5),
        ]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processed.report.parked, 2);
    assert_eq!(handled(), ["permanent:a1", "ok:b1", "ok:b2"]);
    let lane = processor.queue().sent_to(LANE);
    let bodies: Vec<&str> = lane.iter().map(|copy| &*copy.body).collect();
    assert_eq!(bodies, ["permanent:a1", "ok:a2", "ok:a3"]);
    assert!(lane
        .iter()
        .all(|copy| copy.group_id.as_deref() == Some("A")));
    assert_eq!(&*meta_of(&lane[0]).error_kind, "invalid_order");
    assert_eq!(&*meta_of(&lane[1]).error_kind, "follows_group");

    // In the lane: the head holds its group there, untried, with the failure it was parked for.
    let processed = run(
        &processor,
        &handler,
        &event(vec![lane_record(&lane[0], "l1", 1)]),
    )
    .await;
    assert_eq!(failures(&processed), ["l1"]);
    assert_eq!(handled().len(), 3, "not tried");
    let held = ledger.held().await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (&*held[0].0, &*held[0].1.queue_arn, &*held[0].1.error_kind),
        ("l1", LANE_ARN, "invalid_order")
    );
    // Meanwhile the group's later records keep following it, and B keeps going, at the cost of
    // one ledger read for the batch's groups.
    let reads = ledger.reads();
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            sequenced("a4", "ok:a4", "A", 1, 6),
            sequenced("b3", "ok:b3", "B", 1, 7),
        ]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processor.queue().sent_to(LANE).len(), 4);
    assert_eq!(ledger.reads(), reads + 1);

    // Released to be tried again: tried with a fresh set of attempts; it fails again, and holds
    // its group in place in the lane.
    ledger.release_hold("l1", Release::Retry).await.unwrap();
    let processed = run(
        &processor,
        &handler,
        &event(vec![lane_record(&lane[0], "l1", 2)]),
    )
    .await;
    assert_eq!(failures(&processed), ["l1"]);
    assert_eq!(handled().last().map(String::as_str), Some("permanent:a1"));
    assert_eq!(ledger.held().await.unwrap().len(), 1);
    // Released to the DLQ: the group goes on in the lane, in order.
    ledger
        .release_hold("l1", Release::DeadLetter)
        .await
        .unwrap();
    let lane = processor.queue().sent_to(LANE);
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            lane_record(&lane[0], "l1", 3),
            lane_record(&lane[1], "l2", 1),
        ]),
    )
    .await;
    assert_eq!(
        failures(&processed),
        ["l2"],
        "behind its dead-lettered head"
    );
    assert_eq!(
        &*meta_of(&processor.queue().sent_to(DLQ)[0]).error_kind,
        "released_to_dlq"
    );
    // A source record while the lane's records are not all done still follows them.
    let processed = run(
        &processor,
        &handler,
        &event(vec![sequenced("a5", "ok:a5", "A", 1, 8)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    let lane = processor.queue().sent_to(LANE);
    assert_eq!(lane.len(), 5);
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            lane_record(&lane[1], "l2", 2),
            lane_record(&lane[2], "l3", 1),
            lane_record(&lane[3], "l4", 1),
            lane_record(&lane[4], "l5", 1),
        ]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    // Every record of the lane done: the group runs in its source again, after them.
    let processed = run(
        &processor,
        &handler,
        &event(vec![sequenced("a6", "ok:a6", "A", 1, 9)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processor.queue().sent_to(LANE).len(), 5, "a6 ran in place");
    let group_a: Vec<String> = handled()
        .into_iter()
        .filter(|body| body.ends_with(|c: char| c.is_ascii_digit()) && body.contains(":a"))
        .collect();
    assert_eq!(
        group_a,
        [
            "permanent:a1",
            "permanent:a1",
            "ok:a2",
            "ok:a3",
            "ok:a4",
            "ok:a5",
            "ok:a6"
        ]
    );
}

/// Issue 42, item 1, found by the soak: a record comes back to its source after it left for the
/// lane when the answer to its copy's send or its source delete is lost. A held head whose copy
/// SQS did not confirm is parked again as the held head (before: it followed itself, and was
/// tried in the lane with a fresh set of attempts no operator gave it); a record whose copy SQS
/// confirmed is done in its source, untried and not sent again (before: tried again in place,
/// after its group's later records had taken effect from the lane).
#[tokio::test]
async fn a_record_back_in_its_source_after_it_left_for_the_lane_is_parked_again_or_done() {
    let ledger = Arc::new(MemoryLedger::new());
    let processor = laned(ledger.clone());
    let handler = handler();
    let source = |id: &str, body: &str, receives: u32, sequence: u32| {
        event(vec![sequenced(id, body, "A", receives, sequence)])
    };
    let marks = || -> Vec<String> {
        processor
            .queue()
            .sent_to(LANE)
            .iter()
            .map(|copy| copy.attribute("redrive-lane").unwrap_or_default()[..4].to_owned())
            .collect()
    };
    // The lane refuses the copy: a1 is given back.
    processor.queue().fail_calls_to(LANE);
    let processed = run(&processor, &handler, &source("a1", "permanent", 1, 1)).await;
    assert_eq!(failures(&processed), ["a1"]);
    processor
        .queue()
        .fail_calls_to("https://sqs.local/123456789012/nowhere");
    // Back, its group waiting on it: parked again as the held head, untried.
    let processed = run(&processor, &handler, &source("a1", "permanent", 2, 1)).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1, "not tried again");
    // (The recording lists the refused send too.)
    assert_eq!(marks(), ["held", "held"], "sent again, held");
    // Its delete lost: back again, done here, its copy in the lane.
    let processed = run(&processor, &handler, &source("a1", "permanent", 3, 1)).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(marks(), ["held", "held"], "not sent again");
    // a2 follows; its delete lost, it comes back: done here, not sent again, not tried.
    run(&processor, &handler, &source("a2", "ok", 1, 2)).await;
    assert_eq!(marks(), ["held", "held", "foll"]);
    let processed = run(&processor, &handler, &source("a2", "ok", 2, 2)).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processed.report.done, 1);
    assert_eq!(marks(), ["held", "held", "foll"]);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
}

/// Issue 53, item 5: a park SQS did not confirm may have landed. Given back at the queue's
/// visibility timeout (360 s and more), it came back past the 5 minutes in which SQS deduplicates
/// its copy by its id, and the lane could hold two copies of a held head. It and its group's
/// records given back with it now come back within them.
#[tokio::test]
async fn a_park_not_confirmed_comes_back_within_the_lanes_deduplication_interval() {
    let processor = laned(Arc::new(MemoryLedger::new()));
    let handler = handler();
    processor.queue().fail_calls_to(LANE);
    let json = event(vec![
        sequenced("a1", "permanent", "A", 1, 1),
        sequenced("a2", "ok", "A", 1, 2),
        sequenced("b1", "ok", "B", 1, 3),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(failures(&processed), ["a1", "a2"], "b1 is done");
    let changes = processor.queue().visibility_changes();
    assert_eq!(changes.len(), 2, "{changes:?}");
    for (handle, visibility) in &changes {
        assert!(
            *visibility < Duration::from_secs(300),
            "{handle} comes back within SQS's 5-minute deduplication interval: {visibility:?}"
        );
    }
}

#[tokio::test]
async fn records_are_not_started_past_the_deadline_margin_and_a_slow_one_is_cut_off() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = event(vec![record("m-1", "ok"), record("m-2", "ok")]);
    let event_ = SqsEvent::parse(&json).unwrap();
    let processed = processor
        .process(&handler, &event_.records, NOW + 1_500)
        .await
        .unwrap();
    assert_eq!(failures(&processed), ["m-1", "m-2"]);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0);

    // A real-time deadline: the slow handler is abandoned at the margin and retried as transient.
    // One record at a time: m-2 waits behind it.
    let (processor, now) = on_the_real_clock(1);
    let json = event(vec![record("m-1", "slow"), record("m-2", "ok")]);
    let event_ = SqsEvent::parse(&json).unwrap();
    let processed = processor
        .process(&handler, &event_.records, now + 400)
        .await
        .unwrap();
    assert_eq!(failures(&processed), ["m-2"], "not started");
    assert_eq!(
        &*meta_of(&processor.queue().sent_to(SOURCE)[0]).error_kind,
        "deadline"
    );
}

#[tokio::test]
async fn no_record_starts_past_the_margin_after_a_handler_that_never_yields() {
    let (processor, now) = on_the_real_clock(8);
    let handler = handler();
    let json = event(vec![
        record("m-1", "blocking:400"),
        record("m-2", "ok"),
        record("m-3", "ok"),
    ]);
    let event_ = SqsEvent::parse(&json).unwrap();
    let processed = processor
        .process(&handler, &event_.records, now + 400)
        .await
        .unwrap();
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
    assert_eq!(failures(&processed), ["m-2", "m-3"], "not started");
    assert_eq!(processed.report.done, 1, "m-1 finished: it is done");
    assert!(processor.queue().sent_to(SOURCE).is_empty());
}

#[tokio::test]
async fn ten_original_attributes_are_packed_into_the_dlq_copy() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let mut rec = record("m-1", "permanent");
    for i in 0..9 {
        rec["messageAttributes"][format!("a{i}")] =
            serde_json::json!({"stringValue": format!("v{i}"), "dataType": "String"});
    }
    rec["messageAttributes"]["bin"] =
        serde_json::json!({"binaryValue": "AAEC", "dataType": "Binary"});
    let processed = run(&processor, &handler, &event(vec![rec.clone()])).await;
    assert!(failures(&processed).is_empty());
    let dead = &processor.queue().sent_to(DLQ)[0];
    assert_eq!(
        dead.attributes.len(),
        1,
        "10 originals + metadata would exceed SQS's limit"
    );
    let packed = meta_of(dead).attributes.unwrap();
    assert_eq!(packed.len(), 11);
    assert_eq!(packed["bin"].binary_value.as_deref(), Some("AAEC"));
    assert_eq!(packed["a3"].string_value.as_deref(), Some("v3"));
}

#[tokio::test]
async fn a_record_without_a_body_is_given_back() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = r#"{"Records":[{"messageId":"m-1","eventSourceARN":"arn:aws:sqs:eu-west-1:1:q"}]}"#;
    let event = SqsEvent::parse(json).unwrap();
    let processed = processor
        .process(&handler, &event.records, DEADLINE)
        .await
        .unwrap();
    assert_eq!(failures(&processed), ["m-1"]);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0);
}

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

#[tokio::test]
async fn without_a_dlq_every_failure_is_reported_and_nothing_is_sent() {
    let processor = processor_with_dlq(None, RetryPolicy::default());
    let handler = handler();
    let json = event(vec![
        record("m-ok", "ok"),
        record("m-tr", "transient"),
        record("m-pe", "permanent"),
        record("m-pa", "panic"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(failures(&processed), ["m-tr", "m-pe", "m-pa"]);
    assert!(processor.queue().calls().is_empty());
    assert_eq!(processed.report.sqs_requests, 0);
}

// The bad-input matrix (README, "Reliability"): the cases not covered by a rule above.

#[tokio::test]
async fn events_that_are_not_sqs_events_fail_the_batch_with_a_clear_error() {
    let cases = [
        (
            r#"{"Records": [{"messageId": "m-1", "body": "ok"}"#,
            "EOF while parsing",
        ),
        (
            r#"{"version":"0","detail-type":"OrderPlaced","detail":{}}"#,
            "missing field `Records`",
        ),
        ("{}", "missing field `Records`"),
        (
            r#"{"Records": {"messageId": "m-1"}}"#,
            "invalid type: map, expected a sequence",
        ),
        // SQS accepts no lone surrogate in a body, so no SQS event carries one.
        (
            r#"{"Records": [{"messageId": "m-1", "body": "\ud800"}]}"#,
            "hex escape",
        ),
    ];
    for (json, reason) in cases {
        let error = BatchError::from(SqsEvent::parse(json).unwrap_err()).to_string();
        assert!(
            error.starts_with("the event is not an SQS, Kinesis or DynamoDB Streams event: "),
            "{error}"
        );
        assert!(error.contains(reason), "{json}: {error}");
    }
    // Bytes that are not UTF-8 do not even reach the handler: the runtime refuses the payload.
    let bytes = b"{\"Records\": [{\"messageId\": \"m-1\", \"body\": \"\xff\"}]}";
    assert!(serde_json::from_slice::<Box<serde_json::value::RawValue>>(bytes).is_err());
}

#[tokio::test]
async fn a_body_near_one_mebibyte_is_retried_with_its_metadata_or_given_back_when_it_cannot_be() {
    let processor = processor(RetryPolicy::default());
    let fits = format!("transient:{}", "x".repeat((1 << 20) - 2_000));
    let too_big = format!("transient:{}", "x".repeat((1 << 20) - 100));
    let json = event(vec![record("m-fits", &fits), record("m-big", &too_big)]);
    let processed = run(&processor, &handler(), &json).await;
    assert_eq!(
        failures(&processed),
        ["m-big"],
        "given back unchanged for the queue's redrive policy"
    );
    let retried = processor.queue().sent_to(SOURCE);
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].body.len(), fits.len(), "the body is never cut");
    assert!(retried[0].size() <= 1 << 20);
    assert_eq!(meta_of(&retried[0]).attempts, 1);
}

struct Verbose;
impl RecordHandler for Verbose {
    async fn handle(&self, _: &Message<'_>) -> Result<(), RecordError> {
        Err(RecordError::permanent("invalid_order", "é".repeat(50_000)))
    }
}

#[tokio::test]
async fn a_huge_error_message_is_cut_at_a_character_boundary_in_the_metadata() {
    let processor = processor(RetryPolicy::default());
    let json = event(vec![record("m-1", "ok")]);
    let records = SqsEvent::parse(&json).unwrap().records;
    processor
        .process(&Verbose, &records, DEADLINE)
        .await
        .unwrap();
    let dead = processor.queue().sent_to(DLQ);
    let meta = meta_of(&dead[0]);
    assert!(
        meta.error_message.len() <= 1024,
        "{}",
        meta.error_message.len()
    );
    assert!(meta.error_message.ends_with("…[truncated]"));
    assert!(meta.error_message.starts_with("éé"));
}

#[tokio::test]
async fn json_reads_a_body_as_serde_json_reads_its_text() {
    /// What `Message::json` gave, and what serde_json gives from the body's text.
    struct Reads(std::sync::Mutex<Vec<(String, String)>>);
    impl RecordHandler for Reads {
        async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
            let read = message.json::<serde_json::Value>();
            let text = serde_json::from_str::<serde_json::Value>(message.body())
                .map_err(|error| RecordError::permanent("malformed_body", error));
            let show = |value: Result<serde_json::Value, RecordError>| match value {
                Ok(value) => value.to_string(),
                Err(error) => format!("error: {error}"),
            };
            self.0.lock().unwrap().push((show(read), show(text)));
            Ok(())
        }
    }
    let bodies = [
        r#"{"a":"b","n":[1,2.5,-0,1e3,12345678901234567890],"t":true,"z":null}"#,
        r#" [1, {"k": "é"}] "#,
        r#"{"a":"x\"y"}"#,
        r#"{"a":1,}"#,
        r#"{"a":01}"#,
        "{\"a\":\"tab\there\"}",
        "plain text",
        "",
    ];
    let records = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| record(&format!("m-{i}"), body))
        .collect();
    let handler = Reads(Default::default());
    let processor = processor(RetryPolicy::default());
    run(&processor, &handler, &event(records)).await;
    let reads = handler.0.into_inner().unwrap();
    assert_eq!(reads.len(), bodies.len());
    for ((read, text), body) in reads.iter().zip(bodies) {
        assert_eq!(read, text, "{body}");
    }
    assert!(!reads[0].0.starts_with("error"), "{:?}", reads[0]);
    assert!(reads[3].0.starts_with("error"), "{:?}", reads[3]);
}

/// Concurrency: proven by counting records in flight and the order of calls, never by timing.
mod concurrency {
    use std::sync::Mutex;

    use redrive_core::breaker::BreakerState;
    use redrive_core::{BreakerSettings, CircuitBreaker};

    use super::*;

    /// Counts records in flight (in all and per message group) and logs the order of the calls.
    /// A body is `ok`, `transient`, `permanent` or `panic`, after a sleep of 1 ms or of the
    /// `+nap:<ms>` it ends with.
    #[derive(Default)]
    struct Counting {
        in_flight: Mutex<InFlight>,
    }

    #[derive(Default)]
    struct InFlight {
        now: usize,
        most: usize,
        per_group: std::collections::HashMap<String, usize>,
        most_in_a_group: usize,
        calls: Vec<String>,
    }

    impl Counting {
        fn new() -> Self {
            Self::default()
        }
        fn most(&self) -> usize {
            self.in_flight.lock().unwrap().most
        }
        fn most_in_a_group(&self) -> usize {
            self.in_flight.lock().unwrap().most_in_a_group
        }
        fn calls(&self) -> Vec<String> {
            self.in_flight.lock().unwrap().calls.clone()
        }
        fn change(&self, message: &Message<'_>, by: isize) {
            let mut flight = self.in_flight.lock().unwrap();
            flight.now = flight.now.checked_add_signed(by).unwrap();
            flight.most = flight.most.max(flight.now);
            if let Some(group) = message.group_id() {
                let in_group = flight.per_group.entry(group.to_owned()).or_default();
                *in_group = in_group.checked_add_signed(by).unwrap();
                let in_group = *in_group;
                flight.most_in_a_group = flight.most_in_a_group.max(in_group);
            }
            if by > 0 {
                flight.calls.push(message.id().to_owned());
            }
        }
    }

    impl RecordHandler for Counting {
        async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
            self.change(message, 1);
            // Both sleep and panic leave through here: the count goes down on unwinding too.
            struct Leave<'a>(&'a Counting, Message<'a>);
            impl Drop for Leave<'_> {
                fn drop(&mut self) {
                    self.0.change(&self.1, -1);
                }
            }
            let _leave = Leave(self, *message);
            let (verdict, nap) = message
                .body()
                .split_once("+nap:")
                .unwrap_or((message.body(), "1"));
            tokio::time::sleep(Duration::from_millis(nap.parse().unwrap())).await;
            match verdict {
                "ok" => Ok(()),
                "transient" => Err(RecordError::transient("payment_timeout", "timed out")),
                "permanent" => Err(RecordError::permanent("invalid_order", "no")),
                "panic" => panic!("poison order"),
                other => panic!("unknown verdict {other}"),
            }
        }
    }

    fn processor_with(concurrency: usize) -> Processor<RecordingQueue> {
        let config = ProcessorConfig {
            dlq_url: Some(DLQ.into()),
            concurrency: NonZeroUsize::new(concurrency).unwrap(),
            ..ProcessorConfig::default()
        };
        Processor::new(RecordingQueue::default(), config)
            .with_clock(Arc::new(ManualClock::at(NOW)))
            .with_seed(7)
    }

    fn fifo(id: &str, body: &str, group: &str) -> serde_json::Value {
        let mut rec = record(id, body);
        rec["eventSourceARN"] = "arn:aws:sqs:eu-west-1:123456789012:orders.fifo".into();
        rec["attributes"]["MessageGroupId"] = group.into();
        rec
    }

    #[tokio::test]
    async fn the_bound_is_reached_and_never_exceeded() {
        let records: Vec<_> = (0..50).map(|i| record(&format!("m-{i}"), "ok")).collect();
        for (bound, expected) in [(1, 1), (8, 8), (100, 50)] {
            let processor = processor_with(bound);
            let handler = Counting::new();
            let processed = run(&processor, &handler, &event(records.clone())).await;
            assert!(failures(&processed).is_empty());
            assert_eq!(processed.report.done, 50);
            assert_eq!(handler.most(), expected, "bound {bound}");
        }
    }

    #[tokio::test]
    async fn fifo_groups_run_side_by_side_each_in_the_events_order() {
        // Three groups, interleaved; each group's records must be called in this order.
        let mut records = Vec::new();
        for i in 0..4 {
            for group in ["A", "B", "C"] {
                records.push(fifo(
                    &format!("{group}{i}"),
                    &format!("ok+nap:{}", 1 + i % 3),
                    group,
                ));
            }
        }
        let processor = processor_with(10);
        let handler = Counting::new();
        let processed = run(&processor, &handler, &event(records.clone())).await;
        assert!(failures(&processed).is_empty());
        assert_eq!(processed.report.done, 12);
        assert_eq!(
            handler.most_in_a_group(),
            1,
            "one record of a group at a time"
        );
        assert_eq!(handler.most(), 3, "the groups overlap");
        let calls = handler.calls();
        for group in ["A", "B", "C"] {
            let order: Vec<&String> = calls.iter().filter(|id| id.starts_with(group)).collect();
            let expected: Vec<String> = (0..4).map(|i| format!("{group}{i}")).collect();
            assert_eq!(order, expected.iter().collect::<Vec<_>>(), "group {group}");
        }

        // A bound of 1 calls every record in the event's order, as before lanes.
        let processor = processor_with(1);
        let handler = Counting::new();
        run(&processor, &handler, &event(records.clone())).await;
        let in_event_order: Vec<String> = records
            .iter()
            .map(|r| r["messageId"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(handler.calls(), in_event_order);
        assert_eq!(handler.most(), 1);
    }

    #[tokio::test]
    async fn a_failure_holds_back_only_the_rest_of_its_group() {
        let records = vec![
            fifo("a1", "ok+nap:2", "A"),
            fifo("b1", "ok+nap:1", "B"),
            fifo("a2", "transient", "A"),
            fifo("b2", "ok+nap:3", "B"),
            fifo("a3", "ok", "A"),
            fifo("c1", "permanent", "C"),
            fifo("b3", "ok", "B"),
            fifo("a4", "ok", "A"),
            fifo("c2", "ok", "C"),
        ];
        let processor = processor_with(10);
        let handler = Counting::new();
        let processed = run(&processor, &handler, &event(records)).await;
        assert_eq!(
            failures(&processed),
            ["a2", "a3", "a4", "c2"],
            "A gives back from its failure on; C's permanent failure is dead-lettered, and C's \
             next record waits for the next delivery; B goes on"
        );
        let mut calls = handler.calls();
        calls.sort();
        assert_eq!(
            calls,
            ["a1", "a2", "b1", "b2", "b3", "c1"],
            "nothing after a failure starts"
        );
        assert_eq!(processed.report.done, 4);
        assert_eq!(processed.report.dead_lettered, 1);
        let sent = processor.queue().sent_to(DLQ);
        assert_eq!(&*meta_of(&sent[0]).origin_message_id, "c1");
    }

    #[tokio::test]
    async fn a_panic_fails_only_its_own_record_among_concurrent_ones() {
        let records = vec![
            record("m-1", "ok+nap:5"),
            record("m-2", "panic+nap:1"),
            record("m-3", "ok+nap:3"),
            record("m-4", "transient+nap:2"),
        ];
        let processor = processor_with(4);
        let handler = Counting::new();
        let processed = run(&processor, &handler, &event(records)).await;
        assert!(failures(&processed).is_empty());
        assert_eq!(handler.most(), 4);
        assert_eq!(processed.report.done, 2);
        let dead = processor.queue().sent_to(DLQ);
        assert_eq!(dead.len(), 1);
        let meta = meta_of(&dead[0]);
        assert_eq!(
            (&*meta.origin_message_id, meta.error_class),
            ("m-2", ErrorClass::Panic)
        );
        let retried = processor.queue().sent_to(SOURCE);
        assert_eq!(&*meta_of(&retried[0]).origin_message_id, "m-4");
    }

    #[tokio::test]
    async fn at_the_deadline_every_record_in_flight_is_cut_off_and_the_rest_given_back() {
        let (processor, now) = on_the_real_clock(2);
        let handler = handler();
        let json = event(vec![
            record("m-1", "slow"),
            record("m-2", "slow"),
            record("m-3", "ok"),
        ]);
        let event_ = SqsEvent::parse(&json).unwrap();
        let processed = processor
            .process(&handler, &event_.records, now + 400)
            .await
            .unwrap();
        assert_eq!(failures(&processed), ["m-3"], "not started");
        assert_eq!(handler.calls.load(Ordering::SeqCst), 2);
        let retried = processor.queue().sent_to(SOURCE);
        let cut_off: Vec<(String, String)> = retried
            .iter()
            .map(meta_of)
            .map(|meta| {
                (
                    meta.origin_message_id.to_string(),
                    meta.error_kind.to_string(),
                )
            })
            .collect();
        assert_eq!(
            cut_off,
            [
                ("m-1".to_owned(), "deadline".to_owned()),
                ("m-2".to_owned(), "deadline".to_owned())
            ]
        );
    }

    /// Calls the downstream through a breaker; the downstream takes a few ms and succeeds.
    struct Guarded {
        breaker: CircuitBreaker,
        downstream_calls: AtomicU32,
    }

    impl RecordHandler for Guarded {
        async fn handle(&self, _message: &Message<'_>) -> Result<(), RecordError> {
            self.breaker
                .call(|| async {
                    self.downstream_calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok(())
                })
                .await
        }
    }

    #[tokio::test]
    async fn a_half_open_breaker_lets_exactly_one_probe_through_however_many_arrive_at_once() {
        let clock = Arc::new(ManualClock::at(NOW));
        let settings = BreakerSettings {
            threshold: 1,
            open_for: Duration::from_secs(10),
        };
        let handler = Guarded {
            breaker: CircuitBreaker::with_clock("payments", settings, clock.clone()),
            downstream_calls: AtomicU32::new(0),
        };
        // Open it.
        let opened = handler
            .breaker
            .call(|| async { Err::<(), _>(RecordError::transient("timeout", "down")) })
            .await;
        assert!(opened.is_err());
        assert!(matches!(handler.breaker.state(), BreakerState::Open { .. }));

        let records: Vec<_> = (0..10).map(|i| record(&format!("m-{i}"), "ok")).collect();
        let processor = processor_with(10).with_clock(clock.clone());
        // While open: no call at all.
        let processed = run(&processor, &handler, &event(records.clone())).await;
        assert_eq!(handler.downstream_calls.load(Ordering::SeqCst), 0);
        assert_eq!(processed.report.deferred, 10);

        // Half-open: ten records at once, one probe.
        clock.advance(10_000);
        let processor = processor_with(10).with_clock(clock.clone());
        let processed = run(&processor, &handler, &event(records)).await;
        assert_eq!(
            handler.downstream_calls.load(Ordering::SeqCst),
            1,
            "one probe"
        );
        assert_eq!((processed.report.done, processed.report.deferred), (1, 9));
        assert!(failures(&processed).is_empty());
        assert_eq!(
            handler.breaker.state(),
            BreakerState::Closed { failures: 0 }
        );
    }

    #[tokio::test]
    async fn one_processor_serves_several_invocations_at_once() {
        // As under Lambda Managed Instances, where lambda_runtime runs invocations concurrently.
        let processor = processor_with(4);
        let handler = Counting::new();
        let first = event(
            (0..6)
                .map(|i| record(&format!("a-{i}"), "ok+nap:2"))
                .collect(),
        );
        let second = event(
            (0..6)
                .map(|i| record(&format!("b-{i}"), "transient+nap:1"))
                .collect(),
        );
        let (first, second) = tokio::join!(
            run(&processor, &handler, &first),
            run(&processor, &handler, &second)
        );
        assert_eq!(first.report.done, 6);
        assert_eq!(second.report.retried, 6);
        assert!(failures(&first).is_empty() && failures(&second).is_empty());
        assert_eq!(handler.most(), 8, "each invocation keeps its own bound");
        assert_eq!(processor.queue().sent_to(SOURCE).len(), 6);
    }
}

/// Keeps what each record's handler saw of its invocation.
#[derive(Default)]
struct SeesInvocation {
    seen: std::sync::Mutex<Vec<(Option<String>, u64)>>,
}

impl RecordHandler for SeesInvocation {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let invocation = message.invocation();
        self.seen.lock().unwrap().push((
            invocation.request_id.map(str::to_owned),
            invocation.deadline_ms,
        ));
        Ok(())
    }
}

#[tokio::test]
async fn a_handler_sees_the_invocation_its_record_arrived_in() {
    let processor = processor(RetryPolicy::default());
    let handler = SeesInvocation::default();
    let json = event(vec![record("m-1", "ok"), record("m-2", "ok")]);
    let event = SqsEvent::parse(&json).unwrap();
    let invocation = redrive_core::Invocation {
        deadline_ms: DEADLINE,
        request_id: Some("8476a536-e9f4-5d5b-a3f4-0d3b6a2d4f1c"),
        ..redrive_core::Invocation::default()
    };
    processor
        .process(&handler, &event.records, invocation)
        .await
        .unwrap();
    let request = Some("8476a536-e9f4-5d5b-a3f4-0d3b6a2d4f1c".to_owned());
    assert_eq!(
        *handler.seen.lock().unwrap(),
        [(request.clone(), DEADLINE), (request, DEADLINE)]
    );
}

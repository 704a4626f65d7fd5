//! Large messages through S3, on an in-memory bucket and queue: the body a pointer stands for, the
//! failures of reading it, and one object per message across every copy of it.
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redrive_core::clock::ManualClock;
use redrive_core::envelope::{OutgoingMessage, MAX_MESSAGE_BYTES};
use redrive_core::payload::{MemoryPayloads, PayloadError, Pointer, SIZE_ATTRIBUTE};
use redrive_core::port::RecordingQueue;
use redrive_core::{
    ErrorClass, Message, Meta, Payloads, Processed, Processor, ProcessorConfig, RecordError,
    RecordHandler, RetryPolicy, SqsEvent,
};

const NOW: u64 = 1_763_790_000_000;
const DLQ: &str = "https://sqs.local/123456789012/orders-dlq";
const SOURCE: &str = "https://sqs.local/123456789012/orders";
const ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:orders";
const BUCKET: &str = "orders-payloads";

/// Fails a body that starts with `transient` or `permanent`; the rest succeed. Keeps the bodies it
/// saw.
#[derive(Default)]
struct Seen(std::sync::Mutex<Vec<String>>);

impl RecordHandler for Seen {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        self.0.lock().unwrap().push(message.body().to_owned());
        match message.body() {
            body if body.starts_with("transient") => {
                Err(RecordError::transient("payment_timeout", "timed out"))
            }
            body if body.starts_with("permanent") => Err(RecordError::permanent(
                "invalid_order",
                "amount must be positive",
            )),
            _ => Ok(()),
        }
    }
}

fn setup() -> (Processor<RecordingQueue>, Arc<MemoryPayloads>) {
    let bucket = Arc::new(MemoryPayloads::default());
    let mut config = ProcessorConfig::default();
    config.dlq_url = Some(DLQ.into());
    config.source_queue_url = Some(SOURCE.into());
    config.retry = {
        let mut retry_policy = RetryPolicy::default();
        retry_policy.max_attempts = 3;
        retry_policy
    };
    let processor = Processor::new(RecordingQueue::default(), config)
        .with_clock(Arc::new(ManualClock::at(NOW)))
        .with_seed(7)
        .with_payloads(Payloads::new(bucket.clone(), BUCKET));
    (processor, bucket)
}

/// A record as Lambda delivers it, with `attributes` as its message attributes.
fn record(id: &str, body: &str, attributes: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1763789990000"},
        "messageAttributes": attributes,
        "md5OfBody": "x", "eventSource": "aws:sqs", "eventSourceARN": ARN, "awsRegion": "eu-west-1"
    })
}

/// What the Extended Client sends for a body of `size` bytes it put at `key`.
fn pointer_record(id: &str, key: &str, size: usize) -> serde_json::Value {
    let pointer = Pointer {
        bucket: BUCKET.into(),
        key: key.into(),
    };
    record(
        id,
        &pointer.to_body(),
        serde_json::json!({
            SIZE_ATTRIBUTE: {"stringValue": size.to_string(), "dataType": "Number"},
            "tenant": {"stringValue": "acme", "dataType": "String"},
        }),
    )
}

/// A copy redrive sent, delivered again as `id`.
fn redelivered(id: &str, copy: &OutgoingMessage<'_>) -> serde_json::Value {
    let attributes: serde_json::Map<String, serde_json::Value> = copy
        .attributes
        .iter()
        .map(|(name, value)| (name.to_string(), serde_json::to_value(value).unwrap()))
        .collect();
    record(id, &copy.body, serde_json::Value::Object(attributes))
}

async fn run(
    processor: &Processor<RecordingQueue>,
    handler: &Seen,
    records: Vec<serde_json::Value>,
) -> Processed {
    let json = serde_json::json!({ "Records": records }).to_string();
    let event = SqsEvent::parse(&json).unwrap();
    processor
        .process(handler, &event.records, NOW + 60_000)
        .await
        .unwrap()
}

fn meta_of(message: &OutgoingMessage<'_>) -> Meta<'static> {
    serde_json::from_str::<Meta<'_>>(message.attribute("redrive").unwrap())
        .unwrap()
        .into_owned()
}

#[tokio::test]
async fn a_pointer_reaches_the_handler_as_its_body_and_the_producers_object_is_left() {
    let (processor, bucket) = setup();
    bucket.insert(BUCKET, "5b1f-producer", "{\"order\":1}");
    let handler = Seen::default();
    let processed = run(
        &processor,
        &handler,
        vec![
            pointer_record("m-large", "5b1f-producer", 11),
            record("m-small", "plain", serde_json::json!({})),
        ],
    )
    .await;

    assert!(processed.response.batch_item_failures.is_empty());
    let mut seen = handler.0.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, ["plain", "{\"order\":1}"]);
    assert_eq!(
        bucket.gets.load(Ordering::Relaxed),
        1,
        "one GET, for the pointer only"
    );
    assert_eq!(processed.report.payloads_fetched, 1);
    assert_eq!(
        bucket.deletes.load(Ordering::Relaxed),
        0,
        "not redrive's object"
    );
    assert!(bucket.object(BUCKET, "5b1f-producer").is_some());
}

#[tokio::test]
async fn an_unreadable_pointer_fails_its_record_alone_with_a_kind_of_its_own() {
    let (processor, _bucket) = setup();
    let handler = Seen::default();
    let processed = run(
        &processor,
        &handler,
        vec![
            pointer_record("m-gone", "expired", 2_000_000),
            record("m-ok", "fine", serde_json::json!({})),
        ],
    )
    .await;

    assert!(processed.response.batch_item_failures.is_empty());
    assert_eq!(
        *handler.0.lock().unwrap(),
        ["fine"],
        "the handler never sees a pointer"
    );
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(dead.len(), 1);
    let meta = meta_of(&dead[0]);
    assert_eq!(
        (meta.error_class, &*meta.error_kind),
        (ErrorClass::Permanent, "payload_missing")
    );
    assert_eq!(
        Pointer::parse(&dead[0].body).unwrap().key,
        "expired",
        "the pointer travels on"
    );
    assert_eq!(dead[0].attribute(SIZE_ATTRIBUTE), Some("2000000"));
    assert_eq!(dead[0].attribute("tenant"), Some("acme"));
}

#[tokio::test]
async fn an_unavailable_bucket_is_a_transient_failure_and_the_copy_keeps_the_pointer() {
    let (processor, bucket) = setup();
    bucket.insert(BUCKET, "k", "transient order");
    bucket.fail_with(Some(PayloadError::Unavailable("503 SlowDown".into())));
    let handler = Seen::default();
    run(&processor, &handler, vec![pointer_record("m-1", "k", 15)]).await;

    let retried = processor.queue().sent_to(SOURCE);
    assert_eq!(retried.len(), 1);
    assert_eq!(&*meta_of(&retried[0]).error_kind, "payload_unavailable");
    assert_eq!(meta_of(&retried[0]).error_class, ErrorClass::Transient);
    assert_eq!(Pointer::parse(&retried[0].body).unwrap().key, "k");
    assert_eq!(bucket.puts.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn a_body_too_large_for_its_context_goes_to_s3_once_for_all_its_copies_and_is_deleted_when_done(
) {
    let (processor, bucket) = setup();
    let body = format!(
        "transient{}",
        "x".repeat(MAX_MESSAGE_BYTES - 1 - "transient".len())
    );
    let handler = Seen::default();

    // First failure: the copy cannot carry body and context, so the body goes to S3.
    let first = run(
        &processor,
        &handler,
        vec![record("m-1", &body, serde_json::json!({}))],
    )
    .await;
    assert!(
        first.response.batch_item_failures.is_empty(),
        "not given back"
    );
    assert_eq!(first.report.payloads_offloaded, 1);
    let retry = processor.queue().sent_to(SOURCE).pop().unwrap();
    assert!(retry.size() <= MAX_MESSAGE_BYTES);
    let pointer = Pointer::parse(&retry.body).unwrap().into_owned();
    assert_eq!((&*pointer.bucket, &*pointer.key), (BUCKET, "redrive/m-1"));
    assert_eq!(
        retry.attribute(SIZE_ATTRIBUTE),
        Some(&*body.len().to_string())
    );
    assert_eq!(
        bucket.object(BUCKET, "redrive/m-1").as_deref(),
        Some(&*body)
    );
    let meta = meta_of(&retry);
    assert_eq!(
        (meta.attempts, &*meta.error_message),
        (1, "timed out"),
        "the whole context"
    );

    // Its retry fails again, then for good: the same object, no second put.
    let second = run(&processor, &handler, vec![redelivered("m-2", &retry)]).await;
    assert_eq!(second.report.payloads_fetched, 1);
    let retry = processor.queue().sent_to(SOURCE).pop().unwrap();
    let third = run(&processor, &handler, vec![redelivered("m-3", &retry)]).await;
    assert_eq!(third.report.dead_lettered, 1);
    let dead = processor.queue().sent_to(DLQ).pop().unwrap();
    assert_eq!(Pointer::parse(&dead.body).unwrap(), pointer);
    assert_eq!(&*meta_of(&dead).origin_message_id, "m-1");
    assert_eq!(
        bucket.puts.load(Ordering::Relaxed),
        1,
        "one object per message"
    );
    assert_eq!(bucket.len(), 1, "kept while the dead letter points at it");
    assert!(handler.0.lock().unwrap().iter().all(|seen| *seen == body));

    // Redriven and handled: the object goes with it.
    let fixed = Seen::default();
    bucket.insert(BUCKET, "redrive/m-1", "fixed order");
    let done = run(&processor, &fixed, vec![redelivered("m-4", &dead)]).await;
    assert_eq!((done.report.done, done.report.payload_orphans), (1, 0));
    assert!(bucket.is_empty(), "deleted once done");
}

#[tokio::test]
async fn a_pointer_on_a_hop_not_due_yet_goes_on_unread_and_keeps_its_attempts() {
    let (processor, bucket) = setup();
    bucket.fail_with(Some(PayloadError::Unavailable("503 SlowDown".into())));
    let meta = serde_json::json!({
        "v": 1, "attempts": 2, "dueAt": "2025-11-22T07:00:00.000Z",
        "originQueueArn": ARN, "originMessageId": "m-1",
        "firstFailureAt": "2025-11-22T05:00:00.000Z", "lastFailureAt": "2025-11-22T05:30:00.000Z",
        "errorClass": "transient", "errorKind": "payment_timeout", "errorMessage": "timed out"
    });
    let mut hop = pointer_record("m-2", "redrive/m-1", 2_000_000);
    hop["messageAttributes"]["redrive"] =
        serde_json::json!({ "stringValue": meta.to_string(), "dataType": "String" });
    let handler = Seen::default();
    run(&processor, &handler, vec![hop]).await;

    assert_eq!(
        bucket.gets.load(Ordering::Relaxed),
        0,
        "nothing to read before it is due"
    );
    let sent_on = processor.queue().sent_to(SOURCE);
    assert_eq!(sent_on.len(), 1);
    assert_eq!(meta_of(&sent_on[0]).attempts, 2, "a hop spends no attempt");
    assert_eq!(Pointer::parse(&sent_on[0].body).unwrap().key, "redrive/m-1");
}

#[tokio::test]
async fn a_copy_that_cannot_be_offloaded_is_given_back_as_without_a_bucket() {
    let (processor, bucket) = setup();
    bucket.fail_with(Some(PayloadError::Refused("AccessDenied".into())));
    let body = format!("permanent{}", "x".repeat(MAX_MESSAGE_BYTES - 100));
    let handler = Seen::default();
    let processed = run(
        &processor,
        &handler,
        vec![record("m-1", &body, serde_json::json!({}))],
    )
    .await;

    assert_eq!(processed.response.batch_item_failures.len(), 1);
    assert!(processor.queue().sent_to(DLQ).is_empty());
    assert_eq!(processed.report.payloads_offloaded, 0);
}

/// Puts whose key names `stall` never answer; the rest go to the bucket.
struct StallingPuts(Arc<MemoryPayloads>);

impl redrive_core::PayloadStore for StallingPuts {
    fn get<'a>(
        &'a self,
        pointer: &'a Pointer<'a>,
    ) -> futures_util::future::BoxFuture<'a, Result<String, PayloadError>> {
        self.0.get(pointer)
    }
    fn put<'a>(
        &'a self,
        pointer: &'a Pointer<'a>,
        body: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<(), PayloadError>> {
        if pointer.key.contains("stall") {
            Box::pin(std::future::pending())
        } else {
            self.0.put(pointer, body)
        }
    }
    fn delete<'a>(
        &'a self,
        pointer: &'a Pointer<'a>,
    ) -> futures_util::future::BoxFuture<'a, Result<(), PayloadError>> {
        self.0.delete(pointer)
    }
}

#[tokio::test]
async fn a_put_cut_off_at_the_deadline_is_an_orphan_and_the_puts_done_by_then_are_kept() {
    let bucket = Arc::new(MemoryPayloads::default());
    let mut config = ProcessorConfig::default();
    config.dlq_url = Some(DLQ.into());
    config.source_queue_url = Some(SOURCE.into());
    config.deadline_margin = Duration::from_millis(100);
    let processor = Processor::new(RecordingQueue::default(), config).with_payloads(Payloads::new(
        Arc::new(StallingPuts(bucket.clone())),
        BUCKET,
    ));
    let body = format!("transient{}", "x".repeat(MAX_MESSAGE_BYTES - 100));
    let json = serde_json::json!({ "Records": [
        record("m-fast", &body, serde_json::json!({})),
        record("m-stall", &body, serde_json::json!({})),
    ] })
    .to_string();
    let event = SqsEvent::parse(&json).unwrap();
    let now = redrive_core::clock::Clock::now_ms(&redrive_core::clock::SystemClock);
    let processed = processor
        .process(&Seen::default(), &event.records, now + 1_000)
        .await
        .unwrap();

    let retried = processor.queue().sent_to(SOURCE);
    assert_eq!(retried.len(), 1, "the copy whose put was done is sent");
    assert_eq!(
        Pointer::parse(&retried[0].body).unwrap().key,
        "redrive/m-fast"
    );
    let given_back: Vec<_> = processed
        .response
        .batch_item_failures
        .iter()
        .map(|failure| failure.item_identifier.as_str())
        .collect();
    assert_eq!(given_back, ["m-stall"]);
    assert_eq!(
        processed.report.payload_orphans, 1,
        "the cut-off put may have written"
    );
}

#[tokio::test]
async fn a_slow_bucket_fails_the_read_by_the_deadline_not_the_batch() {
    struct Stalled;
    impl redrive_core::PayloadStore for Stalled {
        fn get<'a>(
            &'a self,
            _: &'a Pointer<'a>,
        ) -> futures_util::future::BoxFuture<'a, Result<String, PayloadError>> {
            Box::pin(std::future::pending())
        }
        fn put<'a>(
            &'a self,
            _: &'a Pointer<'a>,
            _: &'a str,
        ) -> futures_util::future::BoxFuture<'a, Result<(), PayloadError>> {
            Box::pin(std::future::pending())
        }
        fn delete<'a>(
            &'a self,
            _: &'a Pointer<'a>,
        ) -> futures_util::future::BoxFuture<'a, Result<(), PayloadError>> {
            Box::pin(std::future::pending())
        }
    }
    let mut config = ProcessorConfig::default();
    config.dlq_url = Some(DLQ.into());
    config.source_queue_url = Some(SOURCE.into());
    config.deadline_margin = Duration::from_millis(100);
    let processor = Processor::new(RecordingQueue::default(), config)
        .with_payloads(Payloads::new(Arc::new(Stalled), BUCKET));
    let now = redrive_core::clock::Clock::now_ms(&redrive_core::clock::SystemClock);
    let json = serde_json::json!({ "Records": [pointer_record("m-1", "k", 3), record("m-2", "ok", serde_json::json!({}))] }).to_string();
    let event = SqsEvent::parse(&json).unwrap();
    let handler = Seen::default();
    let processed = processor
        .process(&handler, &event.records, now + 1_000)
        .await
        .unwrap();

    assert_eq!(*handler.0.lock().unwrap(), ["ok"]);
    let retried = processor.queue().sent_to(SOURCE);
    assert_eq!(retried.len(), 1);
    assert_eq!(&*meta_of(&retried[0]).error_kind, "payload_unavailable");
    assert!(processed.response.batch_item_failures.is_empty());
}

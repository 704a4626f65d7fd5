//! Every sample event in `events/` through the real handler, on an in-memory SQS port: the exact
//! response and where every record went.
use std::time::Duration;

use lambda_runtime::{Context, LambdaEvent};
use orders::payments::SimulatedPayments;
use orders::OrdersHandler;
use redrive::breaker::{BreakerSettings, TenantBreakerSettings, TenantBreakers};
use redrive::envelope::OutgoingMessage;
use redrive::lambda::Bytes;
use redrive::port::{Clock, SystemClock};
use redrive::testing::{Call, RecordingQueue};
use redrive::{ErrorClass, Meta, Processor, ProcessorConfig, RetryPolicy};

const DLQ: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-dlq";
const SOURCE: &str = "https://sqs.local/123456789012/orders";
const LANE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders-kafka-lane.fifo";
const REQUEST_ID: &str = "8476a536-e9f4-5d5b-a3f4-0d3b6a2d4f1c";
const TRACE_ID: &str = "Root=1-6743d1c2-5e8b3c0f1a2b3c4d5e6f7a8b;Parent=53995c3f42cd8ad8;Sampled=1";

struct Outcome {
    response: serde_json::Value,
    calls: Vec<Call>,
    queue: RecordingQueue,
}

fn knobs() -> SimulatedPayments {
    SimulatedPayments::from_env_file(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../events/sqs-consumer.env"),
    )
    .unwrap()
}

fn sample(file: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../events/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

async fn invoke(file: &str) -> Result<Outcome, redrive::BatchError> {
    invoke_json(sample(file)).await
}

async fn invoke_json(json: String) -> Result<Outcome, redrive::BatchError> {
    let mut config = ProcessorConfig::default();
    config.dlq_url = Some(DLQ.into());
    config.source_queue_url = None;
    config.retry = RetryPolicy::default();
    config.deadline_margin = Duration::from_secs(2);
    config.lane_url = Some(LANE.into());
    let processor = Processor::new(RecordingQueue::default(), config);
    let handler = OrdersHandler::new(
        knobs(),
        TenantBreakers::new(
            "payments",
            BreakerSettings::default(),
            TenantBreakerSettings::default(),
        ),
    );
    let mut context = Context::default();
    context.deadline = SystemClock.now_ms() + 30_000;
    context.request_id = REQUEST_ID.into();
    context.xray_trace_id = Some(TRACE_ID.into());
    context.env_config = std::sync::Arc::new(lambda_runtime::Config {
        function_name: "redrive-orders".into(),
        version: "7".into(),
        ..lambda_runtime::Config::default()
    });
    let event = LambdaEvent::new(Bytes::from(json), context.clone());
    let response = redrive::lambda::respond(
        redrive::lambda::handle_event(event, &processor, &handler).await?,
        "redrive",
        &context,
    );
    let queue = processor.into_queue();
    Ok(Outcome {
        response: serde_json::to_value(response).unwrap(),
        calls: queue.calls(),
        queue,
    })
}

impl Outcome {
    fn dead_letters(&self) -> Vec<(String, ErrorClass, String, u32)> {
        self.queue.sent_to(DLQ).iter().map(summary).collect()
    }
    fn retries(&self) -> Vec<(String, ErrorClass, String, u32)> {
        self.queue.sent_to(SOURCE).iter().map(summary).collect()
    }
}

fn meta(message: &OutgoingMessage<'_>) -> Meta<'static> {
    serde_json::from_str::<Meta<'_>>(message.attribute("redrive").unwrap())
        .unwrap()
        .into_owned()
}

fn summary(message: &OutgoingMessage<'_>) -> (String, ErrorClass, String, u32) {
    let meta = meta(message);
    let order: serde_json::Value = serde_json::from_str(&message.body).unwrap_or_default();
    let id = order["orderId"]
        .as_str()
        .map_or_else(|| meta.origin_message_id.to_string(), str::to_owned);
    (
        id,
        meta.error_class,
        meta.error_kind.to_string(),
        meta.attempts,
    )
}

#[tokio::test]
async fn every_copy_names_the_invocation_that_failed_it() {
    let outcome = invoke("sqs-mixed-batch.json").await.unwrap();
    let copies: Vec<_> = outcome
        .queue
        .sent_to(DLQ)
        .into_iter()
        .chain(outcome.queue.sent_to(SOURCE))
        .collect();
    assert!(!copies.is_empty());
    for copy in &copies {
        assert_eq!(
            meta(copy).failed_in,
            Some(redrive::envelope::FailedIn {
                function: "redrive-orders".into(),
                version: Some("7".into()),
                request_id: REQUEST_ID.into(),
                trace_id: Some(TRACE_ID.into()),
            })
        );
    }
}

fn no_failures() -> serde_json::Value {
    serde_json::json!({ "batchItemFailures": [] })
}

#[tokio::test]
async fn an_sqs_batch_is_told_from_a_kinesis_one_by_its_event_source_not_its_text() {
    // A message attribute may hold exactly "aws:kinesis", quotes and all, in the event's text.
    let mut event: serde_json::Value =
        serde_json::from_str(&sample("sqs-mixed-batch.json")).unwrap();
    event["Records"][0]["messageAttributes"] = serde_json::json!({
        "source": { "stringValue": "aws:kinesis", "dataType": "String" }
    });
    let marked = invoke_json(event.to_string()).await.unwrap();
    let plain = invoke("sqs-mixed-batch.json").await.unwrap();
    assert_eq!(marked.response, plain.response);
    assert_eq!(marked.dead_letters(), plain.dead_letters());
    assert_eq!(marked.retries(), plain.retries());
    assert_eq!(
        marked.retries().len(),
        1,
        "handled as SQS: a stream is never re-sent to"
    );
}

#[tokio::test]
async fn mixed_batch_every_order_has_its_fate() {
    let outcome = invoke("sqs-mixed-batch.json").await.unwrap();
    assert_eq!(outcome.response, no_failures());
    assert_eq!(
        outcome.dead_letters(),
        [
            (
                "o-1002".into(),
                ErrorClass::Permanent,
                "invalid_order".into(),
                1
            ),
            ("o-1004".into(), ErrorClass::Panic, "panic".into(), 1),
        ]
    );
    assert_eq!(
        outcome.retries(),
        [(
            "o-1003".into(),
            ErrorClass::Transient,
            "payment_timeout".into(),
            1
        )]
    );
    assert_eq!(outcome.calls.len(), 2, "one batched send per destination");
}

#[tokio::test]
async fn fifo_batch_holds_back_the_failed_group_and_lets_the_other_go_on() {
    let outcome = invoke("sqs-fifo-two-groups.json").await.unwrap();
    assert_eq!(
        outcome.response,
        serde_json::json!({ "batchItemFailures": [
            { "itemIdentifier": "5b1e7a30-2002-4c11-8e0f-000000002002" },
            { "itemIdentifier": "5b1e7a30-2004-4c11-8e0f-000000002004" },
        ]})
    );
    let [Call::ChangeVisibility { changes, .. }] = outcome.calls.as_slice() else {
        panic!("{:?}", outcome.calls)
    };
    assert_eq!(changes.len(), 2);
    assert!(
        changes[0].1 <= Duration::from_secs(2),
        "backoff for the first retry"
    );
    assert_eq!(changes[1].1, Duration::ZERO);
}

#[tokio::test]
async fn a_record_on_its_last_attempt_goes_to_the_dlq_with_its_history() {
    let outcome = invoke("sqs-retry-attempt.json").await.unwrap();
    assert_eq!(outcome.response, no_failures());
    let dead = outcome.queue.sent_to(DLQ);
    let meta = meta(&dead[0]);
    assert_eq!(
        (meta.attempts, meta.error_class),
        (5, ErrorClass::Transient)
    );
    assert_eq!(
        &*meta.origin_message_id, "7c3d9e11-3000-4a6b-b1c2-000000003000",
        "the first message id survives"
    );
    assert_eq!(
        meta.first_failure_at.to_string(),
        "2026-11-22T05:00:00.000Z"
    );
    assert!(meta.last_failure_at > meta.first_failure_at);
}

#[tokio::test]
async fn ten_attributes_are_packed_and_the_body_is_kept() {
    let outcome = invoke("sqs-ten-attributes.json").await.unwrap();
    assert_eq!(outcome.response, no_failures());
    let dead = outcome.queue.sent_to(DLQ);
    assert_eq!(dead[0].attributes.len(), 1);
    let packed = meta(&dead[0]).attributes.unwrap();
    assert_eq!(packed.len(), 10);
    assert_eq!(
        packed["signature"].binary_value.as_deref(),
        Some("c2lnbmVkLWJ5LWFjbWU=")
    );
    assert_eq!(
        &*dead[0].body,
        r#"{"orderId":"o-4001","customerId":"c-42","amount":25.0,"currency":"euro"}"#
    );
    assert_eq!(summary(&dead[0]).2, "invalid_order");
}

#[tokio::test]
async fn a_malformed_body_fails_only_its_record() {
    let outcome = invoke("sqs-malformed-body.json").await.unwrap();
    assert_eq!(outcome.response, no_failures());
    let dead = outcome.queue.sent_to(DLQ);
    assert_eq!(dead.len(), 1);
    assert_eq!(
        &*dead[0].body,
        r#"{"orderId":"o-5001","customerId":"c-42","amount":25.0,"#
    );
    assert_eq!(summary(&dead[0]).2, "malformed_body");
}

#[tokio::test]
async fn a_record_without_message_id_is_a_clear_whole_batch_error() {
    let error = invoke("sqs-missing-message-id.json")
        .await
        .err()
        .expect("whole-batch error");
    assert_eq!(
        error.to_string(),
        "record 1 has no messageId: Lambda's SQS event source always sets one, and a partial batch response cannot \
         name the record, so the whole batch is failed"
    );
}

#[tokio::test]
async fn a_dynamodb_stream_batch_charges_new_orders_dead_letters_the_invalid_one_and_stops_at_the_timeout(
) {
    let outcome = invoke("dynamodb-orders.json").await.unwrap();
    // o-6001 inserted (charged) and updated (not a payment), o-6002 dead-lettered, o-1003 times
    // out: Lambda retries from its sequence number, so the REMOVE after it is not started.
    assert_eq!(
        outcome.response,
        serde_json::json!({ "batchItemFailures": [{ "itemIdentifier": "4100000000000000001004" }] })
    );
    let dead = outcome.queue.sent_to(DLQ);
    assert_eq!(dead.len(), 1);
    let meta = meta(&dead[0]);
    assert_eq!(
        (
            meta.error_class,
            &*meta.error_kind,
            &*meta.origin_message_id,
            meta.attempts
        ),
        (
            ErrorClass::Permanent,
            "invalid_order",
            "4100000000000000001003",
            1
        )
    );
    let record: serde_json::Value = serde_json::from_str(&dead[0].body).unwrap();
    assert_eq!(
        record["dynamodb"]["NewImage"]["orderId"]["S"], "o-6002",
        "the dead letter is the record as the stream delivered it"
    );
    assert_eq!(
        &*meta.origin_queue_arn,
        "arn:aws:dynamodb:us-east-1:123456789012:table/redrive-orders/stream/2026-11-20T09:30:00.000"
    );
    assert!(outcome.retries().is_empty(), "a stream is never re-sent to");
}

#[tokio::test]
async fn a_kafka_batch_sends_the_invalid_order_to_the_dlq_the_timeout_to_the_lane_and_their_keys_follow(
) {
    let outcome = invoke("kafka-orders.json").await.unwrap();
    // Nothing holds a partition: o-7002 (invalid) is dead-lettered and o-7003, its customer's
    // next order, follows it there untried; o-1003 times out into the retry lane and o-7005 (the
    // same customer) follows it; o-7001 and o-7006 are charged.
    assert_eq!(outcome.response, no_failures());
    let kinds = |url: &str| -> Vec<(String, String)> {
        outcome
            .queue
            .sent_to(url)
            .iter()
            .map(|message| {
                let order: serde_json::Value = serde_json::from_str(&message.body).unwrap();
                (
                    order["orderId"].as_str().unwrap().to_owned(),
                    meta(message).error_kind.to_string(),
                )
            })
            .collect()
    };
    assert_eq!(
        kinds(DLQ),
        [
            ("o-7002".into(), "invalid_order".into()),
            ("o-7003".into(), "follows_dead_letter".into())
        ]
    );
    assert_eq!(
        kinds(LANE),
        [
            ("o-1003".into(), "payment_timeout".into()),
            ("o-7005".into(), "follows_key".into())
        ]
    );
    let lane = outcome.queue.sent_to(LANE);
    assert_eq!(
        lane[0].group_id.as_deref(),
        Some("orders:Yy0y"),
        "the key c-2's group"
    );
    assert_eq!(lane[0].deduplication_id.as_deref(), Some("orders-1:57"));
}

#[tokio::test]
async fn a_kinesis_batch_dead_letters_the_invalid_order_and_stops_at_the_timeout() {
    let outcome = invoke("kinesis-orders.json").await.unwrap();
    // o-5001 done, o-5002 dead-lettered, o-1003 times out: Lambda retries from its sequence
    // number, so o-5004 is not started in this invocation.
    assert_eq!(
        outcome.response,
        serde_json::json!({ "batchItemFailures": [{ "itemIdentifier": "49590338271490256608559692538361571095921575989136588892" }] })
    );
    assert_eq!(
        outcome.dead_letters(),
        [(
            "o-5002".into(),
            ErrorClass::Permanent,
            "invalid_order".into(),
            1
        )]
    );
    let dead = &outcome.queue.sent_to(DLQ)[0];
    assert_eq!(dead.attribute("partitionKey"), Some("c-9"));
    assert_eq!(
        &*meta(dead).origin_queue_arn,
        "arn:aws:kinesis:us-east-1:123456789012:stream/redrive-orders-stream"
    );
    assert!(outcome.retries().is_empty(), "a stream is never re-sent to");
    assert_eq!(
        outcome.calls.len(),
        1,
        "one SendMessageBatch for the dead letter"
    );
}

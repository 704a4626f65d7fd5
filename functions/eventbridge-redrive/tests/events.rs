//! The sample EventBridge DLQ batch and on-failure batch through the real handler and processor, on
//! in-memory ports: where every event went.
use std::sync::Arc;
use std::time::Duration;

use lambda_runtime::{Context, LambdaEvent};
use redrive::config::EventRedriveSettings;
use redrive::envelope::OutgoingMessage;
use redrive::eventbridge::{client_context, EventRedrive};
use redrive::lambda::Bytes;
use redrive::port::{Clock, SystemClock};
use redrive::testing::{Call, ManualClock, RecordingInvoker, RecordingQueue};
use redrive::{Meta, Processor, ProcessorConfig, RetryPolicy};

const PARKED: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/eventbridge-redrive-parked";
const AUDIT: &str = "https://sqs.local/123456789012/orders-audit";
const FUNCTION: &str = "arn:aws:lambda:us-east-1:123456789012:function:orders-events";

struct Run {
    response: serde_json::Value,
    processor: Processor<RecordingQueue>,
    handler: EventRedrive<RecordingQueue, RecordingInvoker>,
}

fn sample(file: &str) -> serde_json::Value {
    let json = std::fs::read_to_string(format!(
        "{}/../../events/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    serde_json::from_str(&json).unwrap()
}

/// One invocation with `batch`, 30 s to run: the batch response.
async fn handle(
    processor: &Processor<RecordingQueue>,
    handler: &EventRedrive<RecordingQueue, RecordingInvoker>,
    batch: &serde_json::Value,
) -> serde_json::Value {
    let mut context = Context::default();
    context.deadline = SystemClock.now_ms() + 30_000;
    let event = LambdaEvent::new(Bytes::from(batch.to_string()), context);
    let processed = redrive::lambda::handle_batch(event, processor, handler)
        .await
        .unwrap();
    serde_json::to_value(&processed.response).unwrap()
}

async fn run(file: &str, handler: EventRedrive<RecordingQueue, RecordingInvoker>) -> Run {
    let processor = Processor::new(RecordingQueue::default(), {
        let mut processor_config = ProcessorConfig::default();
        processor_config.dlq_url = Some(PARKED.into());
        processor_config.source_queue_url = None;
        processor_config.retry = RetryPolicy::default();
        processor_config.deadline_margin = Duration::from_secs(2);
        processor_config
    });
    let response = handle(&processor, &handler, &sample(file)).await;
    Run {
        response,
        processor,
        handler,
    }
}

fn handler() -> EventRedrive<RecordingQueue, RecordingInvoker> {
    let settings = EventRedriveSettings::from_lookup([], |_| None).unwrap();
    EventRedrive::new(
        RecordingQueue::default(),
        RecordingInvoker::default(),
        settings,
    )
}

/// The `id` of an EventBridge event.
fn event_id(event: &str) -> String {
    let event: serde_json::Value = serde_json::from_str(event).unwrap();
    event["id"].as_str().expect("an event id").to_owned()
}

/// The error kind in a copy's or dead letter's metadata.
fn error_kind(message: &OutgoingMessage<'_>) -> String {
    let meta: Meta<'_> = serde_json::from_str(message.attribute("redrive").unwrap()).unwrap();
    meta.error_kind.to_string()
}

/// What the processor sent anywhere but the parking queue: retries and deferrals.
fn sent_back(processor: &Processor<RecordingQueue>) -> Vec<OutgoingMessage<'static>> {
    processor
        .queue()
        .calls()
        .into_iter()
        .filter_map(|call| match call {
            Call::Send {
                queue_url,
                messages,
            } if queue_url != PARKED => Some(messages),
            _ => None,
        })
        .flatten()
        .collect()
}

fn parked(run: &Run) -> Vec<(String, String)> {
    run.processor
        .queue()
        .sent_to(PARKED)
        .iter()
        .map(|message| {
            let event: serde_json::Value = serde_json::from_str(&message.body).unwrap();
            // A DLQ message's body is the event; an on-failure record carries it as requestPayload.
            let order = event["detail"]["orderId"]
                .as_str()
                .or(event["requestPayload"]["detail"]["orderId"].as_str());
            (order.unwrap().to_owned(), error_kind(message))
        })
        .collect()
}

#[tokio::test]
async fn target_dlq_events_go_back_to_the_target_that_failed_and_parked_codes_stay_parked() {
    let input = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../events/eventbridge-dlq-batch.json"
    ))
    .unwrap();
    let input: serde_json::Value = serde_json::from_str(&input).unwrap();
    let run = run("eventbridge-dlq-batch.json", handler()).await;
    assert_eq!(run.response, serde_json::json!({ "batchItemFailures": [] }));

    let to_audit = run.handler_queue_sent(AUDIT);
    assert_eq!(
        to_audit,
        [input["Records"][0]["body"].as_str().unwrap()],
        "byte for byte"
    );

    let invokes = run.handler.lambda().invokes();
    assert_eq!(invokes.len(), 1);
    assert_eq!(invokes[0].function_arn, FUNCTION);
    assert_eq!(
        invokes[0].payload,
        input["Records"][1]["body"].as_str().unwrap(),
        "byte for byte"
    );
    assert_eq!(
        invokes[0].client_context,
        client_context(1, &event_id(&invokes[0].payload)),
        "the redelivery count and the event's id, for the target to deduplicate"
    );

    assert_eq!(
        parked(&run),
        [("o-2003".to_owned(), "parked_no_permissions".to_owned())]
    );
    let parked_message = &run.processor.queue().sent_to(PARKED)[0];
    assert_eq!(
        parked_message.attribute("ERROR_CODE"),
        Some("NO_PERMISSIONS"),
        "EventBridge's attributes are kept"
    );
}

#[tokio::test]
async fn on_failure_records_are_reinvoked_unless_the_function_said_permanent() {
    let input: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../events/lambda-on-failure-batch.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let run = run("lambda-on-failure-batch.json", handler()).await;
    assert_eq!(run.response, serde_json::json!({ "batchItemFailures": [] }));
    let invokes = run.handler.lambda().invokes();
    assert_eq!(invokes.len(), 1);
    assert_eq!(invokes[0].function_arn, format!("{FUNCTION}:$LATEST"));
    let record: serde_json::Value =
        serde_json::from_str(input["Records"][0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&invokes[0].payload).unwrap(),
        record["requestPayload"],
        "the event the function failed on, no field added"
    );
    assert!(!invokes[0].payload.contains("redrive"));
    assert_eq!(
        parked(&run),
        [("o-3002".to_owned(), "function_permanent_error".to_owned())]
    );
}

#[tokio::test]
async fn a_function_that_fails_again_is_retried_by_the_redrive_then_parked_with_its_event_unchanged(
) {
    // The loop guard: the function's error comes back to the redrive (a synchronous invoke), never
    // to its on-failure destination, so the redrive's own attempts bound the redeliveries.
    let function = format!("{FUNCTION}:$LATEST");
    let attempts = RetryPolicy::default().max_attempts;
    let handler = handler();
    handler
        .lambda()
        .fail(&function, "redrive.transient.payment_timeout", u32::MAX);
    let processor = Processor::new(RecordingQueue::default(), {
        let mut processor_config = ProcessorConfig::default();
        processor_config.dlq_url = Some(PARKED.into());
        processor_config.deadline_margin = Duration::from_secs(2);
        processor_config
    });
    let mut batch = sample("lambda-on-failure-batch.json");
    for delivery in 1..=attempts {
        let processed = handle(&processor, &handler, &batch).await;
        assert_eq!(
            processed,
            serde_json::json!({ "batchItemFailures": [] }),
            "delivery {delivery}"
        );
        let invokes = handler.lambda().invokes();
        assert_eq!(invokes.len() as u32, delivery);
        let last = invokes.last().unwrap();
        assert_eq!(
            last.client_context,
            client_context(delivery, &event_id(&last.payload))
        );
        // The next delivery is the retry the processor sent (o-3002 was parked at once).
        let retries = sent_back(&processor);
        if delivery < attempts {
            let retry = retries.last().unwrap();
            batch = serde_json::json!({ "Records": [{
                "messageId": format!("retry-{delivery}"),
                "receiptHandle": "rh",
                "body": retry.body.to_string(),
                "attributes": { "ApproximateReceiveCount": "1", "SentTimestamp": "1763791500000" },
                "messageAttributes": { "redrive": {
                    "stringValue": retry.attribute("redrive").unwrap(), "dataType": "String"
                } },
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders-events-consumer-failures-dlq",
                "awsRegion": "us-east-1"
            }]});
        }
    }
    let kinds: Vec<String> = processor
        .queue()
        .sent_to(PARKED)
        .iter()
        .map(error_kind)
        .collect();
    assert_eq!(kinds, ["function_permanent_error", "function_error"]);
    assert_eq!(handler.lambda().invokes().len() as u32, attempts);
    assert!(handler
        .lambda()
        .invokes()
        .iter()
        .all(|invoke| !invoke.payload.contains("redrive")));
}

/// A throttled invoke never ran the function: the event waits without spending an attempt, so a
/// burst of throttles does not park it.
#[tokio::test]
async fn a_throttled_invoke_waits_without_spending_an_attempt() {
    let handler = handler();
    handler.lambda().throttle(FUNCTION, u32::MAX);
    let run = run("eventbridge-dlq-batch.json", handler).await;
    assert_eq!(run.response, serde_json::json!({ "batchItemFailures": [] }));
    let deferred = run
        .processor
        .queue()
        .sent_to("https://sqs.local/123456789012/orders-bus-target-dlq");
    assert_eq!(deferred.len(), 1, "re-sent to the DLQ it came from");
    let meta: Meta<'_> = serde_json::from_str(deferred[0].attribute("redrive").unwrap()).unwrap();
    assert_eq!(
        (&*meta.error_kind, meta.attempts, deferred[0].delay_seconds),
        ("target_throttled", 0, 10)
    );
    assert!(run.handler.lambda().invokes().is_empty(), "nothing ran");
}

#[tokio::test]
async fn a_failed_invoke_is_retried_later_and_a_missing_function_is_parked() {
    let handler = handler();
    handler
        .lambda()
        .refuse(FUNCTION, "ServiceException: an internal error");
    let run = run("eventbridge-dlq-batch.json", handler).await;
    assert_eq!(run.response, serde_json::json!({ "batchItemFailures": [] }));
    let retried = run
        .processor
        .queue()
        .sent_to("https://sqs.local/123456789012/orders-bus-target-dlq");
    assert_eq!(
        retried.len(),
        1,
        "re-sent to the DLQ it came from, with a delay"
    );
    assert!(retried[0].delay_seconds > 0);
    let meta: Meta<'_> = serde_json::from_str(retried[0].attribute("redrive").unwrap()).unwrap();
    assert_eq!(meta.attempts, 1, "the function may have run: an attempt");

    let handler = self::handler();
    handler
        .lambda()
        .refuse(FUNCTION, "ResourceNotFoundException: Function not found");
    let run = self::run("eventbridge-dlq-batch.json", handler).await;
    let mut parked = parked(&run);
    parked.sort();
    assert_eq!(
        parked,
        [
            ("o-2002".to_owned(), "invoke_failed".to_owned()),
            ("o-2003".to_owned(), "parked_no_permissions".to_owned())
        ]
    );
}

impl Run {
    fn handler_queue_sent(&self, url: &str) -> Vec<String> {
        self.handler_queue()
            .sent_to(url)
            .into_iter()
            .map(|m| m.body.to_string())
            .collect()
    }

    fn handler_queue(&self) -> &RecordingQueue {
        self.handler.queue()
    }
}

#[tokio::test]
async fn an_event_waits_after_its_failure_before_it_is_redriven() {
    const FAILED_AT: u64 = 1_763_791_500_000; // the SentTimestamp of the sample's records
    let handler_at = |now_ms| {
        let clock = Arc::new(ManualClock::at(now_ms));
        handler().with_clock(clock)
    };

    let early = run(
        "lambda-on-failure-batch.json",
        handler_at(FAILED_AT + 60_000),
    )
    .await;
    assert_eq!(
        early.response,
        serde_json::json!({ "batchItemFailures": [] })
    );
    assert!(early.handler.lambda().invokes().is_empty(), "not yet");
    let waiting: Vec<(String, u32, String)> = sent_back(&early.processor)
        .iter()
        .map(|copy| (error_kind(copy), copy.delay_seconds, copy.body.to_string()))
        .collect();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let (kind, delay_seconds, body) = &waiting[0];
    assert_eq!(
        (kind.as_str(), *delay_seconds),
        ("redrive_not_due", 240),
        "REDRIVE_REPROCESS_AFTER (5 min) after the failure"
    );
    assert!(body.contains("o-3001"));
    assert_eq!(
        parked(&early),
        [("o-3002".to_owned(), "function_permanent_error".to_owned())],
        "what cannot heal is parked at once"
    );

    let due = run(
        "lambda-on-failure-batch.json",
        handler_at(FAILED_AT + 300_000),
    )
    .await;
    assert_eq!(due.handler.lambda().invokes().len(), 1);
}

#[tokio::test]
async fn an_event_for_a_fifo_queue_goes_in_its_rules_group_or_is_parked_when_none_is_known() {
    const LEDGER: &str = "arn:aws:sqs:us-east-1:123456789012:ledger.fifo";
    let mut batch = sample("eventbridge-dlq-batch.json");
    batch["Records"][0]["messageAttributes"]["TARGET_ARN"]["stringValue"] = LEDGER.into();
    let body = batch["Records"][0]["body"].as_str().unwrap().to_owned();
    let processor = || {
        Processor::new(RecordingQueue::default(), {
            let mut processor_config = ProcessorConfig::default();
            processor_config.dlq_url = Some(PARKED.into());
            processor_config
        })
    };

    let settings = EventRedriveSettings::from_lookup(["REDRIVE_FIFO_TARGET_GROUPS"], |name| {
        (name == "REDRIVE_FIFO_TARGET_GROUPS").then(|| format!("{LEDGER}=account-42"))
    })
    .unwrap();
    let grouped = EventRedrive::new(
        RecordingQueue::default(),
        RecordingInvoker::default(),
        settings,
    );
    handle(&processor(), &grouped, &batch).await;
    let sent = grouped
        .queue()
        .sent_to("https://sqs.local/123456789012/ledger.fifo");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (
            sent[0].body.as_ref(),
            sent[0].group_id.as_deref(),
            sent[0].deduplication_id.as_deref()
        ),
        (
            body.as_str(),
            Some("account-42"),
            Some("5d8f0b2e-0000-4c55-9b1e-0000000e2001")
        )
    );

    let unknown = handler();
    let processor = processor();
    handle(&processor, &unknown, &batch).await;
    assert!(
        unknown.queue().calls().is_empty(),
        "nothing sent to the queue"
    );
    let parked: Vec<String> = processor
        .queue()
        .sent_to(PARKED)
        .iter()
        .map(error_kind)
        .collect();
    assert!(
        parked.contains(&"fifo_group_unknown".to_owned()),
        "{parked:?}"
    );
}

#[test]
fn fifo_target_groups_are_checked_at_start() {
    let read = |value: &str| {
        let value = value.to_owned();
        EventRedriveSettings::from_lookup(["REDRIVE_FIFO_TARGET_GROUPS"], move |name| {
            (name == "REDRIVE_FIFO_TARGET_GROUPS").then(|| value.clone())
        })
    };
    let settings =
        read("arn:aws:sqs:us-east-1:1:a.fifo=g1, arn:aws:sqs:us-east-1:1:b.fifo=g2").unwrap();
    assert_eq!(
        settings.fifo_group("arn:aws:sqs:us-east-1:1:b.fifo"),
        Some("g2")
    );
    for bad in [
        "arn:aws:sqs:us-east-1:1:a.fifo",
        "arn:aws:sqs:us-east-1:1:std=g",
        "x.fifo=g",
    ] {
        let error = read(bad).unwrap_err().to_string();
        assert!(error.contains("REDRIVE_FIFO_TARGET_GROUPS"), "{error}");
    }
}

#[tokio::test]
async fn a_redelivered_event_continues_the_trace_of_the_delivery_that_failed() {
    let mut batch = sample("eventbridge-dlq-batch.json");
    let header = |n: usize| format!("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1;n={n}");
    for n in 0..2 {
        batch["Records"][n]["attributes"]["AWSTraceHeader"] = header(n).into();
    }
    let processor = Processor::new(RecordingQueue::default(), ProcessorConfig::default());
    let handler = handler();
    handle(&processor, &handler, &batch).await;
    let to_audit = handler.queue().sent_to(AUDIT);
    assert_eq!(to_audit[0].trace_header.as_deref(), Some(&*header(0)));
    let invokes = handler.lambda().invokes();
    assert_eq!(invokes[0].trace_header.as_deref(), Some(&*header(1)));
}

/// No SDK retry on Invoke (a retried invoke may run the function twice), and a read timeout that
/// covers any target's run.
#[test]
fn the_lambda_client_never_retries_an_invoke_and_waits_out_any_target() {
    let config = eventbridge_redrive::LambdaInvoker::client_config();
    assert_eq!(config.retry_config().map(|r| r.max_attempts()), Some(1));
    assert!(
        config.timeout_config().and_then(|t| t.read_timeout())
            >= Some(Duration::from_secs(15 * 60 + 10))
    );
}

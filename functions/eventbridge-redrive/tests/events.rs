//! The sample EventBridge DLQ batch and on-failure batch through the real handler and processor, on
//! in-memory ports: where every event went.
use std::sync::Arc;
use std::time::Duration;

use lambda_runtime::{Context, LambdaEvent};
use redrive::clock::{Clock, ManualClock, SystemClock};
use redrive::config::EventRedriveSettings;
use redrive::eventbridge::{EventRedrive, RecordingInvoker};
use redrive::lambda::Bytes;
use redrive::port::{Call, RecordingQueue};
use redrive::{Meta, Processor, ProcessorConfig, RetryPolicy};

const PARKED: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/eventbridge-redrive-parked";
const AUDIT: &str = "https://sqs.local/123456789012/orders-audit";
const FUNCTION: &str = "arn:aws:lambda:us-east-1:123456789012:function:orders-events";

struct Run {
    response: serde_json::Value,
    processor: Processor<RecordingQueue>,
    handler: EventRedrive<RecordingQueue, RecordingInvoker>,
}

async fn run(file: &str, handler: EventRedrive<RecordingQueue, RecordingInvoker>) -> Run {
    let json = std::fs::read_to_string(format!(
        "{}/../../events/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let processor = Processor::new(
        RecordingQueue::default(),
        ProcessorConfig {
            dlq_url: Some(PARKED.into()),
            source_queue_url: None,
            retry: RetryPolicy::default(),
            deadline_margin: Duration::from_secs(2),
            ..ProcessorConfig::default()
        },
    );
    let mut context = Context::default();
    context.deadline = SystemClock.now_ms() + 30_000;
    let event = LambdaEvent::new(Bytes::from(json), context);
    let processed = redrive::lambda::handle_batch(event, &processor, &handler)
        .await
        .unwrap();
    Run {
        response: serde_json::to_value(&processed.response).unwrap(),
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

fn parked(run: &Run) -> Vec<(String, String)> {
    run.processor
        .queue()
        .sent_to(PARKED)
        .iter()
        .map(|message| {
            let meta: Meta<'_> =
                serde_json::from_str(message.attribute("redrive").unwrap()).unwrap();
            let event: serde_json::Value = serde_json::from_str(&message.body).unwrap();
            // A DLQ message's body is the event; an on-failure record carries it as requestPayload.
            let order = event["detail"]["orderId"]
                .as_str()
                .or(event["requestPayload"]["detail"]["orderId"].as_str());
            (order.unwrap().to_owned(), meta.error_kind.to_string())
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
    assert_eq!(invokes[0].0, FUNCTION);
    let payload: serde_json::Value = serde_json::from_str(&invokes[0].1).unwrap();
    assert_eq!(payload["detail"]["orderId"], "o-2002");
    assert_eq!(payload["redrive-count"], 1);

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
    let run = run("lambda-on-failure-batch.json", handler()).await;
    assert_eq!(run.response, serde_json::json!({ "batchItemFailures": [] }));
    let invokes = run.handler.lambda().invokes();
    assert_eq!(invokes.len(), 1);
    assert_eq!(invokes[0].0, format!("{FUNCTION}:$LATEST"));
    let payload: serde_json::Value = serde_json::from_str(&invokes[0].1).unwrap();
    assert_eq!(
        (
            payload["detail"]["orderId"].as_str(),
            payload["redrive-count"].as_u64()
        ),
        (Some("o-3001"), Some(1))
    );
    assert_eq!(
        parked(&run),
        [("o-3002".to_owned(), "function_permanent_error".to_owned())]
    );
}

#[tokio::test]
async fn the_loop_guard_parks_an_event_redriven_too_often() {
    let settings =
        EventRedriveSettings::from_lookup(["REDRIVE_REPROCESS_MAX"], |_| Some("0".into())).unwrap();
    let handler = EventRedrive::new(
        RecordingQueue::default(),
        RecordingInvoker::default(),
        settings,
    );
    let run = run("lambda-on-failure-batch.json", handler).await;
    assert!(run.handler.lambda().invokes().is_empty());
    let mut parked = parked(&run);
    parked.sort();
    assert_eq!(
        parked,
        [
            ("o-3001".to_owned(), "redrive_cap".to_owned()),
            ("o-3002".to_owned(), "function_permanent_error".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_refused_invoke_is_retried_later_and_a_missing_function_is_parked() {
    let handler = handler();
    handler
        .lambda()
        .refuse(FUNCTION, "TooManyRequestsException: Rate exceeded");
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
    let waiting: Vec<(String, u32, String)> = early
        .processor
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
        .map(|copy| {
            let meta: Meta<'_> = serde_json::from_str(copy.attribute("redrive").unwrap()).unwrap();
            (
                meta.error_kind.to_string(),
                copy.delay_seconds,
                copy.body.to_string(),
            )
        })
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

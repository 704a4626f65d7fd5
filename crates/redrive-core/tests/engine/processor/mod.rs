//! The record-fate rules, on an in-memory port: exact batch responses and exact send requests.
mod bulk;
mod concurrency;
mod fates;
mod fifo;
mod hold;
mod lane;
mod limits;

use futures_util::future::BoxFuture;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redrive_core::clock::{Clock, ManualClock};
use redrive_core::envelope::OutgoingMessage;
use redrive_core::error::PortError;
use redrive_core::ledger::{
    AttemptLedger, Counted, ForwardingLedger, LedgerCall, LedgerEntry, MemoryLedger, Release,
};
use redrive_core::ledger::{KeyPlace, Position};
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
    /// Each call's [`Message::tenant`].
    tenants: std::sync::Mutex<Vec<Option<String>>>,
}

impl RecordHandler for ByBody {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let tenant = message.tenant().map(std::borrow::Cow::into_owned);
        self.tenants.lock().unwrap().push(tenant);
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
        tenants: std::sync::Mutex::default(),
    }
}

fn processor(retry: RetryPolicy) -> Processor<RecordingQueue> {
    processor_with_dlq(Some(DLQ), retry)
}

fn processor_with_dlq(dlq: Option<&str>, retry: RetryPolicy) -> Processor<RecordingQueue> {
    let mut config = ProcessorConfig::default();
    config.dlq_url = dlq.map(str::to_owned);
    config.source_queue_url = None;
    config.retry = retry;
    config.deadline_margin = Duration::from_secs(2);
    Processor::new(RecordingQueue::default(), config)
        .with_clock(Arc::new(ManualClock::at(NOW)))
        .with_seed(7)
}

/// A processor on the system clock with a 100 ms deadline margin and `concurrency` records at
/// once, and the time now (ms).
fn on_the_real_clock(concurrency: usize) -> (Processor<RecordingQueue>, u64) {
    let mut config = ProcessorConfig::default();
    config.dlq_url = Some(DLQ.into());
    config.source_queue_url = Some(SOURCE.into());
    config.retry = RetryPolicy::default();
    config.deadline_margin = Duration::from_millis(100);
    config.concurrency = NonZeroUsize::new(concurrency).unwrap();
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

/// A FIFO record of group `group`, received `receives` times, first `first_received_ago` ms ago.
fn fifo_record(id: &str, body: &str, group: &str, receives: u32) -> serde_json::Value {
    let mut rec = record(id, body);
    rec["eventSourceARN"] = "arn:aws:sqs:eu-west-1:123456789012:orders.fifo".into();
    rec["attributes"]["MessageGroupId"] = group.into();
    rec["attributes"]["ApproximateReceiveCount"] = receives.to_string().into();
    rec["attributes"]["ApproximateFirstReceiveTimestamp"] = NOW.to_string().into();
    rec
}

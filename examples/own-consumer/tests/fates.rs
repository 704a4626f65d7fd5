//! The consumer's handler through redrive's processor, on the in-memory queue: where each order
//! goes.
use own_consumer::{Reserve, Warehouse};
use redrive::testing::RecordingQueue;
use redrive::{ErrorClass, Meta, Processor, ProcessorConfig, SqsEvent};

const DLQ: &str = "https://sqs.local/123456789012/orders-dlq";
const SOURCE: &str = "https://sqs.local/123456789012/orders";

/// Answers by SKU: `busy` with 503, `gone` with 404, anything else with success.
struct Scripted;

impl Warehouse for Scripted {
    async fn reserve(&self, sku: &str, _quantity: u32) -> Result<(), u16> {
        match sku {
            "busy" => Err(503),
            "gone" => Err(404),
            _ => Ok(()),
        }
    }
}

fn record(id: &str, body: &str) -> serde_json::Value {
    serde_json::json!({
        "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1763789990000"},
        "messageAttributes": {}, "md5OfBody": "x", "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:eu-west-1:123456789012:orders", "awsRegion": "eu-west-1"
    })
}

fn kinds(queue: &RecordingQueue, url: &str) -> Vec<(String, ErrorClass)> {
    queue
        .sent_to(url)
        .iter()
        .map(|message| {
            let meta: Meta<'_> =
                serde_json::from_str(message.attribute("redrive").unwrap()).unwrap();
            (meta.error_kind.to_string(), meta.error_class)
        })
        .collect()
}

#[tokio::test]
async fn each_order_gets_the_fate_its_failure_calls_for() {
    let order = |sku: &str, quantity: u32| {
        format!(r#"{{"id":"o-{sku}","sku":"{sku}","quantity":{quantity}}}"#)
    };
    let event = serde_json::json!({ "Records": [
        record("m-ok", &order("mug", 2)),
        record("m-busy", &order("busy", 1)),
        record("m-gone", &order("gone", 1)),
        record("m-zero", &order("mug", 0)),
        record("m-garbled", "{not json"),
    ]})
    .to_string();
    let event = SqsEvent::parse(&event).unwrap();
    let processor = Processor::new(RecordingQueue::default(), {
        let mut processor_config = ProcessorConfig::default();
        processor_config.dlq_url = Some(DLQ.into());
        processor_config.source_queue_url = Some(SOURCE.into());
        processor_config
    });
    let processed = processor
        .process(&Reserve(Scripted), &event.records, u64::MAX / 2)
        .await
        .unwrap();

    assert!(processed.response.batch_item_failures.is_empty());
    assert_eq!(processed.report.done, 1);
    assert_eq!(
        kinds(processor.queue(), SOURCE),
        [("warehouse".to_owned(), ErrorClass::Transient)],
        "503: retried with backoff"
    );
    assert_eq!(
        kinds(processor.queue(), DLQ),
        [
            ("warehouse".to_owned(), ErrorClass::Permanent),
            ("invalid_order".to_owned(), ErrorClass::Permanent),
            ("malformed_body".to_owned(), ErrorClass::Permanent),
        ],
        "404, a zero quantity and a body that is not JSON: dead-lettered at once"
    );
}

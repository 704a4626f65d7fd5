//! The generated SQS event every CPU-bound row parses and the handler it runs: `make bench`'s,
//! and `tools/ab-cpu`'s harness (which includes this file, its redrive-core named `redrive`), so
//! both measure the same bytes and the same work.

use redrive::{Message, RecordError, RecordHandler};
use serde::Deserialize;

/// Every 100th order fails: 1%.
pub const FAIL_EVERY: usize = 100;

/// An SQS event as Lambda delivers it: `records` orders, every `FAIL_EVERY`th marked to fail; from
/// a FIFO queue when `fifo_groups` is given, its records dealt round the groups in turn (no order
/// fails there: a failure holds back the rest of its group, and each processor would then do a
/// different amount of work).
pub fn generate_event(records: usize, fifo_groups: Option<usize>) -> String {
    let records: Vec<serde_json::Value> = (0..records)
        .map(|i| {
            let fails = i % FAIL_EVERY == FAIL_EVERY - 1 && fifo_groups.is_none();
            let status = if fails { "fail" } else { "ok" };
            let body = order_body(i, status);
            let mut record = serde_json::json!({
                "messageId": format!("{:08x}-1f2e-4d3c-8b7a-{i:012}", i * 7919),
                "receiptHandle": format!("AQEBwJnKyrHigUMZj6rYigCgxlaS3SLy0a{i:08}/AE6QY/ZpGgmyLqZ4uAQIlR2BJu0uVnJ5fTWf5Y0lzNVvsG+Jyc=="),
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1763790000000",
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": "1763790000123"
                },
                "messageAttributes": {},
                "md5OfBody": "e4e68fb7bd0e697a0ae8f1bb342846b3",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
                "awsRegion": "us-east-1"
            });
            if let Some(groups) = fifo_groups {
                record["eventSourceARN"] = "arn:aws:sqs:us-east-1:123456789012:orders.fifo".into();
                let attributes = &mut record["attributes"];
                attributes["MessageGroupId"] = format!("customer-{}", i % groups).into();
                attributes["MessageDeduplicationId"] = format!("o-{i:06}").into();
                attributes["SequenceNumber"] = format!("1884949646046769{i:06}").into();
            }
            record
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

/// The body of order `i` (the Kafka rows' values too).
pub fn order_body(i: usize, status: &str) -> String {
    format!(
        r#"{{"orderId":"o-{i:06}","customerId":"c-{}","status":"{status}","amount":{}.{:02},"currency":"EUR"}}"#,
        i % 977,
        10 + i % 90,
        i % 100
    )
}

/// An order's body, as every peer parses it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // parsed in full, as the peers do; only `status` is read
pub struct Order<'a> {
    pub order_id: &'a str,
    pub customer_id: &'a str,
    pub status: &'a str,
    pub amount: f64,
    pub currency: &'a str,
}

/// The same work every peer does: parse the body as JSON, check a field, fail 1%.
pub struct CheckStatus;

impl RecordHandler for CheckStatus {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let order: Order<'_> = message.json()?;
        match order.status {
            "fail" => Err(RecordError::transient("order_failed", "status is fail")),
            _ => Ok(()),
        }
    }
}

//! An incident of dead letters to read, group and redrive, as the consumer writes them: order `n`
//! failed permanently with one of six error kinds, on one of three function versions (6, 7, 8).
//! The console's browser test and `make bench`'s grouping row seed it.
use std::ops::Range;

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;

use crate::Error;

/// The incident's error kinds; each failed on each of the three versions.
pub const KINDS: [&str; 6] = [
    "invalid_order",
    "payment_timeout",
    "card_declined",
    "stock_missing",
    "address_invalid",
    "rate_limited",
];

/// A dead letter's error class, error kind and the function version it failed in.
pub type Failure<'a> = (&'a str, &'a str, &'a str);

/// The error kind and function version order `n` failed with.
pub fn failure_of(n: usize) -> (&'static str, String) {
    (
        KINDS[n % KINDS.len()],
        (6 + n / KINDS.len() % 3).to_string(),
    )
}

/// The failure envelope (the `redrive` attribute) of order `order`, failed in version `version`
/// of function `orders` with `class` and `kind`, from the queue `origin_arn`.
pub fn envelope((class, kind, version): Failure<'_>, origin_arn: &str, order: usize) -> String {
    serde_json::json!({
        "v": 1, "attempts": 5, "originQueueArn": origin_arn, "originMessageId": format!("m-{order}"),
        "firstFailureAt": "2026-11-22T05:00:00.000Z", "lastFailureAt": "2026-11-22T05:10:00.000Z",
        "errorClass": class, "errorKind": kind, "errorMessage": format!("order {order} failed"),
        "failedIn": {"function": "orders", "version": version, "requestId": format!("r-{order}")},
    })
    .to_string()
}

/// The body of order `n`.
pub fn body(n: usize) -> String {
    format!(r#"{{"orderId":"o-{n}"}}"#)
}

/// Sends the dead letters of `orders` to `dlq_url`, 10 to a call, 8 calls at a time.
pub async fn seed(
    client: &Client,
    dlq_url: &str,
    origin_arn: &str,
    orders: Range<usize>,
) -> Result<(), Error> {
    let mut sends = tokio::task::JoinSet::new();
    let first_orders: Vec<usize> = orders.clone().step_by(10).collect();
    for first in first_orders {
        let entries = (first..(first + 10).min(orders.end))
            .map(|n| {
                let (kind, version) = failure_of(n);
                let envelope = MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(envelope(("permanent", kind, &version), origin_arn, n))
                    .build()
                    .expect("type and value are set");
                SendMessageBatchRequestEntry::builder()
                    .id(format!("e{n}"))
                    .message_body(body(n))
                    .message_attributes("redrive", envelope)
                    .build()
                    .expect("id and body are set")
            })
            .collect();
        let send = client
            .send_message_batch()
            .queue_url(dlq_url)
            .set_entries(Some(entries));
        sends.spawn(send.send());
        while sends.len() >= 8 {
            settle(sends.join_next().await)?;
        }
    }
    while let Some(sent) = sends.join_next().await {
        settle(Some(sent))?;
    }
    Ok(())
}

type Sent = Result<
    aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput,
    aws_sdk_sqs::error::SdkError<aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError>,
>;

fn settle(sent: Option<Result<Sent, tokio::task::JoinError>>) -> Result<(), Error> {
    let output = sent
        .expect("a send is pending")
        .map_err(Error::sdk)?
        .map_err(Error::sdk)?;
    match output.failed.first() {
        None => Ok(()),
        Some(failure) => Err(Error::Sqs(format!(
            "SendMessageBatch refused {} entries: {failure:?}",
            output.failed.len()
        ))),
    }
}

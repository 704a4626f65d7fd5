//! Large messages on moto's S3 and SQS, against the real peers: the Amazon SQS Extended Client for
//! Python (pinned in tools/requirements.txt) sends what the consumer reads, in both formats, and
//! reads what redrive offloaded; the SNS Extended Client publishes through raw delivery. Every
//! message and every object is accounted for.
use std::collections::HashMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_s3::Client as S3;
use redrive::payload::{Pointer, SIZE_ATTRIBUTE};
use redrive::reprocess::ReprocessCommand;
use redrive::{Message, RecordError, RecordHandler};
use redrive_e2e::{meta, Options, Stack};

const LIMIT: Duration = Duration::from_secs(60);

/// A bucket named after the test, made on moto.
async fn bucket(test: &str) -> (S3, String) {
    redrive_e2e::require_emulator();
    let s3 = redrive::aws::s3_client(&redrive::aws::sdk_config_from_env());
    let name = format!("t{}-{test}", std::process::id());
    s3.create_bucket().bucket(&name).send().await.unwrap();
    (s3, name)
}

async fn keys(s3: &S3, bucket: &str) -> Vec<String> {
    let listed = s3.list_objects_v2().bucket(bucket).send().await.unwrap();
    listed
        .contents()
        .iter()
        .filter_map(|object| object.key().map(str::to_owned))
        .collect()
}

/// Runs tools/interop/extended_client.py with the project's Python.
fn extended_client(arguments: &[&str]) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let output = Command::new(format!("{root}/.venv/bin/python"))
        .arg(format!("{root}/tools/interop/extended_client.py"))
        .args(arguments)
        .output()
        .expect("the project's virtualenv (make venv) has the Extended Client");
    assert!(
        output.status.success(),
        "extended_client.py {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Sends `body` with the extended client's `command`: `send` (the SQS Extended Client),
/// `send-legacy` (the attribute and pointer class the older clients wrote), `sns-publish` (the
/// SNS Extended Client, raw delivery to `queue`, which is then the queue's ARN).
fn extended_send(command: &str, queue: &str, bucket: &str, body: &str) {
    let file = std::env::temp_dir().join(format!("extended-{}-{bucket}", std::process::id()));
    std::fs::write(&file, body).unwrap();
    extended_client(&[command, queue, bucket, file.to_str().unwrap()]);
    std::fs::remove_file(file).unwrap();
}

/// An order of about `bytes` bytes.
fn large_order(id: &str, bytes: usize) -> String {
    let head =
        format!(r#"{{"orderId":"{id}","customerId":"c-1","amount":10.5,"currency":"EUR","note":""#);
    format!("{head}{}\"}}", "n".repeat(bytes - head.len() - 2))
}

#[tokio::test]
async fn the_extended_clients_messages_reach_the_handler_as_their_bodies() {
    let (s3, bucket) = bucket("large-read").await;
    let stack = Stack::new(
        "large-read",
        Options {
            payload_bucket: Some(&bucket),
            ..Options::default()
        },
    )
    .await;
    let current = large_order("o-current", 300_000);
    let legacy = large_order("o-legacy", 700_000);
    let published = large_order("o-published", 500_000);
    extended_send("send", &stack.queue.url, &bucket, &current);
    extended_send("send-legacy", &stack.queue.url, &bucket, &legacy);
    extended_send("sns-publish", &stack.queue.arn, &bucket, &published);
    stack.send(&[redrive_e2e::order("o-small")], None).await;

    let polls = stack.drain(LIMIT).await;
    assert!(polls
        .iter()
        .all(|poll| poll.given_back == 0 && !poll.whole_batch_failed));

    let mut charged = stack.charged();
    charged.sort();
    assert_eq!(charged, ["o-current", "o-legacy", "o-published", "o-small"]);
    assert_eq!(stack.source_depth().await, 0);
    assert!(stack.dlq_messages().await.is_empty());
    assert_eq!(
        keys(&s3, &bucket).await.len(),
        3,
        "the producer's objects are the producer's: an SNS fan-out shares one among subscribers"
    );
}

/// Fails each order's first delivery transiently and its second for good, until healed; then
/// charges it.
#[derive(Default)]
struct TransientThenPermanent {
    calls: Mutex<HashMap<String, u32>>,
    healed: std::sync::atomic::AtomicBool,
    bodies: Mutex<Vec<usize>>,
}

impl RecordHandler for TransientThenPermanent {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        self.bodies.lock().unwrap().push(message.body().len());
        if self.healed.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(());
        }
        let id = message.json::<serde_json::Value>()?["orderId"].to_string();
        let mut calls = self.calls.lock().unwrap();
        let call = calls.entry(id).or_default();
        *call += 1;
        match *call {
            1 => Err(RecordError::transient(
                "payment_timeout",
                "the payment service timed out",
            )),
            _ => Err(RecordError::permanent(
                "invalid_order",
                "the card was refused for good",
            )),
        }
    }
}

#[tokio::test]
async fn a_body_of_a_mebibyte_less_a_byte_fails_reaches_the_dlq_whole_and_is_redriven_once() {
    let (s3, bucket) = bucket("large-fail").await;
    let stack = Stack::new(
        "large-fail",
        Options {
            payload_bucket: Some(&bucket),
            ..Options::default()
        },
    )
    .await;
    let body = large_order("o-big", (1 << 20) - 1);
    assert_eq!(body.len(), 1_048_575);
    stack
        .client
        .send_message()
        .queue_url(&stack.queue.url)
        .message_body(&body)
        .send()
        .await
        .unwrap();

    let handler = TransientThenPermanent::default();
    stack.drain_with(&handler, LIMIT).await;

    assert_eq!(
        *handler.bodies.lock().unwrap(),
        [body.len(), body.len()],
        "the whole body, twice"
    );
    let dead = stack.dlq_messages().await;
    assert_eq!(dead.len(), 1);
    let envelope = meta(&dead[0]).expect("the failure context travels");
    assert_eq!(
        (
            envelope.attempts,
            &*envelope.error_kind,
            &*envelope.error_message
        ),
        (2, "invalid_order", "the card was refused for good")
    );
    let pointer = Pointer::parse(dead[0].body().unwrap())
        .unwrap()
        .into_owned();
    assert_eq!(&*pointer.bucket, bucket);
    assert_eq!(
        pointer.key,
        format!("redrive/{}", envelope.origin_message_id)
    );
    let size = dead[0].message_attributes().unwrap()[SIZE_ATTRIBUTE].string_value();
    assert_eq!(size, Some("1048575"));
    assert_eq!(
        keys(&s3, &bucket).await,
        [pointer.key.to_string()],
        "one object for both copies"
    );
    stack.release_dlq(&dead).await;

    // The Extended Client reads redrive's dead letter as the body it was.
    let read: serde_json::Value =
        serde_json::from_str(&extended_client(&["peek", &stack.queue.dlq_url, &bucket])).unwrap();
    assert_eq!(read[0]["body"], body.as_str());
    assert!(read[0]["attributes"]["redrive"].is_string());

    // Redriven home with its pointer, handled, and its object deleted: the operator fixed the
    // cause of the permanent failure and redrives it by name.
    let summary = stack
        .redrive_dlq(ReprocessCommand {
            error_kinds: vec!["invalid_order".into()],
            ..ReprocessCommand::default()
        })
        .await;
    assert_eq!(summary.reprocessed, 1, "{summary:?}");
    handler
        .healed
        .store(true, std::sync::atomic::Ordering::SeqCst);
    stack.drain_with(&handler, LIMIT).await;

    assert_eq!(handler.bodies.lock().unwrap().len(), 3);
    assert_eq!(handler.bodies.lock().unwrap()[2], body.len());
    assert_eq!(stack.source_depth().await, 0);
    assert!(stack.dlq_messages().await.is_empty());
    assert!(keys(&s3, &bucket).await.is_empty(), "deleted once done");
}

//! `dlq held` and `dlq release` against a FIFO queue and a ledger table on moto.
use redrive_local::provision::{depth, queue_arn};

use super::{dlq, on_moto, stdout};
/// A FIFO queue whose group the consumer held on its head (in flight for hours, its hold in a new
/// ledger table): (queue URL, table, the head's message id).
pub(crate) async fn held_head(
    client: &aws_sdk_sqs::Client,
    prefix: &str,
) -> (String, String, String) {
    use redrive::ledger::{AttemptLedger, Hold};
    on_moto();
    let url = client
        .create_queue()
        .queue_name(format!("{prefix}-payments.fifo"))
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = queue_arn(client, &url).await.unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body(r#"{"orderId":"p-1"}"#)
        .message_group_id("customer-A")
        .message_deduplication_id("p-1")
        .send()
        .await
        .unwrap();
    let received = client
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(43_000)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    let head = &received[0];
    let table = format!("{prefix}-idempotency");
    redrive_local::provision::idempotency_table(&ledger_client(), &table)
        .await
        .unwrap();
    let hold = Hold {
        since_ms: 1_763_790_000_000,
        receive_count: 1,
        receipt_handle: head.receipt_handle().unwrap().to_owned(),
        queue_arn: arn,
        error_kind: "invalid_order".into(),
        error_message: "no amount".into(),
        release: None,
    };
    let id = head.message_id().unwrap().to_owned();
    let ledger = redrive::aws::DynamoDbStore::with_client(ledger_client(), &table);
    ledger.hold(&id, &hold, false).await.unwrap();
    (url, table, id)
}

fn ledger_client() -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::new(&redrive::aws::sdk_config_from_env())
}

/// Received from `url` now: the message ids.
pub(crate) async fn receive_now(client: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    client
        .receive_message()
        .queue_url(url)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default()
        .iter()
        .filter_map(|message| message.message_id().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn a_held_fifo_head_is_listed_and_released_to_come_back_at_once() {
    use redrive::ledger::AttemptLedger;
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-cli-held", std::process::id());
    let (url, table, id) = held_head(&client, &prefix).await;
    let id = id.as_str();
    let ledger = redrive::aws::DynamoDbStore::with_client(ledger_client(), &table);

    let listed = stdout(&dlq(&["held", &table], &[]));
    assert!(
        listed.contains(id) && listed.contains("invalid_order"),
        "{listed}"
    );
    let missing = dlq(&["release", &table, "no-such-message"], &[]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("holds no group"));

    let released = stdout(&dlq(&["release", &table, id], &[]));
    assert!(released.contains("goes on now"), "{released}");
    assert_eq!(
        receive_now(&client, &url).await,
        [id],
        "visible again at once"
    );
    let entry = ledger.entries(&[id]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert_eq!((entry.hold.is_none(), entry.attempts_from), (true, 2));
    assert!(depth(&client, &url).await.is_ok());
}

//! The `dlq` binary against moto: reading consumes nothing, redrive moves only what it should, and
//! errors are clear.
use std::process::{Command, Output};

use aws_sdk_sqs::types::MessageAttributeValue;
use redrive_local::provision::{depth, queue_arn};

fn dlq(args: &[&str], env: &[(&str, &str)]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_dlq"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    eprintln!("dlq {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn meta(class: &str, kind: &str, origin: &str) -> String {
    format!(
        r#"{{"v":1,"attempts":5,"originQueueArn":"{origin}","originMessageId":"m-{kind}","firstFailureAt":"2026-11-22T05:00:00.000Z","lastFailureAt":"2026-11-22T05:10:00.000Z","errorClass":"{class}","errorKind":"{kind}","errorMessage":"boom"}}"#
    )
}

#[tokio::test]
async fn reading_consumes_nothing_and_redrive_moves_only_the_eligible() {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok(),
        "run with `make test` (moto server and AWS_ENDPOINT_URL)"
    );
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-cli", std::process::id());
    let mut urls = Vec::new();
    for name in ["orders", "orders-dlq"] {
        let url = client
            .create_queue()
            .queue_name(format!("{prefix}-{name}"))
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        urls.push(url);
    }
    let (origin_url, dlq_url) = (&urls[0], &urls[1]);
    let origin_arn = queue_arn(&client, origin_url).await.unwrap();
    let dead = [
        ("transient", "payment_timeout"),
        ("transient", "payment_timeout"),
        ("permanent", "invalid_order"),
    ];
    for (i, (class, kind)) in dead.iter().enumerate() {
        let value = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(meta(class, kind, &origin_arn))
            .build()
            .unwrap();
        client
            .send_message()
            .queue_url(dlq_url)
            .message_body(format!(r#"{{"orderId":"o-{i}"}}"#))
            .message_attributes("redrive", value)
            .send()
            .await
            .unwrap();
    }

    let help = stdout(&dlq(&["--help"], &[]));
    assert!(
        help.contains("Examples:") && help.contains("move-task"),
        "{help}"
    );

    let stats: serde_json::Value =
        serde_json::from_str(&stdout(&dlq(&["stats", dlq_url], &[]))).unwrap();
    assert_eq!(stats["read"]["messages"], 3);
    assert_eq!(stats["read"]["byKind"]["payment_timeout"], 2);
    assert_eq!(stats["read"]["byOrigin"][format!("{prefix}-orders")], 3);

    let peeked = stdout(&dlq(&["peek", dlq_url, "-n", "2"], &[]));
    assert_eq!(peeked.matches("\"messageId\"").count(), 2, "{peeked}");
    let exported = stdout(&dlq(&["export", dlq_url], &[]));
    let lines: Vec<serde_json::Value> = exported
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "peek consumed nothing");
    assert!(lines
        .iter()
        .all(|l| l["redrive"]["originQueueArn"] == origin_arn.as_str()));

    let dry: serde_json::Value =
        serde_json::from_str(&stdout(&dlq(&["redrive", dlq_url, "--dry-run"], &[]))).unwrap();
    assert_eq!(
        (dry["reprocessed"].as_u64(), dry["manualReview"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(
        depth(&client, dlq_url).await.unwrap().0,
        3,
        "a dry run moves nothing"
    );

    let run: serde_json::Value = serde_json::from_str(&stdout(&dlq(
        &["redrive", "--error-kind", "payment_timeout", dlq_url],
        &[],
    )))
    .unwrap();
    assert_eq!(
        (run["reprocessed"].as_u64(), run["filteredOut"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(depth(&client, origin_url).await.unwrap().0, 2);
    assert_eq!(depth(&client, dlq_url).await.unwrap().0, 1);

    let bad = dlq(&["redrive", dlq_url, "--error-class", "flaky"], &[]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not an error class"));
    let typo = dlq(&["stats", dlq_url], &[("REDRIVE_REPROCES_MAX", "2")]);
    assert!(typo.status.success(), "stats reads no REDRIVE_* setting");
    let typo = dlq(
        &["redrive", dlq_url, "--dry-run"],
        &[("REDRIVE_REPROCES_MAX", "2")],
    );
    assert!(String::from_utf8_lossy(&typo.stderr).contains("unknown setting"));

    // moto has no message move tasks; the error names the call.
    let listed = dlq(&["move-task", "list", dlq_url], &[]);
    assert!(!listed.status.success());
    assert!(String::from_utf8_lossy(&listed.stderr).contains("ListMessageMoveTasks failed"));
}

#[tokio::test]
async fn a_held_fifo_head_is_listed_and_released_to_come_back_at_once() {
    use redrive::fifo::{AttemptLedger, Hold};
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok(),
        "run with `make test` (moto server and AWS_ENDPOINT_URL)"
    );
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-cli-held", std::process::id());
    let url = client
        .create_queue()
        .queue_name(format!("{prefix}-payments.fifo"))
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = queue_arn(&client, &url).await.unwrap();
    client
        .send_message()
        .queue_url(&url)
        .message_body(r#"{"orderId":"p-1"}"#)
        .message_group_id("customer-A")
        .message_deduplication_id("p-1")
        .send()
        .await
        .unwrap();
    // The consumer held its group on it: the head waits in flight for hours.
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
    let dynamodb = aws_sdk_dynamodb::Client::new(&redrive::sqs::sdk_config_from_env());
    let table = format!("{prefix}-idempotency");
    redrive_local::provision::idempotency_table(&dynamodb, &table)
        .await
        .unwrap();
    let ledger = redrive::dynamodb::DynamoDbStore::with_client(dynamodb, &table);
    let hold = Hold {
        since_ms: 1_763_790_000_000,
        receive_count: 1,
        receipt_handle: head.receipt_handle().unwrap().to_owned(),
        queue_arn: arn,
        error_kind: "invalid_order".into(),
        error_message: "no amount".into(),
        release: None,
    };
    let id = head.message_id().unwrap();
    ledger.hold(id, &hold, false).await.unwrap();

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
    let again = client
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(again.len(), 1, "visible again at once");
    assert_eq!(again[0].message_id(), Some(id));
    let entry = ledger.entries(&[id]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert_eq!((entry.hold.is_none(), entry.attempts_from), (true, 2));
    assert!(depth(&client, &url).await.is_ok());
}

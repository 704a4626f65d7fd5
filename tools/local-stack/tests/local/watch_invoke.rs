//! The path a developer takes by hand: `cargo lambda watch` serving the real function, and
//! `cargo lambda invoke --data-file events/sqs-mixed-batch.json`, with moto as SQS.
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::Duration;

use aws_sdk_sqs::types::QueueAttributeName;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Stops `cargo lambda watch` and everything it started (cargo, the function) when dropped.
struct Watch(Child);

impl Drop for Watch {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let _ = self.0.wait();
    }
}

/// Bodies of the DLQ messages visible now (they stay invisible for the queue's timeout after).
async fn dlq_bodies(client: &aws_sdk_sqs::Client, dlq: &str) -> Vec<String> {
    let output = client
        .receive_message()
        .queue_url(dlq)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    output
        .messages
        .unwrap_or_default()
        .iter()
        .map(|m| m.body().unwrap().to_owned())
        .collect()
}

/// The order ids of the DLQ's visible messages, sorted (they stay in flight a while after).
async fn dlq_orders(client: &aws_sdk_sqs::Client, dlq: &str) -> Vec<String> {
    let mut orders: Vec<String> = dlq_bodies(client, dlq)
        .await
        .iter()
        .map(|body| {
            serde_json::from_str::<serde_json::Value>(body).unwrap()["orderId"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    orders.sort();
    orders
}

/// `cargo lambda invoke <function> --data-file <file>` against watch: the function's answer, or
/// the error it reported (stdout and stderr). Given up after 10 minutes (the first invoke builds
/// the function): a function that exits instead of answering leaves the invoke waiting.
fn invoke(port: u16, function: &str, data_file: &str) -> Result<serde_json::Value, String> {
    let output = Command::new("timeout")
        .current_dir(root())
        .args([
            "600",
            "cargo",
            "lambda",
            "invoke",
            function,
            "--invoke-address",
            "127.0.0.1",
        ])
        .args(["--invoke-port", &port.to_string()])
        .args(["--data-file", data_file, "--output-format", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    if output.status.success() {
        Ok(serde_json::from_str(stdout.trim()).unwrap_or(serde_json::Value::Null))
    } else {
        Err(format!(
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cargo_lambda_invoke_against_watch_answers_the_sample_batch() {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("needs moto: run with `make test`");
    let cargo_lambda = Command::new("cargo").args(["lambda", "--version"]).output();
    assert!(
        cargo_lambda.is_ok_and(|o| o.status.success()),
        "needs cargo-lambda on PATH: run with `make test` (it installs it in .venv)"
    );

    // The sample events name the queue `orders` in account 123456789012 (moto's default).
    let client = redrive_local::sqs_client();
    let create = |name: &'static str| {
        client
            .create_queue()
            .queue_name(name)
            .attributes(QueueAttributeName::VisibilityTimeout, "30")
            .send()
    };
    let source = create("orders").await.unwrap().queue_url.unwrap();
    let dlq = create("orders-dlq").await.unwrap().queue_url.unwrap();
    // Where the EventBridge redrive's sample events come from (a retry copy goes back there).
    create("orders-bus-target-dlq").await.unwrap();

    let port = redrive_local::free_port();
    let state = root().join(".local");
    std::fs::create_dir_all(&state).unwrap();
    let log = std::fs::File::create(state.join("watch.log")).unwrap();
    let env = [
        format!("REDRIVE_DLQ_URL={dlq}"),
        format!("AWS_ENDPOINT_URL={endpoint}"),
        "AWS_ACCESS_KEY_ID=test".into(),
        "AWS_SECRET_ACCESS_KEY=test".into(),
        "AWS_REGION=us-east-1".into(),
        "REDRIVE_RETRY_SEQUENCE=1m".into(),
    ];
    let mut watch = Command::new("cargo");
    watch
        .current_dir(root())
        .args([
            "lambda",
            "watch",
            "--invoke-address",
            "127.0.0.1",
            "--invoke-port",
            &port.to_string(),
        ])
        .args(["--env-file", "events/sqs-consumer.env"])
        .args(env.iter().flat_map(|pair| ["--env-var", pair.as_str()]))
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    std::os::unix::process::CommandExt::process_group(&mut watch, 0);
    let _watch = Watch(watch.spawn().unwrap());

    redrive_local::wait_until_listening(
        port,
        Duration::from_secs(120),
        "cargo lambda watch (see .local/watch.log)",
    );

    // The first invoke compiles the function; give it the time a cold build takes on 2 cores.
    let response = invoke(port, "sqs-consumer", "events/sqs-mixed-batch.json").unwrap();
    assert_eq!(response, serde_json::json!({ "batchItemFailures": [] }));

    // o-1002 (invalid) and o-1004 (panic) are in the DLQ; o-1003 (flaky) was re-sent with a delay.
    assert_eq!(dlq_orders(&client, &dlq).await, ["o-1002", "o-1004"]);
    let delayed = client
        .get_queue_attributes()
        .queue_url(&source)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .unwrap();
    assert_eq!(
        delayed.attributes().unwrap()[&QueueAttributeName::ApproximateNumberOfMessagesDelayed],
        "1"
    );

    // The same function behind an orders table's stream: o-6002 (invalid) is dead-lettered as
    // its record, o-1003 (flaky) stops the batch at its sequence number.
    let response = invoke(port, "sqs-consumer", "events/dynamodb-orders.json").unwrap();
    assert_eq!(
        response,
        serde_json::json!({ "batchItemFailures": [{ "itemIdentifier": "4100000000000000001004" }] })
    );
    let records: Vec<serde_json::Value> = dlq_bodies(&client, &dlq)
        .await
        .iter()
        .map(|body| serde_json::from_str(body).unwrap())
        .collect();
    assert_eq!(
        records
            .iter()
            .map(|record| &record["dynamodb"]["NewImage"]["orderId"]["S"])
            .collect::<Vec<_>>(),
        ["o-6002"]
    );

    // And behind a Kafka topic, without a retry lane: o-7002 (invalid) is dead-lettered and its
    // customer's next order follows it; o-1003 (flaky) gives its partition back from its offset.
    let response = invoke(port, "sqs-consumer", "events/kafka-orders.json").unwrap();
    assert_eq!(
        response,
        serde_json::json!({ "batchItemFailures": [
            { "itemIdentifier": { "partition": "orders-1", "offset": 57 } }
        ] })
    );
    assert_eq!(dlq_orders(&client, &dlq).await, ["o-7002", "o-7003"]);

    // The poller, delivering real SQS messages to the function through watch's invoke endpoint.
    let bodies = [
        r#"{"orderId":"o-7001","customerId":"c-1","amount":10.0,"currency":"EUR"}"#,
        r#"{"orderId":"o-7002","customerId":"c-1","amount":11.0,"currency":"EUR"}"#,
        r#"{"orderId":"o-7003", not json"#,
    ];
    for body in bodies {
        client
            .send_message()
            .queue_url(&source)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let queue = redrive_local::provision::QueuePair {
        key: "orders".into(),
        fifo: false,
        arn: redrive_local::provision::queue_arn(&client, &source)
            .await
            .unwrap(),
        url: source.clone(),
        dlq_arn: redrive_local::provision::queue_arn(&client, &dlq)
            .await
            .unwrap(),
        dlq_url: dlq.clone(),
    };
    let poller = redrive_local::poller::Poller::new(client.clone(), &queue, 10, Duration::ZERO);
    let scratch = state.join("poller-event.json");
    let poll = poller
        .poll(Duration::from_secs(2), |event| {
            redrive_local::poller::invoke_watch(port, "sqs-consumer", event, scratch)
        })
        .await
        .unwrap();
    assert_eq!(
        (
            poll.received,
            poll.deleted,
            poll.given_back,
            poll.whole_batch_failed
        ),
        (3, 3, 0, false)
    );
    let bodies = dlq_bodies(&client, &dlq).await;
    assert_eq!(
        bodies,
        [r#"{"orderId":"o-7003", not json"#],
        "the malformed order, byte for byte"
    );

    // The other functions, with their sample events, through the same watch.
    // The event consumer: o-1003's payment times out on its first attempt; the error type names
    // the class for the on-failure record. (Its redelivery, which succeeds, needs the client
    // context the EventBridge redrive invokes with: `cargo lambda invoke --client-context-*`
    // hands it to the runtime still base64-encoded, which lambda_runtime refuses, where Lambda
    // decodes it; functions/event-consumer/tests/function/events.rs covers it.)
    let event = "events/eventbridge-order-event.json";
    let failed = invoke(port, "event-consumer", event).unwrap_err();
    assert!(
        failed.contains("redrive.transient.payment_timeout"),
        "{failed}"
    );
    // The EventBridge redrive: its targets do not exist on moto (no `orders-audit` queue, no
    // function), which no retry mends: every event is parked and none is given back.
    let response = invoke(
        port,
        "eventbridge-redrive",
        "events/eventbridge-dlq-batch.json",
    )
    .unwrap();
    assert_eq!(response, serde_json::json!({ "batchItemFailures": [] }));
    // The DLQ reprocessor: the sample command, a dry run on the DLQ, answers with its summary.
    let summary = invoke(port, "dlq-redrive", "events/redrive-command.json").unwrap();
    assert_eq!(summary["dryRun"], true, "{summary}");
    assert_eq!(summary["sendFailures"], 0, "{summary}");
}

//! The `dlq` binary against moto: reading consumes nothing, redrive moves only what it should, and
//! errors are clear.
mod browser;
mod console;
mod doctor;
mod held;
mod intake;

use std::process::{Command, Output};

use aws_sdk_sqs::types::MessageAttributeValue;
use redrive_local::provision::{depth, queue_arn};

pub(crate) fn dlq(args: &[&str], env: &[(&str, &str)]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_dlq"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    eprintln!("dlq {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

pub(crate) fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// Sends a dead letter to `dlq_url` per order of `orders`, with a failure envelope of `failure`.
pub(crate) async fn dead_letters(
    client: &aws_sdk_sqs::Client,
    dlq_url: &str,
    failure: redrive_local::incident::Failure<'_>,
    origin_arn: &str,
    orders: impl IntoIterator<Item = usize>,
) {
    for order in orders {
        let value = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(redrive_local::incident::envelope(
                failure,
                origin_arn,
                1000 + order,
            ))
            .build()
            .unwrap();
        client
            .send_message()
            .queue_url(dlq_url)
            .message_body(redrive_local::incident::body(order))
            .message_attributes("redrive", value)
            .send()
            .await
            .unwrap();
    }
}

/// Stops a test run outside `make test` with what it needs: the moto server it talks to.
pub(crate) fn on_moto() {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok(),
        "run with `make test` (moto server and AWS_ENDPOINT_URL)"
    );
}

/// An origin queue and its DLQ where `client` points: (origin URL, DLQ URL, origin ARN).
pub(crate) async fn origin_and_dlq(
    client: &aws_sdk_sqs::Client,
    prefix: &str,
) -> (String, String, String) {
    on_moto();
    let origin_url = new_queue(client, &format!("{prefix}-orders")).await;
    let dlq_url = new_queue(client, &format!("{prefix}-orders-dlq")).await;
    let origin_arn = queue_arn(client, &origin_url).await.unwrap();
    (origin_url, dlq_url, origin_arn)
}

/// A standard queue named `name`: its URL.
pub(crate) async fn new_queue(client: &aws_sdk_sqs::Client, name: &str) -> String {
    let created = client.create_queue().queue_name(name).send().await;
    created.unwrap().queue_url.unwrap()
}

#[tokio::test]
async fn reading_consumes_nothing_and_redrive_moves_only_the_eligible() {
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-cli", std::process::id());
    let (origin_url, dlq_url, origin_arn) = origin_and_dlq(&client, &prefix).await;
    let (origin_url, dlq_url) = (&origin_url, &dlq_url);
    let dead = [
        ("transient", "payment_timeout", "7"),
        ("transient", "payment_timeout", "7"),
        ("permanent", "invalid_order", "7"),
    ];
    for (i, failure) in dead.into_iter().enumerate() {
        dead_letters(&client, dlq_url, failure, &origin_arn, [i]).await;
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

    // One group per cause: the two timeouts' messages differ by their order number only.
    let groups: Vec<serde_json::Value> = stdout(&dlq(&["groups", dlq_url], &[]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary: Vec<(&str, u64, &str)> = groups
        .iter()
        .map(|g| {
            (
                g["errorKind"].as_str().unwrap(),
                g["count"].as_u64().unwrap(),
                g["pattern"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("payment_timeout", 2, "order <n> failed"),
            ("invalid_order", 1, "order <n> failed")
        ]
    );
    assert_eq!(groups[0]["origin"], format!("{prefix}-orders"));

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

/// Issue 56: a fair queue's dead letters counted by tenant (their message group), and one
/// tenant's redriven home alone, each copy still in its tenant's group.
#[tokio::test]
async fn one_tenants_dead_letters_are_counted_and_redriven_alone() {
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-tenants", std::process::id());
    let (origin_url, dlq_url, origin_arn) = origin_and_dlq(&client, &prefix).await;
    let tenants = ["t-13", "t-1", "t-13", "t-2", "t-13", "t-1"];
    for (order, tenant) in tenants.into_iter().enumerate() {
        let failure = ("transient", "webhook_unavailable", "7");
        let value = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(redrive_local::incident::envelope(
                failure,
                &origin_arn,
                order,
            ))
            .build()
            .unwrap();
        client
            .send_message()
            .queue_url(&dlq_url)
            .message_body(redrive_local::incident::body(order))
            .message_attributes("redrive", value)
            .message_group_id(tenant)
            .send()
            .await
            .unwrap();
    }

    let stats: serde_json::Value =
        serde_json::from_str(&stdout(&dlq(&["stats", &dlq_url, "--by", "tenant"], &[]))).unwrap();
    assert_eq!(
        stats["read"]["byTenant"],
        serde_json::json!([
            { "tenant": "t-13", "messages": 3 },
            { "tenant": "t-1", "messages": 2 },
            { "tenant": "t-2", "messages": 1 },
        ])
    );

    let run: serde_json::Value = serde_json::from_str(&stdout(&dlq(
        &["redrive", &dlq_url, "--tenant", "t-13"],
        &[],
    )))
    .unwrap();
    assert_eq!(
        (run["reprocessed"].as_u64(), run["filteredOut"].as_u64()),
        (Some(3), Some(3))
    );
    let home = client
        .receive_message()
        .queue_url(&origin_url)
        .max_number_of_messages(10)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    let groups: Vec<&str> = home
        .iter()
        .map(|m| {
            let attributes = m.attributes.as_ref().unwrap();
            attributes[&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId].as_str()
        })
        .collect();
    assert_eq!(groups, ["t-13", "t-13", "t-13"]);
    let left: serde_json::Value =
        serde_json::from_str(&stdout(&dlq(&["stats", &dlq_url, "--by", "tenant"], &[]))).unwrap();
    assert_eq!(left["read"]["messages"], 3, "the others' stay: {left}");
    assert!(left["read"]["byTenant"]
        .as_array()
        .unwrap()
        .iter()
        .all(|count| count["tenant"] != "t-13"));
}

/// Issue 55: a job takes exactly the group's messages read when it was made; later failures of
/// the same group stay in the DLQ, a second run finds nothing left to do, an edited job is refused.
#[tokio::test]
async fn a_job_redrives_exactly_the_group_it_selected_and_never_a_later_arrival() {
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-job", std::process::id());
    let (origin_url, dlq_url, origin_arn) = origin_and_dlq(&client, &prefix).await;
    let invalid = ("permanent", "invalid_order", "7");
    dead_letters(&client, &dlq_url, invalid, &origin_arn, 0..3).await;
    let timeout = ("transient", "payment_timeout", "7");
    dead_letters(&client, &dlq_url, timeout, &origin_arn, 3..5).await;
    let groups: Vec<serde_json::Value> = stdout(&dlq(&["groups", &dlq_url], &[]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let key = groups
        .iter()
        .find(|g| g["errorKind"] == "invalid_order")
        .and_then(|g| g["key"].as_str())
        .unwrap()
        .to_owned();
    let file = std::env::temp_dir().join(format!("{prefix}-job.json"));
    let path = file.to_str().unwrap();

    let unknown = dlq(
        &[
            "job",
            "new",
            &dlq_url,
            "--group",
            "0000000000000000",
            "--out",
            path,
        ],
        &[],
    );
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no failure group 0000000000000000"));
    let dry: serde_json::Value = serde_json::from_str(&stdout(&dlq(
        &["job", "new", &dlq_url, "--group", &key, "--out", path],
        &[],
    )))
    .unwrap();
    assert_eq!(
        (dry["dryRun"].as_bool(), dry["reprocessed"].as_u64()),
        (Some(true), Some(3)),
        "{dry}"
    );
    assert_eq!(
        depth(&client, &dlq_url).await.unwrap().0,
        5,
        "a dry run moves nothing"
    );

    dead_letters(&client, &dlq_url, invalid, &origin_arn, 5..7).await;
    // (sent home, selected but no longer in the DLQ) of one run of the job.
    let run_job = || {
        let run: serde_json::Value =
            serde_json::from_str(&stdout(&dlq(&["job", "run", path], &[]))).unwrap();
        (
            run["reprocessed"].as_u64(),
            run["selectionNotFound"].as_u64(),
        )
    };
    assert_eq!(run_job(), (Some(3), Some(0)));
    assert_eq!(depth(&client, &origin_url).await.unwrap().0, 3);
    let left: Vec<serde_json::Value> = stdout(&dlq(&["export", &dlq_url], &[]))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut orders: Vec<&str> = left.iter().map(|l| l["body"].as_str().unwrap()).collect();
    orders.sort_unstable();
    assert_eq!(
        orders,
        [3, 4, 5, 6].map(|n| format!(r#"{{"orderId":"o-{n}"}}"#)),
        "the other group and the later failures stay"
    );

    assert_eq!(
        run_job(),
        (Some(0), Some(3)),
        "run again: nothing left to do"
    );
    let mut job: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    job["messageIds"]
        .as_array_mut()
        .unwrap()
        .push("swept-in".into());
    std::fs::write(&file, job.to_string()).unwrap();
    let edited = dlq(&["job", "run", path], &[]);
    assert!(String::from_utf8_lossy(&edited.stderr).contains("does not match its selectionHash"));
    std::fs::remove_file(&file).unwrap();
}

#[tokio::test]
async fn peek_and_export_show_a_large_messages_body_from_s3_or_where_it_is_kept() {
    let client = redrive_local::sqs_client();
    let name = format!("t{}-cli-large", std::process::id());
    let dlq_url = client
        .create_queue()
        .queue_name(format!("{name}-dlq"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let s3 = redrive::aws::s3_client(&redrive::aws::sdk_config_from_env());
    s3.create_bucket().bucket(&name).send().await.unwrap();
    let body = format!(
        r#"{{"orderId":"o-large","note":"{}"}}"#,
        "n".repeat(300_000)
    );
    s3.put_object()
        .bucket(&name)
        .key("5b1f-producer")
        .body(body.clone().into_bytes().into())
        .send()
        .await
        .unwrap();
    let pointer = format!(
        r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{{"s3BucketName":"{name}","s3Key":"5b1f-producer"}}]"#
    );
    for (key, size) in [("5b1f-producer", body.len()), ("expired", 7)] {
        let number = |value: String| {
            MessageAttributeValue::builder()
                .data_type("Number")
                .string_value(value)
                .build()
                .unwrap()
        };
        client
            .send_message()
            .queue_url(&dlq_url)
            .message_body(pointer.replace("5b1f-producer", key))
            .message_attributes("ExtendedPayloadSize", number(size.to_string()))
            .send()
            .await
            .unwrap();
    }

    let exported: Vec<serde_json::Value> = stdout(&dlq(&["export", &dlq_url], &[]))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let by_key = |lines: &[serde_json::Value], key: &str| {
        lines
            .iter()
            .find(|line| line["largeMessage"]["s3"] == format!("s3://{name}/{key}"))
            .cloned()
            .unwrap_or_else(|| panic!("{key}: {lines:?}"))
    };
    let read = by_key(&exported, "5b1f-producer");
    assert_eq!(read["body"], body.as_str(), "the body read from S3");
    assert_eq!(read["largeMessage"]["bytes"], body.len());
    let gone = by_key(&exported, "expired");
    assert!(gone["largeMessage"]["unreadable"]
        .as_str()
        .unwrap()
        .contains("no object"));
    assert_eq!(gone["body"], pointer.replace("5b1f-producer", "expired"));

    let peeked = stdout(&dlq(&["peek", &dlq_url, "--pointers"], &[]));
    assert!(
        !peeked.contains("nnnnnnnn"),
        "with --pointers no body is read"
    );
    assert_eq!(
        peeked.matches(&format!("s3://{name}/")).count(),
        2,
        "{peeked}"
    );
    assert_eq!(
        depth(&client, &dlq_url).await.unwrap().0,
        2,
        "nothing consumed"
    );
}

/// One SQS consumer on moto as `dlq doctor` reads it: a function, its queue, the queue's DLQ and
/// the mapping between them, each setting as a case sets it.
pub(crate) struct Consumer {
    fifo: bool,
    visibility_timeout: u32,
    max_receive_count: Option<u32>,
    dlq_retention: u32,
    partial_batch_response: bool,
    batch_size: i32,
    environment: Vec<(&'static str, &'static str)>,
    reserved: Option<i32>,
}

impl Default for Consumer {
    /// A sound one: 30 s function timeout, a 180 s visibility timeout, maxReceiveCount 10, a DLQ
    /// that keeps messages 14 days against the source's 4, partial batch responses.
    fn default() -> Self {
        Self {
            fifo: false,
            visibility_timeout: 180,
            max_receive_count: Some(10),
            dlq_retention: 1_209_600,
            partial_batch_response: true,
            batch_size: 10,
            environment: vec![("REDRIVE_MAX_ATTEMPTS", "5")],
            reserved: None,
        }
    }
}

/// An IAM role on moto (Lambda refuses a function whose role does not exist). The SDK has no IAM
/// client here: moto takes IAM's query call from any request that names the service.
pub(crate) fn moto_role(name: &str) -> String {
    use std::io::{Read, Write as _};
    let endpoint = std::env::var("AWS_ENDPOINT_URL").unwrap();
    let host = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let body = format!(
        "Action=CreateRole&Version=2010-05-08&RoleName={name}&AssumeRolePolicyDocument=%7B%7D"
    );
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    write!(
        stream,
        "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.contains("<Arn>"), "{answer}");
    format!("arn:aws:iam::123456789012:role/{name}")
}

pub(crate) async fn deploy(name: &str, role: &str, consumer: &Consumer) {
    let config = redrive::aws::sdk_config_from_env();
    let sqs = aws_sdk_sqs::Client::new(&config);
    let lambda = aws_sdk_lambda::Client::new(&config);
    let suffix = if consumer.fifo { ".fifo" } else { "" };
    let queue = |queue: String, attributes: Vec<(&'static str, String)>| {
        let sqs = sqs.clone();
        async move {
            let mut create = sqs.create_queue().queue_name(queue);
            for (key, value) in attributes {
                create = create.attributes(key.into(), value);
            }
            let url = create.send().await.unwrap().queue_url.unwrap();
            queue_arn(&sqs, &url).await.unwrap()
        }
    };
    let fifo = |mut attributes: Vec<(&'static str, String)>| {
        if consumer.fifo {
            attributes.push(("FifoQueue", "true".into()));
        }
        attributes
    };
    let dlq = queue(
        format!("{name}-dlq{suffix}"),
        fifo(vec![(
            "MessageRetentionPeriod",
            consumer.dlq_retention.to_string(),
        )]),
    )
    .await;
    let mut attributes = fifo(vec![
        ("VisibilityTimeout", consumer.visibility_timeout.to_string()),
        ("MessageRetentionPeriod", "345600".into()),
    ]);
    if let Some(max) = consumer.max_receive_count {
        attributes.push((
            "RedrivePolicy",
            format!(r#"{{"deadLetterTargetArn":"{dlq}","maxReceiveCount":{max}}}"#),
        ));
    }
    let source = queue(format!("{name}{suffix}"), attributes).await;
    let environment = aws_sdk_lambda::types::Environment::builder()
        .set_variables(Some(
            consumer
                .environment
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ))
        .build();
    lambda
        .create_function()
        .function_name(name)
        .runtime(aws_sdk_lambda::types::Runtime::Providedal2023)
        .role(role)
        .handler("bootstrap")
        .timeout(30)
        .environment(environment)
        .code(
            aws_sdk_lambda::types::FunctionCode::builder()
                .zip_file(aws_sdk_lambda::primitives::Blob::new(b"a zip".to_vec()))
                .build(),
        )
        .send()
        .await
        .unwrap();
    if let Some(reserved) = consumer.reserved {
        lambda
            .put_function_concurrency()
            .function_name(name)
            .reserved_concurrent_executions(reserved)
            .send()
            .await
            .unwrap();
    }
    let mut mapping = lambda
        .create_event_source_mapping()
        .function_name(name)
        .event_source_arn(source)
        .batch_size(consumer.batch_size)
        .scaling_config(
            aws_sdk_lambda::types::ScalingConfig::builder()
                .maximum_concurrency(10)
                .build(),
        );
    if consumer.partial_batch_response {
        mapping = mapping.function_response_types(
            aws_sdk_lambda::types::FunctionResponseType::ReportBatchItemFailures,
        );
    }
    mapping.send().await.unwrap();
}

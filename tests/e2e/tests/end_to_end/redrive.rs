//! Redrive end to end on moto: the DLQ reprocessor against real queues, and the EventBridge
//! redrive reading a target DLQ through the poller. Every message is accounted for.

use std::time::Duration;

use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName};
use redrive::config::{EventRedriveSettings, ReprocessSettings};
use redrive::eventbridge::EventRedrive;
use redrive::reprocess::{ReprocessCommand, ReprocessSummary, Reprocessor};
use redrive::testing::RecordingInvoker;
use redrive::{Processor, ProcessorConfig, Settings, SqsQueue};
use redrive_e2e::{meta, order, order_id, require_emulator, Options, Stack};
use redrive_local::poller::Poller;
use redrive_local::provision::{depth, queue_arn, QueuePair};

const LIMIT: Duration = Duration::from_secs(60);

async fn redrive(
    stack: &Stack,
    overrides: &[(&str, &str)],
    command: ReprocessCommand,
) -> ReprocessSummary {
    let settings = ReprocessSettings::from_lookup(overrides.iter().map(|(n, _)| *n), |name| {
        overrides
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.to_string())
    })
    .unwrap();
    let command = ReprocessCommand {
        source: Some(stack.queue.dlq_url.clone()),
        ..command
    };
    let plan = command.plan(&settings).unwrap();
    Reprocessor::new(SqsQueue::with_client(stack.client.clone()), &settings)
        .run(&plan, None, |_| {})
        .await
        .unwrap()
}

async fn dlq_depth(stack: &Stack) -> u64 {
    let (visible, in_flight, delayed) = depth(&stack.client, &stack.queue.dlq_url).await.unwrap();
    visible + in_flight + delayed
}

#[tokio::test]
async fn the_dlq_reprocessor_sends_healed_failures_home_once_and_leaves_the_rest() {
    let knobs = [("PAYMENTS_FLAKY_ORDERS", "o-outage:99")];
    let settings = [("REDRIVE_MAX_ATTEMPTS", "2")];
    let mut stack = Stack::new(
        "reprocess",
        Options {
            knobs: &knobs,
            settings: &settings,
            ..Options::default()
        },
    )
    .await;
    let invalid = r#"{"orderId":"o-invalid","customerId":"c-1","amount":-1,"currency":"EUR"}"#;
    stack
        .send(
            &[order("o-outage"), invalid.to_owned(), order("o-fine")],
            None,
        )
        .await;
    stack.drain(LIMIT).await;
    assert_eq!(stack.charged(), ["o-fine"]);
    assert_eq!(dlq_depth(&stack).await, 2);
    stack.consumer.payments_mut().heal();
    let now = [("REDRIVE_REPROCESS_AFTER", "0s")];

    // A dry run decides and counts; the DLQ is as it was.
    let dry = redrive(
        &stack,
        &now,
        ReprocessCommand {
            dry_run: true,
            ..ReprocessCommand::default()
        },
    )
    .await;
    assert_eq!(
        (dry.examined, dry.reprocessed, dry.manual_review),
        (2, 1, 1)
    );
    assert_eq!(dlq_depth(&stack).await, 2);
    assert_eq!(stack.source_depth().await, 0);

    // Before the backoff has passed nothing moves.
    let early = redrive(&stack, &[], ReprocessCommand::default()).await;
    assert_eq!(
        (early.not_yet, early.manual_review, early.reprocessed),
        (1, 1, 0)
    );

    // The transient failure goes home and is charged; the invalid order stays for review.
    let run = redrive(&stack, &now, ReprocessCommand::default()).await;
    assert_eq!(
        (run.reprocessed, run.manual_review, run.send_failures),
        (1, 1, 0)
    );
    stack.drain(LIMIT).await;
    assert_eq!(stack.charged(), ["o-fine", "o-outage"]);
    let again = redrive(&stack, &now, ReprocessCommand::default()).await;
    assert_eq!(
        (again.examined, again.reprocessed),
        (1, 0),
        "nothing is redriven twice"
    );
    assert_eq!(stack.charged(), ["o-fine", "o-outage"]);

    // A send that fails leaves the message in the DLQ.
    let nowhere = "arn:aws:sqs:us-east-1:123456789012:no-such-queue".to_owned();
    let failed = redrive(
        &stack,
        &now,
        ReprocessCommand {
            destination: Some(nowhere),
            force: true,
            ..ReprocessCommand::default()
        },
    )
    .await;
    assert_eq!((failed.reprocessed, failed.send_failures), (0, 1));
    assert_eq!(dlq_depth(&stack).await, 1);

    // Forced after a "fix" that does not fix it: back in the DLQ with its redrive count, and the cap
    // turns the next attempt into an alert.
    let forced = redrive(
        &stack,
        &now,
        ReprocessCommand {
            force: true,
            ..ReprocessCommand::default()
        },
    )
    .await;
    assert_eq!(forced.reprocessed, 1);
    stack.drain(LIMIT).await;
    let dead = stack.dlq_messages().await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (order_id(&dead[0]), meta(&dead[0]).unwrap().reprocess_count),
        ("o-invalid".to_owned(), 1)
    );
    stack.release_dlq(&dead).await;
    let capped = redrive(
        &stack,
        &[
            ("REDRIVE_REPROCESS_AFTER", "0s"),
            ("REDRIVE_REPROCESS_MAX", "1"),
        ],
        ReprocessCommand {
            force: true,
            ..ReprocessCommand::default()
        },
    )
    .await;
    assert_eq!((capped.alerted, capped.reprocessed), (1, 0));
    assert_eq!(dlq_depth(&stack).await, 1);
    stack.assert_accounted(3, &stack.dlq_messages().await).await;
}

#[tokio::test]
async fn eventbridge_dlq_messages_go_to_their_own_target_and_parked_codes_stay_parked() {
    require_emulator();
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-eb", std::process::id());
    let create = |name: String| {
        let client = client.clone();
        async move {
            let url = client
                .create_queue()
                .queue_name(name)
                .send()
                .await
                .unwrap()
                .queue_url
                .unwrap();
            let arn = queue_arn(&client, &url).await.unwrap();
            (url, arn)
        }
    };
    let (audit_url, audit_arn) = create(format!("{prefix}-audit")).await;
    let (dlq_url, dlq_arn) = create(format!("{prefix}-bus-dlq")).await;
    let (parked_url, _) = create(format!("{prefix}-parked")).await;
    let ledger_url = client
        .create_queue()
        .queue_name(format!("{prefix}-ledger.fifo"))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .attributes(QueueAttributeName::ContentBasedDeduplication, "true")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let ledger_arn = queue_arn(&client, &ledger_url).await.unwrap();
    let function = "arn:aws:lambda:us-east-1:123456789012:function:orders-events";
    let event = |order: &str| {
        format!(
            r#"{{"version":"0","id":"ev-{order}","detail-type":"OrderPlaced","source":"shop.orders","account":"123456789012","time":"2026-11-22T06:00:00Z","region":"us-east-1","resources":[],"detail":{{"orderId":"{order}","customerId":"c-1","amount":3.5,"currency":"EUR"}}}}"#
        )
    };
    let failures = [
        ("o-sqs", audit_arn.as_str(), "THROTTLING"),
        ("o-lambda", function, "THROTTLING"),
        ("o-denied", function, "NO_PERMISSIONS"),
        ("o-fifo", ledger_arn.as_str(), "THROTTLING"),
    ];
    for (order, target, code) in failures {
        let attribute = |value: &str| {
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .unwrap()
        };
        client
            .send_message()
            .queue_url(&dlq_url)
            .message_body(event(order))
            .message_attributes(
                "RULE_ARN",
                attribute("arn:aws:events:us-east-1:123456789012:rule/orders/order-placed"),
            )
            .message_attributes("TARGET_ARN", attribute(target))
            .message_attributes("ERROR_CODE", attribute(code))
            .message_attributes("ERROR_MESSAGE", attribute("failed"))
            .message_attributes(
                "EXHAUSTED_RETRY_CONDITION",
                attribute("MaximumRetryAttempts"),
            )
            .message_attributes("RETRY_ATTEMPTS", attribute("185"))
            .send()
            .await
            .unwrap();
    }

    let settings = Settings::from_lookup(["REDRIVE_DLQ_URL"], |name| {
        (name == "REDRIVE_DLQ_URL").then(|| parked_url.clone())
    })
    .unwrap();
    let processor = Processor::new(
        SqsQueue::with_client(client.clone()),
        ProcessorConfig::from(&settings),
    );
    let handler = EventRedrive::new(
        SqsQueue::with_client(client.clone()),
        RecordingInvoker::default(),
        // Redriven at once: the wait after a failure is shown in functions/eventbridge-redrive.
        EventRedriveSettings::from_lookup(
            ["REDRIVE_REPROCESS_AFTER", "REDRIVE_FIFO_TARGET_GROUPS"],
            |name| match name {
                "REDRIVE_REPROCESS_AFTER" => Some("0s".into()),
                "REDRIVE_FIFO_TARGET_GROUPS" => Some(format!("{ledger_arn}=ledger-7")),
                _ => None,
            },
        )
        .unwrap(),
    );
    let queue = QueuePair {
        key: "bus".into(),
        fifo: false,
        url: dlq_url.clone(),
        arn: dlq_arn,
        dlq_url: parked_url.clone(),
        dlq_arn: String::new(),
    };
    let poller = Poller::new(client.clone(), &queue, 10, Duration::ZERO);
    let invoke = |event: String| {
        let (processor, handler) = (&processor, &handler);
        async move {
            let mut context = lambda_runtime::Context::default();
            context.deadline = u64::MAX / 2;
            let event =
                lambda_runtime::LambdaEvent::new(redrive::lambda::Bytes::from(event), context);
            let processed = redrive::lambda::handle_batch(event, processor, handler)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(serde_json::to_string(&processed.response).unwrap())
        }
    };
    let mut deleted = 0;
    while deleted < 4 {
        let poll = poller.poll(Duration::from_secs(1), invoke).await.unwrap();
        assert_eq!(poll.given_back, 0);
        deleted += poll.deleted;
    }

    let take = |url: String| {
        let client = client.clone();
        async move {
            let output = client
                .receive_message()
                .queue_url(url)
                .max_number_of_messages(10)
                .message_attribute_names("All")
                .send()
                .await
                .unwrap();
            output.messages.unwrap_or_default()
        }
    };
    let audited = take(audit_url).await;
    assert_eq!(audited.len(), 1);
    assert_eq!(
        audited[0].body(),
        Some(event("o-sqs").as_str()),
        "the event byte for byte"
    );
    let ledger = client
        .receive_message()
        .queue_url(&ledger_url)
        .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(
        ledger
            .iter()
            .map(|m| {
                (
                    m.body().unwrap_or_default(),
                    m.attributes()
                        .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                        .map(String::as_str),
                )
            })
            .collect::<Vec<_>>(),
        [(event("o-fifo").as_str(), Some("ledger-7"))],
        "the event byte for byte, in the group its rule target gives it"
    );
    let invokes = handler.lambda().invokes();
    assert_eq!(invokes.len(), 1, "{invokes:?}");
    assert_eq!(
        (
            invokes[0].function_arn.as_str(),
            invokes[0].payload.as_str()
        ),
        (function, event("o-lambda").as_str()),
        "the event byte for byte"
    );
    let parked = take(parked_url.clone()).await;
    assert_eq!(parked.len(), 1);
    let parked_event: serde_json::Value = serde_json::from_str(parked[0].body().unwrap()).unwrap();
    assert_eq!(parked_event["detail"]["orderId"], "o-denied");
    assert_eq!(
        &*meta(&parked[0]).unwrap().error_kind,
        "parked_no_permissions"
    );
    assert_eq!(depth(&client, &dlq_url).await.unwrap(), (0, 0, 0));

    // The permission is fixed; the operator redrives the parking queue (`take` above hid its
    // message: make it visible) and the event reaches its target this time.
    for message in &parked {
        client
            .change_message_visibility()
            .queue_url(&parked_url)
            .receipt_handle(message.receipt_handle().unwrap_or_default())
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
    let settings = ReprocessSettings::from_lookup([], |_| None).unwrap();
    let plan = ReprocessCommand {
        source: Some(parked_url.clone()),
        force: true,
        ..ReprocessCommand::default()
    }
    .plan(&settings)
    .unwrap();
    let summary = Reprocessor::new(SqsQueue::with_client(client.clone()), &settings)
        .run(&plan, None, |_| {})
        .await
        .unwrap();
    assert_eq!(summary.reprocessed, 1);
    let poll = poller.poll(Duration::from_secs(1), invoke).await.unwrap();
    assert_eq!((poll.received, poll.deleted), (1, 1));
    let invokes = handler.lambda().invokes();
    assert_eq!(invokes.len(), 2);
    assert!(invokes[1].payload.contains("o-denied"));
    assert_eq!(depth(&client, &parked_url).await.unwrap(), (0, 0, 0));
}

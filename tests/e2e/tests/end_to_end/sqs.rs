//! End to end on a real SQS (moto server) through the local poller: one test per fate. Each test
//! accounts for every message it sent: charged, still in the source, or in the DLQ.

use std::time::Duration;

use redrive::{ErrorClass, Message, RecordError, RecordHandler};
use redrive_e2e::{meta, order, order_id, InFlight, Options, Stack};

const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn successes_are_deleted_and_nothing_is_re_sent() {
    let stack = Stack::new("success", Options::default()).await;
    let orders: Vec<String> = (0..12).map(|i| order(&format!("o-{i}"))).collect();
    stack.send(&orders, None).await;
    let polls = stack.drain(LIMIT).await;
    assert_eq!(polls.iter().map(|p| p.deleted).sum::<usize>(), 12);
    assert_eq!(stack.charged().len(), 12);
    let dead = stack.dlq_messages().await;
    assert!(dead.is_empty());
    stack.assert_accounted(12, &dead).await;
}

#[tokio::test]
async fn a_transient_failure_is_re_sent_with_its_delay_and_attributes_then_succeeds() {
    let knobs = [("PAYMENTS_FLAKY_ORDERS", "o-flaky:2")];
    let stack = Stack::new(
        "transient",
        Options {
            knobs: &knobs,
            // A delay long enough to see the copy wait it out (the shipped 2 s scaled is 33 ms).
            settings: &[("REDRIVE_RETRY_SEQUENCE", "2s")],
            ..Options::default()
        },
    )
    .await;
    stack.send(&[order("o-flaky")], None).await;

    let first = stack
        .poller()
        .poll(Duration::from_secs(1), |event| stack.invoke(event))
        .await
        .unwrap();
    assert_eq!(
        (first.received, first.deleted, first.given_back),
        (1, 1, 0),
        "the original is not listed as failed"
    );
    assert_eq!(
        stack.delayed().await,
        1,
        "the re-sent copy waits out its DelaySeconds"
    );
    // Not visible before its delay, visible after.
    let early = stack
        .poller()
        .poll(Duration::ZERO, |_| async {
            unreachable!("delivered before its delay")
        })
        .await
        .unwrap();
    assert_eq!(early.received, 0);
    tokio::time::sleep(Duration::from_millis(2200)).await;

    let output = stack
        .client
        .receive_message()
        .queue_url(&stack.queue.url)
        .message_attribute_names("All")
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let copy = &output.messages.unwrap()[0];
    let carried = meta(copy).expect("the copy carries the redrive attribute");
    assert_eq!(
        (carried.attempts, carried.error_class, &*carried.error_kind),
        (1, ErrorClass::Transient, "payment_timeout")
    );
    assert_eq!(
        copy.message_attributes().unwrap()["tenant"].string_value(),
        Some("acme"),
        "original attributes kept"
    );
    assert_eq!(copy.body(), Some(order("o-flaky").as_str()));

    stack.drain(LIMIT).await;
    assert_eq!(stack.charged(), ["o-flaky"], "third attempt succeeds, once");
    let dead = stack.dlq_messages().await;
    assert!(dead.is_empty());
    stack.assert_accounted(1, &dead).await;
}

#[tokio::test]
async fn transient_failures_that_exhaust_their_attempts_land_in_the_dlq_with_metadata() {
    let knobs = [("PAYMENTS_FLAKY_ORDERS", "o-down:99")];
    let settings = [("REDRIVE_MAX_ATTEMPTS", "3")];
    let stack = Stack::new(
        "exhausted",
        Options {
            knobs: &knobs,
            settings: &settings,
            ..Options::default()
        },
    )
    .await;
    stack.send(&[order("o-down"), order("o-fine")], None).await;
    stack.drain(LIMIT).await;
    let dead = stack.dlq_messages().await;
    assert_eq!(dead.len(), 1);
    let carried = meta(&dead[0]).unwrap();
    assert_eq!(
        (carried.attempts, carried.error_class, &*carried.error_kind),
        (3, ErrorClass::Transient, "payment_timeout")
    );
    assert!(carried.last_failure_at > carried.first_failure_at);
    assert_eq!(&*carried.origin_queue_arn, stack.queue.arn);
    assert_eq!(stack.charged(), ["o-fine"]);
    stack.assert_accounted(2, &dead).await;
}

#[tokio::test]
async fn permanent_failures_go_to_the_dlq_at_once_with_the_body_byte_for_byte() {
    let stack = Stack::new("permanent", Options::default()).await;
    let invalid = "{\"orderId\" : \"o-ü-1\",\n \"customerId\":\"c-1\", \"amount\": -3, \"currency\":\"EUR\", \"note\":\"tab\\there \u{1F600}\"}";
    let malformed = "{\"orderId\": \"o-2\", \"amount\": 1,,}";
    stack
        .send(
            &[invalid.to_owned(), malformed.to_owned(), order("o-3")],
            None,
        )
        .await;
    let polls = stack.drain(LIMIT).await;
    assert_eq!(polls.len(), 1, "no retries: one batch decides all");
    let mut dead = stack.dlq_messages().await;
    dead.sort_by_key(|m| meta(m).unwrap().error_kind.to_string());
    let kinds: Vec<_> = dead
        .iter()
        .map(|m| {
            (
                m.body().unwrap().to_owned(),
                meta(m).unwrap().error_kind.to_string(),
                meta(m).unwrap().attempts,
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (invalid.to_owned(), "invalid_order".into(), 1),
            (malformed.to_owned(), "malformed_body".into(), 1)
        ]
    );
    assert_eq!(
        dead[0].message_attributes().unwrap()["tenant"].string_value(),
        Some("acme")
    );
    assert_eq!(stack.charged(), ["o-3"]);
    stack.assert_accounted(3, &dead).await;
}

#[tokio::test]
async fn a_panic_fails_only_its_record() {
    let knobs = [("PAYMENTS_POISON_ORDERS", "o-poison")];
    let stack = Stack::new(
        "panic",
        Options {
            knobs: &knobs,
            ..Options::default()
        },
    )
    .await;
    stack
        .send(&[order("o-1"), order("o-poison"), order("o-2")], None)
        .await;
    stack.drain(LIMIT).await;
    let dead = stack.dlq_messages().await;
    assert_eq!(dead.len(), 1);
    let carried = meta(&dead[0]).unwrap();
    assert_eq!(carried.error_class, ErrorClass::Panic);
    assert!(
        carried.error_message.contains("o-poison"),
        "{}",
        carried.error_message
    );
    assert_eq!(stack.charged(), ["o-1", "o-2"]);
    stack.assert_accounted(3, &dead).await;
}

#[tokio::test]
async fn fifo_keeps_group_order_under_failure_while_other_groups_advance() {
    let knobs = [("PAYMENTS_FLAKY_ORDERS", "a-2:1")];
    let stack = Stack::new(
        "fifo",
        Options {
            fifo: true,
            knobs: &knobs,
            ..Options::default()
        },
    )
    .await;
    stack
        .send(&["a-1", "a-2", "a-3"].map(order), Some("A"))
        .await;
    stack.send(&["b-1", "b-2"].map(order), Some("B")).await;

    let polls = stack.drain(LIMIT).await;
    assert!(
        polls.len() >= 2,
        "a-2 and a-3 come back in a later batch: {polls:?}"
    );
    let charged = stack.charged();
    let group = |prefix: &str| {
        charged
            .iter()
            .filter(|id| id.starts_with(prefix))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        group("a-"),
        ["a-1", "a-2", "a-3"],
        "group A in order, a-3 only after a-2"
    );
    assert_eq!(group("b-"), ["b-1", "b-2"]);
    let b_done = charged.iter().position(|id| id == "b-2").unwrap();
    let a2_done = charged.iter().position(|id| id == "a-2").unwrap();
    assert!(
        b_done < a2_done,
        "group B did not wait for group A: {charged:?}"
    );
    let dead = stack.dlq_messages().await;
    assert!(dead.is_empty());
    stack.assert_accounted(5, &dead).await;
}

#[tokio::test]
async fn fifo_groups_run_side_by_side_each_in_order_end_to_end() {
    let knobs = [
        ("PAYMENTS_LATENCY", "30ms"),
        ("PAYMENTS_FLAKY_ORDERS", "b-2:1"),
    ];
    let settings = [("REDRIVE_CONCURRENCY", "3")];
    let stack = Stack::new(
        "fifo-lanes",
        Options {
            fifo: true,
            knobs: &knobs,
            settings: &settings,
            ..Options::default()
        },
    )
    .await;
    for group in ["a", "b", "c"] {
        let orders: Vec<String> = (1..=3).map(|n| order(&format!("{group}-{n}"))).collect();
        stack.send(&orders, Some(group)).await;
    }

    let counting = InFlight::new(&stack.consumer);
    stack.drain_with(&counting, LIMIT).await;
    let (most, most_in_a_group) = counting.most();
    assert_eq!(most_in_a_group, 1, "one record of a group at a time");
    assert!(most > 1, "the groups overlapped ({most} at most)");
    assert!(most <= 3, "REDRIVE_CONCURRENCY=3 bounds them ({most})");
    let charged = stack.charged();
    for group in ["a", "b", "c"] {
        let in_group: Vec<&String> = charged.iter().filter(|id| id.starts_with(group)).collect();
        let expected: Vec<String> = (1..=3).map(|n| format!("{group}-{n}")).collect();
        assert_eq!(in_group, expected.iter().collect::<Vec<_>>(), "{charged:?}");
    }
    let dead = stack.dlq_messages().await;
    assert!(dead.is_empty());
    stack.assert_accounted(9, &dead).await;
}

#[tokio::test]
async fn a_failing_retry_send_gives_the_record_back_and_nothing_is_lost() {
    let knobs = [("PAYMENTS_FLAKY_ORDERS", "o-flaky:1")];
    let broken = [(
        "REDRIVE_SOURCE_QUEUE_URL",
        "http://127.0.0.1:1/123456789012/no-such-queue",
    )];
    let stack = Stack::new(
        "sendfail",
        Options {
            knobs: &knobs,
            settings: &broken,
            ..Options::default()
        },
    )
    .await;
    stack.send(&[order("o-flaky"), order("o-ok")], None).await;
    let poll = stack
        .poller()
        .poll(Duration::from_secs(1), |event| stack.invoke(event))
        .await
        .unwrap();
    assert_eq!(
        (poll.received, poll.deleted, poll.given_back),
        (2, 1, 1),
        "the record whose re-send failed is listed"
    );
    assert_eq!(
        stack.source_depth().await,
        1,
        "still in the source queue, in flight"
    );

    // With the send path repaired, the record comes back after its visibility timeout and is retried.
    let mut stack = stack;
    stack.reconfigure(&[]);
    stack.drain(LIMIT).await;
    let mut charged = stack.charged();
    charged.sort();
    assert_eq!(charged, ["o-flaky", "o-ok"]);
    let dead = stack.dlq_messages().await;
    assert!(dead.is_empty());
    stack.assert_accounted(2, &dead).await;
}

#[tokio::test]
async fn a_record_given_back_max_receive_count_times_is_dead_lettered_by_the_queue_itself() {
    let stack = Stack::new(
        "redrivepolicy",
        Options {
            max_receive_count: Some(2),
            visibility_timeout_seconds: Some(1),
            ..Options::default()
        },
    )
    .await;
    stack.send(&[order("o-late")], None).await;
    // Every invocation arrives past its deadline: the record is never started and always given back.
    for _ in 0..2 {
        let poll = stack
            .poller()
            .poll(Duration::from_secs(3), |event| {
                stack.invoke_with_deadline(event, 0, &stack.consumer)
            })
            .await
            .unwrap();
        assert_eq!((poll.received, poll.given_back), (1, 1));
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let third = stack
        .poller()
        .poll(Duration::from_secs(1), |_| async {
            unreachable!("moved to the DLQ by SQS")
        })
        .await
        .unwrap();
    assert_eq!(third.received, 0);
    let dead = stack.dlq_messages().await;
    assert_eq!(dead.len(), 1);
    assert_eq!(order_id(&dead[0]), "o-late");
    assert!(
        meta(&dead[0]).is_none(),
        "moved by SQS's redrive policy, without redrive metadata"
    );
    assert!(stack.charged().is_empty());
    stack.assert_accounted(1, &dead).await;
}

#[tokio::test]
async fn a_whole_batch_error_deletes_nothing() {
    let stack = Stack::new("wholebatch", Options::default()).await;
    stack.send(&[order("o-1"), order("o-2")], None).await;
    let poll = stack
        .poller()
        .poll(Duration::from_secs(1), |_| async {
            Err("function error".to_owned())
        })
        .await
        .unwrap();
    assert!(poll.whole_batch_failed);
    assert_eq!((poll.received, poll.deleted), (2, 0));
    stack.drain(LIMIT).await;
    let mut charged = stack.charged();
    charged.sort();
    assert_eq!(
        charged,
        ["o-1", "o-2"],
        "redelivered after the visibility timeout and processed"
    );
    stack.assert_accounted(2, &[]).await;
}

/// Records, per order, the attempt each delivery handed to the handler.
struct Attempts<'a> {
    consumer: &'a orders::OrdersHandler<orders::payments::SimulatedPayments>,
    seen: std::sync::Mutex<Vec<(String, u32)>>,
}

impl RecordHandler for Attempts<'_> {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let order: serde_json::Value = message.json()?;
        let id = order["orderId"].as_str().unwrap_or_default().to_owned();
        self.seen.lock().unwrap().push((id, message.attempt()));
        self.consumer.handle(message).await
    }
}

/// On FIFO the attempt is SQS's receive count, less the receives the attempt ledger knows were
/// untried. With a batch of one record a record is never delivered without being tried, so its
/// count is its own failures; in a batch of ten, a record held back behind a failing one of its
/// group is delivered (and counted) each time it is, unless the ledger takes those off.
#[tokio::test]
async fn fifo_attempts_count_only_own_failures_with_a_batch_of_one() {
    let knobs = [("PAYMENTS_FLAKY_ORDERS", "a-1:2")];
    // In a batch of ten, a-2 is received with a-1 and held back twice; the ledger knows.
    for (batch_size, ledger, first_try_of_a2) in [(1, false, 1), (10, false, 3), (10, true, 1)] {
        let stack = Stack::new(
            &format!("fifo-attempts-{batch_size}-{ledger}"),
            Options {
                fifo: true,
                knobs: &knobs,
                batch_size: Some(batch_size),
                ledger,
                ..Options::default()
            },
        )
        .await;
        stack.send(&["a-1", "a-2"].map(order), Some("A")).await;
        let attempts = Attempts {
            consumer: &stack.consumer,
            seen: Default::default(),
        };
        stack.drain_with(&attempts, LIMIT).await;
        let seen = attempts.seen.into_inner().unwrap();
        let of = |id: &str| -> Vec<u32> {
            seen.iter()
                .filter(|(o, _)| o == id)
                .map(|(_, a)| *a)
                .collect()
        };
        assert_eq!(
            of("a-1"),
            [1, 2, 3],
            "batch {batch_size}: two timeouts, then done"
        );
        assert_eq!(
            of("a-2"),
            [first_try_of_a2],
            "batch {batch_size}: a-2 is tried once, after a-1: {seen:?}"
        );
        assert_eq!(stack.charged(), ["a-1", "a-2"]);
        stack.assert_accounted(2, &stack.dlq_messages().await).await;
    }
}

/// Keeps the body of every request the SDK sends: moto 5.2.5 stores `MessageSystemAttributes` on
/// SendMessage but drops them on SendMessageBatch, so what the engine asked of SQS is read here.
#[derive(Debug, Default, Clone)]
struct Wire(std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>);

impl aws_sdk_sqs::config::Intercept for Wire {
    fn name(&self) -> &'static str {
        "Wire"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_sqs::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_sqs::config::RuntimeComponents,
        _: &mut aws_sdk_sqs::config::ConfigBag,
    ) -> Result<(), aws_sdk_sqs::error::BoxError> {
        if let Some(body) = context.request().body().bytes() {
            if let Ok(json) = serde_json::from_slice(body) {
                self.0.lock().unwrap().push(json);
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_retry_and_a_dead_letter_carry_the_trace_header_of_the_delivery_that_failed() {
    use aws_sdk_sqs::types::{MessageSystemAttributeNameForSends, MessageSystemAttributeValue};
    let knobs = [("PAYMENTS_FLAKY_ORDERS", "o-flaky:1")];
    let mut stack = Stack::new(
        "traced",
        Options {
            knobs: &knobs,
            ..Options::default()
        },
    )
    .await;
    let wire = Wire::default();
    let watched = aws_sdk_sqs::Client::from_conf(
        stack
            .client
            .config()
            .to_builder()
            .interceptor(wire.clone())
            .build(),
    );
    let settings = stack
        .topology
        .settings(
            &stack.queue.key,
            &stack.queue.dlq_url,
            Options::default().settings,
        )
        .unwrap();
    stack.processor = redrive::Processor::new(
        redrive::SqsQueue::with_client(watched),
        redrive::ProcessorConfig::from(&settings),
    );
    let trace = |order: &str| {
        format!("Root=1-6921a3c0-0a1b2c3d4e5f60718293a4b5;Parent=53995c3f42cd8ad8;Sampled=1;Lineage=a87bd80c:0|{order}")
    };
    let invalid = r#"{"orderId":"o-invalid","customerId":"c-1","amount":-3,"currency":"EUR"}"#;
    for (order_id, body) in [
        ("o-flaky", order("o-flaky")),
        ("o-invalid", invalid.to_owned()),
    ] {
        let header = MessageSystemAttributeValue::builder()
            .data_type("String")
            .string_value(trace(order_id))
            .build()
            .unwrap();
        stack
            .client
            .send_message()
            .queue_url(&stack.queue.url)
            .message_body(body)
            .message_system_attributes(MessageSystemAttributeNameForSends::AwsTraceHeader, header)
            .send()
            .await
            .unwrap();
    }
    stack.drain(LIMIT).await;
    assert_eq!(stack.charged(), ["o-flaky"], "retried once, then done");
    let dead = stack.dlq_messages().await;
    assert_eq!(dead.len(), 1);
    stack.assert_accounted(2, &dead).await;

    // The header reached the consumer in the event (moto keeps SendMessage's system attributes),
    // and the engine sent it on with the retry copy and the dead letter.
    let sent: Vec<(String, Option<String>)> = wire
        .0
        .lock()
        .unwrap()
        .iter()
        .flat_map(|request| request["Entries"].as_array().cloned().unwrap_or_default())
        .map(|entry| {
            let order: serde_json::Value =
                serde_json::from_str(entry["MessageBody"].as_str().unwrap()).unwrap();
            (
                order["orderId"].as_str().unwrap().to_owned(),
                entry["MessageSystemAttributes"]["AWSTraceHeader"]["StringValue"]
                    .as_str()
                    .map(str::to_owned),
            )
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("o-flaky".to_owned(), Some(trace("o-flaky"))),
            ("o-invalid".to_owned(), Some(trace("o-invalid")))
        ]
    );
}

#[tokio::test]
async fn the_local_queues_take_the_attributes_terraform_ships() {
    use aws_sdk_sqs::types::QueueAttributeName;
    use redrive_local::topology::{self, Topology};

    redrive_e2e::require_emulator();
    let mut topology = Topology::load(&topology::default_path()).unwrap();
    topology.name_prefix = format!("t{}-shipped", std::process::id());
    let client = redrive_local::sqs_client();
    let pairs = redrive_local::provision::provision(&client, &topology)
        .await
        .unwrap();
    assert_eq!(pairs.len(), topology.consumers.len());
    for pair in pairs {
        let consumer = &topology.consumers[&pair.key];
        // What the rendering of the stack's plan says: 1 MiB, the largest copy the engine sends.
        assert_eq!(
            consumer.max_message_size,
            redrive::envelope::MAX_MESSAGE_BYTES as u64
        );
        for (url, size, retention, receive_count) in [
            (
                &pair.url,
                consumer.max_message_size,
                consumer.message_retention_seconds,
                Some(consumer.max_receive_count),
            ),
            (
                &pair.dlq_url,
                consumer.dlq_max_message_size,
                consumer.dlq_message_retention_seconds,
                None,
            ),
        ] {
            let attributes = client
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(QueueAttributeName::All)
                .send()
                .await
                .unwrap()
                .attributes
                .unwrap();
            let attribute = |name: QueueAttributeName| attributes.get(&name).cloned();
            assert_eq!(
                attribute(QueueAttributeName::MaximumMessageSize),
                Some(size.to_string()),
                "{url}"
            );
            assert_eq!(
                attribute(QueueAttributeName::MessageRetentionPeriod),
                Some(retention.to_string()),
                "{url}"
            );
            let policy = attribute(QueueAttributeName::RedrivePolicy)
                .map(|text| serde_json::from_str::<serde_json::Value>(&text).unwrap());
            assert_eq!(
                policy.map(|p| p["maxReceiveCount"].as_u64().unwrap() as u32),
                receive_count,
                "{url}"
            );
        }
    }
}

/// Issue 53 B: each consumer runs here with the `REDRIVE_*` environment Terraform plans for its
/// function (`infra/rendered/infra.json`), not one the local stack derives: before, the source's
/// visibility timeout and retention, the idempotency lease and TTL and the metrics namespace were
/// left at the engine's defaults.
#[test]
fn each_consumer_runs_with_the_environment_terraform_ships() {
    use redrive_local::topology::{self, Topology};

    let topology = Topology::load(&topology::default_path()).unwrap();
    let rendering = topology::rendering("infra").unwrap();
    for key in topology.consumers.keys() {
        let shipped =
            &rendering["functions"][format!("{}-{key}", topology.name_prefix)]["environment"];
        let env = topology.function_env(key, "https://dlq");
        for (name, value) in shipped.as_object().unwrap() {
            let value = value.as_str().unwrap();
            if value == "(known after apply)" {
                continue; // a queue URL: the local stack's own
            }
            let local = env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
            assert_eq!(local, Some(value), "{key}: {name}");
        }
        assert!(
            env.iter()
                .any(|(n, v)| n == "REDRIVE_SOURCE_VISIBILITY_TIMEOUT" && v.ends_with('s')),
            "{key}: {env:?}"
        );
    }
}

//! Kafka on a real broker (`tansu`, Kafka-compatible, built by `make`) read by the stand-in for
//! Lambda's Kafka mapping (`redrive_local::kafka_poller`), the orders consumer invoked in process,
//! its retry lane and DLQ SQS FIFO queues on moto: an outage sends every key's first record to the
//! lane and its later ones after it, a poison order is dead-lettered with its key's later orders,
//! a flaky order leaves its partition while other keys are charged, and a later batch's order of a
//! key still in the lane follows it there; after the outage the lane charges each customer's
//! orders in order, and the DLQ's redrive into the lane the poison key's.
use std::collections::BTreeMap;
use std::time::Duration;

use redrive::reprocess::ReprocessCommand;
use redrive_e2e::{order, Options, Stack};
use redrive_local::kafka_poller::{Broker, KafkaPoller};
use redrive_local::mapping::ShippedMapping;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

const LIMIT: Duration = Duration::from_secs(90);

/// The broker, or `None` where it is not built (then the test says so; CI requires it).
fn broker() -> Option<Broker> {
    let Some(binary) = Broker::binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "tansu is not built (make builds it into .cache/tools/bin), and CI must run the Kafka test"
        );
        eprintln!("tansu is not built: the Kafka end-to-end test is skipped (make test builds it)");
        return None;
    };
    Some(Broker::start(&binary).unwrap())
}

/// Produces `(key, order id)` records to `partition` of `orders`, in order.
async fn produce(client: &rskafka::client::Client, partition: i32, orders: &[(&str, &str)]) {
    let partition_client = client
        .partition_client("orders", partition, UnknownTopicHandling::Retry)
        .await
        .unwrap();
    let records = orders
        .iter()
        .map(|(key, id)| Record {
            key: Some(key.as_bytes().to_vec()),
            value: Some(order(id).into_bytes()),
            headers: BTreeMap::from([("source".to_owned(), b"e2e".to_vec())]),
            timestamp: rskafka::chrono::DateTime::from_timestamp_millis(now_ms()).unwrap(),
        })
        .collect();
    partition_client
        .produce(records, Compression::NoCompression)
        .await
        .unwrap();
}

fn now_ms() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since_epoch.as_millis()).unwrap()
}

/// Polls the topic until no partition has a record past its committed offset.
async fn drain_topic(stack: &Stack, poller: &mut KafkaPoller) {
    let started = std::time::Instant::now();
    // Boxed: the whole invocation's future nests too deeply to sit inside the poll's.
    while let Some(poll) = poller
        .poll(|event| Box::pin(stack.invoke(event)))
        .await
        .unwrap()
    {
        assert!(!poll.whole_batch_failed, "{poll:?}");
        assert!(started.elapsed() < LIMIT, "the topic did not drain");
    }
}

/// The orders of `customer` (c-N) that were charged, in the order they were.
fn charged_of(stack: &Stack, of: &BTreeMap<&str, &str>, customer: &str) -> Vec<String> {
    stack
        .charged()
        .into_iter()
        .filter(|id| of.get(id.as_str()) == Some(&customer))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_partition_never_waits_and_each_key_takes_effect_in_order() {
    let Some(broker) = broker() else { return };
    let outage = std::env::temp_dir().join(format!("kafka-outage-{}", std::process::id()));
    let outage_file = outage.to_str().unwrap().to_owned();
    let mut stack = Stack::new(
        "kafka",
        Options {
            fifo: true,
            knobs: &[
                ("PAYMENTS_OUTAGE_FILE", &outage_file),
                ("PAYMENTS_POISON_ORDERS", "o-61"),
                ("PAYMENTS_FLAKY_ORDERS", "o-40:1"),
            ],
            batch_size: Some(1),
            ledger: true,
            ..Options::default()
        },
    )
    .await;
    // The consumer's FIFO queue is the lane: the same function reads it.
    let lane = stack.queue.url.clone();
    stack.reconfigure(&[("REDRIVE_LANE_URL", &lane)]);
    let client = broker.client().await.unwrap();
    client
        .controller_client()
        .unwrap()
        .create_topic("orders", 2, 1, 5_000)
        .await
        .unwrap();
    // A key's records are in one partition, as Kafka's partitioner puts them.
    let partition_0 = [
        ("c-1", "o-11"),
        ("c-2", "o-21"),
        ("c-1", "o-12"),
        ("c-2", "o-22"),
    ];
    let partition_1 = [
        ("c-3", "o-31"),
        ("c-6", "o-61"),
        ("c-3", "o-32"),
        ("c-6", "o-62"),
    ];
    let later = [
        ("c-4", "o-40"),
        ("c-5", "o-50"),
        ("c-1", "o-13"),
        ("c-4", "o-41"),
    ];
    produce(&client, 0, &partition_0).await;
    produce(&client, 1, &partition_1).await;
    let customer: BTreeMap<&str, &str> = partition_0
        .iter()
        .chain(&partition_1)
        .chain(&later)
        .map(|(key, id)| (*id, *key))
        .collect();
    let mut poller = KafkaPoller::new(
        &client,
        &broker.address,
        "orders",
        2,
        ShippedMapping::kafka().unwrap(),
    )
    .await
    .unwrap();

    // The payment service is down: no partition waits. Each key's first order fails into the
    // lane and its later ones follow it there untried; o-61 is poison (a panic): it goes to the
    // DLQ, and o-62, the same customer's next, follows it.
    std::fs::write(&outage, "down").unwrap();
    drain_topic(&stack, &mut poller).await;
    assert!(stack.charged().is_empty());
    let dead = stack.dlq_messages().await;
    let mut dead_orders: Vec<String> = dead.iter().map(redrive_e2e::order_id).collect();
    dead_orders.sort();
    assert_eq!(dead_orders, ["o-61", "o-62"]);
    stack.release_dlq(&dead).await;

    // A flaky order of a new customer leaves its partition; the other new customer's order is
    // charged in the same batch, before the lane is read at all; c-1's third follows its first
    // two, which wait in the lane since the batch before (the attempt ledger remembers).
    produce(&client, 0, &later).await;
    std::fs::remove_file(&outage).unwrap();
    drain_topic(&stack, &mut poller).await;
    assert_eq!(stack.charged(), ["o-50"], "no key waits for another");

    // The lane, the same function: each customer's orders in the order Kafka had them.
    stack.drain(LIMIT).await;
    for (key, expected) in [
        ("c-1", vec!["o-11", "o-12", "o-13"]),
        ("c-2", vec!["o-21", "o-22"]),
        ("c-3", vec!["o-31", "o-32"]),
        ("c-4", vec!["o-40", "o-41"]),
    ] {
        assert_eq!(charged_of(&stack, &customer, key), expected, "{key}");
    }

    // The poison is fixed; the DLQ is redriven into the lane, in its customer's order: its
    // dead letters name no origin queue, so they go to the fallback, as a schedule of
    // modules/recovery with the lane as the DLQ's origin_arn sends them.
    stack.consumer.payments_mut().heal();
    let summary = stack
        .redrive_dlq(ReprocessCommand {
            fallback_destination: Some(stack.queue.arn.clone()),
            ..ReprocessCommand::default()
        })
        .await;
    assert_eq!(summary.reprocessed, 2);
    stack.drain(LIMIT).await;
    assert_eq!(charged_of(&stack, &customer, "c-6"), ["o-61", "o-62"]);
    let mut all = stack.charged();
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(
        (before, all.len()),
        (12, 12),
        "every order charged once: {all:?}"
    );
    assert!(stack.dlq_messages().await.is_empty());
    assert_eq!(stack.source_depth().await, 0);
}

//! The stand-in for Lambda's Kafka mapping on the `tansu` broker: a partition given back in the
//! middle of a record batch is delivered again from the record named, none skipped; a partition
//! that keeps failing is discarded past the mapping's retries, and never with -1.
use std::collections::BTreeMap;

use redrive_local::kafka_poller::{Broker, KafkaPoller};
use redrive_local::mapping::ShippedMapping;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::client::Client;

/// A broker with the topic `orders` of one partition holding three record batches of ten
/// (offsets 0-9, 10-19, 20-29), written now; `None` where tansu is not built.
async fn orders() -> Option<(Broker, Client)> {
    let Some(binary) = Broker::binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "tansu is not built (make builds it into .cache/tools/bin), and CI must run this test"
        );
        eprintln!("tansu is not built: skipped (make test builds it)");
        return None;
    };
    let broker = Broker::start(&binary).unwrap();
    let client = broker.client().await.unwrap();
    client
        .controller_client()
        .unwrap()
        .create_topic("orders", 1, 1, 5_000)
        .await
        .unwrap();
    let partition = client
        .partition_client("orders", 0, UnknownTopicHandling::Retry)
        .await
        .unwrap();
    let written = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for batch in 0..3 {
        let records = (0..10)
            .map(|i| rskafka::record::Record {
                key: None,
                value: Some(format!("{batch}-{i}").into_bytes()),
                headers: BTreeMap::new(),
                timestamp: rskafka::chrono::DateTime::from_timestamp_millis(written).unwrap(),
            })
            .collect();
        partition
            .produce(records, Compression::NoCompression)
            .await
            .unwrap();
    }
    Some((broker, client))
}

/// One poll whose function gives the partition back from `give_back` (`Some(None)`: answers with
/// no failure; `None`: fails as a whole); the offsets delivered and what the poll did.
async fn poll_once(
    poller: &mut KafkaPoller,
    give_back: Option<Option<i64>>,
) -> Option<(Vec<i64>, redrive_local::kafka_poller::KafkaPoll)> {
    let mut delivered = Vec::new();
    let poll = poller
        .poll(|event| {
            let event: serde_json::Value = serde_json::from_str(&event).unwrap();
            delivered = event["records"]["orders-0"]
                .as_array()
                .unwrap()
                .iter()
                .map(|record| record["offset"].as_i64().unwrap())
                .collect();
            async move {
                let give_back = give_back.ok_or("injected: the function failed")?;
                let failures: Vec<serde_json::Value> = give_back
                    .map(|offset| serde_json::json!({"itemIdentifier": {"partition": "orders-0", "offset": offset}}))
                    .into_iter()
                    .collect();
                Ok(serde_json::json!({ "batchItemFailures": failures }).to_string())
            }
        })
        .await
        .unwrap()?;
    Some((delivered, poll))
}

#[tokio::test]
async fn a_partition_given_back_inside_a_record_batch_is_delivered_again_from_that_record() {
    let Some((broker, client)) = orders().await else {
        return;
    };
    let mut poller = KafkaPoller::new(
        &client,
        &broker.address,
        "orders",
        1,
        ShippedMapping::kafka().unwrap(),
    )
    .await
    .unwrap();
    let mut firsts = Vec::new();
    for give_back in [Some(5), Some(15), Some(25), None] {
        let (offsets, poll) = poll_once(&mut poller, Some(give_back)).await.unwrap();
        assert!(!poll.whole_batch_failed);
        firsts.push((offsets[0], offsets.len()));
    }
    assert_eq!(firsts, [(0, 30), (5, 25), (15, 15), (25, 5)]);
    assert!(poll_once(&mut poller, Some(None)).await.is_none());
}

/// Issue 53 item 2: what `modules/kafka-consumer` shipped before (5 retries) discards a partition's
/// records after six failures in a row; what it ships now (-1) keeps them until they succeed.
#[tokio::test]
async fn a_failing_partition_is_discarded_past_its_retries_and_kept_while_they_are_unbounded() {
    let Some((broker, client)) = orders().await else {
        return;
    };
    let shipped = ShippedMapping::kafka().unwrap();
    assert_eq!(shipped.maximum_retry_attempts, None, "the shipped retries");
    let bounded = ShippedMapping {
        maximum_retry_attempts: Some(5),
        ..shipped.clone()
    };
    let mut poller = KafkaPoller::new(&client, &broker.address, "orders", 1, bounded)
        .await
        .unwrap();
    // Committed to 3, then offset 3 fails six times: its first try and five retries; the sixth
    // failure discards offsets 3 to 29.
    let mut discarded = Vec::new();
    for _ in 0..6 {
        let (_, poll) = poll_once(&mut poller, Some(Some(3))).await.unwrap();
        discarded.push(poll.discarded);
    }
    assert_eq!(discarded, [0, 0, 0, 0, 0, 27]);
    assert!(poll_once(&mut poller, Some(None)).await.is_none());
    drop(poller);

    let mut kept = KafkaPoller::new(&client, &broker.address, "orders", 1, shipped)
        .await
        .unwrap();
    // A function that fails as a whole: bisected down to one record (30, 15, 7, 3, 1), then
    // retried without end.
    let mut sizes = Vec::new();
    for _ in 0..40 {
        let (offsets, poll) = poll_once(&mut kept, None).await.unwrap();
        assert!(poll.whole_batch_failed);
        assert_eq!(poll.discarded, 0);
        sizes.push(offsets.len());
    }
    assert_eq!(sizes[..6], [30, 15, 7, 3, 1, 1]);
    let (offsets, poll) = poll_once(&mut kept, Some(None)).await.unwrap();
    assert_eq!((offsets, poll.committed), (vec![0], 1));
}

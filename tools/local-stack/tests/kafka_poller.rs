//! The stand-in for Lambda's Kafka mapping on the `tansu` broker: a partition given back in the
//! middle of a record batch is delivered again from the record named, none skipped.
use std::collections::BTreeMap;

use redrive_local::kafka_poller::{Broker, KafkaPoller};
use rskafka::client::partition::{Compression, UnknownTopicHandling};

#[tokio::test]
async fn a_partition_given_back_inside_a_record_batch_is_delivered_again_from_that_record() {
    let Some(binary) = Broker::binary() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "tansu is not built (make builds it into .cache/tools/bin), and CI must run this test"
        );
        eprintln!("tansu is not built: skipped (make test builds it)");
        return;
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
    // Three record batches of ten: offsets 0-9, 10-19, 20-29.
    for batch in 0..3 {
        let records = (0..10)
            .map(|i| rskafka::record::Record {
                key: None,
                value: Some(format!("{batch}-{i}").into_bytes()),
                headers: BTreeMap::new(),
                timestamp: rskafka::chrono::DateTime::from_timestamp_millis(1).unwrap(),
            })
            .collect();
        partition
            .produce(records, Compression::NoCompression)
            .await
            .unwrap();
    }
    let mut poller = KafkaPoller::new(&client, &broker.address, "orders", 1, 100)
        .await
        .unwrap();
    let mut delivered: Vec<Vec<i64>> = Vec::new();
    for give_back in [Some(5), Some(15), Some(25), None] {
        let poll = poller
            .poll(|event| {
                let event: serde_json::Value = serde_json::from_str(&event).unwrap();
                let offsets = event["records"]["orders-0"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|record| record["offset"].as_i64().unwrap())
                    .collect();
                delivered.push(offsets);
                let failures: Vec<serde_json::Value> = give_back
                    .map(|offset| serde_json::json!({"itemIdentifier": {"partition": "orders-0", "offset": offset}}))
                    .into_iter()
                    .collect();
                async move { Ok(serde_json::json!({ "batchItemFailures": failures }).to_string()) }
            })
            .await
            .unwrap()
            .unwrap();
        assert!(!poll.whole_batch_failed);
    }
    let firsts: Vec<(i64, usize)> = delivered.iter().map(|o| (o[0], o.len())).collect();
    assert_eq!(firsts, [(0, 30), (5, 25), (15, 15), (25, 5)]);
    assert!(poller
        .poll(|_| async { Ok(String::new()) })
        .await
        .unwrap()
        .is_none());
}

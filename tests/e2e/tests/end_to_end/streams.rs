//! DynamoDB Streams on moto through the real SDK: an orders table's stream read by the local
//! stand-in for Lambda's event source mapping (`redrive_local::stream_poller`), the orders
//! consumer invoked in process; its dead letters redriven through the consumer's queue.
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use redrive::reprocess::ReprocessCommand;
use redrive_e2e::{meta, Options, Stack};
use redrive_local::mapping::ShippedMapping;
use redrive_local::stream_poller::{StreamPoll, StreamPoller};

const LIMIT: Duration = Duration::from_secs(60);

/// An orders table with a `NEW_AND_OLD_IMAGES` stream, as `infra/` makes one: its client, name
/// and stream ARN.
async fn orders_table(name: &str) -> (aws_sdk_dynamodb::Client, String, String) {
    let client = aws_sdk_dynamodb::Client::new(&redrive::aws::sdk_config_from_env());
    let table = format!("{name}-{}", std::process::id());
    let stream_arn = redrive_local::provision::streamed_table(&client, &table, "orderId")
        .await
        .unwrap();
    (client, table, stream_arn)
}

async fn put_order(client: &aws_sdk_dynamodb::Client, table: &str, id: &str, status: &str) {
    let text = |value: &str| AttributeValue::S(value.to_owned());
    client
        .put_item()
        .table_name(table)
        .item("orderId", text(id))
        .item("customerId", text("c-7"))
        .item("amount", AttributeValue::N("19.5".into()))
        .item("currency", text("EUR"))
        .item("status", text(status))
        .send()
        .await
        .unwrap();
}

/// Polls until every record read is checkpointed past and the stream has no more.
async fn drain_stream(stack: &Stack, poller: &mut StreamPoller) -> Vec<StreamPoll> {
    let started = std::time::Instant::now();
    let mut polls = Vec::new();
    while started.elapsed() < LIMIT {
        let round = poller.poll(|event| stack.invoke(event)).await.unwrap();
        if round.is_empty() && poller.pending() == 0 {
            return polls;
        }
        polls.extend(round);
    }
    panic!("the stream did not drain in {LIMIT:?}: {polls:?}");
}

#[tokio::test]
async fn a_poison_change_is_dead_lettered_the_shard_goes_on_and_its_redrive_charges_it_once() {
    let outage = std::env::temp_dir().join(format!("ddb-stream-outage-{}", std::process::id()));
    let outage_file = outage.to_str().unwrap();
    let mut stack = Stack::new(
        "ddb-stream",
        Options {
            knobs: &[
                ("PAYMENTS_OUTAGE_FILE", outage_file),
                ("PAYMENTS_POISON_ORDERS", "o-5"),
            ],
            ..Options::default()
        },
    )
    .await;
    let (client, table, stream_arn) = orders_table("orders-stream").await;
    let orders: Vec<String> = (1..=8).map(|n| format!("o-{n}")).collect();
    for id in &orders {
        put_order(&client, &table, id, "NEW").await;
    }
    // Changes that are not payments: the consumer is done with them without a charge.
    put_order(&client, &table, "o-2", "PAID").await;
    client
        .delete_item()
        .table_name(&table)
        .key("orderId", AttributeValue::S("o-4".into()))
        .send()
        .await
        .unwrap();

    // The mapping Terraform ships for a table's stream, in batches of 4 so that the test sees
    // several batches.
    let rendering = redrive_local::topology::rendering("table-stream").unwrap();
    let mapping = ShippedMapping {
        batch_size: 4,
        ..ShippedMapping::shipped(
            &rendering,
            "module.orders_changes.aws_lambda_event_source_mapping.stream",
            Some(stack.queue.dlq_url.clone()),
        )
        .unwrap()
    };
    let config = redrive::aws::sdk_config_from_env();
    let mut poller = StreamPoller::new(&config, &stream_arn, mapping)
        .await
        .unwrap();

    // The payment service is down: each batch stops at its first record, which Lambda retries.
    std::fs::write(&outage, "down").unwrap();
    for _ in 0..2 {
        let polls = poller.poll(|event| stack.invoke(event)).await.unwrap();
        assert_eq!(
            polls,
            [StreamPoll {
                invoked: 4,
                ..StreamPoll::default()
            }]
        );
    }
    assert!(stack.charged().is_empty());
    std::fs::remove_file(&outage).unwrap();
    let polls = drain_stream(&stack, &mut poller).await;
    assert!(
        polls
            .iter()
            .all(|poll| poll.checkpointed == poll.invoked && poll.discarded == 0),
        "past the outage every batch is done: {polls:?}"
    );
    let in_stream_order = ["o-1", "o-2", "o-3", "o-4", "o-6", "o-7", "o-8"];
    assert_eq!(
        stack.charged(),
        in_stream_order,
        "each new order charged once, in the stream's order, past the poison one"
    );

    let dead = stack.dlq_messages().await;
    assert_eq!(dead.len(), 1, "one dead letter, no on-failure record");
    let record: serde_json::Value = serde_json::from_str(dead[0].body().unwrap()).unwrap();
    assert_eq!(record["dynamodb"]["NewImage"]["orderId"]["S"], "o-5");
    let meta = meta(&dead[0]).unwrap();
    assert_eq!(
        (meta.error_class, &*meta.origin_queue_arn, meta.attempts),
        (redrive::ErrorClass::Panic, stream_arn.as_str(), 1)
    );
    assert_eq!(
        &*meta.origin_message_id,
        record["dynamodb"]["SequenceNumber"].as_str().unwrap()
    );

    // The bug is fixed; the operator redrives the DLQ into the consumer's queue, which the
    // same function reads: the change reaches the handler as it came from the stream.
    stack.consumer.payments_mut().heal();
    stack.release_dlq(&dead).await;
    let summary = stack
        .redrive_dlq(ReprocessCommand {
            destination: Some(stack.queue.arn.clone()),
            ..ReprocessCommand::default()
        })
        .await;
    assert_eq!(summary.reprocessed, 1);
    stack.drain(LIMIT).await;
    let mut charged = stack.charged();
    assert_eq!(charged.pop().as_deref(), Some("o-5"));
    assert_eq!(charged, in_stream_order, "nothing charged twice");
    assert!(stack.dlq_messages().await.is_empty());
    assert_eq!(stack.source_depth().await, 0);
}

#[tokio::test]
async fn a_batch_older_than_the_record_age_is_discarded_with_its_on_failure_record() {
    let outage = std::env::temp_dir().join(format!("ddb-stream-age-{}", std::process::id()));
    std::fs::write(&outage, "down").unwrap();
    let stack = Stack::new(
        "ddb-stream-age",
        Options {
            knobs: &[("PAYMENTS_OUTAGE_FILE", outage.to_str().unwrap())],
            ..Options::default()
        },
    )
    .await;
    let (client, table, stream_arn) = orders_table("orders-stream-age").await;
    put_order(&client, &table, "o-1", "NEW").await;
    // The shipped mapping, but records count as too old at once: the first retry is past the age.
    let rendering = redrive_local::topology::rendering("table-stream").unwrap();
    let mapping = ShippedMapping {
        maximum_record_age: Some(Duration::ZERO),
        ..ShippedMapping::shipped(
            &rendering,
            "module.orders_changes.aws_lambda_event_source_mapping.stream",
            Some(stack.queue.dlq_url.clone()),
        )
        .unwrap()
    };
    assert_eq!(mapping.maximum_retry_attempts, None, "shipped: -1");
    let config = redrive::aws::sdk_config_from_env();
    let mut poller = StreamPoller::new(&config, &stream_arn, mapping)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let polls = poller.poll(|event| stack.invoke(event)).await.unwrap();
    std::fs::remove_file(&outage).unwrap();
    assert_eq!(
        polls,
        [StreamPoll {
            invoked: 1,
            discarded: 1,
            ..StreamPoll::default()
        }]
    );
    assert!(stack.charged().is_empty());
    let dead = stack.dlq_messages().await;
    assert_eq!(dead.len(), 1, "the on-failure record");
    let record: serde_json::Value = serde_json::from_str(dead[0].body().unwrap()).unwrap();
    assert_eq!(record["requestContext"]["condition"], "RecordAgeExceeded");
    assert_eq!(record["DDBStreamBatchInfo"]["batchSize"], 1);
}

//! Kafka batches on an in-memory queue: a partition goes on past a failed record, which goes to
//! the retry lane (or the DLQ) with its origin; a later record of its key follows it untried;
//! without a lane, or when the copy cannot be sent, the partition is given back from the record.
use futures_util::future::BoxFuture;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use redrive_core::envelope::{Meta, OutgoingMessage, DATA_ENCODING_ATTRIBUTE};
use redrive_core::error::PortError;
use redrive_core::kafka::{KafkaEvent, KafkaEventResponse, KafkaOrigin, KAFKA_ATTRIBUTE};
use redrive_core::ledger::{Counted, ForwardingLedger, LedgerCall, MemoryLedger};
use redrive_core::port::RecordingQueue;
use redrive_core::{
    Message, Processed, Processor, ProcessorConfig, RecordError, RecordHandler, SqsEvent,
};

const DLQ: &str = "https://sqs.local/123456789012/orders-kafka-dlq";
const LANE: &str = "https://sqs.local/123456789012/orders-kafka-lane.fifo";
const LATER: u64 = u64::MAX / 2;

/// `(partition, offset, key, value)` records of the topic `orders`, grouped by partition as
/// Lambda groups them; each with a header `trace` of bytes Lambda writes as numbers.
fn event(records: &[(i64, i64, Option<&str>, &str)]) -> String {
    let mut partitions = serde_json::Map::new();
    for (partition, offset, key, value) in records {
        let record = serde_json::json!({
            "topic": "orders",
            "partition": partition,
            "offset": offset,
            "timestamp": 1_763_791_800_000_i64 + offset,
            "timestampType": "CREATE_TIME",
            "key": key.map(|key| BASE64.encode(key)),
            "value": BASE64.encode(value),
            "headers": [{ "trace": [116, 45, 0xff - 256] }],
        });
        partitions
            .entry(format!("orders-{partition}"))
            .or_insert_with(|| serde_json::json!([]))
            .as_array_mut()
            .unwrap()
            .push(record);
    }
    serde_json::json!({
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/orders/abcd",
        "bootstrapServers": "b-1.orders.kafka.us-east-1.amazonaws.com:9092",
        "records": partitions,
    })
    .to_string()
}

/// Fails a value that says `bad` for good and `slow` transiently; keeps what it handled.
#[derive(Default)]
struct Orders(Mutex<Vec<(String, Option<KafkaOrigin>)>>);
impl RecordHandler for Orders {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        self.0
            .lock()
            .unwrap()
            .push((message.body().to_owned(), message.kafka()));
        match message.body() {
            value if value.starts_with("bad") => {
                Err(RecordError::permanent("invalid", "bad order"))
            }
            value if value.starts_with("slow") => Err(RecordError::transient("timeout", "slow")),
            _ => Ok(()),
        }
    }
}

fn processor(lane: Option<&str>) -> Processor<RecordingQueue> {
    Processor::new(RecordingQueue::default(), {
        let mut processor_config = ProcessorConfig::default();
        processor_config.dlq_url = Some(DLQ.to_owned());
        processor_config.lane_url = lane.map(str::to_owned);
        processor_config.deadline_margin = std::time::Duration::ZERO;
        processor_config
    })
}

async fn run(
    processor: &Processor<RecordingQueue>,
    handler: &Orders,
    json: &str,
) -> Processed<KafkaEventResponse> {
    let event = KafkaEvent::from_slice(json.as_bytes()).unwrap();
    processor
        .process_kafka(handler, &event, LATER)
        .await
        .unwrap()
}

fn handled(handler: &Orders) -> Vec<String> {
    handler
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(body, _)| body.clone())
        .collect()
}

#[tokio::test]
async fn a_failed_record_leaves_its_partition_for_the_lane_and_its_keys_later_records_follow() {
    let processor = processor(Some(LANE));
    let handler = Orders::default();
    let json = event(&[
        (0, 10, Some("c-1"), "ok 10"),
        (0, 11, Some("c-1"), "slow 11"),
        (0, 12, Some("c-2"), "ok 12"),
        (0, 13, Some("c-1"), "ok 13"),
        (0, 14, Some("c-3"), "bad 14"),
        (0, 15, Some("c-3"), "ok 15"),
        (1, 7, Some("c-4"), "ok 7"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert!(
        processed.response.batch_item_failures.is_empty(),
        "nothing holds a partition"
    );
    assert_eq!(
        handled(&handler),
        ["ok 10", "slow 11", "ok 12", "bad 14", "ok 7"],
        "13 follows 11 of its key to the lane, 15 follows 14 to the DLQ, untried"
    );
    let report = &processed.report;
    assert_eq!(
        (
            report.done,
            report.sent_to_lane,
            report.dead_lettered,
            report.given_back
        ),
        (3, 2, 2, 0)
    );

    let lane = processor.queue().sent_to(LANE);
    let bodies: Vec<&str> = lane.iter().map(|m| &*m.body).collect();
    assert_eq!(bodies, ["slow 11", "ok 13"], "in the partition's order");
    let group = BASE64.encode("c-1");
    assert!(lane
        .iter()
        .all(|m| m.group_id.as_deref() == Some(&*format!("orders:{group}"))));
    assert_eq!(lane[0].deduplication_id.as_deref(), Some("orders-0:11"));
    let meta: Meta<'_> = serde_json::from_str(lane[1].attribute("redrive").unwrap()).unwrap();
    assert_eq!((&*meta.error_kind, meta.attempts), ("follows_key", 1));
    let origin: KafkaOrigin =
        serde_json::from_str(lane[0].attribute(KAFKA_ATTRIBUTE).unwrap()).unwrap();
    assert_eq!(
        (
            origin.topic.as_str(),
            origin.partition,
            origin.offset,
            origin.key_text().as_deref()
        ),
        ("orders", 0, 11, Some("c-1"))
    );
    assert_eq!(
        origin.header("trace"),
        Some(vec![116, 45, 0xff]),
        "a signed byte read unsigned"
    );

    let dead = processor.queue().sent_to(DLQ);
    let dead: Vec<(String, String)> = dead
        .iter()
        .map(|m| {
            let meta: Meta<'_> = serde_json::from_str(m.attribute("redrive").unwrap()).unwrap();
            (m.body.to_string(), meta.error_kind.to_string())
        })
        .collect();
    let first_dead = &processor.queue().sent_to(DLQ)[0];
    let meta: Meta<'_> = serde_json::from_str(first_dead.attribute("redrive").unwrap()).unwrap();
    assert_eq!(
        &*meta.origin_queue_arn, "",
        "no origin queue: the reprocessor sends it to the lane, the DLQ's fallback"
    );
    assert_eq!(
        dead,
        [
            ("bad 14".to_owned(), "invalid".to_owned()),
            ("ok 15".to_owned(), "follows_dead_letter".to_owned())
        ]
    );
}

#[tokio::test]
async fn without_a_lane_a_transient_failure_gives_its_partition_back_from_it_and_others_go_on() {
    let processor = processor(None);
    let handler = Orders::default();
    let json = event(&[
        (0, 10, Some("c-1"), "ok 10"),
        (0, 11, Some("c-1"), "slow 11"),
        (0, 12, Some("c-2"), "ok 12"),
        (1, 7, None, "bad 7"),
        (1, 8, None, "ok 8"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(
        serde_json::to_value(&processed.response).unwrap(),
        serde_json::json!({ "batchItemFailures": [
            { "itemIdentifier": { "partition": "orders-0", "offset": 11 } }
        ] })
    );
    assert_eq!(handled(&handler), ["ok 10", "slow 11", "bad 7", "ok 8"]);
    assert_eq!(
        (
            processed.report.done,
            processed.report.dead_lettered,
            processed.report.given_back
        ),
        (2, 1, 2)
    );
}

#[tokio::test]
async fn a_record_the_deadline_comes_before_is_given_back_untried() {
    let processor = processor(Some(LANE));
    let handler = Orders::default();
    let json = event(&[(0, 10, Some("c-1"), "ok 10"), (1, 3, None, "ok 3")]);
    let event = KafkaEvent::from_slice(json.as_bytes()).unwrap();
    let processed = processor.process_kafka(&handler, &event, 0).await.unwrap();
    let given_back: Vec<(String, i64)> = processed
        .response
        .batch_item_failures
        .iter()
        .map(|f| {
            (
                f.item_identifier.partition.clone(),
                f.item_identifier.offset,
            )
        })
        .collect();
    assert_eq!(
        given_back,
        [("orders-0".into(), 10), ("orders-1".into(), 3)]
    );
    assert!(handled(&handler).is_empty());
    assert!(processor.queue().calls().is_empty());
}

#[tokio::test]
async fn a_copy_the_lane_does_not_confirm_gives_the_partition_back_from_its_record() {
    let processor = processor(Some(LANE));
    processor.queue().fail_calls_to(LANE);
    let handler = Orders::default();
    let json = event(&[
        (0, 10, Some("c-1"), "slow 10"),
        (0, 11, Some("c-2"), "ok 11"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(
        processed.response.batch_item_failures[0]
            .item_identifier
            .offset,
        10
    );
    assert_eq!(handled(&handler), ["slow 10"], "nothing after it starts");
    assert_eq!(
        (processed.report.send_failures, processed.report.given_back),
        (1, 2)
    );
}

/// The lane's delivery of `copies`, as SQS records of a FIFO queue.
fn lane_event(copies: &[OutgoingMessage<'_>]) -> String {
    let records: Vec<serde_json::Value> = copies
        .iter()
        .enumerate()
        .map(|(n, copy)| {
            let attributes: serde_json::Map<String, serde_json::Value> = copy
                .attributes
                .iter()
                .map(|(name, value)| {
                    (
                        name.to_string(),
                        serde_json::json!({ "stringValue": value.string_value.as_deref(), "dataType": "String" }),
                    )
                })
                .collect();
            serde_json::json!({
                "messageId": format!("m-{n}"), "receiptHandle": format!("r-{n}"), "body": &*copy.body,
                "attributes": { "ApproximateReceiveCount": "1", "SentTimestamp": "1763791800000",
                                "MessageGroupId": copy.group_id.as_deref() },
                "messageAttributes": attributes, "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders-kafka-lane.fifo",
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

#[tokio::test]
async fn a_key_with_records_out_from_an_earlier_batch_follows_them_until_they_are_done() {
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = processor(Some(LANE)).with_ledger(ledger.clone());
    let handler = Orders::default();
    let first = event(&[
        (0, 10, Some("c-1"), "slow 10"),
        (0, 11, Some("c-3"), "bad 11"),
        (0, 12, Some("c-2"), "ok 12"),
    ]);
    run(&processor, &handler, &first).await;
    let second = event(&[
        (0, 13, Some("c-1"), "ok 13"),
        (0, 14, Some("c-3"), "ok 14"),
        (0, 15, Some("c-2"), "ok 15"),
        (0, 16, None, "ok 16"),
    ]);
    let processed = run(&processor, &handler, &second).await;
    assert!(processed.response.batch_item_failures.is_empty());
    assert_eq!(
        handled(&handler),
        ["slow 10", "bad 11", "ok 12", "ok 15", "ok 16"],
        "13 follows 10 to the lane and 14 follows 11 to the DLQ, from the batch before"
    );
    assert_eq!(ledger.reads(), 2, "one read of the keys per batch");
    let dead: Vec<String> = processor
        .queue()
        .sent_to(DLQ)
        .iter()
        .map(|m| m.body.to_string())
        .collect();
    assert_eq!(dead, ["bad 11", "ok 14"]);

    // The lane (the same function, with the same ledger) takes both c-1 records; then c-1 is
    // tried at once again, while c-3 waits on its dead letters.
    let lane = lane_event(&processor.queue().sent_to(LANE));
    let lane = SqsEvent::from_slice(lane.as_bytes()).unwrap();
    let processed = processor
        .process(&Seen::default(), &lane.records, LATER)
        .await
        .unwrap();
    assert!(processed.response.batch_item_failures.is_empty());
    let third = event(&[(0, 17, Some("c-1"), "ok 17"), (0, 18, Some("c-3"), "ok 18")]);
    run(&processor, &handler, &third).await;
    assert_eq!(
        handled(&handler)[5..],
        ["ok 17"],
        "18 follows c-3's to the DLQ"
    );
}

/// Counts the records in its hands at once; each waits a turn of the runtime before it is done.
#[derive(Default)]
struct InFlight {
    now: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
    order: Mutex<Vec<String>>,
}
impl RecordHandler for InFlight {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        use std::sync::atomic::Ordering::SeqCst;
        let now = self.now.fetch_add(1, SeqCst) + 1;
        self.most.fetch_max(now, SeqCst);
        tokio::task::yield_now().await;
        self.order.lock().unwrap().push(message.body().to_owned());
        self.now.fetch_sub(1, SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn partitions_run_side_by_side_and_each_keeps_its_order() {
    let processor = processor(Some(LANE));
    let handler = InFlight::default();
    let json = event(&[
        (0, 1, Some("c-1"), "p0 1"),
        (0, 2, Some("c-1"), "p0 2"),
        (0, 3, Some("c-2"), "p0 3"),
        (1, 1, Some("c-3"), "p1 1"),
        (1, 2, Some("c-3"), "p1 2"),
        (2, 1, Some("c-4"), "p2 1"),
    ]);
    let event = KafkaEvent::from_slice(json.as_bytes()).unwrap();
    let processed = processor
        .process_kafka(&handler, &event, LATER)
        .await
        .unwrap();
    assert_eq!((processed.report.records, processed.report.done), (6, 6));
    use std::sync::atomic::Ordering::SeqCst;
    assert_eq!(
        handler.most.load(SeqCst),
        3,
        "one record of each partition at once"
    );
    let order = handler.order.lock().unwrap();
    for partition in ["p0", "p1", "p2"] {
        let mine: Vec<&String> = order
            .iter()
            .filter(|body| body.starts_with(partition))
            .collect();
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(mine, sorted, "{partition} in offset order");
    }
}

/// A ledger DynamoDB does not answer (a brownout): every call fails.
#[derive(Default)]
struct Down(MemoryLedger);
impl ForwardingLedger for Down {
    type Inner = MemoryLedger;
    fn inner(&self) -> &MemoryLedger {
        &self.0
    }
    fn around<'a, T: Send + 'a>(
        &'a self,
        _: LedgerCall<'a>,
        _: impl FnOnce() -> BoxFuture<'a, Result<T, PortError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, PortError>> {
        Box::pin(async { Err(PortError::new("BatchGetItem", "ServiceUnavailable")) })
    }
}

#[tokio::test]
async fn a_ledger_that_cannot_say_which_keys_wait_gives_the_batch_back_untried() {
    let processor = processor(Some(LANE)).with_ledger(Arc::new(Down::default()));
    let handler = Orders::default();
    let json = event(&[
        (0, 10, Some("c-1"), "ok 10"),
        (0, 11, Some("c-2"), "ok 11"),
        (1, 7, Some("c-4"), "ok 7"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    let given_back: Vec<(&str, i64)> = processed
        .response
        .batch_item_failures
        .iter()
        .map(|failure| {
            (
                failure.item_identifier.partition.as_str(),
                failure.item_identifier.offset,
            )
        })
        .collect();
    assert_eq!(given_back, [("orders-0", 10), ("orders-1", 7)]);
    assert!(handled(&handler).is_empty(), "no record tried");
    assert_eq!(processed.report.given_back, 3);
}

#[test]
fn a_lane_without_the_attempt_ledger_is_refused_at_start() {
    let lane = |table: bool| {
        let names = ["REDRIVE_LANE_URL", "REDRIVE_LEDGER_TABLE"];
        redrive_core::Settings::from_lookup(names, move |name| match name {
            "REDRIVE_LANE_URL" => {
                Some(LANE.replace("https://sqs.local", "https://sqs.us-east-1.amazonaws.com"))
            }
            "REDRIVE_LEDGER_TABLE" if table => Some("orders-ledger".to_owned()),
            _ => None,
        })
    };
    let error = lane(false).unwrap_err();
    assert!(
        error.to_string().contains("REDRIVE_LEDGER_TABLE"),
        "{error}"
    );
    assert!(lane(true).is_ok());
}

/// Keeps each message's bytes and origin; fails the first `fail` of them transiently.
#[derive(Default)]
struct Seen {
    fail: usize,
    seen: Mutex<Vec<(Vec<u8>, Option<KafkaOrigin>)>>,
    tenants: Mutex<Vec<Option<String>>>,
}
impl RecordHandler for Seen {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let mut seen = self.seen.lock().unwrap();
        seen.push((message.data().into_owned(), message.kafka()));
        let tenant = message.tenant().map(std::borrow::Cow::into_owned);
        self.tenants.lock().unwrap().push(tenant);
        if seen.len() <= self.fail {
            return Err(RecordError::transient("timeout", "slow"));
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_lane_copy_reaches_the_handler_with_its_bytes_and_origin() {
    let processor = processor(Some(LANE));
    let handler = Seen {
        fail: 1,
        ..Seen::default()
    };
    let mut json: serde_json::Value =
        serde_json::from_str(&event(&[(3, 40, Some("c-9"), "")])).unwrap();
    json["records"]["orders-3"][0]["value"] =
        serde_json::json!(BASE64.encode([0x1f_u8, 0x8b, 0x00]));
    let json = json.to_string();
    let event = KafkaEvent::from_slice(json.as_bytes()).unwrap();
    processor
        .process_kafka(&handler, &event, LATER)
        .await
        .unwrap();
    let copies = processor.queue().sent_to(LANE);
    assert_eq!(copies[0].attribute(DATA_ENCODING_ATTRIBUTE), Some("base64"));
    let sqs = lane_event(&copies);
    let sqs = SqsEvent::from_slice(sqs.as_bytes()).unwrap();
    let processed = processor
        .process(&handler, &sqs.records, LATER)
        .await
        .unwrap();
    assert!(processed.response.batch_item_failures.is_empty());
    let seen = handler.seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].0,
        [0x1f_u8, 0x8b, 0x00],
        "the value's bytes, from the lane"
    );
    assert_eq!(seen[1].1, seen[0].1, "the same origin from the lane");
    assert_eq!(seen[1].1.as_ref().map(|origin| origin.offset), Some(40));
    assert_eq!(
        *handler.tenants.lock().unwrap(),
        [Some("c-9".to_owned()), Some("c-9".to_owned())],
        "the key is the tenant, on the record and on its copy"
    );
}

/// Runs one record of partition 3 whose `value` is as given (JSON), failing it transiently once:
/// what the handler saw from the topic and from the lane, and the copy the lane got.
async fn through_the_lane(
    value: serde_json::Value,
) -> (
    Vec<(Vec<u8>, Option<KafkaOrigin>)>,
    OutgoingMessage<'static>,
) {
    let processor = processor(Some(LANE));
    let handler = Seen {
        fail: 1,
        ..Seen::default()
    };
    let mut json: serde_json::Value =
        serde_json::from_str(&event(&[(3, 41, Some("c-9"), "")])).unwrap();
    json["records"]["orders-3"][0]["value"] = value;
    let json = json.to_string();
    let event = KafkaEvent::from_slice(json.as_bytes()).unwrap();
    let processed = processor
        .process_kafka(&handler, &event, LATER)
        .await
        .unwrap();
    assert!(
        processed.response.batch_item_failures.is_empty(),
        "the copy went to the lane: the partition goes on"
    );
    let copies = processor.queue().sent_to(LANE);
    assert_eq!(copies.len(), 1);
    let sqs = lane_event(&copies);
    let sqs = SqsEvent::from_slice(sqs.as_bytes()).unwrap();
    let from_lane = processor
        .process(&handler, &sqs.records, LATER)
        .await
        .unwrap();
    assert!(from_lane.response.batch_item_failures.is_empty());
    let seen = handler.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    (seen, copies[0].clone().into_owned())
}

#[tokio::test]
async fn a_value_whose_text_sqs_refuses_reaches_the_lane_as_base64_with_its_bytes() {
    // UTF-8, but with characters SQS refuses in a body (a NUL and an escape).
    let text = "order\u{0}7\u{1b}";
    let (seen, copy) = through_the_lane(serde_json::json!(BASE64.encode(text))).await;
    assert_eq!(copy.attribute(DATA_ENCODING_ATTRIBUTE), Some("base64"));
    assert_eq!(&*copy.body, BASE64.encode(text));
    assert_eq!(
        seen[0].0,
        text.as_bytes(),
        "the value's bytes, from the topic"
    );
    assert_eq!(seen[1].0, text.as_bytes(), "and from the lane");
    assert_eq!(seen[1].1, seen[0].1);
}

#[tokio::test]
async fn a_tombstone_reaches_the_lane_with_the_body_null_and_its_origin_says_so() {
    let (seen, copy) = through_the_lane(serde_json::Value::Null).await;
    assert_eq!(&*copy.body, "null", "SQS takes no empty body");
    for (data, origin) in &seen {
        assert_eq!(data.as_slice(), b"null");
        let origin = origin.as_ref().unwrap();
        assert!(origin.tombstone);
        assert_eq!(
            (origin.offset, origin.key_text().as_deref()),
            (41, Some("c-9"))
        );
    }
}

#[test]
fn a_lane_that_is_not_a_fifo_queue_is_refused_at_start() {
    let error = redrive_core::Settings::from_lookup(["REDRIVE_LANE_URL"], |name| {
        (name == "REDRIVE_LANE_URL")
            .then(|| "https://sqs.us-east-1.amazonaws.com/123456789012/orders-lane".to_owned())
    })
    .unwrap_err();
    assert!(error.to_string().contains("REDRIVE_LANE_URL"), "{error}");
}

/// A header's bytes as Lambda writes them (numbers, a signed byte read as unsigned) or as base64;
/// anything else is refused with the reason, not taken as empty.
#[test]
fn header_bytes_are_read_as_numbers_signed_bytes_or_base64() {
    let record = |headers: &str| {
        serde_json::from_str::<redrive_core::kafka::KafkaRecord<'_>>(&format!(
            r#"{{"topic":"orders","partition":0,"offset":1,"headers":{headers}}}"#
        ))
        .map(|record| {
            let headers = record.headers.iter();
            headers
                .map(|header| (header.name.to_string(), header.value.0.clone()))
                .collect::<Vec<_>>()
        })
    };
    let read = record(r#"[{"a":[104,105]},{"b":[-1,0]},{"c":"aGk="}]"#).unwrap();
    let bytes: Vec<(&str, &[u8])> = read
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_slice()))
        .collect();
    assert_eq!(
        bytes,
        [("a", &b"hi"[..]), ("b", &[255, 0][..]), ("c", &b"hi"[..])]
    );
    let too_big = record(r#"[{"a":[300]}]"#).unwrap_err().to_string();
    assert!(too_big.contains("300 is not a byte"), "{too_big}");
    let not_base64 = record(r#"[{"a":"%%"}]"#).unwrap_err().to_string();
    assert!(not_base64.contains("Invalid"), "{not_base64}");
    assert!(record(r#"[{"a":true}]"#).is_err());
}

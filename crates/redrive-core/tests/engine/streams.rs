//! Stream batches (Kinesis, DynamoDB Streams) on an in-memory queue: in order, a permanent
//! failure dead-lettered and the shard going on, anything else the checkpoint.
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use redrive_core::envelope::{Meta, DATA_ENCODING_ATTRIBUTE};
use redrive_core::port::RecordingQueue;
use redrive_core::stream::{
    DynamoDbEvent, ItemChange, KinesisData, KinesisRecord, StreamsEventResponse, POINTER_ENCODING,
};
use redrive_core::{
    BatchError, Message, Processed, Processor, ProcessorConfig, RecordError, RecordHandler,
    RetryPolicy,
};
use redrive_event::Text;

const DLQ: &str = "https://sqs.local/123456789012/stream-dlq";

struct Orders;
impl RecordHandler for Orders {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        match message.body() {
            "bad" => Err(RecordError::permanent("invalid", "bad order")),
            "slow" => Err(RecordError::transient("timeout", "slow")),
            "bug" => panic!("bug"),
            _ => Ok(()),
        }
    }
}

fn record(sequence: &str, data: &str) -> KinesisRecord<'static> {
    KinesisRecord {
        kinesis: KinesisData {
            partition_key: Some(Text::from("p")),
            sequence_number: Some(Text::from(sequence.to_owned())),
            data: Some(Text::from(BASE64.encode(data))),
            approximate_arrival_timestamp: Some(1_763_791_800.5),
        },
        event_source_arn: Some(Text::from(
            "arn:aws:kinesis:us-east-1:123456789012:stream/s",
        )),
    }
}

fn processor(dlq: Option<&str>) -> Processor<RecordingQueue> {
    Processor::new(RecordingQueue::default(), {
        let mut processor_config = ProcessorConfig::default();
        processor_config.dlq_url = dlq.map(str::to_owned);
        processor_config.source_queue_url = None;
        processor_config.retry = RetryPolicy::default();
        processor_config.deadline_margin = std::time::Duration::ZERO;
        processor_config
    })
}

fn checkpoint(processed: &Processed<StreamsEventResponse>) -> Option<&str> {
    processed
        .response
        .batch_item_failures
        .first()
        .and_then(|f| f.item_identifier.as_deref())
}

const LATER: u64 = u64::MAX / 2;

#[tokio::test]
async fn permanent_failures_and_panics_are_dead_lettered_and_the_batch_goes_on() {
    let processor = processor(Some(DLQ));
    let records = [
        record("1", "ok"),
        record("2", "bad"),
        record("3", "bug"),
        record("4", "ok"),
    ];
    let processed = processor
        .process_stream(&Orders, &records, LATER)
        .await
        .unwrap();
    assert_eq!(checkpoint(&processed), None);
    let dead: Vec<String> = processor
        .queue()
        .sent_to(DLQ)
        .iter()
        .map(|m| m.body.to_string())
        .collect();
    assert_eq!(dead, ["bad", "bug"]);
    let sent = processor.queue().sent_to(DLQ);
    let meta: Meta<'_> = serde_json::from_str(sent[1].attribute("redrive").unwrap()).unwrap();
    assert_eq!(
        (meta.error_class.as_str(), &*meta.origin_message_id),
        ("panic", "3")
    );
    assert_eq!(
        (processed.report.done, processed.report.dead_lettered),
        (2, 2)
    );
}

#[tokio::test]
async fn a_transient_failure_a_refused_dead_letter_or_no_dlq_stops_the_batch_there() {
    let records = [record("1", "ok"), record("2", "slow"), record("3", "ok")];
    let processed = processor(Some(DLQ))
        .process_stream(&Orders, &records, LATER)
        .await
        .unwrap();
    assert_eq!(checkpoint(&processed), Some("2"));
    assert_eq!((processed.report.done, processed.report.given_back), (1, 2));

    let refusing = processor(Some(DLQ));
    refusing.queue().fail_calls_to(DLQ);
    let records = [record("1", "bad"), record("2", "ok")];
    let processed = refusing
        .process_stream(&Orders, &records, LATER)
        .await
        .unwrap();
    assert_eq!(checkpoint(&processed), Some("1"));

    let report_only = processor(None);
    let processed = report_only
        .process_stream(&Orders, &records, LATER)
        .await
        .unwrap();
    assert_eq!(checkpoint(&processed), Some("1"));
    assert!(report_only.queue().calls().is_empty());
}

/// Keeps the bytes it is given; refuses an empty payload.
#[derive(Default)]
struct Bytes(std::sync::Mutex<Vec<Vec<u8>>>);
impl RecordHandler for Bytes {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let data = message.data().into_owned();
        if data.len() < 3 {
            return Err(RecordError::permanent("too_short", "no payload"));
        }
        self.0.lock().unwrap().push(data);
        Ok(())
    }
}

#[tokio::test]
async fn data_that_is_not_utf8_reaches_the_handler_as_bytes_and_its_dead_letter_says_base64() {
    let gzip: &[u8] = &[0x1f, 0x8b, 0x08, 0x00, 0xff, 0xfe];
    let binary = |sequence: &str, bytes: &[u8]| {
        let mut record = record(sequence, "");
        record.kinesis.data = Some(Text::from(BASE64.encode(bytes)));
        record
    };
    let processor = processor(Some(DLQ));
    let handler = Bytes::default();
    let records = [binary("1", gzip), record("2", "text"), binary("3", &[0xc3])];
    let processed = processor
        .process_stream(&handler, &records, LATER)
        .await
        .unwrap();
    assert_eq!(checkpoint(&processed), None);
    assert_eq!(
        *handler.0.lock().unwrap(),
        [gzip.to_vec(), b"text".to_vec()]
    );
    let dead = &processor.queue().sent_to(DLQ)[0];
    assert_eq!(&*dead.body, BASE64.encode([0xc3]));
    assert_eq!(dead.attribute(DATA_ENCODING_ATTRIBUTE), Some("base64"));
}

/// Refuses every record: each one is dead-lettered.
struct RefuseAll;
impl RecordHandler for RefuseAll {
    async fn handle(&self, _message: &Message<'_>) -> Result<(), RecordError> {
        Err(RecordError::permanent("invalid", "refused"))
    }
}

/// Text SQS refuses (a NUL, U+FFFF) is dead-lettered as the data's base64, and data that
/// cannot fit even so as a pointer to the record: before, the send was refused (or the copy
/// too large), the batch stopped at the record, and its data went with the stream's retention.
#[tokio::test]
async fn data_sqs_cannot_carry_is_dead_lettered_encoded_or_as_a_pointer() {
    let processor = processor(Some(DLQ));
    let control = record("1", "a\u{0}b\u{ffff}");
    let mut huge = record("2", "");
    huge.kinesis.data = Some(Text::from(BASE64.encode(vec![0xff_u8; 800 * 1024])));
    let processed = processor
        .process_stream(&RefuseAll, &[control, huge, record("3", "fine")], LATER)
        .await
        .unwrap();
    assert_eq!(checkpoint(&processed), None, "nothing holds the shard");
    assert_eq!(processed.report.dead_lettered, 3);
    let dead = processor.queue().sent_to(DLQ);
    assert!(dead
        .iter()
        .all(|m| redrive_core::envelope::sqs_accepts(&m.body)));
    assert_eq!(&*dead[0].body, BASE64.encode("a\u{0}b\u{ffff}"));
    assert_eq!(dead[0].attribute(DATA_ENCODING_ATTRIBUTE), Some("base64"));
    let pointer: serde_json::Value = serde_json::from_str(&dead[1].body).unwrap();
    assert_eq!(pointer["sequenceNumber"], "2");
    assert_eq!(
        pointer["streamArn"],
        "arn:aws:kinesis:us-east-1:123456789012:stream/s"
    );
    assert_eq!(
        dead[1].attribute(DATA_ENCODING_ATTRIBUTE),
        Some(POINTER_ENCODING)
    );
    assert_eq!(&*dead[2].body, "fine", "text SQS takes stays text");
}

#[tokio::test]
async fn undecodable_data_is_dead_lettered_as_it_came_and_the_deadline_checkpoints() {
    let processor = processor(Some(DLQ));
    let mut garbled = record("1", "");
    garbled.kinesis.data = Some(Text::from("not base64!"));
    let processed = processor
        .process_stream(&Orders, &[garbled, record("2", "ok")], LATER)
        .await
        .unwrap();
    assert_eq!(checkpoint(&processed), None);
    let dead = &processor.queue().sent_to(DLQ)[0];
    assert_eq!(&*dead.body, "not base64!");

    let processed = processor
        .process_stream(&Orders, &[record("7", "ok")], 0)
        .await
        .unwrap();
    assert_eq!(
        checkpoint(&processed),
        Some("7"),
        "no time left: nothing is started"
    );
}

const TABLE_STREAM: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-20T09:30:00.000";

/// A DynamoDB Streams event of `(sequence number, event name, new image's status)` records, each
/// the change of one order with its keys and images in DynamoDB JSON.
fn dynamodb_event(records: &[(&str, &str, &str)]) -> String {
    let records: Vec<serde_json::Value> = records
        .iter()
        .map(|(sequence, name, status)| {
            let image = serde_json::json!({
                "orderId": { "S": format!("o-{sequence}") },
                "amount": { "N": "19.5" },
                "status": { "S": status },
            });
            let mut change = serde_json::json!({
                "ApproximateCreationDateTime": 1_763_791_800,
                "Keys": { "orderId": { "S": format!("o-{sequence}") } },
                "SequenceNumber": sequence,
                "SizeBytes": 64,
                "StreamViewType": "NEW_AND_OLD_IMAGES",
            });
            if *name != "REMOVE" {
                change["NewImage"] = image.clone();
            }
            if *name != "INSERT" {
                change["OldImage"] = image;
            }
            serde_json::json!({
                "eventID": format!("e-{sequence}"),
                "eventName": name,
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": change,
                "eventSourceARN": TABLE_STREAM,
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

/// Keeps each change it is given; an order whose new status is `bad` is refused for good, `slow`
/// fails transiently.
#[derive(Default)]
struct Changes(std::sync::Mutex<Vec<(String, ItemChange)>>);
impl RecordHandler for Changes {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let change = ItemChange::from_message(message)?.expect("a DynamoDB Streams record");
        self.0
            .lock()
            .unwrap()
            .push((message.id().to_owned(), change.clone()));
        match change
            .new_image
            .as_ref()
            .map(|image| image["status"].as_str())
        {
            Some(Some("bad")) => Err(RecordError::permanent("invalid", "bad order")),
            Some(Some("slow")) => Err(RecordError::transient("timeout", "slow")),
            _ => Ok(()),
        }
    }
}

#[tokio::test]
async fn dynamodb_changes_are_handled_in_order_a_poison_one_dead_lettered_and_a_transient_one_the_checkpoint(
) {
    let json = dynamodb_event(&[
        ("101", "INSERT", "new"),
        ("102", "MODIFY", "bad"),
        ("103", "REMOVE", ""),
        ("104", "INSERT", "slow"),
        ("105", "INSERT", "new"),
    ]);
    let event = DynamoDbEvent::from_slice(json.as_bytes()).unwrap();
    let processor = processor(Some(DLQ));
    let handler = Changes::default();
    let processed = processor
        .process_stream(&handler, &event.records, LATER)
        .await
        .unwrap();
    assert_eq!(checkpoint(&processed), Some("104"));
    let seen = handler.0.lock().unwrap();
    let order: Vec<&str> = seen.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(
        order,
        ["101", "102", "103", "104"],
        "nothing after the checkpoint ran"
    );
    assert_eq!(seen[0].1.new_image.as_ref().unwrap()["amount"], 19.5);
    assert_eq!(seen[2].1.event_name, "REMOVE");
    assert_eq!(seen[2].1.keys, serde_json::json!({ "orderId": "o-103" }));
    assert!(seen[2].1.new_image.is_none());
    let report = &processed.report;
    assert_eq!(
        (report.done, report.dead_lettered, report.given_back),
        (2, 1, 2)
    );
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(dead.len(), 1);
    assert_eq!(
        &*dead[0].body,
        event.records[1].json(),
        "the dead letter is the record as the stream delivered it"
    );
    let meta: Meta<'_> = serde_json::from_str(dead[0].attribute("redrive").unwrap()).unwrap();
    assert_eq!(
        (
            &*meta.origin_message_id,
            &*meta.origin_queue_arn,
            &*meta.error_kind
        ),
        ("102", TABLE_STREAM, "invalid")
    );
}

#[tokio::test]
async fn a_dynamodb_dead_letter_redriven_through_a_queue_is_the_same_change_to_the_handler() {
    let json = dynamodb_event(&[("201", "INSERT", "bad")]);
    let event = DynamoDbEvent::from_slice(json.as_bytes()).unwrap();
    let processor = processor(Some(DLQ));
    let from_stream = Changes::default();
    processor
        .process_stream(&from_stream, &event.records, LATER)
        .await
        .unwrap();
    let dead = processor.queue().sent_to(DLQ).remove(0);
    let sqs = serde_json::json!({ "Records": [{
        "messageId": "m-1",
        "receiptHandle": "r-1",
        "body": &*dead.body,
        "attributes": { "ApproximateReceiveCount": "1", "SentTimestamp": "1763791800000" },
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders-redrive",
    }]})
    .to_string();
    let from_queue = Changes::default();
    processor
        .process(
            &from_queue,
            &redrive_core::SqsEvent::from_slice(sqs.as_bytes())
                .unwrap()
                .records,
            LATER,
        )
        .await
        .unwrap();
    assert_eq!(
        from_queue.0.lock().unwrap()[0].1,
        from_stream.0.lock().unwrap()[0].1
    );
}

/// Keeps each change it is given.
#[derive(Default)]
struct Unmarshalled(std::sync::Mutex<Vec<Result<Option<ItemChange>, RecordError>>>);
impl RecordHandler for Unmarshalled {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        self.0
            .lock()
            .unwrap()
            .push(ItemChange::from_message(message));
        Ok(())
    }
}

#[tokio::test]
async fn an_item_change_reads_every_attribute_type_as_plain_json_and_refuses_what_is_not_one() {
    let image = serde_json::json!({
        "s": { "S": "text" }, "n": { "N": "-12.5" }, "big": { "N": "12345678901234567890" },
        "yes": { "BOOL": true }, "nothing": { "NULL": true }, "b": { "B": "AAEC" },
        "m": { "M": { "inner": { "N": "1" } } }, "l": { "L": [{ "S": "a" }, { "N": "2" }] },
        "ss": { "SS": ["a", "b"] }, "ns": { "NS": ["1", "2.5"] }, "bs": { "BS": ["AA=="] },
    });
    let mut event: serde_json::Value = serde_json::from_str(&dynamodb_event(&[
        ("301", "INSERT", ""),
        ("302", "INSERT", ""),
    ]))
    .unwrap();
    event["Records"][0]["dynamodb"]["NewImage"] = image;
    event["Records"][1]["dynamodb"]["NewImage"] = serde_json::json!({ "x": { "Q": "1" } });
    let json = event.to_string();
    let records = DynamoDbEvent::from_slice(json.as_bytes()).unwrap().records;
    let handler = Unmarshalled::default();
    processor(Some(DLQ))
        .process_stream(&handler, &records, LATER)
        .await
        .unwrap();
    let seen = handler.0.lock().unwrap();
    let change = seen[0].as_ref().unwrap().as_ref().unwrap();
    assert_eq!(
        change.new_image.as_ref().unwrap(),
        &serde_json::json!({
            "s": "text", "n": -12.5, "big": 12_345_678_901_234_567_890_u64, "yes": true,
            "nothing": null, "b": "AAEC", "m": { "inner": 1 }, "l": ["a", 2],
            "ss": ["a", "b"], "ns": [1, 2.5], "bs": ["AA=="],
        })
    );
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        s: &'a str,
        n: f64,
    }
    let typed: Typed<'_> = change.new_image().unwrap();
    assert_eq!((typed.s, typed.n), ("text", -12.5));
    let refused = seen[1].as_ref().unwrap_err();
    assert_eq!(
        (refused.kind(), refused.class()),
        ("malformed_change", redrive_core::ErrorClass::Permanent)
    );
}

#[tokio::test]
async fn dynamodb_records_sqs_cannot_carry_go_encoded_or_as_a_pointer_with_their_keys() {
    let mut event: serde_json::Value = serde_json::from_str(&dynamodb_event(&[
        ("401", "INSERT", "bad\u{ffff}"),
        ("402", "INSERT", "bad"),
    ]))
    .unwrap();
    event["Records"][1]["dynamodb"]["NewImage"]["note"] =
        serde_json::json!({ "S": "x".repeat(1024 * 1024) });
    let json = event.to_string();
    let records = DynamoDbEvent::from_slice(json.as_bytes()).unwrap().records;
    let processor = processor(Some(DLQ));
    let processed = processor
        .process_stream(&RefuseAll, &records, LATER)
        .await
        .unwrap();
    assert_eq!(checkpoint(&processed), None, "nothing holds the shard");
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(&*dead[0].body, BASE64.encode(records[0].json()));
    assert_eq!(dead[0].attribute(DATA_ENCODING_ATTRIBUTE), Some("base64"));
    let pointer: serde_json::Value = serde_json::from_str(&dead[1].body).unwrap();
    assert_eq!(
        (
            &pointer["sequenceNumber"],
            &pointer["streamArn"],
            &pointer["keys"]
        ),
        (
            &serde_json::json!("402"),
            &serde_json::json!(TABLE_STREAM),
            &serde_json::json!({ "orderId": { "S": "o-402" } })
        )
    );
    assert_eq!(
        dead[1].attribute(DATA_ENCODING_ATTRIBUTE),
        Some(POINTER_ENCODING)
    );
}

#[tokio::test]
async fn a_stream_record_without_a_sequence_number_fails_the_batch_by_name() {
    let mut event: serde_json::Value = serde_json::from_str(&dynamodb_event(&[
        ("501", "INSERT", ""),
        ("502", "INSERT", ""),
    ]))
    .unwrap();
    event["Records"][1]["dynamodb"]
        .as_object_mut()
        .unwrap()
        .remove("SequenceNumber");
    let json = event.to_string();
    let records = DynamoDbEvent::from_slice(json.as_bytes()).unwrap().records;
    let error = processor(Some(DLQ))
        .process_stream(&Orders, &records, LATER)
        .await
        .unwrap_err();
    assert!(matches!(
        error,
        BatchError::MissingSequenceNumber { index: 1 }
    ));
}

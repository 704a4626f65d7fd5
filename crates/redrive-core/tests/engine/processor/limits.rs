//! The deadline, SQS's limits and the bad-input matrix (README, "Reliability").
use super::*;

#[tokio::test]
async fn records_are_not_started_past_the_deadline_margin_and_a_slow_one_is_cut_off() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = event(vec![record("m-1", "ok"), record("m-2", "ok")]);
    let event_ = SqsEvent::parse(&json).unwrap();
    let processed = processor
        .process(&handler, &event_.records, NOW + 1_500)
        .await
        .unwrap();
    assert_eq!(failures(&processed), ["m-1", "m-2"]);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0);

    // A real-time deadline: the slow handler is abandoned at the margin and retried as transient.
    // One record at a time: m-2 waits behind it.
    let (processor, now) = on_the_real_clock(1);
    let json = event(vec![record("m-1", "slow"), record("m-2", "ok")]);
    let event_ = SqsEvent::parse(&json).unwrap();
    let processed = processor
        .process(&handler, &event_.records, now + 400)
        .await
        .unwrap();
    assert_eq!(failures(&processed), ["m-2"], "not started");
    assert_eq!(
        &*meta_of(&processor.queue().sent_to(SOURCE)[0]).error_kind,
        "deadline"
    );
}

#[tokio::test]
async fn no_record_starts_past_the_margin_after_a_handler_that_never_yields() {
    let (processor, now) = on_the_real_clock(8);
    let handler = handler();
    let json = event(vec![
        record("m-1", "blocking:400"),
        record("m-2", "ok"),
        record("m-3", "ok"),
    ]);
    let event_ = SqsEvent::parse(&json).unwrap();
    let processed = processor
        .process(&handler, &event_.records, now + 400)
        .await
        .unwrap();
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
    assert_eq!(failures(&processed), ["m-2", "m-3"], "not started");
    assert_eq!(processed.report.done, 1, "m-1 finished: it is done");
    assert!(processor.queue().sent_to(SOURCE).is_empty());
}

#[tokio::test]
async fn ten_original_attributes_are_packed_into_the_dlq_copy() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let mut rec = record("m-1", "permanent");
    for i in 0..9 {
        rec["messageAttributes"][format!("a{i}")] =
            serde_json::json!({"stringValue": format!("v{i}"), "dataType": "String"});
    }
    rec["messageAttributes"]["bin"] =
        serde_json::json!({"binaryValue": "AAEC", "dataType": "Binary"});
    let processed = run(&processor, &handler, &event(vec![rec.clone()])).await;
    assert!(failures(&processed).is_empty());
    let dead = &processor.queue().sent_to(DLQ)[0];
    assert_eq!(
        dead.attributes.len(),
        1,
        "10 originals + metadata would exceed SQS's limit"
    );
    let packed = meta_of(dead).attributes.unwrap();
    assert_eq!(packed.len(), 11);
    assert_eq!(packed["bin"].binary_value.as_deref(), Some("AAEC"));
    assert_eq!(packed["a3"].string_value.as_deref(), Some("v3"));
}

#[tokio::test]
async fn a_record_without_a_body_is_given_back() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = r#"{"Records":[{"messageId":"m-1","eventSourceARN":"arn:aws:sqs:eu-west-1:1:q"}]}"#;
    let event = SqsEvent::parse(json).unwrap();
    let processed = processor
        .process(&handler, &event.records, DEADLINE)
        .await
        .unwrap();
    assert_eq!(failures(&processed), ["m-1"]);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn without_a_dlq_every_failure_is_reported_and_nothing_is_sent() {
    let processor = processor_with_dlq(None, RetryPolicy::default());
    let handler = handler();
    let json = event(vec![
        record("m-ok", "ok"),
        record("m-tr", "transient"),
        record("m-pe", "permanent"),
        record("m-pa", "panic"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(failures(&processed), ["m-tr", "m-pe", "m-pa"]);
    assert!(processor.queue().calls().is_empty());
    assert_eq!(processed.report.sqs_requests, 0);
}

// The bad-input matrix (README, "Reliability"): the cases not covered by a rule above.

#[tokio::test]
async fn events_that_are_not_sqs_events_fail_the_batch_with_a_clear_error() {
    let cases = [
        (
            r#"{"Records": [{"messageId": "m-1", "body": "ok"}"#,
            "EOF while parsing",
        ),
        (
            r#"{"version":"0","detail-type":"OrderPlaced","detail":{}}"#,
            "missing field `Records`",
        ),
        ("{}", "missing field `Records`"),
        (
            r#"{"Records": {"messageId": "m-1"}}"#,
            "invalid type: map, expected a sequence",
        ),
        // SQS accepts no lone surrogate in a body, so no SQS event carries one.
        (
            r#"{"Records": [{"messageId": "m-1", "body": "\ud800"}]}"#,
            "hex escape",
        ),
    ];
    for (json, reason) in cases {
        let error = BatchError::from(SqsEvent::parse(json).unwrap_err()).to_string();
        assert!(
            error.starts_with("the event is not an SQS, Kinesis or DynamoDB Streams event: "),
            "{error}"
        );
        assert!(error.contains(reason), "{json}: {error}");
    }
    // Bytes that are not UTF-8 do not even reach the handler: the runtime refuses the payload.
    let bytes = b"{\"Records\": [{\"messageId\": \"m-1\", \"body\": \"\xff\"}]}";
    assert!(serde_json::from_slice::<Box<serde_json::value::RawValue>>(bytes).is_err());
}

#[tokio::test]
async fn a_body_near_one_mebibyte_is_retried_with_its_metadata_or_given_back_when_it_cannot_be() {
    let processor = processor(RetryPolicy::default());
    let fits = format!("transient:{}", "x".repeat((1 << 20) - 2_000));
    let too_big = format!("transient:{}", "x".repeat((1 << 20) - 100));
    let json = event(vec![record("m-fits", &fits), record("m-big", &too_big)]);
    let processed = run(&processor, &handler(), &json).await;
    assert_eq!(
        failures(&processed),
        ["m-big"],
        "given back unchanged for the queue's redrive policy"
    );
    let retried = processor.queue().sent_to(SOURCE);
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].body.len(), fits.len(), "the body is never cut");
    assert!(retried[0].size() <= 1 << 20);
    assert_eq!(meta_of(&retried[0]).attempts, 1);
}

struct Verbose;
impl RecordHandler for Verbose {
    async fn handle(&self, _: &Message<'_>) -> Result<(), RecordError> {
        Err(RecordError::permanent("invalid_order", "é".repeat(50_000)))
    }
}

#[tokio::test]
async fn a_huge_error_message_is_cut_at_a_character_boundary_in_the_metadata() {
    let processor = processor(RetryPolicy::default());
    let json = event(vec![record("m-1", "ok")]);
    let records = SqsEvent::parse(&json).unwrap().records;
    processor
        .process(&Verbose, &records, DEADLINE)
        .await
        .unwrap();
    let dead = processor.queue().sent_to(DLQ);
    let meta = meta_of(&dead[0]);
    assert!(
        meta.error_message.len() <= 1024,
        "{}",
        meta.error_message.len()
    );
    assert!(meta.error_message.ends_with("…[truncated]"));
    assert!(meta.error_message.starts_with("éé"));
}

#[tokio::test]
async fn json_reads_a_body_as_serde_json_reads_its_text() {
    /// What `Message::json` gave, and what serde_json gives from the body's text.
    struct Reads(std::sync::Mutex<Vec<(String, String)>>);
    impl RecordHandler for Reads {
        async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
            let read = message.json::<serde_json::Value>();
            let text = serde_json::from_str::<serde_json::Value>(message.body())
                .map_err(|error| RecordError::permanent("malformed_body", error));
            let show = |value: Result<serde_json::Value, RecordError>| match value {
                Ok(value) => value.to_string(),
                Err(error) => format!("error: {error}"),
            };
            self.0.lock().unwrap().push((show(read), show(text)));
            Ok(())
        }
    }
    let bodies = [
        r#"{"a":"b","n":[1,2.5,-0,1e3,12345678901234567890],"t":true,"z":null}"#,
        r#" [1, {"k": "é"}] "#,
        r#"{"a":"x\"y"}"#,
        r#"{"a":1,}"#,
        r#"{"a":01}"#,
        "{\"a\":\"tab\there\"}",
        "plain text",
        "",
    ];
    let records = bodies
        .iter()
        .enumerate()
        .map(|(i, body)| record(&format!("m-{i}"), body))
        .collect();
    let handler = Reads(Default::default());
    let processor = processor(RetryPolicy::default());
    run(&processor, &handler, &event(records)).await;
    let reads = handler.0.into_inner().unwrap();
    assert_eq!(reads.len(), bodies.len());
    for ((read, text), body) in reads.iter().zip(bodies) {
        assert_eq!(read, text, "{body}");
    }
    assert!(!reads[0].0.starts_with("error"), "{:?}", reads[0]);
    assert!(reads[3].0.starts_with("error"), "{:?}", reads[3]);
}

/// Keeps what each record's handler saw of its invocation.
#[derive(Default)]
struct SeesInvocation {
    seen: std::sync::Mutex<Vec<(Option<String>, u64)>>,
}

impl RecordHandler for SeesInvocation {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        let invocation = message.invocation();
        self.seen.lock().unwrap().push((
            invocation.request_id.map(str::to_owned),
            invocation.deadline_ms,
        ));
        Ok(())
    }
}

#[tokio::test]
async fn a_handler_sees_the_invocation_its_record_arrived_in() {
    let processor = processor(RetryPolicy::default());
    let handler = SeesInvocation::default();
    let json = event(vec![record("m-1", "ok"), record("m-2", "ok")]);
    let event = SqsEvent::parse(&json).unwrap();
    let mut invocation = redrive_core::Invocation::default();
    invocation.deadline_ms = DEADLINE;
    invocation.request_id = Some("8476a536-e9f4-5d5b-a3f4-0d3b6a2d4f1c");
    processor
        .process(&handler, &event.records, invocation)
        .await
        .unwrap();
    let request = Some("8476a536-e9f4-5d5b-a3f4-0d3b6a2d4f1c".to_owned());
    assert_eq!(
        *handler.seen.lock().unwrap(),
        [(request.clone(), DEADLINE), (request, DEADLINE)]
    );
}

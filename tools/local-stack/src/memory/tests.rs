use super::*;

fn message(body: &str, group: &str) -> OutgoingMessage<'static> {
    OutgoingMessage {
        body: Text::from(body.to_owned()),
        attributes: Vec::new(),
        delay_seconds: 0,
        group_id: Some(Text::from(group.to_owned())),
        deduplication_id: None,
        trace_header: None,
    }
}

fn bodies(records: &[SqsRecord<'_>]) -> Vec<String> {
    records
        .iter()
        .map(|r| r.body.as_deref().unwrap_or_default().to_owned())
        .collect()
}

/// Five messages of a group whose head is in flight fill a window of five: the other group's
/// message behind them is not found, as SQS's 120,000-message scan does past its window.
#[tokio::test]
async fn a_fifo_receive_looks_no_further_than_its_window() {
    for (window, expected) in [(5, Vec::<String>::new()), (6, vec!["b0".to_owned()])] {
        let sqs = MemorySqs::new(Arc::new(ManualClock::at(0))).with_fifo_scan_window(window);
        let (url, _) = sqs.create("q.fifo", QueueSpec::named("q.fifo"));
        let backlog: Vec<_> = (0..5).map(|n| message(&format!("a{n}"), "a")).collect();
        sqs.send_batch(&url, &backlog).await.unwrap();
        sqs.send_batch(&url, &[message("b0", "b")]).await.unwrap();
        let head = sqs
            .receive(&url, 1, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(bodies(&head), ["a0"]);
        let next = sqs
            .receive(&url, 10, Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(bodies(&next), expected, "window {window}");
    }
}

/// The age metric leaves out what was received three times; NumberOfMessagesSent leaves out
/// the redrive policy's moves; a message past its retention is gone and counted as expired.
#[tokio::test]
async fn the_metrics_and_retention_read_as_sqs_documents_them() {
    let clock = Arc::new(ManualClock::at(0));
    let sqs = MemorySqs::new(clock.clone());
    let (dlq, dlq_arn) = sqs.create("dlq", QueueSpec::named("dlq"));
    let spec = QueueSpec::named("q")
        .dead_letters_to(&dlq_arn, 3)
        .retaining(Duration::from_secs(3600));
    let (url, _) = sqs.create("q", spec);
    let mut plain = message("old", "g");
    plain.group_id = None;
    sqs.send_batch(&url, &[plain.clone()]).await.unwrap();
    clock.advance(60_000);
    plain.body = Text::from("young");
    sqs.send_batch(&url, &[plain]).await.unwrap();
    assert_eq!(sqs.age_of_oldest(&url), Some(Duration::from_secs(60)));
    for _ in 0..3 {
        let got = sqs
            .receive(&url, 10, Duration::from_secs(1), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(got.len(), 2);
        clock.advance(1_000);
    }
    assert_eq!(sqs.age_of_oldest(&url), None, "both received three times");
    sqs.receive(&url, 10, Duration::from_secs(1), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!((sqs.depth(&url), sqs.depth(&dlq)), (0, 2));
    assert_eq!((sqs.sent(&url), sqs.sent(&dlq)), (2, 0));
    // A standard DLQ keeps the enqueue time: "old" expires an hour after its send.
    let dlq_spec = QueueSpec::named("dlq2").retaining(Duration::from_secs(3600));
    let (dlq2, dlq2_arn) = sqs.create("dlq2", dlq_spec);
    let spec = QueueSpec::named("q2").dead_letters_to(&dlq2_arn, 1);
    let (url2, _) = sqs.create("q2", spec);
    let mut once = message("moved", "g");
    once.group_id = None;
    sqs.send_batch(&url2, &[once]).await.unwrap();
    sqs.receive(&url2, 10, Duration::from_secs(1), Duration::ZERO)
        .await
        .unwrap();
    clock.advance(1_800_000);
    sqs.receive(&url2, 10, Duration::from_secs(1), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(sqs.depth(&dlq2), 1);
    clock.advance(1_800_000);
    assert_eq!(sqs.depth(&dlq2), 0);
    assert_eq!(sqs.expired(&dlq2).len(), 1);
}

//! Every fate of a standard queue's record: done, retried with its delay, deferred, dead-lettered, given back; copies and their sends.
use super::*;

#[tokio::test]
async fn every_record_of_a_mixed_batch_gets_its_fate_and_none_is_given_back() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = event(vec![
        record("m-ok", "ok"),
        record("m-tr", "transient"),
        record("m-pe", "permanent"),
        record("m-pa", "panic"),
    ]);
    let processed = run(&processor, &handler, &json).await;

    assert_eq!(
        failures(&processed),
        Vec::<String>::new(),
        "every send was confirmed"
    );
    let retried = processor.queue().sent_to(SOURCE);
    assert_eq!(retried.len(), 1);
    assert_eq!(&*retried[0].body, "transient");
    assert!(
        retried[0].delay_seconds <= 2,
        "first retry within the full-jitter envelope of 2 s"
    );
    assert_eq!(
        retried[0].attribute("tenant"),
        Some("acme"),
        "original attributes travel"
    );
    let meta = meta_of(&retried[0]);
    assert_eq!(
        (meta.attempts, meta.error_class, &*meta.error_kind),
        (1, ErrorClass::Transient, "payment_timeout")
    );
    assert_eq!(
        (&*meta.origin_message_id, &*meta.origin_queue_arn),
        ("m-tr", ARN)
    );

    let dead = processor.queue().sent_to(DLQ);
    let classes: Vec<_> = dead
        .iter()
        .map(|m| {
            (
                m.body.to_string(),
                meta_of(m).error_class,
                meta_of(m).attempts,
            )
        })
        .collect();
    assert_eq!(
        classes,
        [
            ("permanent".into(), ErrorClass::Permanent, 1),
            ("panic".into(), ErrorClass::Panic, 1)
        ]
    );
    assert_eq!(&*meta_of(&dead[1]).error_message, "poison order");
    assert_eq!(meta_of(&dead[1]).first_failure_at.0, NOW);

    let report = &processed.report;
    assert_eq!(
        (
            report.done,
            report.retried,
            report.dead_lettered,
            report.given_back
        ),
        (1, 1, 2, 0)
    );
    assert_eq!(
        (
            report.transient_errors,
            report.permanent_errors,
            report.panics
        ),
        (1, 1, 1)
    );
    assert_eq!(
        report.sqs_requests, 2,
        "one SendMessageBatch per destination, no deletes"
    );
}

#[tokio::test]
async fn delays_grow_exponentially_inside_the_jitter_envelope_and_attempts_run_out_into_the_dlq() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let mut body = "transient".to_owned();
    let mut redrive_attribute: Option<String> = None;
    for attempt in 1..=5u32 {
        let mut rec = record(&format!("m-{attempt}"), &body);
        if let Some(value) = &redrive_attribute {
            rec["messageAttributes"]["redrive"] =
                serde_json::json!({"stringValue": value, "dataType": "String"});
        }
        let before = processor.queue().calls().len();
        let processed = run(&processor, &handler, &event(vec![rec])).await;
        assert!(failures(&processed).is_empty());
        let Call::Send {
            queue_url,
            messages,
        } = &processor.queue().calls()[before]
        else {
            panic!("a send")
        };
        let meta = meta_of(&messages[0]);
        assert_eq!(meta.attempts, attempt);
        assert_eq!(
            &*meta.origin_message_id, "m-1",
            "the first message id is kept across copies"
        );
        if attempt < 5 {
            assert_eq!(queue_url, SOURCE);
            let ceiling = RetryPolicy::default().ceiling(attempt).as_secs() as u32;
            assert!(
                messages[0].delay_seconds <= ceiling,
                "attempt {attempt}: {} > {ceiling}",
                messages[0].delay_seconds
            );
        } else {
            assert_eq!(queue_url, DLQ, "the fifth failure is the last");
            assert_eq!(meta.error_class, ErrorClass::Transient);
        }
        body = messages[0].body.to_string();
        redrive_attribute = messages[0].attribute("redrive").map(str::to_owned);
    }
}

#[tokio::test]
async fn a_retry_sequence_past_fifteen_minutes_hops_without_spending_attempts() {
    let mut policy = RetryPolicy::default();
    policy.backoff = redrive_core::Backoff::Sequence(vec![Duration::from_secs(3600)]);
    policy.max_attempts = 3;
    let processor = processor(policy);
    let handler = handler();
    let processed = run(
        &processor,
        &handler,
        &event(vec![record("m-1", "transient")]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    let sent = processor.queue().sent_to(SOURCE);
    assert_eq!(sent[0].delay_seconds, 900, "SQS's longest delay");
    let meta = meta_of(&sent[0]);
    assert_eq!(meta.due_at.map(|t| t.0), Some(NOW + 3_600_000));

    // The copy arrives 900 s later: not due yet, so it hops again, same attempt, handler not called.
    let mut rec = record("m-2", "transient");
    rec["messageAttributes"]["redrive"] = serde_json::json!({"stringValue": sent[0].attribute("redrive").unwrap(), "dataType": "String"});
    let calls_before = handler.calls.load(Ordering::SeqCst);
    let processed = run(&processor, &handler, &event(vec![rec])).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        calls_before,
        "not handled before it is due"
    );
    let hop = &processor.queue().sent_to(SOURCE)[1];
    assert_eq!(hop.delay_seconds, 900);
    assert_eq!(meta_of(hop).attempts, 1);
    assert_eq!(processed.report.deferred, 1);
}

#[tokio::test]
async fn retry_after_hints_and_deferrals_set_the_delay() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = event(vec![record("m-h", "hint:120"), record("m-d", "defer:30")]);
    let processed = run(&processor, &handler, &json).await;
    assert!(failures(&processed).is_empty());
    let sent = processor.queue().sent_to(SOURCE);
    assert_eq!(
        (sent[0].delay_seconds, meta_of(&sent[0]).attempts),
        (120, 1)
    );
    assert_eq!(
        (sent[1].delay_seconds, meta_of(&sent[1]).attempts),
        (30, 0),
        "a deferral spends no attempt"
    );
    assert_eq!(
        (processed.report.retried, processed.report.deferred),
        (1, 1)
    );
}

#[tokio::test]
async fn a_record_deferred_past_the_age_limit_is_dead_lettered_as_transient() {
    let clock = Arc::new(ManualClock::at(NOW));
    let processor = processor(RetryPolicy::default()).with_clock(clock.clone());
    let handler = handler();
    let mut copy = record("m-1", "defer:300");
    let run = |copy: serde_json::Value| {
        let json = event(vec![copy]);
        let (processor, handler, deadline) = (&processor, &handler, clock.now_ms() + 60_000);
        async move {
            let event = SqsEvent::parse(&json).unwrap();
            processor
                .process(handler, &event.records, deadline)
                .await
                .unwrap()
        }
    };
    // Deferred at NOW, then redelivered every five minutes while the downstream stays down.
    for _ in 0..12 {
        let processed = run(copy.clone()).await;
        assert!(failures(&processed).is_empty());
        assert_eq!(processed.report.deferred, 1, "deferred while under an hour");
        let sent = processor.queue().sent_to(SOURCE);
        let latest = sent.last().expect("a deferred copy");
        assert_eq!(meta_of(latest).first_failure_at.0, NOW);
        copy["messageAttributes"]["redrive"] = serde_json::json!({
            "stringValue": latest.attribute("redrive").unwrap(), "dataType": "String"
        });
        clock.advance(300_000);
    }
    let processed = run(copy).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processed.report.dead_lettered, 1);
    let dead = &processor.queue().sent_to(DLQ)[0];
    let meta = meta_of(dead);
    assert_eq!(
        meta.error_class,
        ErrorClass::Transient,
        "the reprocessor may send it home"
    );
    assert_eq!(&*meta.error_kind, "deferred_too_long");
    assert!(
        meta.error_message.contains("payments_circuit_open") && meta.error_message.contains("1h"),
        "{}",
        meta.error_message
    );
    assert_eq!(
        meta.attempts, 0,
        "a deferral spends no attempt, even the last"
    );
    assert_eq!(processor.queue().sent_to(SOURCE).len(), 12);

    // Sent home by the reprocessor after the outage: the age limit counts from the redrive.
    let mut redriven = meta.clone();
    redriven.redriven_at = Some(redrive_core::envelope::Timestamp(clock.now_ms()));
    clock.advance(300_000);
    let mut home = record("m-1", "defer:300");
    home["messageAttributes"]["redrive"] = serde_json::json!({
        "stringValue": serde_json::to_string(&redriven).unwrap(), "dataType": "String"
    });
    let processed = run(home).await;
    assert_eq!(
        (processed.report.deferred, processed.report.dead_lettered),
        (1, 0)
    );
}

/// A permanent failure's dead letter (one attempt spent) moved back by a move task, and failing
/// again: it is recognised as moved back, so the dead letter it becomes counts the round against
/// the reprocess cap; before, only a dead letter with its attempts used up was, and a permanent
/// one went round and round uncounted.
#[tokio::test]
async fn a_permanent_dead_letter_moved_back_counts_against_the_reprocess_cap() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    run(
        &processor,
        &handler,
        &event(vec![record("m-1", "permanent")]),
    )
    .await;
    let dead = meta_of(&processor.queue().sent_to(DLQ)[0]);
    assert_eq!((dead.attempts, dead.reprocess_count), (1, 0));
    let mut moved = record("m-moved", "permanent");
    moved["messageAttributes"]["redrive"] = serde_json::json!({
        "stringValue": serde_json::to_string(&dead).unwrap(), "dataType": "String"
    });
    let processed = run(&processor, &handler, &event(vec![moved])).await;
    assert_eq!(processed.report.dead_lettered, 1);
    let again = meta_of(processor.queue().sent_to(DLQ).last().unwrap());
    assert_eq!((again.attempts, again.reprocess_count), (1, 1));
    assert_eq!(
        again.redriven_at,
        Some(redrive_core::envelope::Timestamp(NOW))
    );
}

#[tokio::test]
async fn a_dead_letter_moved_back_by_sqs_gets_a_fresh_set_of_attempts_and_counts_as_redriven() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let mut exhausted = meta_of(&first_retry_copy(&processor, &handler).await);
    exhausted.attempts = 5;
    // A move task (`StartMessageMoveTask`) re-sends the dead letter as it is, metadata and all.
    let mut moved = record("m-moved", "transient");
    moved["messageAttributes"]["redrive"] = serde_json::json!({
        "stringValue": serde_json::to_string(&exhausted).unwrap(), "dataType": "String"
    });
    let processed = run(&processor, &handler, &event(vec![moved])).await;
    assert_eq!(
        (processed.report.retried, processed.report.dead_lettered),
        (1, 0),
        "its first failure back home is a retry, not another dead letter"
    );
    let meta = meta_of(processor.queue().sent_to(SOURCE).last().unwrap());
    assert_eq!((meta.attempts, meta.reprocess_count), (1, 1));
    assert_eq!(
        meta.redriven_at,
        Some(redrive_core::envelope::Timestamp(NOW))
    );
    assert_eq!(
        meta.first_failure_at, exhausted.first_failure_at,
        "history kept"
    );
}

/// The copy a first transient failure re-sends.
async fn first_retry_copy(
    processor: &Processor<RecordingQueue>,
    handler: &ByBody,
) -> OutgoingMessage<'static> {
    run(processor, handler, &event(vec![record("m-1", "transient")])).await;
    processor.queue().sent_to(SOURCE).remove(0)
}

#[tokio::test]
async fn a_fair_queue_record_keeps_its_tenant_on_every_copy() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let tenant = |id: &str, body: &str| {
        let mut rec = record(id, body);
        rec["attributes"]["MessageGroupId"] = "tenant-7".into();
        rec
    };
    let json = event(vec![
        tenant("m-retry", "transient"),
        tenant("m-defer", "defer:30"),
        tenant("m-dead", "permanent"),
        record("m-untenanted", "transient"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert!(failures(&processed).is_empty());
    let groups = |queue| -> Vec<Option<String>> {
        processor
            .queue()
            .sent_to(queue)
            .iter()
            .map(|m| m.group_id.as_deref().map(str::to_owned))
            .collect()
    };
    let tenant_7 = Some("tenant-7".to_owned());
    assert_eq!(groups(SOURCE), [tenant_7.clone(), tenant_7.clone(), None]);
    assert_eq!(groups(DLQ), std::slice::from_ref(&tenant_7));
    let mut tenants = handler.tenants.lock().unwrap().clone();
    tenants.sort();
    assert_eq!(
        tenants,
        [None, tenant_7.clone(), tenant_7.clone(), tenant_7]
    );
}

#[tokio::test]
async fn every_copy_carries_the_trace_header_of_the_delivery_that_failed() {
    let mut policy = RetryPolicy::default();
    policy.backoff = redrive_core::Backoff::Sequence(vec![Duration::from_secs(3600)]);
    let processor = processor(policy);
    let handler = handler();
    let traced = |id: &str, body: &str| {
        let mut rec = record(id, body);
        rec["attributes"]["AWSTraceHeader"] = format!(
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1;id={id}"
        )
        .into();
        rec
    };
    let json = event(vec![
        traced("m-retry", "transient"),
        traced("m-defer", "defer:30"),
        traced("m-dead", "permanent"),
        record("m-untraced", "transient"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert!(failures(&processed).is_empty());
    let traces = |queue| -> Vec<Option<String>> {
        processor
            .queue()
            .sent_to(queue)
            .iter()
            .map(|m| {
                m.trace_header
                    .as_deref()
                    .map(|h| h.rsplit("id=").next().unwrap().to_owned())
            })
            .collect()
    };
    let id = |id: &str| Some(id.to_owned());
    assert_eq!(traces(SOURCE), [id("m-retry"), id("m-defer"), None]);
    assert_eq!(traces(DLQ), [id("m-dead")]);

    // The retry copy arrives before it is due (the hour-long backoff): the hop it is sent on as
    // carries the header it arrived with.
    let retry = processor.queue().sent_to(SOURCE).remove(0);
    let mut rec = traced("m-hop", "transient");
    rec["messageAttributes"]["redrive"] = serde_json::json!({"stringValue": retry.attribute("redrive").unwrap(), "dataType": "String"});
    let processed = run(&processor, &handler, &event(vec![rec])).await;
    assert_eq!(processed.report.deferred, 1, "a hop");
    assert_eq!(traces(SOURCE)[3], id("m-hop"));
}

#[tokio::test]
async fn a_record_done_on_a_retry_is_counted_for_the_retry_success_rate() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let mut retried = record("m-retried", "ok");
    let copy = first_retry_copy(&processor, &handler).await;
    retried["messageAttributes"]["redrive"] = serde_json::json!({
        "stringValue": copy.attribute("redrive").unwrap(), "dataType": "String"
    });
    let processed = run(
        &processor,
        &handler,
        &event(vec![retried, record("m-first", "ok")]),
    )
    .await;
    assert_eq!(
        (processed.report.done, processed.report.done_after_retry),
        (2, 1)
    );
}

#[tokio::test]
async fn a_refused_entry_or_a_failed_call_gives_the_record_back() {
    let processor = processor(RetryPolicy::default());
    processor.queue().refuse_entries_containing("permanent");
    let handler = handler();
    let json = event(vec![
        record("m-1", "transient"),
        record("m-2", "permanent"),
        record("m-3", "ok"),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(failures(&processed), ["m-2"]);
    assert_eq!(processed.report.send_failures, 1);

    let processor = self::processor(RetryPolicy::default());
    processor.queue().fail_calls_to(SOURCE);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(
        failures(&processed),
        ["m-1"],
        "the DLQ send still went through"
    );
}

/// A DLQ call that never answers (a stalled connection; the SDK sets no timeout of its own) must
/// not run the invocation past Lambda's timeout, which would fail the whole batch: the carry-out
/// stops at the deadline less the answer's reserve (200 ms with the 2 s margin), the stalled dead
/// letter is given back and the re-send that was confirmed stands.
#[tokio::test(start_paused = true)]
async fn a_stalled_send_gives_its_record_back_before_the_deadline() {
    let processor = processor(RetryPolicy::default());
    processor.queue().stall_calls_to(DLQ);
    let handler = handler();
    let json = event(vec![
        record("m-1", "transient"),
        record("m-2", "permanent"),
        record("m-3", "ok"),
    ]);
    let started = tokio::time::Instant::now();
    let processed = tokio::time::timeout(
        Duration::from_millis(DEADLINE - NOW),
        run(&processor, &handler, &json),
    )
    .await
    .expect("answered before the Lambda deadline");
    assert_eq!(failures(&processed), ["m-2"]);
    assert_eq!(processed.report.send_failures, 1);
    assert_eq!(processor.queue().sent_to(SOURCE).len(), 1, "m-1's retry");
    let took = started.elapsed();
    assert!(
        took <= Duration::from_millis(DEADLINE - NOW - 200),
        "answered {took:?} after the start, within the deadline less the reserve"
    );
}

#[tokio::test]
async fn sends_are_batched_ten_at_a_time() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let records = (0..25)
        .map(|i| record(&format!("m-{i}"), "permanent"))
        .collect();
    let processed = run(&processor, &handler, &event(records)).await;
    assert!(failures(&processed).is_empty());
    let sizes: Vec<usize> = processor
        .queue()
        .calls()
        .iter()
        .map(|call| match call {
            Call::Send { messages, .. } => messages.len(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(sizes, [10, 10, 5]);
    assert_eq!(processed.report.sqs_requests, 3);
}

#[tokio::test]
async fn a_record_without_message_id_fails_the_whole_batch_with_a_clear_error() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let json = r#"{"Records":[{"messageId":"m-1","body":"ok"},{"body":"ok"}]}"#;
    let event = SqsEvent::parse(json).unwrap();
    let error = processor
        .process(&handler, &event.records, DEADLINE)
        .await
        .unwrap_err();
    assert!(matches!(error, BatchError::MissingMessageId { index: 1 }));
    assert!(error.to_string().contains("record 1 has no messageId"));
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        0,
        "nothing handled before the batch is refused"
    );
}

#[tokio::test]
async fn a_malformed_body_is_dead_lettered_byte_for_byte() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let body = "{\"orderId\": \"o-1\", \"amount\": 12.5,, \u{e9}";
    let processed = run(&processor, &handler, &event(vec![record("m-1", body)])).await;
    assert!(failures(&processed).is_empty());
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(&*dead[0].body, body);
    let meta = meta_of(&dead[0]);
    assert_eq!(
        (meta.error_class, &*meta.error_kind),
        (ErrorClass::Permanent, "malformed_body")
    );
}

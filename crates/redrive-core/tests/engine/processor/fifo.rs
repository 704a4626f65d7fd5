//! FIFO records retried in place, and the attempt ledger that counts their tries right.
use super::*;

#[tokio::test]
async fn fifo_retries_in_place_and_holds_back_the_rest_of_the_group_only() {
    let processor = processor(RetryPolicy::default());
    let handler = handler();
    let fifo = fifo_record;
    let json = event(vec![
        fifo("a1", "ok", "A", 1),
        fifo("a2", "transient", "A", 2),
        fifo("b1", "ok", "B", 1),
        fifo("a3", "ok", "A", 1),
        fifo("b2", "ok", "B", 1),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(failures(&processed), ["a2", "a3"]);
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        4,
        "a3 is not started after a2 failed"
    );
    let calls = processor.queue().calls();
    assert_eq!(calls.len(), 1, "no re-send on FIFO: {calls:?}");
    let Call::ChangeVisibility { queue_url, changes } = &calls[0] else {
        panic!()
    };
    assert_eq!(queue_url, "https://sqs.local/123456789012/orders.fifo");
    assert_eq!(
        changes[1],
        ("rh-a3".to_owned(), Duration::ZERO),
        "held-back records come back at once, in order"
    );
    assert_eq!(changes[0].0, "rh-a2");
    assert!(
        changes[0].1 <= RetryPolicy::default().ceiling(2),
        "backoff for the second attempt"
    );

    // The receive count is the attempt count on FIFO: the fifth delivery is the last.
    let processor = self::processor(RetryPolicy::default());
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo("a2", "transient", "A", 5)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(meta_of(&processor.queue().sent_to(DLQ)[0]).attempts, 5);
}

#[tokio::test]
async fn with_the_ledger_a_fifo_record_held_back_behind_its_group_keeps_its_attempts() {
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let handler = handler();
    // a1 fails five times in place; a2, behind it in each batch, is received five times untried.
    for receive in 1..=4 {
        let processed = run(
            &processor,
            &handler,
            &event(vec![
                fifo_record("a1", "transient", "A", receive),
                fifo_record("a2", "transient", "A", receive),
            ]),
        )
        .await;
        assert_eq!(failures(&processed), ["a1", "a2"]);
    }
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            fifo_record("a1", "transient", "A", 5),
            fifo_record("a2", "transient", "A", 5),
        ]),
    )
    .await;
    assert_eq!(failures(&processed), ["a2"], "a1's fifth try was its last");
    assert_eq!(processor.queue().sent_to(DLQ).len(), 1);
    // a2's sixth receive is its first try: a transient failure is retried in place, not
    // dead-lettered as SQS's count alone would have it.
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a2", "transient", "A", 6)]),
    )
    .await;
    assert_eq!(failures(&processed), ["a2"]);
    assert_eq!(processed.report.dead_lettered, 0);
    assert_eq!(
        ledger.writes(),
        7,
        "a2's five untried receives, and a1's and a2's first waits at their group's head"
    );
    assert_eq!(
        ledger.reads(),
        5,
        "one read per batch received before: receives 2 to 6"
    );

    // Without the ledger the same delivery is its sixth attempt: dead-lettered.
    let without = self::processor(RetryPolicy::default());
    let processed = run(
        &without,
        &handler,
        &event(vec![fifo_record("a2", "transient", "A", 6)]),
    )
    .await;
    assert_eq!(processed.report.dead_lettered, 1);
}

#[tokio::test]
async fn with_the_ledger_the_happy_path_makes_no_ledger_call() {
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let records = (0..10)
        .map(|n| fifo_record(&format!("m{n}"), "ok", &format!("g{}", n % 3), 1))
        .collect();
    let processed = run(&processor, &handler(), &event(records)).await;
    assert!(failures(&processed).is_empty());
    assert_eq!((ledger.reads(), ledger.writes()), (0, 0));
}

#[tokio::test]
async fn with_the_ledger_a_delivery_past_its_attempts_is_dead_lettered_untried() {
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let handler = handler();
    // Dead-lettered on its fifth receive, its delete lost: the sixth would be a sixth try.
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a1", "ok", "A", 6)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0, "not tried again");
    let meta = meta_of(&processor.queue().sent_to(DLQ)[0]);
    assert_eq!((&*meta.error_kind, meta.attempts), ("attempts_used_up", 5));
    assert_eq!(meta.error_class, ErrorClass::Transient);
}

/// How a [`Scripted`] ledger answers.
pub(super) enum Script {
    /// It cannot be read (a DynamoDB brownout).
    Fail,
    /// Its first read fails; it answers after.
    FailsFirstRead(std::sync::atomic::AtomicBool),
    /// It answers for these ids only (`BatchGetItem`'s `UnprocessedKeys`).
    Only(Vec<&'static str>),
    /// It answers, then an operator releases this head: the release lands between the
    /// consumer's read and its renewal of the hold.
    ThenRelease(&'static str, Release),
    /// It answers reads, and refuses every hold (a throttled `UpdateItem`).
    RefusesHolds,
    /// It answers, and refuses every renewal of a hold (a hold written without an error).
    RefusesRenewals,
    /// It answers, and refuses to write down a copy in the lane (a throttled `UpdateItem`).
    RefusesLaneCopies,
    /// It answers, and refuses the first write of a copy in the lane.
    RefusesFirstLaneCopy(std::sync::atomic::AtomicBool),
}

/// A memory ledger whose reads (and holds) go as scripted; other writes go through.
pub(super) struct Scripted {
    pub(super) inner: MemoryLedger,
    pub(super) script: Script,
}

/// A refusal as DynamoDB throttles one.
fn throttled<'a, T: Send + 'a>(operation: &'static str) -> BoxFuture<'a, Result<T, PortError>> {
    Box::pin(async move {
        Err(PortError::new(
            operation,
            "ProvisionedThroughputExceededException",
        ))
    })
}

impl ForwardingLedger for Scripted {
    type Inner = MemoryLedger;

    fn inner(&self) -> &MemoryLedger {
        &self.inner
    }

    fn read_entries<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Option<LedgerEntry>>, PortError>> {
        match &self.script {
            Script::Fail => return throttled("BatchGetItem"),
            Script::FailsFirstRead(failed) if !failed.swap(true, Ordering::SeqCst) => {
                return throttled("BatchGetItem")
            }
            _ => {}
        }
        Box::pin(async move {
            let read = self.inner.entries(message_ids).await?;
            match &self.script {
                Script::Only(answers) => Ok(message_ids
                    .iter()
                    .zip(read)
                    .map(|(id, entry)| entry.filter(|_| answers.contains(id)))
                    .collect()),
                Script::ThenRelease(head, release) => {
                    self.inner.release_hold(head, *release).await?;
                    Ok(read)
                }
                _ => Ok(read),
            }
        })
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        call: LedgerCall<'a>,
        ask: impl FnOnce() -> BoxFuture<'a, Result<T, PortError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, PortError>> {
        if let (LedgerCall::Hold(message_id), Script::RefusesRenewals) = (call, &self.script) {
            // A renewal is a hold of a head the ledger holds already.
            return Box::pin(async move {
                let held = self.inner.held().await?;
                if held.iter().any(|(id, _)| id == message_id) {
                    return throttled("UpdateItem").await;
                }
                ask().await
            });
        }
        let refused = match (call, &self.script) {
            (LedgerCall::Hold(_), Script::RefusesHolds) => true,
            (LedgerCall::RecordInLane(_), Script::RefusesLaneCopies) => true,
            (LedgerCall::RecordInLane(_), Script::RefusesFirstLaneCopy(refused)) => {
                !refused.swap(true, Ordering::SeqCst)
            }
            _ => false,
        };
        if refused {
            return throttled("UpdateItem");
        }
        ask()
    }
}

#[tokio::test]
async fn a_ledger_that_cannot_answer_defers_an_untried_record_instead_of_dead_lettering_it() {
    // a1 was received five times, every time held back behind its group: untried. Then the table
    // throttles: SQS's count alone says its attempts are used up.
    let ledger = Arc::new(Scripted {
        inner: MemoryLedger::new(),
        script: Script::Fail,
    });
    for receive in 1..=5 {
        ledger.inner.record_untried("a1", receive).await.unwrap();
    }
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let handler = handler();
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a1", "ok", "A", 6)]),
    )
    .await;
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        0,
        "not tried: its attempts are unknown"
    );
    assert!(
        processor.queue().sent_to(DLQ).is_empty(),
        "not dead-lettered without a try"
    );
    assert_eq!(failures(&processed), ["a1"], "given back to wait in place");
    assert_eq!(processed.report.deferred, 1);
    assert_eq!(
        ledger.inner.entries(&["a1"]).await.unwrap()[0]
            .as_ref()
            .unwrap()
            .untried,
        [1, 2, 3, 4, 5, 6],
        "this receive was untried too"
    );

    // The table answers again: a1 is tried, at its first attempt.
    let answering = Arc::new(Scripted {
        inner: MemoryLedger::new(),
        script: Script::Only(vec!["a1"]),
    });
    for receive in 1..=6 {
        answering.inner.record_untried("a1", receive).await.unwrap();
    }
    let processor = self::processor(RetryPolicy::default()).with_ledger(answering);
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a1", "ok", "A", 7)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_partial_ledger_read_keeps_what_it_read_and_defers_only_what_it_did_not() {
    // a1 and b1 were each received five times untried; the read answers for a1 only.
    let ledger = Arc::new(Scripted {
        inner: MemoryLedger::new(),
        script: Script::Only(vec!["a1"]),
    });
    for receive in 1..=5 {
        ledger.inner.record_untried("a1", receive).await.unwrap();
        ledger.inner.record_untried("b1", receive).await.unwrap();
    }
    let processor = processor(RetryPolicy::default()).with_ledger(ledger.clone());
    let handler = handler();
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            fifo_record("a1", "ok", "A", 6),
            fifo_record("b1", "ok", "B", 6),
        ]),
    )
    .await;
    assert_eq!(
        failures(&processed),
        ["b1"],
        "a1 counted and done; b1 waits for the ledger"
    );
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
    assert!(processor.queue().sent_to(DLQ).is_empty());
}

/// A follower arrives with its head and shares the head's first receive: when the head is
/// dead-lettered at the age limit, the follower's own wait starts then, not at that first receive
/// (which would dead-letter it, and each follower after it, at its first deferral).
#[tokio::test]
async fn a_followers_wait_counts_from_when_it_became_its_groups_head() {
    let clock = Arc::new(ManualClock::at(NOW));
    let ledger = Arc::new(MemoryLedger::new());
    let processor = processor(RetryPolicy::default())
        .with_clock(clock.clone())
        .with_ledger(ledger.clone());
    let handler = handler();
    let deliver = |records: Vec<serde_json::Value>| {
        let json = event(records);
        let (processor, handler, deadline) = (&processor, &handler, clock.now_ms() + 60_000);
        async move {
            let event = SqsEvent::parse(&json).unwrap();
            processor
                .process(handler, &event.records, deadline)
                .await
                .unwrap()
        }
    };
    // a1 and a2 both wait on a downstream that stays down; a2 arrives behind a1 every time.
    let mut receive = 1;
    loop {
        let processed = deliver(vec![
            fifo_record("a1", "defer:30", "A", receive),
            fifo_record("a2", "defer:30", "A", receive),
        ])
        .await;
        if processed.report.dead_lettered > 0 {
            break;
        }
        let calls = processor.queue().calls();
        let Some(Call::ChangeVisibility { changes, .. }) = calls.last() else {
            panic!("{calls:?}")
        };
        clock.advance(u64::try_from(changes[0].1.as_millis()).unwrap());
        receive += 1;
    }
    assert!(clock.now_ms() - NOW >= 3_600_000, "a1 waited out the hour");
    // a2 is the head now, first received with a1 over an hour ago.
    receive += 1;
    let processed = deliver(vec![fifo_record("a2", "defer:30", "A", receive)]).await;
    assert_eq!(
        (processed.report.dead_lettered, processed.report.deferred),
        (0, 1),
        "a2's wait starts now"
    );
    assert_eq!(failures(&processed), ["a2"]);
    let entry = ledger.entries(&["a2"]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert_eq!(entry.head_since_ms, Some(clock.now_ms()));
    // Its own hour later, the age limit holds for it too.
    clock.advance(3_600_000);
    receive += 1;
    let processed = deliver(vec![fifo_record("a2", "defer:30", "A", receive)]).await;
    assert_eq!(processed.report.dead_lettered, 1);
}

#[tokio::test]
async fn a_fifo_deferral_waits_in_place_as_long_as_the_record_has_waited_and_ends_at_the_age_limit()
{
    let clock = Arc::new(ManualClock::at(NOW));
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = processor(RetryPolicy::default())
        .with_clock(clock.clone())
        .with_ledger(ledger.clone());
    let handler = handler();
    let deliver = |receive: u32| {
        let json = event(vec![
            fifo_record("a1", "defer:30", "A", receive),
            fifo_record("a2", "ok", "A", receive),
        ]);
        let (processor, handler, deadline) = (&processor, &handler, clock.now_ms() + 60_000);
        async move {
            let event = SqsEvent::parse(&json).unwrap();
            processor
                .process(handler, &event.records, deadline)
                .await
                .unwrap()
        }
    };
    let mut waits = Vec::new();
    let mut receive = 1;
    loop {
        let processed = deliver(receive).await;
        if processed.report.dead_lettered > 0 {
            assert_eq!(failures(&processed), ["a2"], "held back behind its head");
            break;
        }
        assert_eq!(
            processed.report.deferred, 1,
            "a deferral in place counts for the Deferred alarm"
        );
        let calls = processor.queue().calls();
        let Some(Call::ChangeVisibility { changes, .. }) = calls.last() else {
            panic!("{calls:?}")
        };
        let wait = changes[0].1;
        waits.push(wait.as_secs());
        clock.advance(u64::try_from(wait.as_millis()).unwrap());
        receive += 1;
    }
    // Doubling from the breaker's 30 s to the 1 h limit: 8 receives, not the 120 of fixed waits.
    assert_eq!(waits, [30, 30, 60, 120, 240, 480, 960, 1680]);
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(dead.len(), 1);
    let meta = meta_of(&dead[0]);
    assert_eq!((&*meta.error_kind, meta.attempts), ("deferred_too_long", 0));
    // The deferrals and the holds behind them are untried: in the ledger, not in the attempts.
    let entries: Vec<_> = ledger
        .inner()
        .entries(&["a1", "a2"])
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.expect("read"))
        .collect();
    assert_eq!(entries[0].untried, (1..=8).collect::<Vec<u32>>());
    assert_eq!(entries[1].untried, (1..=9).collect::<Vec<u32>>());
}

//! A FIFO head that holds its group until an operator releases it.
use std::sync::atomic::AtomicBool;

use super::fifo::{Script, Scripted};
use super::*;

/// A processor whose FIFO heads hold their group (for up to three days) in `ledger`.
fn holding(ledger: Arc<dyn AttemptLedger>, clock: Arc<ManualClock>) -> Processor<RecordingQueue> {
    let mut config = ProcessorConfig::default();
    config.dlq_url = Some(DLQ.into());
    config.fifo_on_dead_letter = redrive_core::fifo::FifoOnDeadLetter::Hold {
        max_age: Duration::from_secs(3 * 86400),
    };
    Processor::new(RecordingQueue::default(), config)
        .with_clock(clock)
        .with_ledger(ledger)
}

/// A holding processor over a memory ledger that goes as `script`.
fn scripted(script: Script) -> (Processor<RecordingQueue>, Arc<Scripted>) {
    let ledger = Arc::new(Scripted {
        inner: MemoryLedger::new(),
        script,
    });
    let processor = holding(ledger.clone(), Arc::new(ManualClock::at(NOW)));
    (processor, ledger)
}

/// The waits set through `receipt_handle`.
fn waits_set(
    processor: &Processor<RecordingQueue>,
    receipt_handle: &str,
) -> Vec<(String, Duration)> {
    processor
        .queue()
        .visibility_changes()
        .into_iter()
        .filter(|(handle, _)| handle == receipt_handle)
        .collect()
}

/// Head `a1` held on its first receive (no ledger read then: nothing to release yet).
async fn held_on_first_receive(
    processor: &Processor<RecordingQueue>,
    handler: &impl RecordHandler,
) {
    let held = run(
        processor,
        handler,
        &event(vec![fifo_record("a1", "permanent", "A", 1)]),
    )
    .await;
    assert_eq!(held.report.held, 1);
}

/// A head held on its first receive (no ledger read then: nothing to release yet), then back
/// after its wait with `receipt_handle`, given back untried, over a ledger that goes as `script`.
/// Returns the processor and its ledger.
async fn held_then_back(
    script: Script,
    receipt_handle: &str,
) -> (Processor<RecordingQueue>, Arc<Scripted>) {
    let (processor, ledger) = scripted(script);
    let handler = handler();
    held_on_first_receive(&processor, &handler).await;
    let mut back = fifo_record("a1", "ok", "A", 2);
    back["receiptHandle"] = receipt_handle.into();
    let processed = run(&processor, &handler, &event(vec![back])).await;
    assert_eq!(failures(&processed), ["a1"], "given back, untried");
    (processor, ledger)
}

/// The operator releases the head with `release` while it is back: that batch in flight read the
/// hold before the release.
async fn released_while_in_flight(release: Release) -> (Processor<RecordingQueue>, Arc<Scripted>) {
    held_then_back(Script::ThenRelease("a1", release), "rh-a1").await
}

/// `dlq release` while the head is in flight: the consumer's renewal must not bring the hold back
/// (nor set an 11 h 40 min wait the release undid).
#[tokio::test]
async fn a_release_that_lands_while_the_head_is_in_flight_is_not_undone() {
    let (processor, ledger) = released_while_in_flight(Release::Retry).await;
    assert!(
        ledger.held().await.unwrap().is_empty(),
        "the release stands: {:?}",
        ledger.held().await.unwrap()
    );
    assert_eq!(
        processor.queue().visibility_changes().last(),
        Some(&("rh-a1".to_owned(), Duration::ZERO)),
        "it comes back at once, to be tried with its fresh attempts"
    );
}

/// `dlq release --dead-letter` while the head is in flight: the consumer's renewal must not set an
/// 11 h 40 min wait on a head released to the DLQ; it comes back at once and goes there.
#[tokio::test]
async fn a_release_to_the_dlq_that_lands_while_the_head_is_in_flight_takes_effect_at_once() {
    let (processor, _) = released_while_in_flight(Release::DeadLetter).await;
    assert_eq!(
        processor.queue().visibility_changes().last(),
        Some(&("rh-a1".to_owned(), Duration::ZERO)),
        "it comes back at once"
    );
    assert!(processor.queue().sent_to(DLQ).is_empty());
    // Back: the release to the DLQ is read before anything, and carried out.
    let dead = run(
        &processor,
        &handler(),
        &event(vec![fifo_record("a1", "ok", "A", 3)]),
    )
    .await;
    assert!(failures(&dead).is_empty());
    assert_eq!(processor.queue().sent_to(DLQ).len(), 1);
}

/// `dlq release --dead-letter`, and the head comes back while the ledger cannot be read: its try
/// fails again and would hold its group anew. That hold must not stand on the release (kept, and
/// not listed for release again), leaving the head to wait 11 h 40 min for the DLQ: it is refused,
/// the head comes back at once, and with the ledger read it goes to the DLQ. (The LocalStack soak
/// of held groups stalled on such a head in the lane.)
#[tokio::test]
async fn a_head_released_to_the_dlq_is_not_held_anew_when_its_release_was_not_read() {
    let (processor, ledger) = scripted(Script::FailsFirstRead(AtomicBool::new(false)));
    let handler = handler();
    held_on_first_receive(&processor, &handler).await;
    ledger
        .inner
        .release_hold("a1", Release::DeadLetter)
        .await
        .unwrap();
    let mut back = fifo_record("a1", "permanent", "A", 2);
    back["receiptHandle"] = "rh-a1-second".into();
    let unread = run(&processor, &handler, &event(vec![back])).await;
    assert_eq!(failures(&unread), ["a1"], "given back");
    assert_eq!(
        waits_set(&processor, "rh-a1-second"),
        [("rh-a1-second".to_owned(), Duration::ZERO)],
        "back at once, not after a wait for a hold its release does not end"
    );
    let held = ledger.inner.held().await.unwrap();
    assert_eq!(
        held.iter()
            .map(|(id, hold)| (id.as_str(), hold.release))
            .collect::<Vec<_>>(),
        [("a1", Some(Release::DeadLetter))],
        "the release stands"
    );
    let dead = run(
        &processor,
        &handler,
        &event(vec![fifo_record("a1", "permanent", "A", 3)]),
    )
    .await;
    assert!(failures(&dead).is_empty());
    assert_eq!(processor.queue().sent_to(DLQ).len(), 1);
    assert!(ledger.held().await.unwrap().is_empty());
}

/// A hold the ledger did not write leaves its head where no operator sees it (`dlq held`, the
/// `HeldHeads` gauge): it must not wait there 11 h 40 min, but come back after its queue's
/// visibility timeout to be held again.
#[tokio::test]
async fn a_hold_the_ledger_did_not_write_comes_back_to_be_held_again() {
    let (processor, ledger) = scripted(Script::RefusesHolds);
    let handler = handler();
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            fifo_record("a1", "permanent", "A", 1),
            fifo_record("a2", "ok", "A", 1),
        ]),
    )
    .await;
    assert_eq!(failures(&processed), ["a1", "a2"], "its group waits");
    assert!(
        processor.queue().sent_to(DLQ).is_empty(),
        "not dead-lettered"
    );
    assert!(ledger.held().await.unwrap().is_empty());
    let waits = waits_set(&processor, "rh-a1");
    assert!(
        waits.is_empty(),
        "back after its visibility timeout, not after a wait set for a hold: {waits:?}"
    );
}

/// A renewal the ledger did not confirm (throttled, or answered after the carry deadline) leaves
/// the receipt handle of an earlier receive in the hold, which `dlq release` cannot make visible
/// (SQS wants the latest): the head must not wait 11 h 40 min there either, but come back after
/// its visibility timeout to renew its hold.
#[tokio::test]
async fn a_renewal_the_ledger_did_not_confirm_comes_back_to_be_renewed() {
    let (processor, ledger) = held_then_back(Script::RefusesRenewals, "rh-a1-second").await;
    let held = ledger.held().await.unwrap();
    assert_eq!(
        held.iter()
            .map(|(id, hold)| (id.as_str(), hold.receipt_handle.as_str()))
            .collect::<Vec<_>>(),
        [("a1", "rh-a1")],
        "the hold as the first receive wrote it"
    );
    let waits = waits_set(&processor, "rh-a1-second");
    assert!(
        waits.is_empty(),
        "back after its visibility timeout, not after a wait no release can end: {waits:?}"
    );
}

/// Issue 43, item 1: the Held alarm watches `HeldHeads`, which every container reports from the
/// ledger at least once a minute while it has batches, so a held group keeps it in ALARM between
/// its head's returns (11 h 40 min apart), whatever other groups do; it falls to 0 once the hold
/// ends. (Before, only a batch that held reported 1, and the next batch of another group 0.)
#[tokio::test]
async fn the_held_heads_gauge_stays_up_while_a_group_is_held_and_falls_when_it_is_released() {
    let ledger = Arc::new(MemoryLedger::new());
    let clock = Arc::new(ManualClock::at(NOW));
    let processor = holding(ledger.clone(), clock.clone());
    let handler = handler();
    let run = |json: String| {
        let (processor, handler, clock) = (&processor, &handler, &clock);
        async move {
            let event = SqsEvent::parse(&json).unwrap();
            let deadline = clock.now_ms() + 60_000;
            let processed = processor
                .process(handler, &event.records, deadline)
                .await
                .unwrap();
            assert!(
                failures(&processed).iter().all(|id| id == "a1"),
                "only a1 fails"
            );
            processed
        }
    };
    let other_group = |n: u32| event(vec![fifo_record(&format!("b{n}"), "ok", "B", 1)]);

    let held = run(event(vec![fifo_record("a1", "permanent", "A", 1)])).await;
    assert_eq!((held.report.held, held.report.held_heads), (1, Some(1)));
    // Within the minute, another group's batch does not ask the ledger again: no figure.
    clock.advance(20_000);
    let quiet = run(other_group(1)).await;
    assert_eq!(quiet.report.held_heads, None);
    // Every minute after, hours before the head comes back, still held.
    for n in 2..5 {
        clock.advance(60_000);
        let later = run(other_group(n)).await;
        assert_eq!((later.report.held, later.report.held_heads), (0, Some(1)));
    }
    ledger.release_hold("a1", Release::Retry).await.unwrap();
    clock.advance(60_000);
    let released = run(other_group(5)).await;
    assert_eq!(released.report.held_heads, Some(0));
}

#[tokio::test]
async fn with_hold_a_head_that_would_be_dead_lettered_holds_its_group_until_an_operator_releases_it(
) {
    use redrive_core::fifo::FifoOnDeadLetter;
    let ledger = Arc::new(MemoryLedger::new());
    let holding = |max_age: Duration| {
        let mut config = ProcessorConfig::default();
        config.dlq_url = Some(DLQ.into());
        config.fifo_on_dead_letter = FifoOnDeadLetter::Hold { max_age };
        Processor::new(RecordingQueue::default(), config)
            .with_clock(Arc::new(ManualClock::at(NOW)))
            .with_ledger(ledger.clone())
    };
    let processor = holding(Duration::from_secs(3 * 86400));
    let handler = handler();
    let batch = |receive: u32, head: &str| {
        event(vec![
            fifo_record("a1", head, "A", receive),
            fifo_record("a2", "ok", "A", receive),
            fifo_record("b1", "ok", "B", receive),
        ])
    };
    // A permanent failure: not dead-lettered, the group waits in place; B goes on.
    let processed = run(&processor, &handler, &batch(1, "permanent")).await;
    assert_eq!(failures(&processed), ["a1", "a2"]);
    assert_eq!(
        (processed.report.held, processed.report.dead_lettered),
        (1, 0)
    );
    assert!(processor.queue().sent_to(DLQ).is_empty());
    let Some(Call::ChangeVisibility { changes, .. }) = processor.queue().calls().last().cloned()
    else {
        panic!("a visibility change")
    };
    assert_eq!(
        changes[0],
        (
            "rh-a1".to_owned(),
            redrive_core::SourceQueue::default().max_in_place_wait()
        )
    );
    let held = ledger.held().await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (&*held[0].0, &*held[0].1.error_kind),
        ("a1", "invalid_order")
    );

    // Back after its wait: held again without a try, the failure it was held for kept.
    let calls = handler.calls.load(Ordering::SeqCst);
    let processed = run(&processor, &handler, &batch(2, "ok")).await;
    assert_eq!(failures(&processed), ["a1", "a2"]);
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        calls + 1,
        "b1 only: a1 is not tried"
    );
    let entry = ledger.entries(&["a1"]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert_eq!(
        (
            entry.untried.as_slice(),
            &*entry.hold.as_ref().unwrap().error_kind
        ),
        (&[2][..], "invalid_order")
    );

    // Released to be tried again (the cause is fixed): a fresh set of attempts, and the group
    // goes on in order.
    ledger.release_hold("a1", Release::Retry).await.unwrap();
    let processed = run(&processor, &handler, &batch(3, "ok")).await;
    assert!(failures(&processed).is_empty());
    assert!(ledger.held().await.unwrap().is_empty());

    // Released to the DLQ: dead-lettered as the operator's decision; the group goes on.
    run(
        &processor,
        &handler,
        &event(vec![fifo_record("c1", "permanent", "C", 1)]),
    )
    .await;
    ledger
        .release_hold("c1", Release::DeadLetter)
        .await
        .unwrap();
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            fifo_record("c1", "permanent", "C", 2),
            fifo_record("c2", "ok", "C", 1),
        ]),
    )
    .await;
    // As any head dead-lettered: the rest of the group follows in the next batch.
    assert_eq!(failures(&processed), ["c2"]);
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(&*meta_of(&dead[0]).error_kind, "released_to_dlq");
    assert!(
        ledger.held().await.unwrap().is_empty(),
        "its dead letter confirmed, the hold is over: dlq held no longer lists it"
    );
    let processed = run(
        &processor,
        &handler,
        &event(vec![fifo_record("c2", "ok", "C", 2)]),
    )
    .await;
    assert!(failures(&processed).is_empty());

    // A hold older than the hold limit dead-letters its head before the retention drops it.
    let old = holding(Duration::from_secs(3600));
    let mut record = fifo_record("d1", "permanent", "D", 1);
    record["attributes"]["SentTimestamp"] = (NOW - 2 * 3_600_000).to_string().into();
    let processed = run(&old, &handler, &event(vec![record])).await;
    assert_eq!(
        (processed.report.held, processed.report.dead_lettered),
        (0, 1)
    );
}

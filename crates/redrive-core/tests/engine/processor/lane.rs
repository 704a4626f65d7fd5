//! A held FIFO group waiting in the retry lane while its source goes on.
use super::*;

const LANE: &str = "https://sqs.local/123456789012/orders-held.fifo";
const LANE_ARN: &str = "arn:aws:sqs:eu-west-1:123456789012:orders-held.fifo";

/// Writes down the body of every message it is handed, then acts on it as [`ByBody`] does.
struct Logged {
    inner: ByBody,
    bodies: std::sync::Mutex<Vec<String>>,
}

impl RecordHandler for Logged {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        self.bodies.lock().unwrap().push(message.body().to_owned());
        self.inner.handle(message).await
    }
}

/// A FIFO source record with its `SequenceNumber`.
fn sequenced(id: &str, body: &str, group: &str, receives: u32, sequence: u32) -> serde_json::Value {
    let mut record = fifo_record(id, body, group, receives);
    record["attributes"]["SequenceNumber"] = format!("1884949646046769{sequence:04}").into();
    record
}

/// The lane's delivery `id` (received `receives` times) of a copy sent there.
fn lane_record(copy: &OutgoingMessage<'_>, id: &str, receives: u32) -> serde_json::Value {
    let group = copy.group_id.as_deref().expect("a lane copy has a group");
    let mut record = fifo_record(id, &copy.body, group, receives);
    record["eventSourceARN"] = LANE_ARN.into();
    record["messageAttributes"] = copy
        .attributes
        .iter()
        .map(|(name, value)| (name.to_string(), serde_json::to_value(value).unwrap()))
        .collect::<serde_json::Map<_, _>>()
        .into();
    record
}

/// The event of one record of group A in the FIFO source.
fn in_group_a(id: &str, body: &str, receives: u32, sequence: u32) -> String {
    event(vec![sequenced(id, body, "A", receives, sequence)])
}

/// The ledger keys of groups A and B of the FIFO source.
const GROUP_A: &str = "fifo#arn:aws:sqs:eu-west-1:123456789012:orders.fifo#A";
const GROUP_B: &str = "fifo#arn:aws:sqs:eu-west-1:123456789012:orders.fifo#B";

/// The position of [`sequenced`]'s `sequence`.
fn position(sequence: u128) -> Position {
    Position(18_849_496_460_467_690_000 + sequence)
}

/// What each copy sent to the lane is there for (`held` or `foll`), in the order sent.
fn lane_marks(processor: &Processor<RecordingQueue>) -> Vec<String> {
    processor
        .queue()
        .sent_to(LANE)
        .iter()
        .map(|copy| copy.attribute("redrive-lane").unwrap_or_default()[..4].to_owned())
        .collect()
}

/// A memory ledger, a processor holding groups in the lane with it, and the handler.
fn laned_in_memory() -> (Arc<MemoryLedger>, Processor<RecordingQueue>, ByBody) {
    let ledger = Arc::new(MemoryLedger::new());
    (ledger.clone(), laned(ledger), handler())
}

/// A processor whose FIFO heads hold their group in the retry lane `LANE`, with `ledger`.
fn laned(ledger: Arc<dyn AttemptLedger>) -> Processor<RecordingQueue> {
    let mut config = ProcessorConfig::default();
    config.dlq_url = Some(DLQ.into());
    config.fifo_on_dead_letter = redrive_core::fifo::FifoOnDeadLetter::Hold {
        max_age: Duration::from_secs(3 * 86400),
    };
    config.lane_url = Some(LANE.into());
    Processor::new(RecordingQueue::default(), config)
        .with_clock(Arc::new(ManualClock::at(NOW)))
        .with_ledger(ledger)
}

/// Issue 42, item 1: with a retry lane, a head that would hold its group is sent there with its
/// failure and deleted from the source, and the group's later records follow it there untried,
/// in order, so that the source's other groups never queue behind a held group's backlog (SQS
/// looks at the first 120,000 messages of a FIFO queue only). In the lane the head holds its
/// group until an operator releases it; once the lane's records are done, the group runs in its
/// source again, after them. Fails before the lane: the head is held in place in the source.
#[tokio::test]
async fn with_a_lane_a_held_group_waits_there_in_order_and_its_source_goes_on() {
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = laned(ledger.clone());
    let handler = Logged {
        inner: handler(),
        bodies: Default::default(),
    };
    let handled = || handler.bodies.lock().unwrap().clone();

    // a1 fails: sent to the lane with its failure, deleted from the source; a2 behind it is given back
    // untried; B goes on.
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            sequenced("a1", "permanent:a1", "A", 1, 1),
            sequenced("a2", "ok:a2", "A", 1, 2),
            sequenced("b1", "ok:b1", "B", 1, 3),
        ]),
    )
    .await;
    assert_eq!(failures(&processed), ["a2"]);
    assert_eq!(
        (processed.report.sent_to_lane, processed.report.held),
        (1, 0)
    );
    assert!(processor.queue().sent_to(DLQ).is_empty());
    assert_eq!(handled(), ["permanent:a1", "ok:b1"]);

    // a2 comes back and a3 arrives: both follow a1 to the lane untried, in order; B goes on.
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            sequenced("a2", "ok:a2", "A", 2, 2),
            sequenced("a3", "ok:a3", "A", 1, 4),
            sequenced("b2", "ok:b2", "B", 1, 5),
        ]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processed.report.sent_to_lane, 2);
    assert_eq!(handled(), ["permanent:a1", "ok:b1", "ok:b2"]);
    let lane = processor.queue().sent_to(LANE);
    let bodies: Vec<&str> = lane.iter().map(|copy| &*copy.body).collect();
    assert_eq!(bodies, ["permanent:a1", "ok:a2", "ok:a3"]);
    assert!(lane
        .iter()
        .all(|copy| copy.group_id.as_deref() == Some("A")));
    assert_eq!(&*meta_of(&lane[0]).error_kind, "invalid_order");
    assert_eq!(&*meta_of(&lane[1]).error_kind, "follows_group");

    // In the lane: the head holds its group there, untried, with the failure it was sent there for.
    let processed = run(
        &processor,
        &handler,
        &event(vec![lane_record(&lane[0], "l1", 1)]),
    )
    .await;
    assert_eq!(failures(&processed), ["l1"]);
    assert_eq!(handled().len(), 3, "not tried");
    let held = ledger.held().await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (&*held[0].0, &*held[0].1.queue_arn, &*held[0].1.error_kind),
        ("l1", LANE_ARN, "invalid_order")
    );
    // Meanwhile the group's later records keep following it, and B keeps going, at the cost of
    // one ledger read for the batch's groups.
    let reads = ledger.reads();
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            sequenced("a4", "ok:a4", "A", 1, 6),
            sequenced("b3", "ok:b3", "B", 1, 7),
        ]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processor.queue().sent_to(LANE).len(), 4);
    assert_eq!(ledger.reads(), reads + 1);

    // Released to be tried again: tried with a fresh set of attempts; it fails again, and holds
    // its group in place in the lane.
    ledger.release_hold("l1", Release::Retry).await.unwrap();
    let processed = run(
        &processor,
        &handler,
        &event(vec![lane_record(&lane[0], "l1", 2)]),
    )
    .await;
    assert_eq!(failures(&processed), ["l1"]);
    assert_eq!(handled().last().map(String::as_str), Some("permanent:a1"));
    assert_eq!(ledger.held().await.unwrap().len(), 1);
    // Released to the DLQ: the group goes on in the lane, in order.
    ledger
        .release_hold("l1", Release::DeadLetter)
        .await
        .unwrap();
    let lane = processor.queue().sent_to(LANE);
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            lane_record(&lane[0], "l1", 3),
            lane_record(&lane[1], "l2", 1),
        ]),
    )
    .await;
    assert_eq!(
        failures(&processed),
        ["l2"],
        "behind its dead-lettered head"
    );
    assert_eq!(
        &*meta_of(&processor.queue().sent_to(DLQ)[0]).error_kind,
        "released_to_dlq"
    );
    // A source record while the lane's records are not all done still follows them.
    let processed = run(
        &processor,
        &handler,
        &event(vec![sequenced("a5", "ok:a5", "A", 1, 8)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    let lane = processor.queue().sent_to(LANE);
    assert_eq!(lane.len(), 5);
    let processed = run(
        &processor,
        &handler,
        &event(vec![
            lane_record(&lane[1], "l2", 2),
            lane_record(&lane[2], "l3", 1),
            lane_record(&lane[3], "l4", 1),
            lane_record(&lane[4], "l5", 1),
        ]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    // Every record of the lane done: the group runs in its source again, after them.
    let processed = run(
        &processor,
        &handler,
        &event(vec![sequenced("a6", "ok:a6", "A", 1, 9)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processor.queue().sent_to(LANE).len(), 5, "a6 ran in place");
    let group_a: Vec<String> = handled()
        .into_iter()
        .filter(|body| body.ends_with(|c: char| c.is_ascii_digit()) && body.contains(":a"))
        .collect();
    assert_eq!(
        group_a,
        [
            "permanent:a1",
            "permanent:a1",
            "ok:a2",
            "ok:a3",
            "ok:a4",
            "ok:a5",
            "ok:a6"
        ]
    );
}

/// Issue 42, item 1, found by the soak: a record comes back to its source after it left for the
/// lane when the answer to its copy's send or its source delete is lost. A held head whose copy
/// SQS did not confirm is sent to the lane again as the held head (before: it followed itself, and was
/// tried in the lane with a fresh set of attempts no operator gave it); a record whose copy SQS
/// confirmed is done in its source, untried and not sent again (before: tried again in place,
/// after its group's later records had taken effect from the lane).
#[tokio::test]
async fn a_record_back_in_its_source_after_it_left_for_the_lane_is_sent_again_or_done() {
    let (_, processor, handler) = laned_in_memory();
    let source = in_group_a;
    let marks = || lane_marks(&processor);
    // The lane refuses the copy: a1 is given back.
    processor.queue().fail_calls_to(LANE);
    let processed = run(&processor, &handler, &source("a1", "permanent", 1, 1)).await;
    assert_eq!(failures(&processed), ["a1"]);
    processor
        .queue()
        .fail_calls_to("https://sqs.local/123456789012/nowhere");
    // Back, its group waiting on it: sent to the lane again as the held head, untried.
    let processed = run(&processor, &handler, &source("a1", "permanent", 2, 1)).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1, "not tried again");
    // (The recording lists the refused send too.)
    assert_eq!(marks(), ["held", "held"], "sent again, held");
    // Its delete lost: back again, done here, its copy in the lane.
    let processed = run(&processor, &handler, &source("a1", "permanent", 3, 1)).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(marks(), ["held", "held"], "not sent again");
    // a2 follows; its delete lost, it comes back: done here, not sent again, not tried.
    run(&processor, &handler, &source("a2", "ok", 1, 2)).await;
    assert_eq!(marks(), ["held", "held", "foll"]);
    let processed = run(&processor, &handler, &source("a2", "ok", 2, 2)).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processed.report.done, 1);
    assert_eq!(marks(), ["held", "held", "foll"]);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
}

/// The soak's held head tried ten times (docs/reliability.md): a held head whose copy SQS
/// confirmed in the lane, its source delete lost and the ledger's note of its copy not written,
/// came back after a later record of its group had left: it followed itself to the lane and was
/// tried there with a fresh set of attempts no operator gave it. It still follows (a queue that
/// hands out a group's records out of order would lose it, were it taken for done), and its copy
/// carries its tries: one here, so one more there at the most.
#[tokio::test]
async fn a_record_back_after_a_later_one_of_its_group_left_follows_with_its_tries() {
    let ledger = Arc::new(super::fifo::Scripted {
        inner: MemoryLedger::new(),
        script: super::fifo::Script::RefusesLaneCopies,
    });
    let processor = laned(ledger);
    let handler = handler();
    let source = in_group_a;
    let copies = || -> Vec<(String, u32)> {
        processor
            .queue()
            .sent_to(LANE)
            .iter()
            .map(|copy| {
                let mark = copy.attribute("redrive-lane").unwrap_or_default()[..4].to_owned();
                let meta: serde_json::Value =
                    serde_json::from_str(copy.attribute("redrive").unwrap()).unwrap();
                (
                    mark,
                    u32::try_from(meta["attempts"].as_u64().unwrap()).unwrap(),
                )
            })
            .collect()
    };
    run(&processor, &handler, &source("a1", "permanent", 1, 1)).await;
    run(&processor, &handler, &source("a2", "ok", 1, 2)).await;
    // Both deletes lost; each comes back and follows again (SQS drops a copy sent twice within
    // its 5-minute deduplication interval), untried, with its tries: a2's are SQS's count (the
    // ledger was not told that its first receive went untried), fewer tries there, never more.
    run(&processor, &handler, &source("a1", "permanent", 2, 1)).await;
    run(&processor, &handler, &source("a2", "ok", 2, 2)).await;
    let held_tried_once = ("held".to_owned(), 0);
    assert_eq!(
        copies(),
        [
            held_tried_once,
            ("foll".to_owned(), 0),
            ("foll".to_owned(), 1),
            ("foll".to_owned(), 1)
        ]
    );
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1, "a1's one try");
}

/// The soak's message tried seven times: a record tried in place that then follows its group to
/// the lane (its group's state read as out there) had a fresh set of attempts there. It goes on
/// from its tries in its source: here its fifth attempt is its last.
#[tokio::test]
async fn a_record_that_follows_after_tries_in_its_source_goes_on_from_them_in_the_lane() {
    let (ledger, processor, handler) = laned_in_memory();
    let b1 = |receives: u32| event(vec![sequenced("b1", "transient", "B", receives, 2)]);
    for receives in 1..=4 {
        let processed = run(&processor, &handler, &b1(receives)).await;
        assert_eq!(
            failures(&processed),
            ["b1"],
            "given back to be tried in place"
        );
    }
    // Meanwhile an earlier record of its group is out in the lane (a queue that hands a group's
    // records out of order, as LocalStack does).
    ledger
        .record_key_left(GROUP_B, position(1), KeyPlace::Lane)
        .await
        .unwrap();
    run(&processor, &handler, &b1(5)).await;
    assert_eq!(handler.calls.load(Ordering::SeqCst), 4, "followed, untried");
    let copy = processor.queue().sent_to(LANE)[0].clone();
    run(
        &processor,
        &handler,
        &event(vec![lane_record(&copy, "l1", 1)]),
    )
    .await;
    assert_eq!(handler.calls.load(Ordering::SeqCst), 5, "its fifth try");
    let held = ledger.held().await.unwrap();
    assert!(
        held.iter().any(|(id, _)| id == "l1"),
        "its attempts used up, it holds its group in the lane: {held:?}"
    );
}

/// Issue 53, item 5: a lane send SQS did not confirm may have landed. Given back at the queue's
/// visibility timeout (360 s and more), it came back past the 5 minutes in which SQS deduplicates
/// its copy by its id, and the lane could hold two copies of a held head. It and its group's
/// records given back with it now come back within them.
#[tokio::test]
async fn a_lane_send_not_confirmed_comes_back_within_the_lanes_deduplication_interval() {
    let processor = laned(Arc::new(MemoryLedger::new()));
    let handler = handler();
    processor.queue().fail_calls_to(LANE);
    let json = event(vec![
        sequenced("a1", "permanent", "A", 1, 1),
        sequenced("a2", "ok", "A", 1, 2),
        sequenced("b1", "ok", "B", 1, 3),
    ]);
    let processed = run(&processor, &handler, &json).await;
    assert_eq!(failures(&processed), ["a1", "a2"], "b1 is done");
    let changes = processor.queue().visibility_changes();
    assert_eq!(changes.len(), 2, "{changes:?}");
    for (handle, visibility) in &changes {
        assert!(
            *visibility < Duration::from_secs(300),
            "{handle} comes back within SQS's 5-minute deduplication interval: {visibility:?}"
        );
    }
}

/// A record that took effect from the lane and came back to its source (its delete lost, and the
/// ledger's note of its copy too) was tried there again, after its group's later records: it is
/// the last its group sent out and that position took effect, so it is done, untried.
#[tokio::test]
async fn a_record_back_after_it_took_effect_from_the_lane_is_done_untried() {
    let (ledger, processor, handler) = laned_in_memory();
    ledger
        .record_key_left(GROUP_A, position(1), KeyPlace::Lane)
        .await
        .unwrap();
    ledger.record_key_done(GROUP_A, position(1)).await.unwrap();
    let processed = run(
        &processor,
        &handler,
        &event(vec![sequenced("a1", "ok", "A", 2, 1)]),
    )
    .await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processed.report.done, 1);
    assert_eq!(handler.calls.load(Ordering::SeqCst), 0, "not tried again");
    assert!(processor.queue().sent_to(LANE).is_empty());
}

/// A copy's note in the ledger (`in_lane`) that one write did not make: asked again, so that the
/// record back in its source (its delete lost) is done there, not sent to the lane a second time.
#[tokio::test]
async fn a_copys_note_the_ledger_refused_once_is_written_again() {
    let ledger = Arc::new(super::fifo::Scripted {
        inner: MemoryLedger::new(),
        script: super::fifo::Script::RefusesFirstLaneCopy(Default::default()),
    });
    let processor = laned(ledger);
    let handler = handler();
    let a1 = |receives: u32| event(vec![sequenced("a1", "permanent", "A", receives, 1)]);
    run(&processor, &handler, &a1(1)).await;
    let processed = run(&processor, &handler, &a1(2)).await;
    assert_eq!(
        processed.report.done, 1,
        "its delete lost: done in its source"
    );
    assert_eq!(
        processor.queue().sent_to(LANE).len(),
        1,
        "one copy in the lane"
    );
}

/// The soak's 9 and 10 tries of one message: a record whose copy's answer was lost and whose
/// give-back did not take (its visibility unchanged) came back to its source past SQS's 5-minute
/// deduplication interval and was sent to the lane twice, and each copy was tried with attempts of
/// its own. A copy whose position is the last of its group to take effect in the lane is done
/// there, untried. One whose first copy an operator sent to the DLQ is held for the operator again
/// (its group is not freed by a dead letter: that copy, its delete lost, could still come back).
#[tokio::test]
async fn a_second_copy_of_a_record_that_took_effect_in_the_lane_is_done_untried() {
    let (ledger, processor, handler) = laned_in_memory();
    // Group B waits in the lane: b2 follows, its copy takes effect there.
    ledger
        .record_key_left(GROUP_B, position(1), KeyPlace::Lane)
        .await
        .unwrap();
    run(
        &processor,
        &handler,
        &event(vec![sequenced("b2", "ok", "B", 1, 2)]),
    )
    .await;
    let b2 = processor.queue().sent_to(LANE)[0].clone();
    run(
        &processor,
        &handler,
        &event(vec![lane_record(&b2, "l1", 1)]),
    )
    .await;
    assert_eq!(handler.calls.load(Ordering::SeqCst), 1);
    let processed = run(
        &processor,
        &handler,
        &event(vec![lane_record(&b2, "l2", 1)]),
    )
    .await;
    assert_eq!(processed.report.done, 1);
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        1,
        "the second copy is not tried"
    );
    // a1 holds group A in the lane; an operator sends it to the DLQ; its second copy is held.
    run(&processor, &handler, &in_group_a("a1", "permanent", 1, 3)).await;
    let a1 = processor.queue().sent_to(LANE)[1].clone();
    run(
        &processor,
        &handler,
        &event(vec![lane_record(&a1, "l3", 1)]),
    )
    .await;
    ledger
        .release_hold("l3", Release::DeadLetter)
        .await
        .unwrap();
    run(
        &processor,
        &handler,
        &event(vec![lane_record(&a1, "l3", 2)]),
    )
    .await;
    assert_eq!(processor.queue().sent_to(DLQ).len(), 1, "a1 in the DLQ");
    run(
        &processor,
        &handler,
        &event(vec![lane_record(&a1, "l4", 1)]),
    )
    .await;
    let held = ledger.held().await.unwrap();
    assert!(held.iter().any(|(id, _)| id == "l4"), "held: {held:?}");
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        2,
        "a1's one try, in its source"
    );
}

/// The soak's effect out of its group's order: a record whose copy took effect from the lane came
/// back to its source (its delete lost) when the ledger answered for its group but not for the
/// record itself, so that its note (`in_lane`) went unread; its group back in the source, it ran
/// again there, after its group's later records. It waits for a read instead, untried.
#[tokio::test]
async fn a_record_that_left_before_waits_untried_while_its_own_entry_is_unread() {
    let ledger = Arc::new(super::fifo::Scripted {
        inner: MemoryLedger::new(),
        script: super::fifo::Script::Only(vec![GROUP_A]),
    });
    let processor = laned(ledger.clone());
    let handler = handler();
    let source = |id: &str, receives: u32, sequence: u32| in_group_a(id, "ok", receives, sequence);
    ledger
        .record_key_left(GROUP_A, position(1), KeyPlace::Lane)
        .await
        .unwrap();
    run(&processor, &handler, &source("a2", 1, 2)).await;
    run(&processor, &handler, &source("a3", 1, 3)).await;
    assert_eq!(processor.queue().sent_to(LANE).len(), 2, "both followed");
    ledger.record_key_done(GROUP_A, position(3)).await.unwrap();
    let processed = run(&processor, &handler, &source("a2", 2, 2)).await;
    assert_eq!(failures(&processed), ["a2"], "given back to be read again");
    assert_eq!(
        handler.calls.load(Ordering::SeqCst),
        0,
        "not run again in place"
    );
    assert_eq!(processor.queue().sent_to(LANE).len(), 2, "not sent again");
}

/// The soak's 9 and 10 tries after a dead letter: a lane send SQS took but did not confirm, whose
/// give-back SQS refused, brought its record back to its source past SQS's 5-minute deduplication
/// interval, and it was sent to the lane a second time. The lane's first receive of a copy writes
/// its source record's note (`in_lane`): back in its source, it is done there.
#[tokio::test]
async fn a_copy_received_in_the_lane_keeps_its_record_from_being_sent_again() {
    let (_, processor, handler) = laned_in_memory();
    processor.queue().fail_calls_to(LANE);
    let processed = run(&processor, &handler, &in_group_a("a1", "permanent", 1, 1)).await;
    assert_eq!(failures(&processed), ["a1"], "its send not confirmed");
    processor
        .queue()
        .fail_calls_to("https://sqs.local/123456789012/nowhere");
    // SQS took the copy all the same: the lane receives it.
    let copy = processor.queue().sent_to(LANE)[0].clone();
    run(
        &processor,
        &handler,
        &event(vec![lane_record(&copy, "l1", 1)]),
    )
    .await;
    let processed = run(&processor, &handler, &in_group_a("a1", "permanent", 2, 1)).await;
    assert_eq!(processed.report.done, 1, "done in its source");
    assert_eq!(lane_marks(&processor), ["held"], "not sent again");
}

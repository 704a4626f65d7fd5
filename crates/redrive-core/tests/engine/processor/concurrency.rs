//! Concurrency: proven by counting records in flight and the order of calls, never by timing.
use std::sync::Mutex;

use redrive_core::breaker::BreakerState;
use redrive_core::{BreakerSettings, CircuitBreaker};

use super::*;

/// Counts records in flight (in all and per message group) and logs the order of the calls.
/// A body is `ok`, `transient`, `permanent` or `panic`, after a sleep of 1 ms or of the
/// `+nap:<ms>` it ends with.
#[derive(Default)]
struct Counting {
    in_flight: Mutex<InFlight>,
}

#[derive(Default)]
struct InFlight {
    now: usize,
    most: usize,
    per_group: std::collections::HashMap<String, usize>,
    most_in_a_group: usize,
    calls: Vec<String>,
}

impl Counting {
    fn new() -> Self {
        Self::default()
    }
    fn most(&self) -> usize {
        self.in_flight.lock().unwrap().most
    }
    fn most_in_a_group(&self) -> usize {
        self.in_flight.lock().unwrap().most_in_a_group
    }
    fn calls(&self) -> Vec<String> {
        self.in_flight.lock().unwrap().calls.clone()
    }
    fn change(&self, message: &Message<'_>, by: isize) {
        let mut flight = self.in_flight.lock().unwrap();
        flight.now = flight.now.checked_add_signed(by).unwrap();
        flight.most = flight.most.max(flight.now);
        if let Some(group) = message.group_id() {
            let in_group = flight.per_group.entry(group.to_owned()).or_default();
            *in_group = in_group.checked_add_signed(by).unwrap();
            let in_group = *in_group;
            flight.most_in_a_group = flight.most_in_a_group.max(in_group);
        }
        if by > 0 {
            flight.calls.push(message.id().to_owned());
        }
    }
}

impl RecordHandler for Counting {
    async fn handle(&self, message: &Message<'_>) -> Result<(), RecordError> {
        self.change(message, 1);
        // Both sleep and panic leave through here: the count goes down on unwinding too.
        struct Leave<'a>(&'a Counting, Message<'a>);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.change(&self.1, -1);
            }
        }
        let _leave = Leave(self, *message);
        let (verdict, nap) = message
            .body()
            .split_once("+nap:")
            .unwrap_or((message.body(), "1"));
        tokio::time::sleep(Duration::from_millis(nap.parse().unwrap())).await;
        match verdict {
            "ok" => Ok(()),
            "transient" => Err(RecordError::transient("payment_timeout", "timed out")),
            "permanent" => Err(RecordError::permanent("invalid_order", "no")),
            "panic" => panic!("poison order"),
            other => panic!("unknown verdict {other}"),
        }
    }
}

fn processor_with(concurrency: usize) -> Processor<RecordingQueue> {
    let mut config = ProcessorConfig::default();
    config.dlq_url = Some(DLQ.into());
    config.concurrency = NonZeroUsize::new(concurrency).unwrap();
    Processor::new(RecordingQueue::default(), config)
        .with_clock(Arc::new(ManualClock::at(NOW)))
        .with_seed(7)
}

fn fifo(id: &str, body: &str, group: &str) -> serde_json::Value {
    let mut rec = record(id, body);
    rec["eventSourceARN"] = "arn:aws:sqs:eu-west-1:123456789012:orders.fifo".into();
    rec["attributes"]["MessageGroupId"] = group.into();
    rec
}

#[tokio::test]
async fn the_bound_is_reached_and_never_exceeded() {
    let records: Vec<_> = (0..50).map(|i| record(&format!("m-{i}"), "ok")).collect();
    for (bound, expected) in [(1, 1), (8, 8), (100, 50)] {
        let processor = processor_with(bound);
        let handler = Counting::new();
        let processed = run(&processor, &handler, &event(records.clone())).await;
        assert!(failures(&processed).is_empty());
        assert_eq!(processed.report.done, 50);
        assert_eq!(handler.most(), expected, "bound {bound}");
    }
}

#[tokio::test]
async fn fifo_groups_run_side_by_side_each_in_the_events_order() {
    // Three groups, interleaved; each group's records must be called in this order.
    let mut records = Vec::new();
    for i in 0..4 {
        for group in ["A", "B", "C"] {
            records.push(fifo(
                &format!("{group}{i}"),
                &format!("ok+nap:{}", 1 + i % 3),
                group,
            ));
        }
    }
    let processor = processor_with(10);
    let handler = Counting::new();
    let processed = run(&processor, &handler, &event(records.clone())).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(processed.report.done, 12);
    assert_eq!(
        handler.most_in_a_group(),
        1,
        "one record of a group at a time"
    );
    assert_eq!(handler.most(), 3, "the groups overlap");
    let calls = handler.calls();
    for group in ["A", "B", "C"] {
        let order: Vec<&String> = calls.iter().filter(|id| id.starts_with(group)).collect();
        let expected: Vec<String> = (0..4).map(|i| format!("{group}{i}")).collect();
        assert_eq!(order, expected.iter().collect::<Vec<_>>(), "group {group}");
    }

    // A bound of 1 calls every record in the event's order, as before lanes.
    let processor = processor_with(1);
    let handler = Counting::new();
    run(&processor, &handler, &event(records.clone())).await;
    let in_event_order: Vec<String> = records
        .iter()
        .map(|r| r["messageId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(handler.calls(), in_event_order);
    assert_eq!(handler.most(), 1);
}

#[tokio::test]
async fn a_failure_holds_back_only_the_rest_of_its_group() {
    let records = vec![
        fifo("a1", "ok+nap:2", "A"),
        fifo("b1", "ok+nap:1", "B"),
        fifo("a2", "transient", "A"),
        fifo("b2", "ok+nap:3", "B"),
        fifo("a3", "ok", "A"),
        fifo("c1", "permanent", "C"),
        fifo("b3", "ok", "B"),
        fifo("a4", "ok", "A"),
        fifo("c2", "ok", "C"),
    ];
    let processor = processor_with(10);
    let handler = Counting::new();
    let processed = run(&processor, &handler, &event(records)).await;
    assert_eq!(
        failures(&processed),
        ["a2", "a3", "a4", "c2"],
        "A gives back from its failure on; C's permanent failure is dead-lettered, and C's \
         next record waits for the next delivery; B goes on"
    );
    let mut calls = handler.calls();
    calls.sort();
    assert_eq!(
        calls,
        ["a1", "a2", "b1", "b2", "b3", "c1"],
        "nothing after a failure starts"
    );
    assert_eq!(processed.report.done, 4);
    assert_eq!(processed.report.dead_lettered, 1);
    let sent = processor.queue().sent_to(DLQ);
    assert_eq!(&*meta_of(&sent[0]).origin_message_id, "c1");
}

#[tokio::test]
async fn a_panic_fails_only_its_own_record_among_concurrent_ones() {
    let records = vec![
        record("m-1", "ok+nap:5"),
        record("m-2", "panic+nap:1"),
        record("m-3", "ok+nap:3"),
        record("m-4", "transient+nap:2"),
    ];
    let processor = processor_with(4);
    let handler = Counting::new();
    let processed = run(&processor, &handler, &event(records)).await;
    assert!(failures(&processed).is_empty());
    assert_eq!(handler.most(), 4);
    assert_eq!(processed.report.done, 2);
    let dead = processor.queue().sent_to(DLQ);
    assert_eq!(dead.len(), 1);
    let meta = meta_of(&dead[0]);
    assert_eq!(
        (&*meta.origin_message_id, meta.error_class),
        ("m-2", ErrorClass::Panic)
    );
    let retried = processor.queue().sent_to(SOURCE);
    assert_eq!(&*meta_of(&retried[0]).origin_message_id, "m-4");
}

#[tokio::test]
async fn at_the_deadline_every_record_in_flight_is_cut_off_and_the_rest_given_back() {
    let (processor, now) = on_the_real_clock(2);
    let handler = handler();
    let json = event(vec![
        record("m-1", "slow"),
        record("m-2", "slow"),
        record("m-3", "ok"),
    ]);
    let event_ = SqsEvent::parse(&json).unwrap();
    let processed = processor
        .process(&handler, &event_.records, now + 400)
        .await
        .unwrap();
    assert_eq!(failures(&processed), ["m-3"], "not started");
    assert_eq!(handler.calls.load(Ordering::SeqCst), 2);
    let retried = processor.queue().sent_to(SOURCE);
    let cut_off: Vec<(String, String)> = retried
        .iter()
        .map(meta_of)
        .map(|meta| {
            (
                meta.origin_message_id.to_string(),
                meta.error_kind.to_string(),
            )
        })
        .collect();
    assert_eq!(
        cut_off,
        [
            ("m-1".to_owned(), "deadline".to_owned()),
            ("m-2".to_owned(), "deadline".to_owned())
        ]
    );
}

/// Calls the downstream through a breaker; the downstream takes a few ms and succeeds.
struct Guarded {
    breaker: CircuitBreaker,
    downstream_calls: AtomicU32,
}

impl RecordHandler for Guarded {
    async fn handle(&self, _message: &Message<'_>) -> Result<(), RecordError> {
        self.breaker
            .call(|| async {
                self.downstream_calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(())
            })
            .await
    }
}

#[tokio::test]
async fn a_half_open_breaker_lets_exactly_one_probe_through_however_many_arrive_at_once() {
    let clock = Arc::new(ManualClock::at(NOW));
    let mut settings = BreakerSettings::default();
    settings.threshold = 1;
    settings.open_for = Duration::from_secs(10);
    let handler = Guarded {
        breaker: CircuitBreaker::with_clock("payments", settings, clock.clone()),
        downstream_calls: AtomicU32::new(0),
    };
    // Open it.
    let opened = handler
        .breaker
        .call(|| async { Err::<(), _>(RecordError::transient("timeout", "down")) })
        .await;
    assert!(opened.is_err());
    assert!(matches!(handler.breaker.state(), BreakerState::Open { .. }));

    let records: Vec<_> = (0..10).map(|i| record(&format!("m-{i}"), "ok")).collect();
    let processor = processor_with(10).with_clock(clock.clone());
    // While open: no call at all.
    let processed = run(&processor, &handler, &event(records.clone())).await;
    assert_eq!(handler.downstream_calls.load(Ordering::SeqCst), 0);
    assert_eq!(processed.report.deferred, 10);

    // Half-open: ten records at once, one probe.
    clock.advance(10_000);
    let processor = processor_with(10).with_clock(clock.clone());
    let processed = run(&processor, &handler, &event(records)).await;
    assert_eq!(
        handler.downstream_calls.load(Ordering::SeqCst),
        1,
        "one probe"
    );
    assert_eq!((processed.report.done, processed.report.deferred), (1, 9));
    assert!(failures(&processed).is_empty());
    assert_eq!(
        handler.breaker.state(),
        BreakerState::Closed { failures: 0 }
    );
}

#[tokio::test]
async fn one_processor_serves_several_invocations_at_once() {
    // As under Lambda Managed Instances, where lambda_runtime runs invocations concurrently.
    let processor = processor_with(4);
    let handler = Counting::new();
    let first = event(
        (0..6)
            .map(|i| record(&format!("a-{i}"), "ok+nap:2"))
            .collect(),
    );
    let second = event(
        (0..6)
            .map(|i| record(&format!("b-{i}"), "transient+nap:1"))
            .collect(),
    );
    let (first, second) = tokio::join!(
        run(&processor, &handler, &first),
        run(&processor, &handler, &second)
    );
    assert_eq!(first.report.done, 6);
    assert_eq!(second.report.retried, 6);
    assert!(failures(&first).is_empty() && failures(&second).is_empty());
    assert_eq!(handler.most(), 8, "each invocation keeps its own bound");
    assert_eq!(processor.queue().sent_to(SOURCE).len(), 6);
}

//! The DynamoDB idempotency store on moto, through the real SDK: two containers (processors with
//! memories of their own) share one table; a lease lapses; concurrent claims of one key; the
//! requests a record costs.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive::aws::DynamoDbStore;
use redrive::idempotency::{Claim, IdempotencyStore, Idempotent, KeyFrom};
use redrive::testing::{ManualClock, RecordingQueue};
use redrive::{Message, Processor, ProcessorConfig, RecordError, RecordHandler, SqsEvent};

/// A table named after the test, as `infra/` would make it: string partition key `pk`.
async fn table(name: &str) -> (aws_sdk_dynamodb::Client, String) {
    redrive_e2e::require_emulator();
    let client = aws_sdk_dynamodb::Client::new(&redrive::aws::sdk_config_from_env());
    let table = format!("{name}-{}", std::process::id());
    redrive_local::provision::idempotency_table(&client, &table)
        .await
        .unwrap();
    (client, table)
}

/// Counts the effects per order.
#[derive(Default)]
struct Charges(AtomicU32);

impl RecordHandler for Charges {
    async fn handle(&self, _message: &Message<'_>) -> Result<(), RecordError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn delivery(id: &str) -> String {
    serde_json::json!({ "Records": [{
        "messageId": id, "receiptHandle": format!("rh-{id}"), "body": r#"{"orderId":"o-1"}"#,
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1763789990000"},
        "messageAttributes": {}, "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders", "awsRegion": "us-east-1"
    }]})
    .to_string()
}

#[tokio::test]
async fn a_duplicate_delivered_to_another_container_takes_effect_once() {
    let (client, table) = table("idem-two-containers").await;
    let container = || {
        let handler = Idempotent::new(
            Charges::default(),
            DynamoDbStore::with_client(client.clone(), &table),
            KeyFrom::BodyField("/orderId".into()),
        );
        let processor = Processor::new(RecordingQueue::default(), ProcessorConfig::default());
        (handler, processor)
    };
    let (first, second) = (container(), container());
    // SQS delivers the order twice (two messages, as a producer retry makes), to two containers.
    for ((handler, processor), id) in [(&first, "m-1"), (&second, "m-2")] {
        let json = delivery(id);
        let event = SqsEvent::parse(&json).unwrap();
        let processed = processor
            .process(handler, &event.records, u64::MAX / 2)
            .await
            .unwrap();
        assert!(processed.response.batch_item_failures.is_empty());
    }
    let effects =
        first.0.inner().0.load(Ordering::SeqCst) + second.0.inner().0.load(Ordering::SeqCst);
    assert_eq!(effects, 1, "one charge for the order");
    assert_eq!(second.0.duplicates(), 1, "the other container absorbed it");
}

#[tokio::test]
async fn a_claim_cut_off_at_the_deadline_holds_until_its_lease_lapses() {
    let (client, table) = table("idem-lease").await;
    let clock = Arc::new(ManualClock::at(1_763_790_000_000));
    let store = DynamoDbStore::with_client(client, &table).with_clock(clock.clone());
    let lease = Duration::from_secs(60);
    assert_eq!(
        store.claim("o-1", None, lease).await.unwrap(),
        Claim::Claimed
    );
    // The handler was cut off: no complete, no release. Another delivery waits for the lease.
    assert_eq!(
        store.claim("o-1", None, lease).await.unwrap(),
        Claim::InProgress
    );
    clock.advance(61_000);
    assert_eq!(
        store.claim("o-1", None, lease).await.unwrap(),
        Claim::Claimed
    );
    store
        .complete("o-1", None, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(store.claim("o-1", None, lease).await.unwrap(), Claim::Done);
    store.abandon("o-1").await.unwrap();
    assert_eq!(
        store.claim("o-1", None, lease).await.unwrap(),
        Claim::Done,
        "a release gives up only a claim, never a done key"
    );
    clock.advance(3_601_000);
    assert_eq!(
        store.claim("o-1", None, lease).await.unwrap(),
        Claim::Claimed,
        "expired, even before TTL deletes it"
    );
}

#[tokio::test]
async fn of_concurrent_claims_of_one_key_exactly_one_wins() {
    let (client, table) = table("idem-race").await;
    let store = Arc::new(DynamoDbStore::with_client(client, &table));
    let claims = (0..8).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.claim("o-race", None, Duration::from_secs(60)).await })
    });
    let mut won = 0;
    for claim in claims {
        match claim.await.unwrap().unwrap() {
            Claim::Claimed => won += 1,
            Claim::InProgress => {}
            other => panic!("nobody completed it, with any payload: {other:?}"),
        }
    }
    assert_eq!(won, 1);
}

/// Counts the requests a DynamoDB client sends, by operation (the `X-Amz-Target` header).
#[derive(Debug, Default, Clone)]
struct Requests(Arc<Mutex<BTreeMap<String, u32>>>);

impl aws_sdk_dynamodb::config::Intercept for Requests {
    fn name(&self) -> &'static str {
        "Requests"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or("?");
        let operation = target.rsplit('.').next().unwrap_or(target).to_owned();
        *self.0.lock().unwrap().entry(operation).or_default() += 1;
        Ok(())
    }
}

impl Requests {
    fn take(&self) -> BTreeMap<String, u32> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[tokio::test]
async fn a_record_costs_two_requests_and_a_duplicate_one() {
    let (_, table) = table("idem-requests").await;
    let requests = Requests::default();
    let config = aws_sdk_dynamodb::config::Builder::from(&redrive::aws::sdk_config_from_env())
        .interceptor(requests.clone())
        .build();
    let handler = Idempotent::new(
        Charges::default(),
        DynamoDbStore::with_client(aws_sdk_dynamodb::Client::from_conf(config), &table),
        KeyFrom::BodyField("/orderId".into()),
    );
    let processor = Processor::new(RecordingQueue::default(), ProcessorConfig::default());
    let batch = |copy: &str| {
        let records: Vec<serde_json::Value> = (0..10)
            .map(|n| {
                serde_json::json!({
                    "messageId": format!("m-{copy}-{n}"), "receiptHandle": format!("rh-{copy}-{n}"),
                    "body": format!(r#"{{"orderId":"o-{n}"}}"#),
                    "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
                    "eventSource": "aws:sqs",
                    "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders"
                })
            })
            .collect();
        serde_json::json!({ "Records": records }).to_string()
    };
    let (processor, handler) = (&processor, &handler);
    let run = |json: String| async move {
        let event = SqsEvent::parse(&json).unwrap();
        let processed = processor
            .process(handler, &event.records, u64::MAX / 2)
            .await
            .unwrap();
        assert!(processed.response.batch_item_failures.is_empty());
    };
    run(batch("first")).await;
    // The happy path: a conditional PutItem claims each key, a PutItem marks it done.
    assert_eq!(requests.take(), BTreeMap::from([("PutItem".into(), 20)]));
    run(batch("copy")).await;
    // A copy of a done message: the refused claim carries the item (ALL_OLD), nothing else is read.
    assert_eq!(requests.take(), BTreeMap::from([("PutItem".into(), 10)]));
    assert_eq!(handler.inner().0.load(Ordering::SeqCst), 10);
    assert_eq!(handler.duplicates(), 10);
}

#[tokio::test]
async fn a_key_reused_for_another_payload_is_told_apart_from_a_duplicate() {
    let (client, table) = table("idem-reused").await;
    let store = DynamoDbStore::with_client(client, &table);
    let (lease, keep) = (Duration::from_secs(60), Duration::from_secs(3600));
    let (order, other) = (Some(1), Some(2));
    assert_eq!(
        store.claim("o-1", order, lease).await.unwrap(),
        Claim::Claimed
    );
    assert_eq!(
        store.claim("o-1", other, lease).await.unwrap(),
        Claim::Reused,
        "held"
    );
    assert_eq!(
        store.claim("o-1", order, lease).await.unwrap(),
        Claim::InProgress
    );
    store.complete("o-1", order, keep).await.unwrap();
    assert_eq!(
        store.claim("o-1", other, lease).await.unwrap(),
        Claim::Reused,
        "done"
    );
    assert_eq!(store.claim("o-1", order, lease).await.unwrap(), Claim::Done);
    assert_eq!(
        store.claim("o-1", None, lease).await.unwrap(),
        Claim::Done,
        "a guard that does not check payloads sees a duplicate"
    );
}

#[tokio::test]
async fn the_attempt_ledger_shares_the_table_and_counts_a_retried_write_once() {
    use redrive::ledger::AttemptLedger;
    let (client, table) = table("ledger").await;
    let store = DynamoDbStore::with_client(client.clone(), &table);
    store.record_untried("m-1", 2).await.unwrap();
    store.record_untried("m-1", 2).await.unwrap();
    store.record_untried("m-1", 3).await.unwrap();
    store.record_untried("m-2", 1).await.unwrap();
    // The first wait at its group's head stays; a later or retried write keeps it.
    store.record_head_wait("m-1", 1_000).await.unwrap();
    store.record_head_wait("m-1", 2_000).await.unwrap();
    let found: Vec<_> = store
        .entries(&["m-1", "m-3", "m-2"])
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.expect("read"))
        .collect();
    let mut first = found[0].untried.clone();
    first.sort_unstable();
    assert_eq!(first, [2, 3]);
    assert_eq!(
        (found[1].untried.len(), &found[2].untried[..]),
        (0, &[1][..])
    );
    assert_eq!(found[0].attempts_before(5), 2);
    assert_eq!(
        (found[0].head_since_ms, found[2].head_since_ms),
        (Some(1_000), None)
    );
    // Beside the idempotency keys: a claim of the message id is a key of its own.
    assert_eq!(
        store
            .claim("m-1", None, Duration::from_secs(60))
            .await
            .unwrap(),
        Claim::Claimed
    );
    let item = client
        .get_item()
        .table_name(&table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S("attempts#m-1".into()),
        )
        .send()
        .await
        .unwrap()
        .item
        .expect("the ledger item");
    assert!(
        item.contains_key("expires_at"),
        "expires with the table's TTL"
    );
}

#[tokio::test]
async fn a_held_head_is_listed_renewed_and_released_on_dynamodb() {
    use redrive::ledger::{AttemptLedger, Hold, Release};
    let (client, table) = table("ledger-hold").await;
    let store = DynamoDbStore::with_client(client, &table);
    let hold = |receive_count: u32, since_ms: u64, error_kind: &str| Hold {
        since_ms,
        receive_count,
        receipt_handle: format!("rh-{receive_count}"),
        queue_arn: "arn:aws:sqs:us-east-1:123456789012:payments.fifo".into(),
        error_kind: error_kind.into(),
        error_message: if error_kind.is_empty() {
            ""
        } else {
            "no amount"
        }
        .into(),
        release: None,
    };
    store
        .hold("m-1", &hold(5, 100, "invalid_order"), false)
        .await
        .unwrap();
    // Back after its wait in place: held again, untried, the first failure kept.
    assert!(store.hold("m-1", &hold(6, 900, ""), true).await.unwrap());
    let entry = store.entries(&["m-1"]).await.unwrap()[0]
        .clone()
        .expect("read");
    let held = entry.hold.clone().expect("held");
    assert_eq!(
        (
            held.since_ms,
            held.receive_count,
            &*held.receipt_handle,
            &*held.error_kind
        ),
        (100, 6, "rh-6", "invalid_order")
    );
    assert_eq!(entry.untried, [6]);
    let listed = store.held().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].0, "m-1");

    // Released to the DLQ: the mark stays for the consumer; a renewal by a consumer that read the
    // hold before the release is refused (its head comes back at once and goes to the DLQ).
    let released = store
        .release_hold("m-1", Release::DeadLetter)
        .await
        .unwrap();
    assert_eq!(
        released.map(|hold| hold.receipt_handle),
        Some("rh-6".into())
    );
    assert!(!store.hold("m-1", &hold(7, 2000, ""), true).await.unwrap());
    // So is a new hold by a consumer that did not read the release and failed the head again.
    assert!(!store
        .hold("m-1", &hold(7, 2000, "invalid_order"), true)
        .await
        .unwrap());
    let entry = store.entries(&["m-1"]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert_eq!(
        entry.hold.as_ref().unwrap().release,
        Some(Release::DeadLetter)
    );

    // Released to be tried again: the hold ends and the next receive starts a fresh set.
    store
        .hold("m-2", &hold(5, 100, "payment_timeout"), false)
        .await
        .unwrap();
    store.release_hold("m-2", Release::Retry).await.unwrap();
    let entry = store.entries(&["m-2"]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert_eq!(
        (
            entry.hold.is_none(),
            entry.attempts_before(6),
            entry.attempts_before(8)
        ),
        (true, 0, 2)
    );
    // A renewal by a consumer that read the hold before the release is refused: the release stands.
    assert!(!store.hold("m-2", &hold(6, 950, ""), true).await.unwrap());
    let entry = store.entries(&["m-2"]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert!(entry.hold.is_none(), "not held again");
    assert_eq!(
        store.release_hold("m-3", Release::Retry).await.unwrap(),
        None
    );
    assert_eq!(store.held().await.unwrap().len(), 1, "m-1 only");
    // Its head dead-lettered, a hold ends: read from the list of held heads, not a scan.
    store.clear_hold("m-1").await.unwrap();
    assert!(store.held().await.unwrap().is_empty());
    let entry = store.entries(&["m-1"]).await.unwrap()[0]
        .clone()
        .expect("read");
    assert!(entry.hold.is_none());
}

/// Holds back each UpdateItem that writes a hold (`held_since`) for `delay`, the thread with it: a
/// slow DynamoDB for one call, so that another container's read lands in between.
#[derive(Debug, Clone)]
struct SlowHoldWrites(Duration);

impl aws_sdk_dynamodb::config::Intercept for SlowHoldWrites {
    fn name(&self) -> &'static str {
        "SlowHoldWrites"
    }

    fn read_before_transmit(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_sdk_dynamodb::config::RuntimeComponents,
        _: &mut aws_sdk_dynamodb::config::ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let body = context.request().body().bytes().unwrap_or_default();
        if String::from_utf8_lossy(body).contains("held_since") {
            std::thread::sleep(self.0);
        }
        Ok(())
    }
}

/// A held head stays listed when another container reads the held heads while its hold is being
/// written (the held-heads gauge after a batch, `dlq held`): before, the head was listed first,
/// the reader found it listed without a hold and dropped it, and the group stayed held where no
/// operator saw it (the Kafka soak's seed 5: a head in flight in the lane, never released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_held_while_another_container_reads_the_held_heads_stays_listed() {
    use redrive::ledger::{AttemptLedger, Hold};
    let (client, table) = table("ledger-hold-race").await;
    let config = aws_sdk_dynamodb::config::Builder::from(&redrive::aws::sdk_config_from_env())
        .interceptor(SlowHoldWrites(Duration::from_millis(800)))
        .build();
    let holding = Arc::new(DynamoDbStore::with_client(
        aws_sdk_dynamodb::Client::from_conf(config),
        &table,
    ));
    let reading = DynamoDbStore::with_client(client, &table);
    let hold = Hold {
        since_ms: 100,
        receive_count: 5,
        receipt_handle: "rh-5".into(),
        queue_arn: "arn:aws:sqs:us-east-1:123456789012:orders-held.fifo".into(),
        error_kind: "downstream_down".into(),
        error_message: "the downstream is down".into(),
        release: None,
    };
    let writer = {
        let holding = holding.clone();
        tokio::spawn(async move { holding.hold("m-race", &hold, false).await })
    };
    // Mid-write: the other container reads the held heads.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let read_meanwhile = reading.held().await.unwrap();
    writer.await.unwrap().unwrap();
    let listed: Vec<String> = reading
        .held()
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(
        listed,
        ["m-race"],
        "the held head is listed once its hold is written (read in the middle: {read_meanwhile:?})"
    );
}

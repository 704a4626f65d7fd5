//! A shared idempotency store on DynamoDB (feature `dynamodb`): the copies of one message usually
//! reach different containers, and a store in one container's memory absorbs only the duplicates
//! that happen to come back to it.
//!
//! One item per key: `pk` (the key), `status` (`IN_PROGRESS` or `DONE`), `lease_until` (ms since
//! the epoch: when a claim that was never completed lapses), `expires_at` (s since the epoch,
//! the table's TTL attribute) and, when the guard checks payloads, `payload` (the body's
//! fingerprint). A claim is one conditional put; DynamoDB deletes expired items
//! within days, so the condition reads `expires_at` itself and never trusts an expired item.
//!
//! The same table holds the FIFO attempt ledger ([`redrive_core::fifo`]): one item per message
//! given back untried or held, `pk` = `attempts#<message id>`, `untried` (a number set of receive
//! counts; adding to a set is idempotent, so a retried write counts once), `attempts_from` (after
//! an operator's release), `head_since` (when it began to wait in place at its group's head), the
//! hold (`held_since`, `held_receive`, `held_receipt`, `held_queue`, `held_error_kind`,
//! `held_error`, `held_release`), `parked` (its copy is in the retry lane: `LedgerEntry::in_lane`, stored under the name of 0.1) and `expires_at`; the item `holds#index` lists the held heads'
//! message ids (`held`), so that `dlq held` reads them without a scan. A key with records in the
//! retry lane (`attempts#kafka#<topic>-<partition>#<key>`, `attempts#fifo#<queue arn>#<group>`)
//! holds `key_left`, `key_place` and `key_home` ([`redrive_core::ledger::KeyPositions`]), positions
//! as 39-digit strings that sort as the numbers do (an SQS sequence number has 128 bits, past a
//! DynamoDB number's 38 digits), each written only upwards (a condition on the position).
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, ReturnValuesOnConditionCheckFailure,
};
use aws_sdk_dynamodb::Client;
use futures_util::future::BoxFuture;
use tokio::sync::OnceCell;

use redrive_core::clock::{Clock, SystemClock};
use redrive_core::error::PortError;
use redrive_core::idempotency::{reused, Claim, IdempotencyStore};
use redrive_core::ledger::{
    ledger_key, AttemptLedger, Hold, KeyPlace, KeyPositions, LedgerEntry, Position, Release,
    LEDGER_KEEP,
};

const HELD: &str = "IN_PROGRESS";
const DONE: &str = "DONE";

/// Idempotency keys in a DynamoDB table whose partition key is the string `pk` (TTL on
/// `expires_at`; `infra/modules/idempotency-table` makes one).
pub struct DynamoDbStore {
    client: OnceCell<Client>,
    table: String,
    clock: Arc<dyn Clock>,
}

impl DynamoDbStore {
    /// A store on `table` whose client is built from the environment on its first call (as
    /// [`crate::sqs::SqsQueue::lazy`]).
    pub fn lazy(table: impl Into<String>) -> Self {
        Self {
            client: OnceCell::new(),
            table: table.into(),
            clock: Arc::new(SystemClock),
        }
    }

    /// A store on `table` through `client`.
    pub fn with_client(client: Client, table: impl Into<String>) -> Self {
        Self {
            client: OnceCell::new_with(Some(client)),
            ..Self::lazy(table)
        }
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Reads the time from `clock` (tests move it by hand to lapse a lease).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async { Client::new(&crate::sqs::sdk_config_from_env()) })
            .await
    }

    fn expiry(&self, after: Duration) -> AttributeValue {
        let at_ms = self.clock.now_ms().saturating_add(duration_ms(after));
        number(at_ms.div_ceil(1000))
    }
}

impl IdempotencyStore for DynamoDbStore {
    async fn claim(
        &self,
        key: &str,
        payload: Option<u64>,
        lease: Duration,
    ) -> Result<Claim, PortError> {
        const OPERATION: &str = "PutItem";
        let now = self.clock.now_ms();
        let claimed = self
            .client()
            .await
            .put_item()
            .table_name(&self.table)
            .set_item(Some(payload_item(payload)))
            .item("pk", AttributeValue::S(key.to_owned()))
            .item("status", AttributeValue::S(HELD.to_owned()))
            .item(
                "lease_until",
                number(now.saturating_add(duration_ms(lease))),
            )
            .item("expires_at", self.expiry(lease))
            // Free, a claim that lapsed, or an item past its expiry (TTL deletes lazily).
            .condition_expression(
                "attribute_not_exists(pk) OR (#status = :held AND lease_until < :now) \
                 OR expires_at < :now_s",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":held", AttributeValue::S(HELD.to_owned()))
            .expression_attribute_values(":now", number(now))
            .expression_attribute_values(":now_s", number(now / 1000))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let refused = match claimed {
            Ok(_) => return Ok(Claim::Claimed),
            Err(error) => match error.as_service_error() {
                Some(service) if service.is_conditional_check_failed_exception() => {
                    error.into_service_error()
                }
                _ => return Err(PortError::new(OPERATION, error_text(&error))),
            },
        };
        match refused {
            aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(
                failed,
            ) if failed.item.is_some() => Ok(holder(failed.item.as_ref(), payload)),
            // Without the old item (an older endpoint), read it.
            _ => self.read(key, payload).await,
        }
    }

    async fn complete(
        &self,
        key: &str,
        payload: Option<u64>,
        keep: Duration,
    ) -> Result<(), PortError> {
        self.client()
            .await
            .put_item()
            .table_name(&self.table)
            .set_item(Some(payload_item(payload)))
            .item("pk", AttributeValue::S(key.to_owned()))
            .item("status", AttributeValue::S(DONE.to_owned()))
            .item("expires_at", self.expiry(keep))
            .send()
            .await
            .map(|_| ())
            .map_err(|error| PortError::new("PutItem", error_text(&error)))
    }

    async fn abandon(&self, key: &str) -> Result<(), PortError> {
        // Only a claim is given up: a key another delivery completed meanwhile stays done.
        let abandoned = self
            .client()
            .await
            .delete_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(key.to_owned()))
            .condition_expression("#status = :held")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":held", AttributeValue::S(HELD.to_owned()))
            .send()
            .await;
        match abandoned {
            Ok(_) => Ok(()),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(error) => Err(PortError::new("DeleteItem", error_text(&error))),
        }
    }
}

impl DynamoDbStore {
    /// The key's state, read consistently after a refused claim.
    async fn read(&self, key: &str, payload: Option<u64>) -> Result<Claim, PortError> {
        Ok(holder(self.item(key).await?.as_ref(), payload))
    }

    /// The item of `key`, read consistently.
    async fn item(&self, key: &str) -> Result<Option<HashMap<String, AttributeValue>>, PortError> {
        let output = self
            .client()
            .await
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(key.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| PortError::new("GetItem", error_text(&error)))?;
        Ok(output.item)
    }
}

/// The item that lists the held heads' message ids (`held`, a string set), beside the ledger's.
const HELD_INDEX: &str = "holds#index";

/// The first wait before asking again for the ledger keys a BatchGetItem left unprocessed.
const UNPROCESSED_FIRST_WAIT: Duration = Duration::from_millis(50);
/// The items one BatchGetItem reads at most (DynamoDB API reference, BatchGetItem).
const BATCH_GET_LIMIT: usize = 100;

impl AttemptLedger for DynamoDbStore {
    fn entries<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Option<LedgerEntry>>, PortError>> {
        Box::pin(async move {
            let keys: Vec<String> = message_ids.iter().map(|id| ledger_key(id)).collect();
            let mut found: HashMap<String, LedgerEntry> = HashMap::new();
            let mut unread: Vec<String> = Vec::new();
            // BatchGetItem reads at most 100 items a call, and answers part of a request when the
            // table throttles, the rest in `UnprocessedKeys`, to be asked again with exponential
            // backoff (DynamoDB API reference, BatchGetItem). What three calls leave unread is
            // reported as not answered; what they read is kept.
            for chunk in keys.chunks(BATCH_GET_LIMIT) {
                let mut pending = chunk.to_vec();
                let mut wait = UNPROCESSED_FIRST_WAIT;
                for call in 0..3 {
                    if pending.is_empty() {
                        break;
                    }
                    if call > 0 {
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    }
                    match self.read_ledger(&pending).await {
                        Ok((items, unprocessed)) => {
                            found.extend(items);
                            pending = unprocessed;
                        }
                        Err(error) if call == 0 => return Err(error),
                        Err(_) => break,
                    }
                }
                unread.extend(pending);
            }
            Ok(keys
                .iter()
                .map(|key| (!unread.contains(key)).then(|| found.remove(key).unwrap_or_default()))
                .collect())
        })
    }

    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            let request = self
                .ledger_update(message_id)
                .await
                .update_expression("ADD untried :receive SET expires_at = :expires")
                .expression_attribute_values(":receive", receives(receive_count));
            sent(request.send().await)
        })
    }

    fn record_head_wait<'a>(
        &'a self,
        message_id: &'a str,
        since_ms: u64,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            let request = self
                .ledger_update(message_id)
                .await
                .update_expression(
                    "SET head_since = if_not_exists(head_since, :since), expires_at = :expires",
                )
                .expression_attribute_values(":since", AttributeValue::N(since_ms.to_string()));
            sent(request.send().await)
        })
    }

    fn hold<'a>(
        &'a self,
        message_id: &'a str,
        hold: &'a Hold,
        untried: bool,
    ) -> BoxFuture<'a, Result<bool, PortError>> {
        Box::pin(async move {
            let mut set = vec![
                "held_since = if_not_exists(held_since, :since)",
                "held_receive = :receive_count",
                "held_receipt = :receipt",
                "held_queue = :queue",
                "expires_at = :expires",
            ];
            let mut request = self
                .ledger_update(message_id)
                .await
                .expression_attribute_values(":since", number(hold.since_ms))
                .expression_attribute_values(":receive_count", number(hold.receive_count.into()))
                .expression_attribute_values(":receipt", text(&hold.receipt_handle))
                .expression_attribute_values(":queue", text(&hold.queue_arn));
            if !hold.error_kind.is_empty() {
                set.extend(["held_error_kind = :kind", "held_error = :error"]);
                request = request
                    .expression_attribute_values(":kind", text(&hold.error_kind))
                    .expression_attribute_values(":error", text(&hold.error_message));
            }
            let mut expression = format!("SET {}", set.join(", "));
            if untried {
                expression.push_str(" ADD untried :untried");
                request =
                    request.expression_attribute_values(":untried", receives(hold.receive_count));
            }
            // No hold, new or renewed, stands on an operator's release to the DLQ (it would set
            // a long wait on a head bound there); a renewal (the head came back held) must not
            // bring back a hold released to a retry meanwhile either.
            let renewal = hold.error_kind.is_empty();
            request = request.condition_expression(if renewal {
                "attribute_exists(held_since) AND attribute_not_exists(held_release)"
            } else {
                "attribute_not_exists(held_release)"
            });
            // Listed after the hold is written, never before: `held` drops a listed message whose
            // entry has no hold, and it would drop one listed first while its hold is on the way,
            // leaving a held group no operator sees. A listing lost after the write (a failed
            // call) is made again by the next renewal, each time the head comes back held.
            match request.update_expression(expression).send().await {
                Ok(_) => {
                    self.list_held(message_id, true).await?;
                    Ok(true)
                }
                Err(error)
                    if error
                        .as_service_error()
                        .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
                {
                    Ok(false)
                }
                Err(error) => Err(PortError::new("UpdateItem", error_text(&error))),
            }
        })
    }

    fn release_hold<'a>(
        &'a self,
        message_id: &'a str,
        release: Release,
    ) -> BoxFuture<'a, Result<Option<Hold>, PortError>> {
        Box::pin(async move {
            let key = ledger_key(message_id);
            // The hold as it stands, then a change conditional on it: a head that came back and
            // was held again in between is released on the next try.
            for _ in 0..3 {
                let Some(hold) = self.read_hold(&key).await? else {
                    return Ok(None);
                };
                let request = self
                    .ledger_update(message_id)
                    .await
                    .condition_expression("held_receive = :receive_count")
                    .expression_attribute_values(
                        ":receive_count",
                        number(hold.receive_count.into()),
                    );
                let request = match release {
                    Release::Retry => request
                        .update_expression(
                            "SET attempts_from = :from, expires_at = :expires REMOVE held_since, held_receive, held_receipt, held_queue, held_error_kind, held_error, held_release",
                        )
                        .expression_attribute_values(
                            ":from",
                            number(u64::from(hold.receive_count) + 1),
                        ),
                    Release::DeadLetter => request
                        .update_expression("SET held_release = :release, expires_at = :expires")
                        .expression_attribute_values(":release", text(release.as_str())),
                };
                match request.send().await {
                    Ok(_) => {
                        if release == Release::Retry {
                            self.list_held(message_id, false).await?;
                        }
                        return Ok(Some(hold));
                    }
                    Err(error)
                        if error
                            .as_service_error()
                            .is_some_and(|e| e.is_conditional_check_failed_exception()) => {}
                    Err(error) => return Err(PortError::new("UpdateItem", error_text(&error))),
                }
            }
            Err(PortError::new(
                "UpdateItem",
                "the head was held again three times while being released: try again",
            ))
        })
    }

    fn held(&self) -> BoxFuture<'_, Result<Vec<(String, Hold)>, PortError>> {
        Box::pin(async move {
            // The held heads' ids are listed in one item: no scan of the shared table.
            let ids: Vec<String> = self
                .item(HELD_INDEX)
                .await?
                .and_then(|item| item.get("held")?.as_ss().ok().cloned())
                .unwrap_or_default();
            let mut held = Vec::new();
            for chunk in ids.chunks(BATCH_GET_LIMIT) {
                let keys: Vec<String> = chunk.iter().map(|id| ledger_key(id)).collect();
                let (mut items, unread) = self.read_ledger(&keys).await?;
                if !unread.is_empty() {
                    return Err(PortError::new(
                        "BatchGetItem",
                        format!(
                            "{} held heads left unread (throttled): try again",
                            unread.len()
                        ),
                    ));
                }
                for id in chunk {
                    match items.remove(&ledger_key(id)).and_then(|entry| entry.hold) {
                        Some(hold) => held.push((id.clone(), hold)),
                        // Released or finished: no longer listed.
                        None => self.list_held(id, false).await?,
                    }
                }
            }
            held.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(held)
        })
    }

    fn clear_hold<'a>(&'a self, message_id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            let request = self.ledger_update(message_id).await.update_expression(
                "SET expires_at = :expires REMOVE held_since, held_receive, held_receipt, held_queue, held_error_kind, held_error, held_release",
            );
            sent(request.send().await)?;
            self.list_held(message_id, false).await
        })
    }

    fn record_in_lane<'a>(&'a self, message_id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            let request = self
                .ledger_update(message_id)
                .await
                .update_expression("SET parked = :parked, expires_at = :expires")
                .expression_attribute_values(":parked", AttributeValue::Bool(true));
            sent(request.send().await)
        })
    }

    fn record_key_left<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
        place: KeyPlace,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            let request = self
                .ledger_update(key_id)
                .await
                .update_expression(
                    "SET key_left = :position, key_place = :place, expires_at = :expires",
                )
                .condition_expression("attribute_not_exists(key_left) OR key_left < :position")
                .expression_attribute_values(":position", text(&position.to_sortable()))
                .expression_attribute_values(":place", text(place.as_str()));
            later_kept(request.send().await)
        })
    }

    fn record_key_done<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            let request = self
                .ledger_update(key_id)
                .await
                .update_expression("SET key_home = :position, expires_at = :expires")
                .condition_expression("attribute_not_exists(key_home) OR key_home < :position")
                .expression_attribute_values(":position", text(&position.to_sortable()));
            later_kept(request.send().await)
        })
    }
}

impl DynamoDbStore {
    /// An UpdateItem of the ledger item of `message_id`, whose expiry (`:expires`) it renews.
    /// Adds `message_id` to the list of held heads (`listed`), or takes it off: one item, a string
    /// set (adding and deleting set elements is idempotent).
    async fn list_held(&self, message_id: &str, listed: bool) -> Result<(), PortError> {
        let action = if listed { "ADD" } else { "DELETE" };
        let request = self
            .client()
            .await
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(HELD_INDEX.to_owned()))
            .update_expression(format!("{action} held :id SET expires_at = :expires"))
            .expression_attribute_values(":id", AttributeValue::Ss(vec![message_id.to_owned()]))
            .expression_attribute_values(":expires", self.expiry(LEDGER_KEEP));
        sent(request.send().await)
    }

    async fn ledger_update(
        &self,
        message_id: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.client()
            .await
            .update_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(ledger_key(message_id)))
            .expression_attribute_values(":expires", self.expiry(LEDGER_KEEP))
    }

    /// One consistent BatchGetItem of ledger `keys`: the entries found, and the keys DynamoDB
    /// left unprocessed.
    async fn read_ledger(
        &self,
        keys: &[String],
    ) -> Result<(HashMap<String, LedgerEntry>, Vec<String>), PortError> {
        let request = KeysAndAttributes::builder()
            .set_keys(Some(
                keys.iter()
                    .map(|key| HashMap::from([("pk".to_owned(), AttributeValue::S(key.clone()))]))
                    .collect(),
            ))
            .consistent_read(true)
            .build()
            .map_err(|error| PortError::new("BatchGetItem", error.to_string()))?;
        let output = self
            .client()
            .await
            .batch_get_item()
            .request_items(&self.table, request)
            .send()
            .await
            .map_err(|error| PortError::new("BatchGetItem", error_text(&error)))?;
        let items = output
            .responses
            .and_then(|mut tables| tables.remove(&self.table))
            .unwrap_or_default()
            .into_iter()
            .filter_map(|item| {
                let key = item.get("pk")?.as_s().ok()?.clone();
                Some((key, entry_of(&item)))
            })
            .collect();
        let unprocessed = output
            .unprocessed_keys
            .and_then(|mut tables| tables.remove(&self.table))
            .map(|left| {
                left.keys
                    .iter()
                    .filter_map(|key| key.get("pk")?.as_s().ok().cloned())
                    .collect()
            })
            .unwrap_or_default();
        Ok((items, unprocessed))
    }

    /// The hold of ledger `key`, read consistently.
    async fn read_hold(&self, key: &str) -> Result<Option<Hold>, PortError> {
        Ok(self.item(key).await?.as_ref().and_then(hold_of))
    }
}

/// A ledger item as an [`LedgerEntry`].
fn entry_of(item: &HashMap<String, AttributeValue>) -> LedgerEntry {
    LedgerEntry {
        untried: item
            .get("untried")
            .and_then(|set| set.as_ns().ok())
            .map(|set| set.iter().filter_map(|n| n.parse().ok()).collect())
            .unwrap_or_default(),
        attempts_from: numeric(item, "attempts_from").unwrap_or(0) as u32,
        hold: hold_of(item),
        head_since_ms: numeric(item, "head_since"),
        in_lane: item
            .get("parked")
            .and_then(|value| value.as_bool().ok())
            .copied()
            .unwrap_or(false),
        key: key_offsets_of(item),
    }
}

/// A key's positions in the lane, if the item records any.
fn key_offsets_of(item: &HashMap<String, AttributeValue>) -> Option<KeyPositions> {
    let position = |name: &str| Position::parse(item.get(name)?.as_s().ok()?);
    Some(KeyPositions {
        left: position("key_left")?,
        place: KeyPlace::parse(item.get("key_place")?.as_s().ok()?)?,
        done: position("key_home"),
    })
}

/// The hold a ledger item records, if any.
fn hold_of(item: &HashMap<String, AttributeValue>) -> Option<Hold> {
    let string = |name: &str| {
        item.get(name)
            .and_then(|value| value.as_s().ok())
            .cloned()
            .unwrap_or_default()
    };
    Some(Hold {
        since_ms: numeric(item, "held_since")?,
        receive_count: numeric(item, "held_receive").unwrap_or(0) as u32,
        receipt_handle: string("held_receipt"),
        queue_arn: string("held_queue"),
        error_kind: string("held_error_kind"),
        error_message: string("held_error"),
        release: Release::parse(&string("held_release")),
    })
}

fn numeric(item: &HashMap<String, AttributeValue>, name: &str) -> Option<u64> {
    item.get(name)?.as_n().ok()?.parse().ok()
}

/// A key offset's UpdateItem answer as the ledger's: its condition failing means a later offset
/// is written already, which it keeps.
fn later_kept<T>(
    answer: Result<T, SdkError<UpdateItemError, HttpResponse>>,
) -> Result<(), PortError> {
    match answer {
        Err(error)
            if error
                .as_service_error()
                .is_some_and(UpdateItemError::is_conditional_check_failed_exception) =>
        {
            Ok(())
        }
        answer => sent(answer),
    }
}

/// An UpdateItem's answer as the ledger's.
fn sent<T, E: std::error::Error>(answer: Result<T, E>) -> Result<(), PortError> {
    answer
        .map(|_| ())
        .map_err(|error| PortError::new("UpdateItem", error_text(&error)))
}

fn receives(receive_count: u32) -> AttributeValue {
    AttributeValue::Ns(vec![receive_count.to_string()])
}

fn text(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

/// What the item that refused a claim says: reused for another payload, done, or in progress.
fn holder(item: Option<&HashMap<String, AttributeValue>>, payload: Option<u64>) -> Claim {
    let stored = item.and_then(|item| item.get("payload")?.as_n().ok()?.parse().ok());
    match item.and_then(status) {
        _ if reused(payload, stored) => Claim::Reused,
        Some(DONE) => Claim::Done,
        _ => Claim::InProgress,
    }
}

/// The `payload` attribute of an item, when the guard checks payloads.
fn payload_item(payload: Option<u64>) -> HashMap<String, AttributeValue> {
    payload
        .map(|fingerprint| ("payload".to_owned(), number(fingerprint)))
        .into_iter()
        .collect()
}

fn status(item: &HashMap<String, AttributeValue>) -> Option<&str> {
    item.get("status")?.as_s().ok().map(String::as_str)
}

fn number(n: u64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn error_text(error: &impl std::error::Error) -> String {
    aws_smithy_types::error::display::DisplayErrorContext(error).to_string()
}

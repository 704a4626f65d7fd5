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
//! The same table holds the FIFO attempt ledger ([`redrive_core::ledger`]): one item per message
//! given back untried, `pk` = `attempts#<message id>`, `untried` (a number set of receive counts;
//! adding to a set is idempotent, so a retried write counts once) and `expires_at`.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, ReturnValuesOnConditionCheckFailure,
};
use aws_sdk_dynamodb::Client;
use tokio::sync::OnceCell;

use redrive_core::clock::{Clock, SystemClock};
use redrive_core::error::PortError;
use redrive_core::idempotency::{reused, Claim, IdempotencyStore};
use redrive_core::ledger::{ledger_key, AttemptLedger, BoxFuture, LEDGER_KEEP};

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

    async fn release(&self, key: &str) -> Result<(), PortError> {
        // Only a claim is given up: a key another delivery completed meanwhile stays done.
        let released = self
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
        match released {
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
        Ok(holder(output.item.as_ref(), payload))
    }
}

impl AttemptLedger for DynamoDbStore {
    fn untried<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Vec<u32>>, PortError>> {
        Box::pin(async move {
            let keys: Vec<String> = message_ids.iter().map(|id| ledger_key(id)).collect();
            let mut found: HashMap<String, Vec<u32>> = HashMap::new();
            let mut pending = keys.clone();
            // BatchGetItem may answer part of a request (throttling): ask again for the rest.
            for _ in 0..3 {
                if pending.is_empty() {
                    break;
                }
                let (items, unprocessed) = self.read_ledger(&pending).await?;
                found.extend(items);
                pending = unprocessed;
            }
            if !pending.is_empty() {
                return Err(PortError::new(
                    "BatchGetItem",
                    format!(
                        "{} ledger keys left unprocessed after 3 calls",
                        pending.len()
                    ),
                ));
            }
            Ok(keys
                .iter()
                .map(|key| found.remove(key).unwrap_or_default())
                .collect())
        })
    }

    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            self.client()
                .await
                .update_item()
                .table_name(&self.table)
                .key("pk", AttributeValue::S(ledger_key(message_id)))
                .update_expression("ADD untried :receive SET expires_at = :expires")
                .expression_attribute_values(
                    ":receive",
                    AttributeValue::Ns(vec![receive_count.to_string()]),
                )
                .expression_attribute_values(":expires", self.expiry(LEDGER_KEEP))
                .send()
                .await
                .map_err(|error| PortError::new("UpdateItem", error_text(&error)))?;
            Ok(())
        })
    }
}

impl DynamoDbStore {
    /// One consistent BatchGetItem of ledger `keys`: the untried receive counts found, and the
    /// keys DynamoDB left unprocessed.
    async fn read_ledger(
        &self,
        keys: &[String],
    ) -> Result<(HashMap<String, Vec<u32>>, Vec<String>), PortError> {
        let request = KeysAndAttributes::builder()
            .set_keys(Some(
                keys.iter()
                    .map(|key| HashMap::from([("pk".to_owned(), AttributeValue::S(key.clone()))]))
                    .collect(),
            ))
            .consistent_read(true)
            .projection_expression("pk, untried")
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
                let untried = item
                    .get("untried")
                    .and_then(|set| set.as_ns().ok())
                    .map(|set| set.iter().filter_map(|n| n.parse().ok()).collect())
                    .unwrap_or_default();
                Some((key, untried))
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

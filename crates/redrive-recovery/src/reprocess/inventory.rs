//! Reading a DLQ without consuming it: browsing, the inventory `dlq stats` prints, and the lines
//! `dlq export` writes.
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use serde::Serialize;

use super::{meta_text, HOLD};
use redrive_core::envelope::Meta;
use redrive_core::error::PortError;
use redrive_core::port::{QueuePort, VisibilityChange};
use redrive_event::SqsRecord;

/// Reads up to `max` messages without consuming them: each is hidden while the queue is read, and
/// all are made visible again before this returns (also when a call failed).
pub async fn browse<Q: QueuePort>(
    queue: &Q,
    queue_url: &str,
    max: u32,
) -> Result<Vec<SqsRecord<'static>>, PortError> {
    let mut records: Vec<SqsRecord<'static>> = Vec::new();
    let mut seen = HashSet::new();
    let outcome = loop {
        if records.len() >= max as usize {
            break Ok(());
        }
        let want = (max - records.len() as u32).min(10);
        match queue
            .receive(queue_url, want, HOLD, Duration::from_secs(1))
            .await
        {
            Ok(batch) if batch.is_empty() => break Ok(()),
            Ok(batch) => records.extend(batch.into_iter().filter(|record| {
                seen.insert(record.message_id.as_deref().unwrap_or_default().to_owned())
            })),
            Err(error) => break Err(error),
        }
    };
    let handles: Vec<&str> = records
        .iter()
        .filter_map(|record| record.receipt_handle.as_deref())
        .collect();
    make_visible(queue, queue_url, &handles).await;
    outcome.map(|()| records)
}

/// Makes messages this process holds visible again. A failure loses nothing: they reappear when
/// their hold runs out.
pub(super) async fn make_visible<Q: QueuePort>(
    queue: &Q,
    queue_url: &str,
    handles: &[impl AsRef<str>],
) {
    for chunk in handles.chunks(10) {
        let changes: Vec<VisibilityChange<'_>> = chunk
            .iter()
            .map(|handle| VisibilityChange {
                receipt_handle: handle.as_ref(),
                timeout: Duration::ZERO,
            })
            .collect();
        if let Err(error) = queue.change_visibility_batch(queue_url, &changes).await {
            tracing::warn!(
                %error,
                queue_url,
                hold_seconds = HOLD.as_secs(),
                "could not make messages visible early",
            );
        }
    }
}

/// What a DLQ holds: counts by error class, kind and origin, and the age of the last failures.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    /// Messages read.
    pub messages: u32,
    /// Messages per error class.
    pub by_class: BTreeMap<String, u32>,
    /// Messages per error kind.
    pub by_kind: BTreeMap<String, u32>,
    /// Messages per origin queue.
    pub by_origin: BTreeMap<String, u32>,
    /// Messages per number of earlier redrives.
    pub by_reprocess_count: BTreeMap<u32, u32>,
    /// Age of the last failure: `<1h`, `1h-1d`, `1d-7d`, `>7d`.
    pub age: BTreeMap<&'static str, u32>,
}

impl Inventory {
    /// The figures of `records`, their ages taken at `now_ms`.
    pub fn of(records: &[SqsRecord<'_>], now_ms: u64) -> Self {
        const HOUR: u64 = 3_600_000;
        let mut inventory = Self::default();
        for record in records {
            let meta = Meta::of(record).and_then(Result::ok);
            let failed_at = meta
                .as_ref()
                .map(|m| m.last_failure_at.0)
                .or_else(|| record.sent_ms());
            let count = |map: &mut BTreeMap<String, u32>, key: &str| {
                *map.entry(key.to_owned()).or_default() += 1;
            };
            inventory.messages += 1;
            count(
                &mut inventory.by_class,
                meta.as_ref().map_or("none", |m| m.error_class.as_str()),
            );
            count(
                &mut inventory.by_kind,
                meta.as_ref().map_or("(no metadata)", |m| &m.error_kind),
            );
            let origin = meta
                .as_ref()
                .map_or("(no metadata)", |m| &m.origin_queue_arn);
            count(
                &mut inventory.by_origin,
                origin.rsplit(':').next().unwrap_or(origin),
            );
            *inventory
                .by_reprocess_count
                .entry(meta.as_ref().map_or(0, |m| m.reprocess_count))
                .or_default() += 1;
            let age = now_ms.saturating_sub(failed_at.unwrap_or(now_ms));
            let bucket = match age {
                a if a < HOUR => "<1h",
                a if a < 24 * HOUR => "1h-1d",
                a if a < 7 * 24 * HOUR => "1d-7d",
                _ => ">7d",
            };
            *inventory.age.entry(bucket).or_default() += 1;
        }
        inventory
    }
}

/// Messages per tenant (`redrive::tenant_of`; `(none)` for a message without one), the
/// most first.
pub fn tenant_counts(records: &[SqsRecord<'_>]) -> Vec<(String, u32)> {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for record in records {
        let meta = Meta::of(record).and_then(Result::ok);
        let tenant = redrive_core::handler::tenant_of(record, meta.as_ref());
        *counts
            .entry(tenant.map_or_else(|| "(none)".to_owned(), std::borrow::Cow::into_owned))
            .or_default() += 1;
    }
    let mut counts: Vec<(String, u32)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    counts
}

/// One message as `export` writes it (a JSON line): the original attributes, unpacked, and the
/// metadata parsed.
pub fn export_line(record: &SqsRecord<'_>) -> String {
    let meta = Meta::of(record);
    let attributes: BTreeMap<&str, &redrive_event::MessageAttribute<'_>> = meta
        .as_ref()
        .and_then(|m| m.as_ref().ok())
        .and_then(|m| m.attributes.as_ref())
        .unwrap_or(&record.message_attributes)
        .iter()
        .filter(|(name, _)| &***name != redrive_core::envelope::META_ATTRIBUTE)
        .map(|(name, value)| (&**name, value))
        .collect();
    let meta = match &meta {
        Some(Ok(meta)) => serde_json::to_value(meta).unwrap_or_default(),
        Some(Err(error)) => {
            serde_json::json!({ "unreadable": error.to_string(), "raw": meta_text(record) })
        }
        None => serde_json::Value::Null,
    };
    serde_json::json!({
        "messageId": record.message_id,
        "sentTimestamp": record.attributes.sent_timestamp,
        "receiveCount": record.attributes.approximate_receive_count,
        "groupId": record.attributes.message_group_id,
        "body": record.body,
        "attributes": attributes,
        "redrive": meta,
    })
    .to_string()
}

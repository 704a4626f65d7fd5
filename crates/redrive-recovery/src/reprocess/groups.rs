//! Failure groups: a DLQ's messages grouped by what failed and how (`dlq groups`), so that an
//! operator acts on a cause rather than on a message at a time, as ServicePulse groups failed
//! messages by their exception.
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use redrive_core::envelope::Meta;
use redrive_core::idempotency::fingerprint;
use redrive_event::SqsRecord;

/// What messages of one failure group share: where, in which function version and how they
/// failed, the error message with
/// its numbers and ids masked (`<n>`, `<id>`), so that "order 1234 not found" and "order 98 not
/// found" are one group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Fingerprint {
    /// The queue the messages failed in (its name), or `(no metadata)` for messages SQS moved
    /// there without redrive's failure envelope.
    pub origin: String,
    /// The function that failed them, when the envelope says.
    pub function: Option<String>,
    /// The function's version they failed on, when the envelope says: a group failed on the
    /// versions before a fix is told from one that still fails after it.
    pub function_version: Option<String>,
    /// `transient`, `permanent` or `none` (no metadata).
    pub error_class: String,
    /// The handler's error kind.
    pub error_kind: String,
    /// The error message, numbers and ids masked.
    pub pattern: String,
}

impl Fingerprint {
    /// The fingerprint of `record`, from its failure envelope.
    pub fn of(record: &SqsRecord<'_>) -> Self {
        match Meta::of(record).and_then(Result::ok) {
            Some(meta) => {
                let origin: &str = &meta.origin_queue_arn;
                Self {
                    origin: origin.rsplit(':').next().unwrap_or(origin).to_owned(),
                    function: meta.failed_in.as_ref().map(|at| at.function.clone()),
                    function_version: meta.failed_in.as_ref().and_then(|at| at.version.clone()),
                    error_class: meta.error_class.as_str().to_owned(),
                    error_kind: meta.error_kind.to_string(),
                    pattern: mask(&meta.error_message),
                }
            }
            None => Self {
                origin: "(no metadata)".to_owned(),
                function: None,
                function_version: None,
                error_class: "none".to_owned(),
                error_kind: "(no metadata)".to_owned(),
                pattern: String::new(),
            },
        }
    }

    /// A short name of this fingerprint that every read of any DLQ computes alike (16 hex
    /// digits), for an operator to name a group by (`dlq job new --group`).
    pub fn key(&self) -> String {
        let text = serde_json::to_string(self).expect("a fingerprint is plain data");
        format!("{:016x}", fingerprint(&text))
    }
}

/// One failure group: its fingerprint, how many messages it has and when they failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct FailureGroup {
    /// Its fingerprint's key ([`Fingerprint::key`]).
    pub key: String,
    /// What its messages share.
    #[serde(flatten)]
    pub fingerprint: Fingerprint,
    /// Its messages read.
    pub count: u32,
    /// The earliest first failure of its messages (ms since the epoch), when the envelope says.
    pub first_seen_ms: Option<u64>,
    /// The latest last failure of its messages (ms since the epoch).
    pub last_seen_ms: Option<u64>,
    /// One of its messages' error message as it was, unmasked.
    pub example: String,
    /// The SQS message ids of its messages, in the order read: the exact set an action on the
    /// group takes (a message that arrives later is not in it).
    #[serde(skip)]
    pub message_ids: Vec<String>,
}

/// The failure groups of `records`, the largest first (then by fingerprint, so that the order is
/// stable).
pub fn failure_groups(records: &[SqsRecord<'_>]) -> Vec<FailureGroup> {
    let mut groups: HashMap<Fingerprint, FailureGroup> = HashMap::new();
    for record in records {
        let meta = Meta::of(record).and_then(Result::ok);
        let first = meta.as_ref().map(|m| m.first_failure_at.0);
        let last = meta
            .as_ref()
            .map(|m| m.last_failure_at.0)
            .or_else(|| record.sent_ms());
        let fingerprint = Fingerprint::of(record);
        let group = groups
            .entry(fingerprint.clone())
            .or_insert_with(|| FailureGroup {
                key: fingerprint.key(),
                fingerprint,
                count: 0,
                first_seen_ms: None,
                last_seen_ms: None,
                example: meta
                    .as_ref()
                    .map(|m| m.error_message.to_string())
                    .unwrap_or_default(),
                message_ids: Vec::new(),
            });
        group.count += 1;
        group.first_seen_ms = min_some(group.first_seen_ms, first.or(last));
        group.last_seen_ms = group.last_seen_ms.max(last);
        if let Some(id) = record.message_id.as_deref() {
            group.message_ids.push(id.to_owned());
        }
    }
    let mut groups: Vec<FailureGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.fingerprint.cmp(&b.fingerprint))
    });
    groups
}

fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `message` with each run of digits masked as `<n>`, and each word that mixes digits with
/// letters or is a long hex run (ids, UUIDs, request ids) masked as `<id>`.
fn mask(message: &str) -> String {
    let mut masked = String::with_capacity(message.len());
    let mut word = String::new();
    let flush = |word: &mut String, masked: &mut String| {
        if !word.is_empty() {
            masked.push_str(mask_word(word));
            word.clear();
        }
    };
    for c in message.chars() {
        if c.is_alphanumeric() || c == '-' || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut masked);
            masked.push(c);
        }
    }
    flush(&mut word, &mut masked);
    masked
}

/// What a word of an error message becomes in its pattern.
fn mask_word(word: &str) -> &str {
    let digits = word.chars().filter(char::is_ascii_digit).count();
    if digits == 0 {
        return word;
    }
    if word
        .chars()
        .all(|c| c.is_ascii_digit() || c == '-' || c == '_')
        && word.chars().next().is_some_and(|c| c.is_ascii_digit())
    {
        return "<n>";
    }
    "<id>"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_ids_are_masked_and_words_kept() {
        assert_eq!(
            mask("order 1234 not found (HTTP 404)"),
            "order <n> not found (HTTP <n>)"
        );
        assert_eq!(
            mask("request 3f2b9c1e-7a4d-4c55-9a1b-2e6f0d9c8b7a timed out after 30s"),
            "request <id> timed out after <id>"
        );
        assert_eq!(
            mask("customer c-77 over its limit"),
            "customer <id> over its limit"
        );
        assert_eq!(mask("amount must be positive"), "amount must be positive");
        assert_eq!(mask("2026-11-29 outage"), "<n> outage");
        assert_eq!(mask(""), "");
    }

    #[test]
    fn a_key_names_one_fingerprint_and_tells_others_apart() {
        let fingerprint = Fingerprint {
            origin: "orders".into(),
            function: Some("orders-consumer".into()),
            function_version: Some("7".into()),
            error_class: "permanent".into(),
            error_kind: "invalid_order".into(),
            pattern: "order <n> not found".into(),
        };
        let key = fingerprint.key();
        assert_eq!(key.len(), 16);
        assert_eq!(key, fingerprint.clone().key());
        let fixed = Fingerprint {
            function_version: Some("8".into()),
            ..fingerprint
        };
        assert_ne!(key, fixed.key());
    }
}

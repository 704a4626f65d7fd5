//! Two attempt ledgers for tests, the soak and the bench (`test-util`): one in memory, and one
//! that counts the calls made of another.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use futures_util::future::BoxFuture;

use super::forwarding::{ForwardingLedger, LedgerCall};
use super::lane::{KeyPlace, KeyPositions, Position};
use super::store::{AttemptLedger, Hold, LedgerEntry, Release};
use crate::error::PortError;
use crate::sync::lock;

/// A ledger in memory, shared by the simulated containers of a test or the soak.
#[derive(Default)]
pub struct MemoryLedger {
    entries: Mutex<HashMap<String, LedgerEntry>>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, Result<T, PortError>> {
    Box::pin(std::future::ready(Ok(value)))
}

impl AttemptLedger for MemoryLedger {
    fn entries<'a>(
        &'a self,
        message_ids: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Vec<Option<LedgerEntry>>, PortError>> {
        let entries = lock(&self.entries);
        ready(
            message_ids
                .iter()
                .map(|id| Some(entries.get(*id).cloned().unwrap_or_default()))
                .collect(),
        )
    }

    fn record_untried<'a>(
        &'a self,
        message_id: &'a str,
        receive_count: u32,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        let mut entries = lock(&self.entries);
        let entry = entries.entry(message_id.to_owned()).or_default();
        if !entry.untried.contains(&receive_count) {
            entry.untried.push(receive_count);
        }
        ready(())
    }

    fn record_head_wait<'a>(
        &'a self,
        message_id: &'a str,
        since_ms: u64,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        let mut entries = lock(&self.entries);
        let entry = entries.entry(message_id.to_owned()).or_default();
        entry.head_since_ms.get_or_insert(since_ms);
        ready(())
    }

    fn hold<'a>(
        &'a self,
        message_id: &'a str,
        hold: &'a Hold,
        untried: bool,
    ) -> BoxFuture<'a, Result<bool, PortError>> {
        let mut entries = lock(&self.entries);
        let entry = entries.entry(message_id.to_owned()).or_default();
        // No hold stands on a release to the DLQ, and a renewal needs the hold it renews.
        let released = match &entry.hold {
            Some(held) => held.release.is_some(),
            None => hold.error_kind.is_empty(),
        };
        if released {
            return ready(false);
        }
        if untried && !entry.untried.contains(&hold.receive_count) {
            entry.untried.push(hold.receive_count);
        }
        let mut renewed = hold.clone();
        if let Some(kept) = entry.hold.take() {
            renewed.since_ms = kept.since_ms;
            if renewed.error_kind.is_empty() {
                renewed.error_kind = kept.error_kind;
                renewed.error_message = kept.error_message;
            }
        }
        entry.hold = Some(renewed);
        ready(true)
    }

    fn release_hold<'a>(
        &'a self,
        message_id: &'a str,
        release: Release,
    ) -> BoxFuture<'a, Result<Option<Hold>, PortError>> {
        let mut entries = lock(&self.entries);
        let Some(entry) = entries.get_mut(message_id) else {
            return ready(None);
        };
        let released = entry.hold.clone();
        match (release, &mut entry.hold) {
            (_, None) => {}
            (Release::Retry, Some(hold)) => {
                entry.attempts_from = hold.receive_count + 1;
                entry.hold = None;
            }
            (Release::DeadLetter, Some(hold)) => hold.release = Some(Release::DeadLetter),
        }
        ready(released)
    }

    fn held(&self) -> BoxFuture<'_, Result<Vec<(String, Hold)>, PortError>> {
        let entries = lock(&self.entries);
        let mut held: Vec<(String, Hold)> = entries
            .iter()
            .filter_map(|(id, entry)| Some((id.clone(), entry.hold.clone()?)))
            .collect();
        held.sort_by(|a, b| a.0.cmp(&b.0));
        ready(held)
    }

    fn clear_hold<'a>(&'a self, message_id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        if let Some(entry) = lock(&self.entries).get_mut(message_id) {
            entry.hold = None;
        }
        ready(())
    }

    fn record_in_lane<'a>(&'a self, message_id: &'a str) -> BoxFuture<'a, Result<(), PortError>> {
        lock(&self.entries)
            .entry(message_id.to_owned())
            .or_default()
            .in_lane = true;
        ready(())
    }

    fn record_key_left<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
        place: KeyPlace,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        let mut entries = lock(&self.entries);
        let key = &mut entries.entry(key_id.to_owned()).or_default().key;
        match key {
            Some(key) if key.left >= position => {}
            Some(key) => (key.left, key.place) = (position, place),
            None => {
                *key = Some(KeyPositions {
                    left: position,
                    place,
                    done: None,
                })
            }
        }
        ready(())
    }

    fn record_key_done<'a>(
        &'a self,
        key_id: &'a str,
        position: Position,
    ) -> BoxFuture<'a, Result<(), PortError>> {
        let mut entries = lock(&self.entries);
        if let Some(key) = &mut entries.entry(key_id.to_owned()).or_default().key {
            key.done = key.done.max(Some(position));
        }
        ready(())
    }
}

/// A ledger that counts the calls made of the one it wraps (the demo and the bench report them).
pub struct Counted<L> {
    inner: L,
    reads: AtomicU32,
    writes: AtomicU32,
}

impl<L> Counted<L> {
    /// Counts the calls of `inner`.
    pub fn new(inner: L) -> Self {
        Self {
            inner,
            reads: AtomicU32::new(0),
            writes: AtomicU32::new(0),
        }
    }

    /// Reads made so far.
    pub fn reads(&self) -> u32 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Writes made so far.
    pub fn writes(&self) -> u32 {
        self.writes.load(Ordering::Relaxed)
    }
}

impl<L: AttemptLedger> ForwardingLedger for Counted<L> {
    type Inner = L;

    fn inner(&self) -> &L {
        &self.inner
    }

    fn around<'a, T: Send + 'a>(
        &'a self,
        call: LedgerCall<'a>,
        ask: impl FnOnce() -> BoxFuture<'a, Result<T, PortError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, PortError>> {
        let count = if call.is_read() {
            &self.reads
        } else {
            &self.writes
        };
        count.fetch_add(1, Ordering::Relaxed);
        ask()
    }
}

//! Large messages through S3 ([`crate::payload`]): the bodies of Extended Client pointers fetched
//! before the handlers run (as many at once as records may run, within half the handling time),
//! the bodies of copies too large to carry their failure context offloaded before they are sent,
//! and the objects redrive wrote deleted once their message is done.
use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;

use super::decide::Ruling;
use super::{Item, Processor};
use crate::clock::by_deadline;
use crate::envelope::TooLarge;
use crate::fate::Fate;
use crate::handler::Invocation;
use crate::metrics::BatchReport;
use crate::payload::{PayloadError, Pointer};
use crate::port::QueuePort;

impl<Q: QueuePort> Processor<Q> {
    /// Fetches the body of every record that is an Extended Client pointer. A pointer that cannot
    /// be read leaves its error on the item, which fails that record alone.
    pub(super) async fn fetch_payloads(&self, items: &mut [Item<'_>], invocation: &Invocation<'_>) {
        let Some(payloads) = &self.payloads else {
            return;
        };
        let pointers: Vec<(usize, Result<Pointer<'_>, PayloadError>)> = items
            .iter()
            .enumerate()
            .filter_map(|(index, item)| Some((index, Pointer::of(item.record)?)))
            .collect();
        if pointers.is_empty() {
            return;
        }
        let within = self.budget(invocation.deadline_ms).handling() / 2;
        let store = payloads.store.as_ref();
        let fetched: Vec<(usize, Result<String, PayloadError>)> = stream::iter(pointers)
            .map(|(index, pointer)| async move {
                let body = match pointer {
                    Ok(pointer) => match tokio::time::timeout(within, store.get(&pointer)).await {
                        Ok(body) => body,
                        Err(_) => Err(PayloadError::Unavailable(format!(
                            "{pointer} not read within {} ms",
                            within.as_millis()
                        ))),
                    },
                    Err(error) => Err(error),
                };
                (index, body)
            })
            .buffer_unordered(self.config.concurrency.get())
            .collect()
            .await;
        for (index, body) in fetched {
            if let Err(error) = &body {
                tracing::warn!(message_id = items[index].id, %error, "large message body not read");
            }
            items[index].fetched = Some(Box::new(body));
        }
    }

    /// Puts the bodies of the copies too large to send into the bucket, each under its origin
    /// message's key (a retried batch writes the same object again, never a second one): the
    /// records whose body was stored, with the pointer their copies carry. A record that already
    /// is a pointer, or whose put fails, is left out (given back, as without a bucket).
    pub(super) async fn offload(
        &self,
        items: &[Item<'_>],
        too_large: &[(usize, TooLarge)],
        deadline: Option<Instant>,
    ) -> Vec<(usize, Pointer<'static>)> {
        let Some(payloads) = &self.payloads else {
            return Vec::new();
        };
        let store = payloads.store.as_ref();
        let puts = stream::iter(too_large)
            .filter(|(index, _)| std::future::ready(Pointer::of(items[*index].record).is_none()))
            .map(|&(index, _)| async move {
                let item = &items[index];
                let origin = item
                    .meta
                    .as_deref()
                    .map_or(item.id, |meta| &meta.origin_message_id);
                let pointer = payloads.pointer_for(origin);
                let body = item.record.body.as_deref().unwrap_or_default();
                match store.put(&pointer, body).await {
                    Ok(()) => Some((index, pointer)),
                    Err(error) => {
                        tracing::error!(message_id = item.id, %pointer, %error, "large copy not offloaded");
                        None
                    }
                }
            })
            .buffer_unordered(self.config.concurrency.get())
            .filter_map(std::future::ready)
            .collect::<Vec<_>>();
        by_deadline(deadline, puts).await.unwrap_or_default()
    }

    /// Deletes the objects redrive wrote for the records that are done: no copy points at them
    /// any more. A delete that fails (or is cut off at `deadline`) leaves an orphan for the
    /// bucket's lifecycle rule, counted in the report.
    pub(super) async fn delete_done_payloads(
        &self,
        items: &[Item<'_>],
        rulings: &[Ruling],
        deadline: Option<Instant>,
        report: &mut BatchReport,
    ) {
        let Some(payloads) = &self.payloads else {
            return;
        };
        let done: Vec<Pointer<'_>> = items
            .iter()
            .zip(rulings)
            .filter(|(item, ruling)| {
                matches!(ruling.fate, Fate::Done) && matches!(item.fetched.as_deref(), Some(Ok(_)))
            })
            .filter_map(|(item, _)| Pointer::of(item.record)?.ok())
            .filter(|pointer| payloads.owns(pointer))
            .collect();
        if done.is_empty() {
            return;
        }
        let store = payloads.store.as_ref();
        let deletes = stream::iter(&done)
            .map(|pointer| async move {
                let deleted = store.delete(pointer).await;
                if let Err(error) = &deleted {
                    tracing::warn!(%pointer, %error, "large message body not deleted: left to the bucket's lifecycle rule");
                }
                deleted.is_ok()
            })
            .buffer_unordered(self.config.concurrency.get())
            .collect::<Vec<bool>>();
        let deleted = by_deadline(deadline, deletes).await.unwrap_or_default();
        let orphans = done.len() - deleted.iter().filter(|ok| **ok).count();
        report.payload_orphans += u32::try_from(orphans).unwrap_or(u32::MAX);
    }
}

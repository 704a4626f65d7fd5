//! Large messages through S3 ([`crate::payload`]): the bodies of Extended Client pointers fetched
//! before the handlers run (as many at once as records may run, within half the handling time),
//! the bodies of copies too large to carry their failure context offloaded before they are sent,
//! and the objects redrive wrote deleted once their message is done.
use std::future::Future;

use futures_util::stream::{self, StreamExt};
use tokio::time::Instant;

use super::decide::Ruling;
use super::{Item, Processor};
use crate::clock::by_deadline;
use crate::envelope::TooLarge;
use crate::fate::{Fate, Outcome};
use crate::handler::Invocation;
use crate::ledger::{HeadStatus, LaneState};
use crate::metrics::BatchReport;
use crate::payload::{is_size_attribute, PayloadError, Pointer};
use crate::port::QueuePort;
use redrive_event::{SqsRecord, Text};

/// The records of a batch that are Extended Client pointers, each as its handler sees it (the
/// body fetched, the size attribute gone), or why its body could not be read. The items point
/// at these records while the handlers run ([`Fetched::lend`]) and at the records as delivered
/// again before the fates are carried out ([`Fetched::restore`]), so that every copy carries the
/// pointer; the workers themselves know nothing of S3, and an ordinary batch pays nothing.
#[derive(Default)]
pub(crate) struct Fetched<'r>(Vec<Entry<'r>>);

struct Entry<'r> {
    index: usize,
    delivered: &'r SqsRecord<'r>,
    /// The record with its body; without one when it could not be read, so that the record
    /// is not handled (`Outcome::NoBody`, turned into `error` by [`Fetched::restore`]).
    seen: SqsRecord<'r>,
    error: Option<PayloadError>,
}

impl<'r> Fetched<'r> {
    /// Points the items of the fetched records at the records with their bodies.
    pub(crate) fn lend<'s>(&'s self, items: &mut [Item<'s>]) {
        for entry in &self.0 {
            items[entry.index].record = &entry.seen;
        }
    }

    /// Points the items back at the records as delivered, and fails each record whose body
    /// could not be read with its error.
    pub(crate) fn restore<'s>(&self, items: &mut [Item<'s>], handled: &mut [Outcome])
    where
        'r: 's,
    {
        for entry in &self.0 {
            items[entry.index].record = entry.delivered;
            if let (Some(error), Outcome::NoBody) = (&entry.error, &handled[entry.index]) {
                handled[entry.index] = Outcome::Failed(Box::new(error.clone().into()));
            }
        }
    }

    /// The positions of the records whose body was read.
    fn read(&self) -> impl Iterator<Item = usize> + '_ {
        self.0
            .iter()
            .filter(|entry| entry.error.is_none())
            .map(|entry| entry.index)
    }
}

impl<Q: QueuePort> Processor<Q> {
    /// Fetches the body of every record that is an Extended Client pointer and will be handled
    /// (not a FIFO head the ledger holds, nor a copy on a hop that is not due yet).
    pub(super) async fn fetch_payloads<'r>(
        &self,
        items: &[Item<'r>],
        invocation: &Invocation<'_>,
    ) -> Fetched<'r> {
        let Some(payloads) = &self.payloads else {
            return Fetched::default();
        };
        // A copy on a hop that is not due yet is sent on unread, as a held head is left unread.
        let now = self.clock.now_ms();
        let pointers: Vec<(usize, Result<Pointer<'_>, PayloadError>)> = items
            .iter()
            .enumerate()
            .filter(|(_, item)| {
                matches!(
                    item.fifo.head,
                    HeadStatus::Free | HeadStatus::Unread | HeadStatus::ReleasedToRetry
                ) && item.fifo.lane == LaneState::Free
            })
            .filter(|(_, item)| {
                let due = item.meta.as_ref().and_then(|meta| meta.due_at);
                due.is_none_or(|due| due.0 <= now)
            })
            .filter_map(|(index, item)| Some((index, Pointer::of(item.record)?)))
            .collect();
        if pointers.is_empty() {
            return Fetched::default();
        }
        let within = self.budget(invocation.deadline_ms).handling() / 2;
        let store = payloads.store.as_ref();
        let reads = pointers.into_iter().map(|(index, pointer)| async move {
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
        });
        let bodies = self.at_most_concurrency(reads.collect()).await;
        let entries = bodies
            .into_iter()
            .map(|(index, body)| {
                let delivered = items[index].record;
                let mut seen = delivered.clone();
                seen.message_attributes
                    .retain(|name, _| !is_size_attribute(name));
                let error = match body {
                    Ok(body) => {
                        seen.body = Some(Text::from(body).into());
                        None
                    }
                    Err(error) => {
                        tracing::warn!(message_id = items[index].id, %error, "large message body not read");
                        seen.body = None;
                        Some(error)
                    }
                };
                Entry {
                    index,
                    delivered,
                    seen,
                    error,
                }
            })
            .collect();
        Fetched(entries)
    }

    /// Puts the bodies of the copies too large to send into the bucket, each under its origin
    /// message's key (a retried batch writes the same object again, never a second one): the
    /// records whose body was stored, with the pointer their copies carry, and how many puts
    /// `deadline` cut off (their object may be written, with no copy pointing at it: orphans). A
    /// record that already is a pointer, or whose put fails or is cut off, is left out (given
    /// back, as without a bucket).
    pub(super) async fn offload(
        &self,
        items: &[Item<'_>],
        too_large: &[(usize, TooLarge)],
        deadline: Option<Instant>,
    ) -> (Vec<(usize, Pointer<'static>)>, u32) {
        let Some(payloads) = &self.payloads else {
            return (Vec::new(), 0);
        };
        let store = payloads.store.as_ref();
        // Each put has the deadline of its own, so that the puts done by then are kept.
        let puts = too_large
            .iter()
            .filter(|(index, _)| Pointer::of(items[*index].record).is_none())
            .map(|&(index, _)| async move {
                let item = &items[index];
                let origin = item
                    .meta
                    .as_deref()
                    .map_or(item.id, |meta| &meta.origin_message_id);
                let pointer = payloads.pointer_for(origin);
                let body = item.record.body.as_deref().unwrap_or_default();
                let put = by_deadline(deadline, store.put(&pointer, body)).await;
                if let Some(Err(error)) = &put {
                    tracing::error!(message_id = item.id, %pointer, %error, "large copy not offloaded");
                }
                (index, pointer, put)
            });
        let mut stored = Vec::new();
        let mut cut_off = 0;
        for (index, pointer, put) in self.at_most_concurrency(puts.collect()).await {
            match put {
                Some(Ok(())) => stored.push((index, pointer)),
                Some(Err(_)) => {}
                None => cut_off += 1,
            }
        }
        (stored, cut_off)
    }

    /// Counts the bodies read and deletes the objects redrive wrote for the records that are
    /// done: no copy points at them any more. A delete that fails (or is cut off at `deadline`)
    /// leaves an orphan for the bucket's lifecycle rule, counted in the report.
    pub(super) async fn settle_payloads(
        &self,
        items: &[Item<'_>],
        fetched: &Fetched<'_>,
        rulings: &[Ruling],
        deadline: Option<Instant>,
        report: &mut BatchReport,
    ) {
        let Some(payloads) = &self.payloads else {
            return;
        };
        report.payloads_fetched = u32::try_from(fetched.read().count()).unwrap_or(u32::MAX);
        let done: Vec<Pointer<'_>> = fetched
            .read()
            .filter(|&index| matches!(rulings[index].fate, Fate::Done))
            .filter_map(|index| Pointer::of(items[index].record)?.ok())
            .filter(|pointer| payloads.owns(pointer))
            .collect();
        if done.is_empty() {
            return;
        }
        let store = payloads.store.as_ref();
        let deletes = done.iter().map(|pointer| async move {
                let deleted = store.delete(pointer).await;
                if let Err(error) = &deleted {
                    tracing::warn!(%pointer, %error, "large message body not deleted: left to the bucket's lifecycle rule");
                }
                deleted.is_ok()
            });
        let deleted = by_deadline(deadline, self.at_most_concurrency(deletes.collect()))
            .await
            .unwrap_or_default();
        let orphans = done.len() - deleted.iter().filter(|ok| **ok).count();
        report.payload_orphans += u32::try_from(orphans).unwrap_or(u32::MAX);
    }

    /// Runs `calls` with at most as many at once as records may run; their outputs in any order.
    /// (The calls are made first and then run: a stream that makes them from borrowed items
    /// leaves the batch's future short of `Send`.)
    async fn at_most_concurrency<F: Future>(&self, calls: Vec<F>) -> Vec<F::Output> {
        stream::iter(calls)
            .buffer_unordered(self.config.concurrency.get())
            .collect()
            .await
    }
}

//! Running records: which record starts when (in order, or FIFO groups taking turns), workers polled
//! together on the invocation's task, panics caught per record, and the deadline margin that stops
//! new records and cuts off running ones; for a batch handler, bisection.
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};

use super::{Item, Processor};
use crate::clock::Cutoff;
use crate::error::{ErrorClass, RecordError};
use crate::fate::Outcome;
use crate::handler::{caught, BatchHandler, Invocation, Message, RecordHandler};
use crate::ledger::{HeadStatus, LaneState};
use crate::port::QueuePort;
use crate::sync::lock;

/// Which record a worker starts next.
///
/// A standard queue's records are independent (a fair queue's `MessageGroupId` names a tenant, not
/// an order) and are taken in the event's order. On a FIFO queue each message group takes turns: a
/// group's next record is offered only after the one before it succeeded, since anything else
/// makes the judge give back the rest of the group (`Judge::decide`); of the records on offer the
/// earliest in the event goes first, so that with a bound of 1 the event's order is kept.
enum Schedule {
    InOrder { next: AtomicUsize, len: usize },
    Turns(Mutex<Turns>),
}

struct Turns {
    /// For each record, the next record of its message group.
    next_in_group: Vec<Option<usize>>,
    /// The first record not yet started of each group whose turn may come, earliest first.
    offered: BinaryHeap<Reverse<usize>>,
}

impl Schedule {
    fn new(items: &[Item<'_>], fifo: bool) -> Self {
        if !fifo {
            return Self::InOrder {
                next: AtomicUsize::new(0),
                len: items.len(),
            };
        }
        let mut next_in_group = vec![None; items.len()];
        let mut offered = BinaryHeap::new();
        let mut last_of_group: HashMap<&str, usize> = HashMap::new();
        for (index, item) in items.iter().enumerate() {
            // A FIFO record always has a group; one without is a group of its own.
            let previous = item
                .group()
                .and_then(|group| last_of_group.insert(group, index));
            match previous {
                Some(previous) => next_in_group[previous] = Some(index),
                None => offered.push(Reverse(index)),
            }
        }
        Self::Turns(Mutex::new(Turns {
            next_in_group,
            offered,
        }))
    }

    /// How many records can run at once at the most.
    fn turns(&self) -> usize {
        match self {
            Self::InOrder { len, .. } => *len,
            Self::Turns(turns) => lock(turns).offered.len(),
        }
    }

    /// The next record to start, told of the record this worker `finished` and whether it
    /// succeeded.
    fn next(&self, finished: Option<(usize, bool)>) -> Option<usize> {
        match self {
            Self::InOrder { next, len } => {
                Some(next.fetch_add(1, Ordering::Relaxed)).filter(|index| index < len)
            }
            Self::Turns(turns) => {
                let mut turns = lock(turns);
                if let Some((index, true)) = finished {
                    if let Some(next) = turns.next_in_group[index] {
                        turns.offered.push(Reverse(next));
                    }
                }
                turns.offered.pop().map(|Reverse(index)| index)
            }
        }
    }
}

/// What one worker did: how each record it took went, and the one it is still running.
#[derive(Default)]
struct WorkerLog {
    handled: Vec<(usize, Outcome)>,
    running: Option<usize>,
}

impl<Q: QueuePort> Processor<Q> {
    /// Waits for what `handler` left running past the records' cut-off, within half the time left
    /// to carry fates out.
    pub(super) async fn wait_for_flush<H: RecordHandler>(
        &self,
        handler: &H,
        invocation: &Invocation<'_>,
    ) {
        let flushed = handler.flush();
        match self.budget(invocation.deadline_ms).pending_writes() {
            Some(within) => {
                let _ = tokio::time::timeout(within, flushed).await;
            }
            None => flushed.await,
        }
    }

    /// How handling each record went, in the records' order. Workers, as many as the bound lets
    /// run at once, take records from the schedule and are polled together on this task (no task
    /// is spawned, so the handler need not be `'static`). One timer for the whole batch cuts off
    /// the handlers still running at the margin; no record is started past it either.
    pub(super) async fn handle_all<H: RecordHandler>(
        &self,
        handler: &H,
        items: &[Item<'_>],
        fifo: bool,
        invocation: &Invocation<'_>,
    ) -> Vec<Outcome> {
        let budget = self.budget(invocation.deadline_ms);
        let cutoff = budget.cutoff();
        let schedule = Schedule::new(items, fifo);
        let workers = self.config.concurrency.get().min(schedule.turns());
        let mut logs: Vec<WorkerLog> = (0..workers).map(|_| WorkerLog::default()).collect();
        let in_time = {
            let mut running: FuturesUnordered<_> = logs
                .iter_mut()
                .map(|log| self.work(handler, items, invocation, (&schedule, cutoff), log))
                .collect();
            tokio::time::timeout(budget.handling(), async {
                while running.next().await.is_some() {}
            })
            .await
            .is_ok()
        };
        let mut handled: Vec<Outcome> = items.iter().map(|_| Outcome::NotStarted).collect();
        for log in logs {
            for (index, outcome) in log.handled {
                handled[index] = outcome;
            }
            if let (false, Some(index)) = (in_time, log.running) {
                handled[index] = Outcome::Failed(Box::new(deadline_error()));
            }
        }
        handled
    }

    /// One worker: takes the next record the schedule offers until there is none.
    async fn work<H: RecordHandler>(
        &self,
        handler: &H,
        items: &[Item<'_>],
        invocation: &Invocation<'_>,
        (schedule, cutoff): (&Schedule, Cutoff),
        log: &mut WorkerLog,
    ) {
        let mut finished = None;
        while let Some(index) = schedule.next(finished.take()) {
            let item = &items[index];
            let handled = match self.precheck(item, cutoff) {
                Some(handled) => handled,
                None => {
                    log.running = Some(index);
                    let result = caught(handler.handle(&item.message(invocation))).await;
                    log.running = None;
                    result.into()
                }
            };
            // A record that follows its group to the lane lets the next of the group follow too.
            let goes_on = matches!(handled, Outcome::Succeeded | Outcome::FollowsGroup);
            finished = Some((index, goes_on));
            log.handled.push((index, handled));
        }
    }

    /// Hands the eligible records to `handler` as one call; a permanent failure or a panic (a
    /// record may be at fault) splits the call in halves until the failing records stand alone,
    /// the first half first. On a FIFO queue no record is handed over once an earlier record of
    /// its group did not succeed: a later half's records of that group are blocked, untried, so
    /// a group's effects keep its order (the judge gives them back behind their group).
    pub(super) async fn handle_batch<B: BatchHandler>(
        &self,
        handler: &B,
        items: &[Item<'_>],
        fifo: bool,
        invocation: &Invocation<'_>,
    ) -> Vec<Outcome> {
        let cutoff = self.budget(invocation.deadline_ms).cutoff();
        let mut handled: Vec<Option<Outcome>> = items
            .iter()
            .map(|item| self.precheck(item, cutoff))
            .collect();
        let mut blocks = GroupBlocks::new(fifo);
        for (index, outcome) in handled.iter().enumerate() {
            if outcome
                .as_ref()
                .is_some_and(|outcome| !matches!(outcome, Outcome::FollowsGroup))
            {
                blocks.failed(items, index);
            }
        }
        let eligible: Vec<usize> = (0..items.len()).filter(|&i| handled[i].is_none()).collect();
        let messages: Vec<Message<'_>> = eligible
            .iter()
            .map(|&i| items[i].message(invocation))
            .collect();
        // Sets of `messages` (their positions, in order) still to hand over, as a stack: the
        // first half is taken first, so every earlier record is decided when a later one's turn
        // comes.
        let mut pending: Vec<Vec<usize>> = Vec::with_capacity(8);
        pending.push((0..messages.len()).collect());
        while let Some(set) = pending.pop() {
            let (blocked, set): (Vec<usize>, Vec<usize>) = set
                .into_iter()
                .partition(|&m| blocks.blocks(items, eligible[m]));
            for m in blocked {
                handled[eligible[m]] = Some(Outcome::GroupBlocked);
                blocks.failed(items, eligible[m]);
            }
            if set.is_empty() {
                continue;
            }
            let left = cutoff.left();
            let outcome = if left.is_zero() {
                Outcome::NotStarted
            } else {
                let batch: Vec<Message<'_>> = set.iter().map(|&m| messages[m]).collect();
                let call = caught(handler.handle_batch(&batch));
                match tokio::time::timeout(left, call)
                    .await
                    .unwrap_or_else(|_| Err(deadline_error()))
                {
                    Ok(()) => Outcome::Succeeded,
                    // Halving looks for records at fault. A transient failure or a deferral says
                    // the downstream is (a database that is down): the set is retried as a whole.
                    Err(error) if set.len() == 1 || error.class() == ErrorClass::Transient => {
                        Outcome::Failed(Box::new(error))
                    }
                    Err(_) => {
                        let middle = set.len() / 2;
                        pending.push(set[middle..].to_vec());
                        pending.push(set[..middle].to_vec());
                        continue;
                    }
                }
            };
            let succeeded = matches!(outcome, Outcome::Succeeded);
            for &m in &set {
                if !succeeded {
                    blocks.failed(items, eligible[m]);
                }
                handled[eligible[m]] = Some(outcome.clone());
            }
        }
        handled
            .into_iter()
            .map(|handled| handled.unwrap_or(Outcome::NotStarted))
            .collect()
    }

    /// What is known about a record before calling any handler; `None` when it is to be handled.
    fn precheck(&self, item: &Item<'_>, cutoff: Cutoff) -> Option<Outcome> {
        if item.record.body.is_none() {
            return Some(Outcome::NoBody);
        }
        match (item.fifo.lane, item.fifo.head) {
            (LaneState::Follows, _) => return Some(Outcome::FollowsGroup),
            // Its copy is in the lane, which takes it from here.
            (LaneState::Sent | LaneState::SentTwice, _) => return Some(Outcome::Succeeded),
            (LaneState::HeldAgain, _) => return Some(Outcome::Failed(Box::new(held_again()))),
            (LaneState::Unread, _) => return Some(Outcome::Failed(Box::new(lane_unread()))),
            (LaneState::HeldInLane, HeadStatus::Unread) => {
                return Some(Outcome::Failed(Box::new(ledger_unread())))
            }
            (LaneState::HeldInLane, _) => {
                return Some(Outcome::Failed(Box::new(held_in_lane(item))))
            }
            (LaneState::Free, HeadStatus::Held) => return Some(Outcome::Held),
            (LaneState::Free, HeadStatus::ReleasedToDeadLetter) => {
                return Some(Outcome::ReleasedToDeadLetter)
            }
            (LaneState::Free, _) => {}
        }
        // Only a ledger's count is exact enough to refuse a try on: SQS's alone counts receives
        // nobody tried. Where the ledger could not say, the record waits for it, untried.
        if self.books.is_some()
            && item.fifo.receive_count > 0
            && item.attempts_before >= self.config.retry.max_attempts
        {
            return Some(match item.fifo.head {
                HeadStatus::Unread => Outcome::Failed(Box::new(ledger_unread())),
                _ => Outcome::AttemptsUsedUp,
            });
        }
        if let Some(due) = item.meta.as_ref().and_then(|meta| meta.due_at) {
            let now = self.clock.now_ms();
            if due.0 > now {
                return Some(Outcome::NotDue(Duration::from_millis(due.0 - now)));
            }
        }
        cutoff.passed().then_some(Outcome::NotStarted)
    }
}

pub(crate) fn deadline_error() -> RecordError {
    RecordError::transient(
        "deadline",
        "the handler was still running at the Lambda deadline margin",
    )
}

/// How long a record whose attempts the ledger could not count waits in place before it is read
/// again: a throttled table's retries back off over about that long.
const LEDGER_UNREAD_WAIT: Duration = Duration::from_secs(10);

/// A record whose attempts SQS's count says are used up while the ledger could not say: deferred
/// (no attempt spent), as a breaker defers while its downstream is down.
fn ledger_unread() -> RecordError {
    RecordError::defer("attempt_ledger_unread", LEDGER_UNREAD_WAIT)
}

/// A source record whose group may wait in the retry lane (the ledger did not say): deferred in
/// place, untried, rather than taking effect ahead of its group's records in the lane.
fn lane_unread() -> RecordError {
    RecordError::defer("retry_lane_unread", LEDGER_UNREAD_WAIT)
}

/// The held head come back to its source after it was sent to the lane (the send's answer or the delete
/// was lost): sent there again, as the head, without a try.
fn held_again() -> RecordError {
    RecordError::permanent(
        "held_head_again",
        "its group is held on it and it was sent to the retry lane, but came back to its source (the send's answer or its delete lost): sent there again; if SQS took the first copy, that one holds the failure",
    )
}

/// Why a record follows its group to the lane untried: what its copy there says.
pub(super) fn follows_group() -> RecordError {
    RecordError::transient(
        "follows_group",
        "its group is held on an earlier record in the retry lane: it keeps the group's order there",
    )
}

/// A head held in the retry lane, on its arrival there: the failure it was sent there with, as a
/// permanent one, so that the judge holds its group on it there.
fn held_in_lane(item: &Item<'_>) -> RecordError {
    match item.meta.as_deref() {
        Some(meta) => {
            RecordError::permanent(meta.error_kind.to_string(), meta.error_message.to_string())
        }
        None => RecordError::permanent(
            "held_in_lane",
            "its group was held on it in its source queue",
        ),
    }
}

/// FIFO: the first record of each message group that did not succeed, so that no later record of
/// the group is handed to a batch handler. Nothing is blocked on a standard queue.
struct GroupBlocks<'r> {
    fifo: bool,
    first_failed: HashMap<&'r str, usize>,
}

impl<'r> GroupBlocks<'r> {
    fn new(fifo: bool) -> Self {
        Self {
            fifo,
            first_failed: HashMap::new(),
        }
    }

    /// Record `index` did not succeed.
    fn failed(&mut self, items: &[Item<'r>], index: usize) {
        if let (true, Some(group)) = (self.fifo, items[index].group()) {
            let first = self.first_failed.entry(group).or_insert(index);
            *first = (*first).min(index);
        }
    }

    /// Whether an earlier record of `index`'s group did not succeed.
    fn blocks(&self, items: &[Item<'r>], index: usize) -> bool {
        self.fifo
            && items[index]
                .group()
                .and_then(|group| self.first_failed.get(group))
                .is_some_and(|&first| first < index)
    }
}

//! The figures a soak prints, and its invariant.
use std::fmt;
use std::time::Duration;

/// The figures the soak prints; `lost` must be 0.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SoakReport {
    pub messages: usize,
    /// Large messages: copies offloaded to the bucket, objects left in it at the end, dead
    /// letters pointing into it, those whose object is gone, failed bucket calls injected, and
    /// orphans the batches counted (a delete that failed), and objects last written by an
    /// invocation Lambda stopped (whose report, and count, was lost: the lifecycle rule's). Every
    /// object left is pointed at or counted: `unaccounted_objects`.
    pub payloads_offloaded: u64,
    pub payload_objects_left: usize,
    pub payload_objects_pointed_at: std::collections::BTreeSet<String>,
    pub payload_bodies_missing: usize,
    pub payload_missing_after_effect: usize,
    pub payload_faults: u64,
    pub payload_orphans: u64,
    pub payload_objects_of_stopped: usize,
    pub processed: usize,
    pub in_dlq: usize,
    pub in_dlq_without_metadata: usize,
    pub still_queued: usize,
    pub lost: usize,
    /// Messages SQS deleted at their retention before their fate (counted in `lost` too; only the
    /// model can tell).
    pub expired: usize,
    pub effects_more_than_once: usize,
    pub duplicates_absorbed: u64,
    pub duplicate_dead_letters: usize,
    /// Messages in the DLQ that also took effect: on FIFO the attempt is the receive count, so a
    /// dead-lettered record delivered again after a lost delete is a later attempt, and may
    /// succeed (its dead letter, a panic's, stays for review; redriven, the guard absorbs it).
    pub dead_and_processed: usize,
    /// Records whose dead letter may have gone out in a batch that came back whole: the dead
    /// letters of a batch whose delete was lost, and every record of one Lambda stopped.
    pub dead_letters_delivered_again: u64,
    pub redriven: u32,
    pub beyond_cap: usize,
    pub invocations: u64,
    pub injected_send_failures: u64,
    /// SendMessageBatch calls that never answered, and those of them SQS had carried out.
    pub stalled_calls: u64,
    pub stalled_after_delivery: u64,
    /// Idempotency store calls failed, and completions the store never confirmed (the message
    /// counted as done).
    pub store_faults: u64,
    pub unconfirmed_completions: u64,
    /// Completions that landed after their claim's lease lapsed (a loaded machine: the scaled
    /// budget is shorter than a store call), each a chance for a second delivery's effect.
    pub completions_after_lease: u64,
    /// Claims granted while another claim of the key was open and within its lease.
    pub claims_granted_twice: u64,
    pub lost_deletes: u64,
    /// Calls that answered late (SQS and the store), and visibility changes throttled.
    pub slow_calls: u64,
    pub throttled_visibility: u64,
    /// Batches Lambda did not invoke with, and batches received again while still handled.
    pub throttled_invocations: u64,
    pub overlapping_deliveries: u64,
    /// Invocations Lambda stopped at their deadline (the whole batch delivered again): the
    /// processor is to answer before it, whatever the calls do.
    pub timed_out: u64,
    /// Handlers that came to their effect after their invocation's deadline (a starved task):
    /// stopped there, as Lambda stops the invocation.
    pub stopped_before_effect: u64,
    /// The longest a message a receive could have taken waited for one (the model only): SQS's
    /// FIFO scan window behind one group's large backlog makes it grow for every other group.
    pub longest_deliverable_wait: Duration,
    /// FIFO with a retry lane: records the consumer sent there with their held group, and the
    /// most messages the lane held at once (a held group's backlog).
    pub sent_to_lane: u64,
    pub lane_backlog: usize,
    /// FIFO: effects that came before an earlier message of their group's (before the redrive,
    /// which brings dead letters home out of order by nature).
    pub out_of_order: u64,
    /// The first effect that came out of order, to say where.
    pub first_out_of_order: Option<String>,
    /// A message whose effect happened more than once (the lowest id), to say which.
    pub effects_twice_of: Option<String>,
    /// Whether the order is part of the invariant ([`SoakConfig::order_checked`](super::SoakConfig::order_checked)).
    pub order_checked: bool,
    /// With hold: the order is checked to the end, the redrive included.
    pub order_end_to_end: bool,
    /// With hold: held heads the operator released to be tried again, and to the DLQ.
    pub released_to_retry: u32,
    pub released_to_dlq: u32,
    /// Effects of a message that arrived from a source queue other than its own (two sources
    /// sharing one DLQ: a dead letter redriven to the wrong one).
    pub wrong_source: u64,
    /// Re-sends of one message in one chain (from the source until it is done or dead-lettered;
    /// a redrive starts a new chain), as Lambda's recursive loop detection counts them.
    pub longest_chain: u32,
    pub chains_past_16: usize,
    /// Dead letters whose deferral outlasted `REDRIVE_DEFER_MAX_AGE` (kind `deferred_too_long`).
    pub deferred_too_long: usize,
    /// The most tries one message had in one chain, and the chains with more than
    /// `REDRIVE_MAX_ATTEMPTS`.
    pub most_tries: u32,
    pub tries_beyond_limit: usize,
    /// The first message tried past the limit in one set of attempts, to say which.
    pub first_beyond_limit: Option<String>,
    /// Whether tries beyond the limit break the invariant: on FIFO, whose attempts the ledger
    /// counts, yes; on a standard queue a lost delete brings back a copy already re-sent, which is
    /// tried again with the attempt it carries.
    pub tries_checked: bool,
    /// Per minute of the run's clock: records deferred and transient errors (the EMF figures
    /// the consumer's alarms watch).
    pub minutes: Vec<(u32, u32)>,
    /// Hold runs, per minute of the run's clock: the largest `HeldHeads` the batches reported
    /// (`None`: none counted, the alarm keeps its state), and whether the ledger held a head of
    /// the queue at the minute's last batch.
    pub held_minutes: Vec<(Option<u32>, bool)>,
    pub elapsed: Duration,
}

/// The Held alarm (`HeldHeads` > 0, Maximum, one minute, missing data ignored) replayed over a
/// hold run: minutes a head was held with the alarm OK (a page missed), and minutes in ALARM with
/// nothing held (the lag of a container's count after a release).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeldAlarm {
    pub held: usize,
    pub missed: usize,
    pub late: usize,
}

/// The consumer's default alarm thresholds (`infra/redrive.auto.tfvars.json`).
const DEFERRED_THRESHOLD: u32 = 0;
const TRANSIENT_ERRORS_THRESHOLD: u32 = 10;
/// Lambda stops a chain of invocations through the same queue after about this many.
pub(super) const LAMBDA_LOOP_LIMIT: u32 = 16;

impl SoakReport {
    /// Minutes the Deferred alarm and the TransientErrors alarm were in ALARM, and whether both
    /// were back to OK in the last minute.
    pub fn alarms(&self) -> (usize, usize, bool) {
        let fires = |value: u32, threshold: u32| value > threshold;
        let deferred = |(d, _): &(u32, u32)| fires(*d, DEFERRED_THRESHOLD);
        let transient = |(_, t): &(u32, u32)| fires(*t, TRANSIENT_ERRORS_THRESHOLD);
        let ok_at_end = self
            .minutes
            .last()
            .is_none_or(|minute| !deferred(minute) && !transient(minute));
        (
            self.minutes.iter().filter(|m| deferred(m)).count(),
            self.minutes.iter().filter(|m| transient(m)).count(),
            ok_at_end,
        )
    }

    /// The Held alarm replayed minute by minute over the run.
    pub fn held_alarm(&self) -> HeldAlarm {
        let mut alarm = false;
        let mut replayed = HeldAlarm::default();
        for &(gauge, held) in &self.held_minutes {
            if let Some(gauge) = gauge {
                alarm = gauge > 0;
            }
            replayed.held += usize::from(held);
            replayed.missed += usize::from(held && !alarm);
            replayed.late += usize::from(!held && alarm);
        }
        replayed
    }

    /// The invariant: nothing lost, no effect twice, nobody redriven beyond the cap, no held
    /// group without its alarm.
    pub fn holds(&self) -> bool {
        self.lost == 0
            && self.effects_more_than_once == 0
            && self.beyond_cap == 0
            && self.still_queued == 0
            && (self.out_of_order == 0 || !self.order_checked)
            && (self.tries_beyond_limit == 0 || !self.tries_checked)
            && self.wrong_source == 0
            && self.held_alarm().missed == 0
            && self.unaccounted_objects() == 0
            && self.payload_bodies_missing == 0
    }

    /// Objects in the payload bucket that no dead letter points at and no batch counted as an
    /// orphan: a body redrive forgot.
    pub fn unaccounted_objects(&self) -> usize {
        self.payload_objects_left.saturating_sub(
            self.payload_objects_pointed_at.len()
                + self.payload_orphans as usize
                + self.payload_objects_of_stopped,
        )
    }
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "  messages in                 {:>8}", self.messages)?;
        writeln!(f, "  processed (effect once)     {:>8}", self.processed)?;
        writeln!(
            f,
            "  in the DLQ                  {:>8}  ({} moved there by SQS without metadata)",
            self.in_dlq, self.in_dlq_without_metadata
        )?;
        writeln!(f, "  still queued                {:>8}", self.still_queued)?;
        if self.payloads_offloaded + self.payload_objects_left as u64 > 0 {
            writeln!(
                f,
                "  large: offloaded copies     {:>8}  ({} objects left: {} pointed at by dead letters, {} orphans counted, {} written by stopped invocations, {} unaccounted; dead letters whose body is gone: {} after their effect, {} before; {} bucket calls failed)",
                self.payloads_offloaded,
                self.payload_objects_left,
                self.payload_objects_pointed_at.len(),
                self.payload_orphans,
                self.payload_objects_of_stopped,
                self.unaccounted_objects(),
                self.payload_missing_after_effect,
                self.payload_bodies_missing,
                self.payload_faults
            )?;
        }
        writeln!(f, "  lost                        {:>8}", self.lost)?;
        writeln!(
            f,
            "  expired                     {:>8}  (deleted by SQS at the retention, before their fate)",
            self.expired
        )?;
        writeln!(
            f,
            "  taken from another source   {:>8}  (two sources sharing the DLQ: redriven to the wrong one)",
            self.wrong_source
        )?;
        writeln!(
            f,
            "  effects more than once      {:>8}{}",
            self.effects_more_than_once,
            self.effects_twice_of
                .as_ref()
                .map(|id| format!("  (order {id}, for one)"))
                .unwrap_or_default()
        )?;
        writeln!(
            f,
            "  duplicates absorbed         {:>8}  (deliveries of a message already done)",
            self.duplicates_absorbed
        )?;
        writeln!(f, "  duplicate dead letters      {:>8}  (one message dead-lettered twice after a lost delete)", self.duplicate_dead_letters)?;
        writeln!(
            f,
            "  dead letters also processed {:>8}  (delivered again after a lost delete, and done; at most {})",
            self.dead_and_processed, self.dead_letters_delivered_again
        )?;
        writeln!(
            f,
            "  redriven from the DLQ       {:>8}  (beyond the cap: {})",
            self.redriven, self.beyond_cap
        )?;
        writeln!(f, "  invocations                 {:>8}", self.invocations)?;
        writeln!(
            f,
            "  injected send failures      {:>8}  (whole calls and refused entries)",
            self.injected_send_failures
        )?;
        writeln!(
            f,
            "  stalled sends               {:>8}  (never answered, {} after SQS took them: cut off at the deadline, given back)",
            self.stalled_calls, self.stalled_after_delivery
        )?;
        writeln!(
            f,
            "  store calls failed          {:>8}  (claim, complete, release; completions never confirmed: {}, landed after their lease: {}; claims granted twice: {})",
            self.store_faults, self.unconfirmed_completions, self.completions_after_lease, self.claims_granted_twice
        )?;
        writeln!(
            f,
            "  whole batches failed        {:>8}  (deletes lost: delivered again, done records too)",
            self.lost_deletes
        )?;
        writeln!(
            f,
            "  late calls                  {:>8}  (SQS and store, up to half the batch's time; visibility changes throttled: {})",
            self.slow_calls, self.throttled_visibility
        )?;
        writeln!(
            f,
            "  throttled invocations       {:>8}  (received, not tried: the receive count rises)",
            self.throttled_invocations
        )?;
        writeln!(
            f,
            "  overlapping deliveries      {:>8}  (visibility ran out mid-batch: two containers at once)",
            self.overlapping_deliveries
        )?;
        writeln!(
            f,
            "  timed out by Lambda         {:>8}  (the processor answered after its deadline; {} handlers stopped before their effect)",
            self.timed_out, self.stopped_before_effect
        )?;
        writeln!(
            f,
            "  longest deliverable wait    {:>7}s  (a message a receive could take, waiting for one; in memory)",
            self.longest_deliverable_wait.as_secs()
        )?;
        if self.sent_to_lane > 0 {
            writeln!(
                f,
                "  sent to the retry lane      {:>8}  (a held group's head and backlog; at most {} in the lane at once)",
                self.sent_to_lane, self.lane_backlog
            )?;
        }
        if self.order_end_to_end {
            writeln!(
                f,
                "  held heads released         {:>8}  ({} to be tried again, {} to the DLQ by the operator)",
                self.released_to_retry + self.released_to_dlq,
                self.released_to_retry,
                self.released_to_dlq
            )?;
        }
        writeln!(
            f,
            "  most tries of one message   {:>8}  ({} chains past REDRIVE_MAX_ATTEMPTS{}{})",
            self.most_tries,
            self.tries_beyond_limit,
            if self.tries_checked {
                "; FIFO, counted by the attempt ledger: in the invariant"
            } else {
                "; a copy whose delete was lost is tried again: not in the invariant"
            },
            self.first_beyond_limit
                .as_deref()
                .map_or_else(String::new, |first| format!("; the first: {first}"))
        )?;
        writeln!(
            f,
            "  effects out of group order  {:>8}  (FIFO, {}{}){}",
            self.out_of_order,
            if self.order_end_to_end {
                "end to end, the redrive included"
            } else {
                "before the redrive"
            },
            if self.order_checked {
                ""
            } else {
                "; moto's own FIFO order is not SQS's, so not in the invariant"
            },
            self.first_out_of_order
                .as_deref()
                .map_or_else(String::new, |first| format!("; the first: {first}"))
        )?;
        writeln!(
            f,
            "  longest re-send chain       {:>8}  (chains past Lambda's {LAMBDA_LOOP_LIMIT}: {}; the consumer's recursive_loop is Allow)",
            self.longest_chain, self.chains_past_16
        )?;
        let (deferred, transient, ok_at_end) = self.alarms();
        writeln!(
            f,
            "  deferred past the age limit {:>8}  (dead-lettered deferred_too_long, then redriven)",
            self.deferred_too_long
        )?;
        writeln!(
            f,
            "  alarms over {} minutes       Deferred > {DEFERRED_THRESHOLD}: ALARM {deferred} min; TransientErrors > {TRANSIENT_ERRORS_THRESHOLD}: ALARM {transient} min; {} in the last",
            self.minutes.len(),
            if ok_at_end { "OK" } else { "ALARM" }
        )?;
        if !self.held_minutes.is_empty() {
            let held = self.held_alarm();
            writeln!(
                f,
                "  held minutes unalarmed      {:>8}  (of {} minutes with a held head; HeldHeads > 0 in ALARM {} minutes after the holds ended)",
                held.missed, held.held, held.late
            )?;
        }
        write!(
            f,
            "  invariant                   {:>8}  ({:.1} s)",
            if self.holds() { "holds" } else { "BROKEN" },
            self.elapsed.as_secs_f64()
        )
    }
}

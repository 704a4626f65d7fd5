//! The end of a run, once the queues are empty: held heads released as an operator would, the
//! downstream healed and the DLQ redriven, then every message's fate tallied.
use super::*;

impl<'a, Q: SoakQueues, H: RecordHandler> Driver<'a, Q, H> {
    /// The operator of a hold, when nothing else is visible: every held head is released, to be
    /// tried again the first time (a fix deployed) and to the DLQ after that, or at once for a
    /// permanent failure, and made visible through its receipt handle. False when none was
    /// waiting for a release.
    pub(super) async fn release_held(
        &mut self,
        report: &mut SoakReport,
    ) -> Result<bool, PortError> {
        if !self.holds() {
            return Ok(false);
        }
        let mut released = false;
        // A head released to the DLQ stays listed until it comes back and goes there.
        for (id, hold) in self.ledger.held().await? {
            if hold.release.is_some() {
                continue;
            }
            released = true;
            let id = &id;
            let released_before = self.ledger.entries(&[id.as_str()]).await?[0]
                .as_ref()
                .is_some_and(|entry| entry.attempts_from > 0);
            let release = if released_before || hold.error_kind == "invalid" {
                report.released_to_dlq += 1;
                Release::DeadLetter
            } else {
                report.released_to_retry += 1;
                *self
                    .fresh_sets
                    .lock()
                    .unwrap()
                    .entry(id.clone())
                    .or_default() += 1;
                Release::Retry
            };
            // A stale receipt (the head came back meanwhile) is refused: it is visible anyway.
            release_head(self.ledger, self.queue.inner(), id, release).await?;
        }
        Ok(released)
    }

    /// Phase 2: the downstream and SQS heal; the DLQ is redriven under the policy until nothing
    /// more can go home (permanent failures stay for review).
    pub(super) async fn heal_and_redrive(
        &mut self,
        planned: &PlannedHandler,
        dlq: &str,
        mut second: Option<&mut Self>,
        report: &mut SoakReport,
    ) -> Result<(), PortError> {
        let queue = self.queue;
        report.deferred_too_long = queue
            .inner()
            .read_all(dlq)
            .await?
            .iter()
            .filter_map(|record| Meta::of(record).and_then(Result::ok))
            .filter(|meta| &*meta.error_kind == "deferred_too_long")
            .count();
        // An outage outlasts the deferrals: its messages wait in the DLQ, alarmed, until the
        // downstream is back; then the redrive brings them home.
        if let Some(outage) = &planned.outage {
            while outage.clock.now_ms() < outage.heal_at_ms {
                queue.inner().idle(&self.urls()).await;
            }
        }
        planned.down.store(false, Ordering::SeqCst);
        // With hold nothing leaves a group's order, the redrive included: checked to the end.
        if !self.holds() {
            *planned.group_order.lock().unwrap() = None;
        }
        queue.heal();
        let mut settings = ReprocessSettings::from_lookup([], |_| None)
            .map_err(|e| PortError::new("settings", e))?;
        settings.policy = ReprocessPolicy {
            max_reprocess: self.config.reprocess_cap,
            eligible_after: Duration::ZERO,
            discard_kinds: Vec::new(),
        };
        settings.rate_per_second = 3000.0;
        settings.max_messages = 1_000_000;
        let reprocessor = Reprocessor::new(queue, &settings).with_clock(queue.inner().clock());
        for _ in 0..=self.config.reprocess_cap {
            // As the schedule runs it: the origin in each dead letter's metadata, the source queue
            // for what SQS moved without any.
            let plan = ReprocessCommand {
                source: Some(dlq.to_owned()),
                fallback_destination: Some(self.arn.to_owned()),
                ..ReprocessCommand::default()
            }
            .plan(&settings)
            .map_err(|e| PortError::new("plan", e))?;
            let summary = reprocessor.run(&plan, None, |_| {}).await?;
            report.redriven += summary.reprocessed;
            if summary.reprocessed == 0 {
                return Ok(());
            }
            let mut idle_since = None;
            loop {
                let mut waiting = self.depth().await?;
                let mut invoked = self.invoke_all(report).await?;
                let mut urls = self.urls();
                if let Some(second) = second.as_deref_mut() {
                    waiting += second.depth().await?;
                    invoked |= second.invoke_all(report).await?;
                    urls.extend(second.urls());
                }
                if waiting == 0 {
                    break;
                }
                if invoked || self.release_held(report).await? {
                    idle_since = None;
                } else {
                    self.idle(&urls, &mut idle_since).await?;
                }
            }
        }
        Ok(())
    }

    /// The invariant's figures: every message processed, in the DLQ or still queued; effects
    /// counted; the longest chain of re-sends.
    pub(super) async fn tally(
        &self,
        planned: &PlannedHandler,
        mut chains: HashMap<String, u32>,
        dlq: &str,
        second: Option<&Self>,
        report: &mut SoakReport,
    ) -> Result<(), PortError> {
        let (queue, config) = (self.queue, self.config);
        for (id, copies) in queue.take_chains() {
            let longest = chains.entry(id).or_default();
            *longest = (*longest).max(copies);
        }
        report.longest_chain = chains.values().copied().max().unwrap_or(0);
        report.chains_past_16 = chains.values().filter(|n| **n > LAMBDA_LOOP_LIMIT).count();
        let effects = planned.effects.lock().unwrap().clone();
        report.injected_send_failures = queue.injected.load(Ordering::Relaxed);
        report.stalled_calls = queue.stalls.load(Ordering::Relaxed);
        report.stalled_after_delivery = queue.stalls_after_delivery.load(Ordering::Relaxed);
        report.out_of_order = planned.out_of_order.load(Ordering::Relaxed);
        {
            let tries = planned.tries.lock().unwrap();
            let limit = usize::try_from(config.retry.max_attempts).unwrap_or(usize::MAX);
            let most = tries.values().map(Vec::len).max().unwrap_or(0);
            report.most_tries = u32::try_from(most).unwrap_or(u32::MAX);
            report.tries_beyond_limit = tries.values().filter(|t| t.len() > limit).count();
            report.first_beyond_limit = tries
                .iter()
                .filter(|(_, tries)| tries.len() > limit)
                .min_by_key(|(chain, _)| *chain)
                .map(|((id, redrives, set), tries)| {
                    let each: Vec<String> = tries.iter().map(ToString::to_string).collect();
                    format!(
                        "{id}, {} tries (redriven {redrives} times, release {set}): {}",
                        tries.len(),
                        each.join("; ")
                    )
                });
        }
        report.tries_checked = config.fifo_groups.is_some();
        report.first_out_of_order = planned.first_out_of_order.lock().unwrap().clone();
        report.wrong_source = planned.wrong_source.load(Ordering::Relaxed);
        report.effects_more_than_once = effects.values().filter(|n| **n > 1).count();
        report.effects_twice_of = effects
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(id, _)| id.clone())
            .min();
        report.processed = effects.len();
        let mut dead: BTreeMap<String, u32> = BTreeMap::new();
        for record in queue.inner().take_all(dlq).await? {
            let id = match self.payloads {
                Some(payloads) => {
                    self.large_dead_letter_id(payloads, planned, &record, &effects, report)
                }
                None => None,
            };
            let id = id.unwrap_or_else(|| {
                let body: serde_json::Value =
                    serde_json::from_str(record.body.as_deref().unwrap_or_default())
                        .unwrap_or_default();
                body["id"].as_str().unwrap_or_default().to_owned()
            });
            match Meta::of(&record).and_then(Result::ok) {
                Some(meta) if meta.reprocess_count > config.reprocess_cap => report.beyond_cap += 1,
                Some(_) => {}
                None => report.in_dlq_without_metadata += 1,
            }
            *dead.entry(id).or_default() += 1;
        }
        report.duplicate_dead_letters = dead.values().map(|n| (*n - 1) as usize).sum();
        let dead_not_processed = dead.keys().filter(|id| !effects.contains_key(*id)).count();
        report.dead_and_processed = dead.len() - dead_not_processed;
        report.in_dlq = dead.len();
        report.still_queued = self.depth().await?;
        report.expired = queue.inner().expired(dlq);
        for url in self
            .urls()
            .into_iter()
            .chain(second.iter().flat_map(|second| second.urls()))
        {
            report.expired += queue.inner().expired(url);
        }
        if let Some(second) = second {
            report.still_queued += second.depth().await?;
        }
        report.lost = config
            .messages
            .saturating_sub(report.processed + dead_not_processed + report.still_queued);
        Ok(())
    }

    /// The `id` of a dead letter that points into the payload bucket, read from its object; when
    /// the object is gone, from the origin it was offloaded under. A body gone before its
    /// message took effect is lost (`payload_bodies_missing`); one gone after it is a done
    /// message's delete whose answer Lambda never got, delivered again and dead-lettered as
    /// `payload_missing` with its context (docs/large-messages.md). `None`: an ordinary body.
    pub(super) fn large_dead_letter_id(
        &self,
        payloads: &FaultyPayloads,
        planned: &PlannedHandler,
        record: &SqsRecord<'_>,
        effects: &HashMap<String, u32>,
        report: &mut SoakReport,
    ) -> Option<String> {
        let pointer = redrive::payload::Pointer::of(record)?.ok()?;
        if let Some(body) = payloads.inner.object(&pointer.bucket, &pointer.key) {
            report
                .payload_objects_pointed_at
                .insert(pointer.key.to_string());
            let body: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            return body["id"].as_str().map(str::to_owned);
        }
        let origin = pointer.key.strip_prefix(payload::DEFAULT_PREFIX)?;
        let id = planned
            .origins
            .as_ref()?
            .lock()
            .unwrap()
            .get(origin)
            .cloned();
        match &id {
            Some(id) if effects.contains_key(id) => report.payload_missing_after_effect += 1,
            _ => report.payload_bodies_missing += 1,
        }
        id
    }
}

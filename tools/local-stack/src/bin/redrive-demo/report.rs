//! The demo's report: fates, attempts, retry delays, batch durations, FIFO costs, the DLQ and
//! every alarm's state.
use crate::*;

pub(crate) fn print_summary(step: &str, queue: &str, summary: &ReprocessSummary) {
    println!(
        "  {step:<58} {queue:<9} examined {:>3}: redriven {:>2}, archived {:>2}, review {:>2}, alert {}, not yet {}, send failures {}",
        summary.examined,
        summary.reprocessed,
        summary.discarded,
        summary.manual_review,
        summary.alerted,
        summary.not_yet,
        summary.send_failures
    );
}

pub(crate) fn progress(flows: &[Flow], total: usize, elapsed: Duration) -> String {
    let mut sum = BatchReport::default();
    flows.iter().for_each(|flow| sum.absorb(&flow.report));
    let produced: usize = flows.iter().map(|l| l.produced).sum();
    format!(
        "[{:>5.1}s] produced {produced}/{total} | handled {} | done {} | retried {} | deferred {} | dead-lettered {} | given back {}",
        elapsed.as_secs_f64(),
        sum.records,
        sum.done,
        sum.retried,
        sum.deferred,
        sum.dead_lettered,
        sum.given_back
    )
}

/// The demo's report, a section each; it fails when a message is unaccounted for or an order was
/// charged twice.
pub(crate) async fn report(
    client: &Client,
    topology: &Topology,
    flows: &[Flow],
    scale: f64,
    elapsed: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    print_fates(flows);
    print_batch_durations(flows);
    print_fifo_costs(flows);
    // Alarms first: reading the DLQs below makes their messages invisible for a while.
    print_alarms(client, topology, flows, scale).await?;
    let all_dead = account_for_every_message(client, flows).await?;
    print_attempts(flows, &all_dead);
    print_retry_delays(topology, flows, scale)?;
    print_dlq_contents(&all_dead)?;
    println!("\ndemo run took {:.1}s", elapsed.as_secs_f64());
    Ok(())
}

/// Each consumer's fates.
pub(crate) fn print_fates(flows: &[Flow]) {
    println!("\n== Fates (per record handled; a record handled again after a retry counts again)");
    println!(
        "{:<18}{:>10}{:>10}{:>10}{:>10}{:>10}{:>12}",
        "consumer", "handled", "done", "retried", "deferred", "to DLQ", "given back"
    );
    for flow in flows {
        let r = &flow.report;
        let name = format!(
            "{}{}",
            flow.queue.key,
            if flow.queue.fifo { " (FIFO)" } else { "" }
        );
        println!(
            "{name:<18}{:>10}{:>10}{:>10}{:>10}{:>10}{:>12}",
            r.records, r.done, r.retried, r.deferred, r.dead_lettered, r.given_back
        );
    }
}

/// How long batches took against handling their records one at a time.
pub(crate) fn print_batch_durations(flows: &[Flow]) {
    println!(
        "\n== Batch durations (every payment call takes {PAYMENT_LATENCY}; records in flight at once: REDRIVE_CONCURRENCY)"
    );
    println!(
        "{:<18}{:>12}{:>10}{:>14}{:>12}{:>12}{:>22}",
        "consumer",
        "concurrency",
        "batches",
        "records/batch",
        "median ms",
        "max ms",
        "one at a time (est.)"
    );
    for flow in flows.iter().filter(|flow| !flow.batches.is_empty()) {
        let latency_ms = flow.handler.inner().payments().latency.as_secs_f64() * 1000.0;
        let middle = |mut values: Vec<f64>| {
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        let records = middle(flow.batches.iter().map(|(n, _)| f64::from(*n)).collect());
        let took: Vec<f64> = flow.batches.iter().map(|(_, ms)| *ms).collect();
        let longest = took.iter().copied().fold(0.0, f64::max);
        println!(
            "{:<18}{:>12}{:>10}{:>14}{:>12.1}{:>12.1}{:>19.0} ms",
            flow.queue.key,
            flow.concurrency,
            flow.batches.len(),
            records,
            middle(took),
            longest,
            records * latency_ms
        );
    }
    println!("  (FIFO: one record per message group at a time; the groups run side by side)");
}

/// What a FIFO message cost: Lambda invocations, SQS requests (the mapping's receives and deletes
/// for the batches it delivered, and the consumer's own) and attempt ledger calls.
pub(crate) fn print_fifo_costs(flows: &[Flow]) {
    for flow in flows
        .iter()
        .filter(|flow| flow.queue.fifo && flow.produced > 0)
    {
        let messages = flow.produced as f64;
        let per_message = |n: f64| n / messages;
        println!(
            "  FIFO cost per message, batch size {}: {:.2} Lambda invocations, {:.2} SQS requests, {:.2} attempt ledger calls ({} messages; at batch size 1 every message is an invocation)",
            flow.poller.batch_size(),
            per_message(flow.batches.len() as f64),
            per_message(f64::from(flow.mapping_requests + flow.report.sqs_requests)),
            per_message(f64::from(flow.ledger.reads() + flow.ledger.writes())),
            flow.produced
        );
    }
}

/// The tfvars' alarm rules evaluated on the local figures.
pub(crate) async fn print_alarms(
    client: &Client,
    topology: &Topology,
    flows: &[Flow],
    scale: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n== Alarms (rules from the tfvars, evaluated on the local figures)");
    let alarms = &topology.alarms;
    for flow in flows {
        let key = &flow.queue.key;
        let (dlq_visible, _, _) = depth(client, &flow.queue.dlq_url).await?;
        let oldest = oldest_age_seconds(client, &flow.queue.url).await?;
        let dlq_oldest = oldest_age_seconds(client, &flow.queue.dlq_url).await?;
        let age = f64::from(alarms.oldest_message_age_seconds) / scale;
        let dlq_age = f64::from(alarms.dlq_oldest_message_age_seconds) / scale;
        // The EMF figures' alarms are per period; the run is shorter than one, so its totals.
        let rules = [
            ("DLQ depth > 0".to_owned(), dlq_visible as f64, 0.0),
            (format!("oldest message age > {age:.0}s"), oldest, age),
            (
                format!("DLQ oldest message age > {dlq_age:.0}s"),
                dlq_oldest,
                dlq_age,
            ),
            (
                format!("function errors > {}", alarms.lambda_errors_threshold),
                flow.whole_batch_errors as f64,
                f64::from(alarms.lambda_errors_threshold),
            ),
            (
                format!("function throttles > {}", alarms.lambda_throttles_threshold),
                0.0,
                f64::from(alarms.lambda_throttles_threshold),
            ),
            (
                format!("Deferred > {} (run total)", alarms.deferred_threshold),
                f64::from(flow.report.deferred),
                f64::from(alarms.deferred_threshold),
            ),
            (
                format!(
                    "TransientErrors > {} (run total)",
                    alarms.transient_errors_threshold
                ),
                f64::from(flow.report.transient_errors),
                f64::from(alarms.transient_errors_threshold),
            ),
        ];
        for (rule, value, threshold) in rules {
            alarm(&format!("{key} {rule}"), value, threshold);
        }
    }
    Ok(())
}

/// Where every message went: in = charged + duplicates absorbed + in DLQ + still queued, per
/// consumer; the DLQs' messages (metadata and body) for the sections after.
pub(crate) async fn account_for_every_message(
    client: &Client,
    flows: &[Flow],
) -> Result<Vec<DeadLetter>, Box<dyn std::error::Error>> {
    let mut all_dead = Vec::new();
    println!("\n== Where every message went");
    for flow in flows {
        let dead = read_dlq(client, &flow.queue.dlq_url).await?;
        let (visible, in_flight, delayed) = depth(client, &flow.queue.url).await?;
        let left = (visible + in_flight + delayed) as usize;
        let (lost, twice) = (flow.lost(dead.len() + left), flow.effects_twice());
        println!(
            "{:<10} in {:>4} = charged {:>4} + duplicates absorbed {} + in DLQ {:>3} + still queued {} | lost {lost} | effects twice {twice}",
            flow.queue.key,
            flow.produced,
            flow.charged().len(),
            flow.handler.duplicates(),
            dead.len(),
            left,
        );
        if lost != 0 || twice != 0 {
            return Err(format!(
                "{}: {lost} messages unaccounted for, {twice} orders charged twice",
                flow.queue.key
            )
            .into());
        }
        all_dead.extend(dead);
    }
    Ok(all_dead)
}

/// How many attempts each message took to its final fate.
pub(crate) fn print_attempts(flows: &[Flow], all_dead: &[DeadLetter]) {
    println!("\n== Attempts a message took to its final fate");
    let mut histogram: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for flow in flows {
        flow.charged()
            .iter()
            .for_each(|(_, attempt)| histogram.entry(*attempt).or_default().0 += 1);
    }
    all_dead
        .iter()
        .filter_map(|(meta, _)| meta.as_ref())
        .for_each(|meta| histogram.entry(meta.attempts).or_default().1 += 1);
    for (attempts, (done, dead)) in &histogram {
        println!(
            "  {attempts} attempt(s): {done:>4} processed, {dead:>3} dead-lettered  {}",
            "#".repeat((done + dead).div_ceil(4))
        );
    }
}

/// The delays the retries were scheduled with, against the policy.
pub(crate) fn print_retry_delays(
    topology: &Topology,
    flows: &[Flow],
    scale: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n== Retry delays scheduled (DelaySeconds), against the policy (scaled {scale}x)");
    let policy = topology
        .settings(&flows[0].queue.key, "unused", &[])?
        .processor
        .retry;
    let sent: Vec<Sent> = flows
        .iter()
        .flat_map(|flow| flow.processor.queue().sent())
        .filter(|s| !s.queue_url.contains("-dlq"))
        .collect();
    print_delays(&sent, &policy);
    let fifo_retries: u32 = flows
        .iter()
        .filter(|l| l.queue.fifo)
        .map(|l| l.report.given_back)
        .sum();
    println!("  FIFO: {fifo_retries} records retried in place with ChangeMessageVisibility (no re-send, group order kept)");
    Ok(())
}

/// The DLQs' messages by error class, and one as an example.
pub(crate) fn print_dlq_contents(
    all_dead: &[DeadLetter],
) -> Result<(), Box<dyn std::error::Error>> {
    println!("\n== DLQ contents by error class");
    let mut classes: BTreeMap<String, usize> = BTreeMap::new();
    for (meta, _) in all_dead {
        let key = meta
            .as_ref()
            .map_or("moved by SQS (no metadata)".to_owned(), |m| {
                format!("{}/{}", m.error_class, m.error_kind)
            });
        *classes.entry(key).or_default() += 1;
    }
    classes
        .iter()
        .for_each(|(class, count)| println!("  {class:<34}{count:>4}"));
    if let Some((Some(meta), body)) = all_dead
        .iter()
        .find(|(meta, _)| meta.as_ref().is_some_and(|m| m.attempts > 1))
    {
        println!(
            "\n  example: body {body}\n  redrive attribute:\n{}",
            indent(&serde_json::to_string_pretty(meta)?)
        );
    }
    Ok(())
}

pub(crate) fn alarm(name: &str, value: f64, threshold: f64) {
    let state = if value > threshold { "ALARM" } else { "OK" };
    println!("  {name:<44} {state:<6} (value {value})");
}

pub(crate) fn print_delays(sent: &[Sent], policy: &RetryPolicy) {
    let deferral = |s: &Sent| s.error_kind.ends_with("_circuit_open");
    let mut by_attempt: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    sent.iter()
        .filter(|s| s.attempts > 0 && !deferral(s))
        .for_each(|s| {
            by_attempt
                .entry(s.attempts)
                .or_default()
                .push(s.delay_seconds)
        });
    for (attempt, delays) in by_attempt {
        let ceiling = policy.ceiling(attempt).as_secs_f64().ceil() as u32;
        let max = delays.iter().max().copied().unwrap_or(0);
        let mean = delays.iter().sum::<u32>() as f64 / delays.len() as f64;
        let verdict = if max <= ceiling { "within" } else { "OVER" };
        println!("  retry {attempt}: {:>3} re-sends, delay mean {mean:.1}s max {max}s, {verdict} the envelope 0..{ceiling}s", delays.len());
    }
    let deferrals = sent.iter().filter(|s| deferral(s)).count();
    println!("  deferrals (circuit open, no attempt spent): {deferrals}");
}

pub(crate) fn indent(text: &str) -> String {
    text.lines()
        .map(|line| format!("    {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

pub(crate) async fn oldest_age_seconds(
    client: &Client,
    url: &str,
) -> Result<f64, redrive_local::Error> {
    let output = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
        .send()
        .await
        .map_err(redrive_local::Error::sdk)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as f64;
    let oldest = output
        .messages()
        .iter()
        .filter_map(|m| {
            m.attributes()?
                .get(&MessageSystemAttributeName::SentTimestamp)?
                .parse::<f64>()
                .ok()
        })
        .fold(now, f64::min);
    Ok(((now - oldest) / 1000.0).max(0.0))
}

/// The DLQ's messages with their metadata, read without consuming them.
/// A DLQ message: its metadata (none when SQS moved it) and its body.
pub(crate) type DeadLetter = (Option<Meta<'static>>, String);

pub(crate) async fn read_dlq(
    client: &Client,
    url: &str,
) -> Result<Vec<DeadLetter>, redrive::PortError> {
    let records = browse(&SqsQueue::with_client(client.clone()), url, 10_000).await?;
    Ok(records
        .iter()
        .map(|record| {
            let meta = Meta::of(record).and_then(Result::ok).map(Meta::into_owned);
            (meta, record.body.as_deref().unwrap_or_default().to_owned())
        })
        .collect())
}

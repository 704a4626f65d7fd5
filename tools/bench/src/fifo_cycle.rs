//! The FIFO row as deployed: one message group drained through the receive → invoke → delete cycle
//! of Lambda's event source mapping, at batch size 1 and at the tfvars' FIFO batch size, side by
//! side. SQS hands out a group's next messages only after the earlier ones are deleted, so each
//! cycle costs its fixed part (the poll, the invoke and the delete: `CYCLE`) once per batch, and
//! the records of a batch run one after the other (one group is one lane). The queue is the
//! in-memory SQS of the soak (FIFO group locking as SQS does it), the processor and its attempt
//! ledger are the real ones; the ledger's calls are counted (none on this happy path).
use std::sync::Arc;
use std::time::{Duration, Instant};

use redrive::envelope::OutgoingMessage;
use redrive::event::Text;
use redrive::testing::{Counted, ManualClock, MemoryLedger};
use redrive::{Message, Processor, ProcessorConfig, QueuePort, RecordError, RecordHandler};
use redrive_local::memory::{MemorySqs, QueueSpec};

/// Messages of the one group drained.
pub const MESSAGES: usize = 100;
/// The handler's time per message (a payment call).
pub const HANDLER: Duration = Duration::from_millis(20);
/// The fixed cost of one receive → invoke → delete cycle (the estimate of it).
pub const CYCLE: Duration = Duration::from_millis(50);

/// One drain of the group at one batch size.
pub struct Drained {
    pub batch_size: u32,
    pub messages_per_second: f64,
    pub invocations_per_message: f64,
    /// ReceiveMessage and DeleteMessageBatch (the mapping's), and the processor's own.
    pub requests_per_message: f64,
    pub ledger_calls: u32,
}

struct Payment;

impl RecordHandler for Payment {
    async fn handle(&self, _message: &Message<'_>) -> Result<(), RecordError> {
        tokio::time::sleep(HANDLER).await;
        Ok(())
    }
}

/// Drains [`MESSAGES`] of one group in batches of `batch_size`.
pub async fn drain(batch_size: u32) -> Result<Drained, String> {
    let sqs = MemorySqs::new(Arc::new(ManualClock::at(1_763_790_000_000)));
    let (url, arn) = sqs.create("payments.fifo", QueueSpec::named("payments.fifo"));
    let bodies: Vec<String> = (0..MESSAGES).map(|n| format!("{{\"n\":{n}}}")).collect();
    for chunk in bodies.chunks(10) {
        let messages: Vec<OutgoingMessage<'_>> = chunk
            .iter()
            .map(|body| OutgoingMessage {
                body: Text::from(body.as_str()),
                attributes: Vec::new(),
                delay_seconds: 0,
                group_id: Some(Text::from("customer-A")),
                deduplication_id: Some(Text::from(body.as_str())),
                trace_header: None,
            })
            .collect();
        sqs.send_batch(&url, &messages)
            .await
            .map_err(|e| e.to_string())?;
    }
    let ledger = Arc::new(Counted::new(MemoryLedger::new()));
    let processor = Processor::new(&sqs, {
        let mut processor_config = ProcessorConfig::default();
        processor_config.dlq_url = Some("mem://payments-dlq.fifo".into());
        processor_config.source_queue_url = Some(url.clone());
        processor_config
    })
    .with_ledger(ledger.clone());
    let (mut invocations, mut requests) = (0u32, 0u32);
    let started = Instant::now();
    while sqs.depth(&url) > 0 {
        tokio::time::sleep(CYCLE).await;
        let mut records = sqs
            .receive(&url, batch_size, Duration::from_secs(180), Duration::ZERO)
            .await
            .map_err(|e| e.to_string())?;
        requests += 1;
        if records.is_empty() {
            continue;
        }
        for record in &mut records {
            record.event_source_arn = Some(Text::from(arn.clone()));
        }
        let processed = processor
            .process(&Payment, &records, u64::MAX / 2)
            .await
            .map_err(|e| e.to_string())?;
        invocations += 1;
        requests += processed.report.sqs_requests + 1;
        if !processed.response.batch_item_failures.is_empty() {
            return Err("a payment of the FIFO drain failed".into());
        }
        let handles: Vec<&str> = records
            .iter()
            .filter_map(|record| record.receipt_handle.as_deref())
            .collect();
        sqs.delete_batch(&url, &handles)
            .await
            .map_err(|e| e.to_string())?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let per_message = |n: u32| f64::from(n) / MESSAGES as f64;
    Ok(Drained {
        batch_size,
        messages_per_second: MESSAGES as f64 / elapsed,
        invocations_per_message: per_message(invocations),
        requests_per_message: per_message(requests),
        ledger_calls: ledger.reads() + ledger.writes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_group_drained_in_batches_of_ten_takes_a_tenth_of_the_invocations_and_no_ledger_call()
    {
        let drained = drain(10).await.unwrap();
        assert_eq!(drained.invocations_per_message, 0.1);
        // Per batch: the receive, the delete, and nothing of the processor's own.
        assert_eq!(drained.requests_per_message, 0.2);
        assert_eq!(drained.ledger_calls, 0);
    }
}

//! The DLQ reprocessor function. EventBridge Scheduler invokes it with a [`ReprocessCommand`] as its
//! input (or a plain scheduled event: the defaults from the environment); an operator can invoke it
//! by hand with a command. It answers with the run's [`ReprocessSummary`].
use std::time::{Duration, Instant};

use redrive::config::ReprocessSettings;
use redrive::port::{Clock, SystemClock};
use redrive::reprocess::{ReprocessCommand, ReprocessSummary, Reprocessor};
use redrive::{ConfigError, PortError, QueuePort};

#[derive(Debug, thiserror::Error)]
pub enum InvocationError {
    #[error("the payload is neither a redrive command nor a scheduled event: {0}")]
    Payload(#[from] serde_json::Error),
    #[error(transparent)]
    Command(#[from] ConfigError),
    #[error("the run stopped: {0} (messages it had not finished stay in the DLQ)")]
    Queue(#[from] PortError),
}

/// Time kept back before the deadline: the run stops receiving and releases what it holds.
const DEADLINE_MARGIN: Duration = Duration::from_secs(10);

/// The command in `payload`: a command object, or an EventBridge scheduled event (defaults).
pub fn command_of(payload: &str) -> Result<ReprocessCommand, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_str(payload)?;
    // `detail-type` marks an EventBridge event; a command has no such field.
    if value.get("detail-type").is_some() {
        Ok(ReprocessCommand::default())
    } else {
        serde_json::from_value(value)
    }
}

/// One invocation: plan, run until the DLQ is empty, the limit or the deadline, and report.
pub async fn handle_invocation<Q: QueuePort>(
    payload: &str,
    reprocessor: &Reprocessor<Q>,
    settings: &ReprocessSettings,
    deadline_ms: u64,
) -> Result<ReprocessSummary, InvocationError> {
    let plan = command_of(payload)?.plan(settings)?;
    let now = SystemClock.now_ms();
    let deadline_ms = redrive::lambda::absolute_deadline(deadline_ms, now);
    let left = Duration::from_millis(deadline_ms.saturating_sub(now));
    let stop_at = Instant::now() + left.saturating_sub(DEADLINE_MARGIN);
    let summary = reprocessor.run(&plan, Some(stop_at), |_| {}).await?;
    println!(
        "{}",
        summary.emf_line(&settings.metrics_namespace, SystemClock.now_ms())
    );
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(file: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/../../events/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn a_scheduled_event_runs_with_the_defaults_and_a_command_is_read_as_given() {
        assert_eq!(
            command_of(&sample("scheduled-event.json")).unwrap(),
            ReprocessCommand::default()
        );
        let command = command_of(&sample("redrive-command.json")).unwrap();
        assert!(command.dry_run);
        assert_eq!(command.max_messages, Some(100));
        assert_eq!(command.error_kinds, ["payment_timeout"]);
        let error = command_of(r#"{"maxMessage": 5}"#).unwrap_err();
        assert!(
            error.to_string().contains("unknown field `maxMessage`"),
            "{error}"
        );
    }
}

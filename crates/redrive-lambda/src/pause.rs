//! The consumer's side of pausing its intake (`redrive::intake`): it asks the controller once its
//! handler's downstream has been down for `REDRIVE_PAUSE_AFTER`, and answers the controller's
//! probes with what became of the probe's record.
use std::sync::Mutex;

use redrive_core::config::PauseSettings;
use redrive_core::envelope::OutgoingMessage;
use redrive_core::pause::{PauseRequest, ProbeVerdict};
use redrive_core::port::QueuePort;
use redrive_core::{PortError, ProcessorConfig};
use serde::Serialize;

/// The processor configuration a probe runs with: the deferral age limit lifted. A message the
/// controller probes with waited paused, not deferred, and a probe of a long outage must not
/// dead-letter it for the time the intake stood still.
pub fn probe_config(mut config: ProcessorConfig) -> ProcessorConfig {
    config.retry.defer_max_age = *redrive_core::backoff::DEFER_MAX_AGE_RANGE.end();
    config
}

/// How often one container asks at most: the controller reads requests once a minute.
const ASK_EVERY_MS: u64 = 60_000;

/// A consumer's pause requests: when the outage has lasted, at most once a minute.
pub struct PauseSignal {
    settings: PauseSettings,
    asked_ms: Mutex<Option<u64>>,
}

impl PauseSignal {
    /// Requests as `settings` say.
    pub fn new(settings: PauseSettings) -> Self {
        Self {
            settings,
            asked_ms: Mutex::default(),
        }
    }

    /// The request to send at `now_ms`, if the downstream has been down since `outage_since` for
    /// the configured time and this container has not asked within the last minute.
    pub fn due(
        &self,
        outage_since: Option<u64>,
        function: &str,
        now_ms: u64,
    ) -> Option<PauseRequest> {
        let since = outage_since?;
        let after = u64::try_from(self.settings.after.as_millis()).unwrap_or(u64::MAX);
        if now_ms.saturating_sub(since) < after {
            return None;
        }
        let mut asked = self
            .asked_ms
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if asked.is_some_and(|asked| now_ms < asked + ASK_EVERY_MS) {
            return None;
        }
        *asked = Some(now_ms);
        Some(PauseRequest::new(function, since))
    }

    /// Sends `request` to the controller's queue.
    pub async fn ask<Q: QueuePort>(
        &self,
        queue: &Q,
        request: &PauseRequest,
    ) -> Result<(), PortError> {
        let body = serde_json::to_string(request).expect("a request serialises");
        let message = OutgoingMessage {
            body: body.into(),
            attributes: Vec::new(),
            delay_seconds: 0,
            group_id: None,
            deduplication_id: None,
            trace_header: None,
        };
        let refused = queue
            .send_batch(&self.settings.queue_url, &[message])
            .await?;
        match refused.first() {
            Some(refused) => Err(PortError::new("SendMessageBatch", refused.message.clone())),
            None => Ok(()),
        }
    }
}

/// A consumer's answer: the partial batch response, and to the controller's probe its verdict
/// beside it (`{"batchItemFailures": [...], "probe": "up"}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Answer<R> {
    /// The answer Lambda's event source mapping reads.
    Batch(R),
    /// The answer to a probe.
    Probe {
        /// The partial batch response.
        #[serde(flatten)]
        response: R,
        /// The verdict.
        probe: ProbeVerdict,
    },
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::SqsBatchResponse;
    use redrive_core::port::RecordingQueue;

    use super::*;

    const INTAKE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/redrive-intake";
    const MINUTE: u64 = 60_000;

    #[tokio::test]
    async fn a_container_asks_once_the_outage_lasts_and_then_once_a_minute() {
        let signal = PauseSignal::new(PauseSettings::new(Duration::from_secs(300), INTAKE));
        let down_since = 1_000 * MINUTE;
        assert_eq!(
            signal.due(None, "orders", down_since + 10 * MINUTE),
            None,
            "up"
        );
        assert_eq!(
            signal.due(Some(down_since), "orders", down_since + 4 * MINUTE),
            None
        );
        let request = signal
            .due(Some(down_since), "orders", down_since + 5 * MINUTE)
            .unwrap();
        assert_eq!(request, PauseRequest::new("orders", down_since));
        assert_eq!(
            signal.due(Some(down_since), "orders", down_since + 5 * MINUTE + 59_000),
            None
        );
        assert!(signal
            .due(Some(down_since), "orders", down_since + 6 * MINUTE)
            .is_some());

        let queue = RecordingQueue::default();
        signal.ask(&queue, &request).await.unwrap();
        let sent = queue.sent_to(INTAKE);
        let asked: PauseRequest = serde_json::from_str(&sent[0].body).unwrap();
        assert_eq!(asked, request);
    }

    #[test]
    fn a_probe_answer_is_the_batch_response_with_the_verdict_beside_it() {
        let response = SqsBatchResponse::default();
        let batch = serde_json::to_value(Answer::Batch(response.clone())).unwrap();
        assert_eq!(batch, serde_json::json!({ "batchItemFailures": [] }));
        let probe = Answer::Probe {
            response,
            probe: ProbeVerdict::Down,
        };
        assert_eq!(
            serde_json::to_value(probe).unwrap(),
            serde_json::json!({ "batchItemFailures": [], "probe": "down" })
        );
    }
}

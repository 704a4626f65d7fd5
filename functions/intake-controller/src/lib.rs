//! The intake controller on AWS: [`AwsIntake`] is the [`IntakePort`] on Lambda (the mappings and
//! the probe's invoke), EventBridge Scheduler (the switches) and SQS (the probe's message and the
//! consumers' requests); [`Config`] is what Terraform gives the function.
use std::time::Duration;

use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::{InvocationType, ScalingConfig};
use aws_sdk_scheduler::types::{
    ActionAfterCompletion, FlexibleTimeWindow, FlexibleTimeWindowMode, Target,
};
use base64::Engine as _;
use redrive::aws::sdk_config_from_env;
use redrive::breaker::{ProbeVerdict, PROBE_KEY};
use redrive::envelope::Timestamp;
use redrive::event::SqsRecord;
use redrive::intake::{IntakePort, IntakeSettings, Mapping, MappingState, Probe};
use redrive::port::QueuePort;
use redrive::{PortError, SqsQueue};
use serde::Deserialize;
use tokio::sync::OnceCell;

/// What Terraform gives the controller (`INTAKE_*`).
#[derive(Debug, Clone)]
pub struct Config {
    /// The mappings it may pause.
    pub mappings: Vec<Mapping>,
    /// The consumers' pause requests.
    pub requests_queue_url: String,
    /// The ramp and the switch's delay.
    pub settings: IntakeSettings,
    /// The schedule group of the switches, and the role they run as.
    pub switch_group: String,
    pub switch_role_arn: String,
}

/// One mapping as `INTAKE_MAPPINGS` lists it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MappingEntry {
    uuid: String,
    queue_url: String,
    queue_arn: String,
    function: String,
    max_concurrency: Option<u32>,
}

impl Config {
    /// Reads `INTAKE_MAPPINGS`, `INTAKE_REQUESTS_QUEUE_URL`, `INTAKE_RAMP`, `INTAKE_SWITCH_AFTER`,
    /// `INTAKE_SWITCH_GROUP` and `INTAKE_SWITCH_ROLE_ARN` through `get`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let required = |name: &str| get(name).ok_or_else(|| format!("{name} is not set"));
        let mappings: Vec<MappingEntry> = serde_json::from_str(&required("INTAKE_MAPPINGS")?)
            .map_err(|error| format!("INTAKE_MAPPINGS: {error}"))?;
        let ramp = match get("INTAKE_RAMP").filter(|ramp| !ramp.is_empty()) {
            None => IntakeSettings::default().ramp,
            Some(ramp) => ramp
                .split(',')
                .map(|step| match step.trim().parse::<u32>() {
                    Ok(step) if (2..=1000).contains(&step) => Ok(step),
                    _ => Err(format!(
                        "INTAKE_RAMP: {step:?} is not a concurrency of 2 to 1000"
                    )),
                })
                .collect::<Result<_, _>>()?,
        };
        let switch_after = match get("INTAKE_SWITCH_AFTER") {
            None => IntakeSettings::default().switch_after,
            Some(text) => redrive::retry::parse_duration(&text).ok_or_else(|| {
                format!("INTAKE_SWITCH_AFTER: {text:?} is not a duration such as 15m")
            })?,
        };
        let mut settings = IntakeSettings::default();
        settings.ramp = ramp;
        settings.switch_after = switch_after;
        Ok(Self {
            mappings: mappings
                .into_iter()
                .map(|m| {
                    Mapping::new(
                        m.uuid,
                        m.queue_url,
                        m.queue_arn,
                        m.function,
                        m.max_concurrency,
                    )
                })
                .collect(),
            requests_queue_url: required("INTAKE_REQUESTS_QUEUE_URL")?,
            settings,
            switch_group: required("INTAKE_SWITCH_GROUP")?,
            switch_role_arn: required("INTAKE_SWITCH_ROLE_ARN")?,
        })
    }
}

/// How long a probe's message stays hidden from others while the consumer handles it: longer than
/// any function's timeout (15 minutes).
const PROBE_VISIBILITY: Duration = Duration::from_secs(16 * 60);

/// The port on the AWS SDK; the clients are made on first use.
pub struct AwsIntake {
    sqs: SqsQueue,
    lambda: OnceCell<aws_sdk_lambda::Client>,
    scheduler: OnceCell<aws_sdk_scheduler::Client>,
    switch_group: String,
    switch_role_arn: String,
    /// `aws`, `aws-cn`, `aws-us-gov`: the universal target's ARN names it.
    partition: String,
}

impl AwsIntake {
    /// The port for `config`'s switches.
    pub fn new(config: &Config) -> Self {
        let partition = config
            .switch_role_arn
            .split(':')
            .nth(1)
            .unwrap_or("aws")
            .to_owned();
        Self {
            sqs: SqsQueue::lazy(),
            lambda: OnceCell::new(),
            scheduler: OnceCell::new(),
            switch_group: config.switch_group.clone(),
            switch_role_arn: config.switch_role_arn.clone(),
            partition,
        }
    }

    async fn lambda(&self) -> &aws_sdk_lambda::Client {
        self.lambda
            .get_or_init(|| async { aws_sdk_lambda::Client::new(&sdk_config_from_env()) })
            .await
    }

    async fn scheduler(&self) -> &aws_sdk_scheduler::Client {
        self.scheduler
            .get_or_init(|| async { aws_sdk_scheduler::Client::new(&sdk_config_from_env()) })
            .await
    }

    /// The SQS port the consumers' pause requests are read through ([`take_requests`]).
    pub fn sqs(&self) -> &SqsQueue {
        &self.sqs
    }

    fn switch_name(uuid: &str) -> String {
        format!("switch-{uuid}")
    }
}

fn failed(
    operation: &'static str,
    error: impl std::error::Error + Send + Sync + 'static,
) -> PortError {
    PortError::new(operation, aws_sdk_lambda::error::DisplayErrorContext(error))
}

impl IntakePort for AwsIntake {
    async fn mapping(&self, uuid: &str) -> Result<MappingState, PortError> {
        const OPERATION: &str = "GetEventSourceMapping";
        let mapping = self
            .lambda()
            .await
            .get_event_source_mapping()
            .uuid(uuid)
            .send()
            .await
            .map_err(|error| failed(OPERATION, error))?;
        // The mapping's State (Lambda API reference, EventSourceMappingConfiguration): a mapping
        // on its way to a state counts as there; one being created, updated or deleted is asked
        // again next tick.
        let enabled = match mapping.state() {
            Some("Enabled" | "Enabling") => true,
            Some("Disabled" | "Disabling") => false,
            state => {
                return Err(PortError::new(
                    OPERATION,
                    format!("mapping {uuid} is {state:?}: asked again at the next tick"),
                ))
            }
        };
        let max_concurrency = mapping
            .scaling_config()
            .and_then(ScalingConfig::maximum_concurrency)
            .and_then(|max| u32::try_from(max).ok());
        Ok(MappingState {
            enabled,
            max_concurrency,
        })
    }

    async fn set_mapping(&self, uuid: &str, state: MappingState) -> Result<(), PortError> {
        // An empty ScalingConfig removes the maximum concurrency (Lambda API reference,
        // ScalingConfig: "To remove the configuration, pass an empty value").
        let scaling = ScalingConfig::builder()
            .set_maximum_concurrency(state.max_concurrency.map(|max| max as i32))
            .build();
        self.lambda()
            .await
            .update_event_source_mapping()
            .uuid(uuid)
            .enabled(state.enabled)
            .scaling_config(scaling)
            .send()
            .await
            .map_err(|error| failed("UpdateEventSourceMapping", error))?;
        Ok(())
    }

    async fn arm_switch(
        &self,
        mapping: &Mapping,
        at_ms: u64,
        reason: &str,
    ) -> Result<(), PortError> {
        let name = Self::switch_name(&mapping.uuid);
        // The universal target's input is UpdateEventSourceMapping's request.
        let input = serde_json::json!({
            "UUID": mapping.uuid,
            "Enabled": true,
            "ScalingConfig": match mapping.max_concurrency {
                Some(max) => serde_json::json!({ "MaximumConcurrency": max }),
                None => serde_json::json!({}),
            },
        });
        let target = Target::builder()
            .arn(format!(
                "arn:{}:scheduler:::aws-sdk:lambda:updateEventSourceMapping",
                self.partition
            ))
            .role_arn(&self.switch_role_arn)
            .input(input.to_string())
            .build()
            .map_err(|error| PortError::new("CreateSchedule", error))?;
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(|error| PortError::new("CreateSchedule", error))?;
        // One-time schedules: at(yyyy-mm-ddThh:mm:ss) in the given time zone (Scheduler user
        // guide, "Schedule types").
        let at = Timestamp(at_ms).to_string();
        let expression = format!("at({})", &at[..19]);
        let scheduler = self.scheduler().await;
        let updated = scheduler
            .update_schedule()
            .name(&name)
            .group_name(&self.switch_group)
            .schedule_expression(&expression)
            .schedule_expression_timezone("UTC")
            .flexible_time_window(window.clone())
            .target(target.clone())
            .action_after_completion(ActionAfterCompletion::Delete)
            .description(reason)
            .send()
            .await;
        match updated {
            Ok(_) => Ok(()),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                scheduler
                    .create_schedule()
                    .name(&name)
                    .group_name(&self.switch_group)
                    .schedule_expression(&expression)
                    .schedule_expression_timezone("UTC")
                    .flexible_time_window(window)
                    .target(target)
                    .action_after_completion(ActionAfterCompletion::Delete)
                    .description(reason)
                    .send()
                    .await
                    .map_err(|error| failed("CreateSchedule", error))?;
                Ok(())
            }
            Err(error) => Err(failed("UpdateSchedule", error)),
        }
    }

    async fn disarm_switch(&self, uuid: &str) -> Result<(), PortError> {
        let deleted = self
            .scheduler()
            .await
            .delete_schedule()
            .name(Self::switch_name(uuid))
            .group_name(&self.switch_group)
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                Ok(())
            }
            Err(error) => Err(failed("DeleteSchedule", error)),
        }
    }

    async fn armed_since(&self, uuid: &str) -> Result<Option<u64>, PortError> {
        let got = self
            .scheduler()
            .await
            .get_schedule()
            .name(Self::switch_name(uuid))
            .group_name(&self.switch_group)
            .send()
            .await;
        match got {
            // Armed since the schedule was made: each tick updates it, which keeps that date.
            Ok(schedule) => Ok(Some(schedule.creation_date().map_or(0, |created| {
                u64::try_from(created.to_millis().unwrap_or(0)).unwrap_or(0)
            }))),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            Err(error) => Err(failed("GetSchedule", error)),
        }
    }

    async fn probe(&self, mapping: &Mapping) -> Result<Probe, PortError> {
        let records = self
            .sqs
            .receive(&mapping.queue_url, 1, PROBE_VISIBILITY, Duration::ZERO)
            .await?;
        let Some(probe) = records.first() else {
            return Ok(Probe::Empty);
        };
        let event = lambda_event(probe, &mapping.queue_arn);
        let context = serde_json::json!({ "custom": { PROBE_KEY: "1" } }).to_string();
        let answer = self
            .lambda()
            .await
            .invoke()
            .function_name(&mapping.function)
            .invocation_type(InvocationType::RequestResponse)
            .client_context(base64::engine::general_purpose::STANDARD.encode(context))
            .payload(Blob::new(event.into_bytes()))
            .send()
            .await
            .map_err(|error| failed("Invoke", error))?;
        // A function error leaves the message to come back when its visibility ends, as Lambda's
        // mapping would.
        if answer.function_error.is_some() {
            return Ok(Probe::Down);
        }
        let answer: ProbeAnswer = answer
            .payload
            .as_ref()
            .and_then(|payload| serde_json::from_slice(payload.as_ref()).ok())
            .ok_or_else(|| PortError::new("Invoke", "the consumer's answer is not a probe's: is it built with redrive 0.1 or later?"))?;
        if answer.batch_item_failures.is_empty() {
            if let Some(receipt) = probe.receipt_handle.as_deref() {
                self.sqs
                    .delete_batch(&mapping.queue_url, &[receipt])
                    .await?;
            }
        }
        Ok(match answer.probe {
            ProbeVerdict::Up => Probe::Up,
            ProbeVerdict::Down => Probe::Down,
        })
    }
}

/// A consumer's answer to a probe.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProbeAnswer {
    #[serde(default)]
    batch_item_failures: Vec<serde_json::Value>,
    probe: ProbeVerdict,
}

/// The SQS event of one record, as Lambda's mapping builds it (Lambda developer guide, "Using
/// Lambda with Amazon SQS", example event).
pub fn lambda_event(record: &SqsRecord<'_>, queue_arn: &str) -> String {
    let system = &record.attributes;
    let mut attributes = serde_json::Map::new();
    for (name, value) in [
        ("ApproximateReceiveCount", &system.approximate_receive_count),
        ("SentTimestamp", &system.sent_timestamp),
        (
            "ApproximateFirstReceiveTimestamp",
            &system.approximate_first_receive_timestamp,
        ),
        ("MessageGroupId", &system.message_group_id),
        ("SequenceNumber", &system.sequence_number),
        ("AWSTraceHeader", &system.aws_trace_header),
        (
            "DeadLetterQueueSourceArn",
            &system.dead_letter_queue_source_arn,
        ),
    ] {
        if let Some(value) = value {
            attributes.insert(name.into(), value.to_string().into());
        }
    }
    let region = queue_arn.split(':').nth(3).unwrap_or_default();
    serde_json::json!({
        "Records": [{
            "messageId": record.message_id.as_deref(),
            "receiptHandle": record.receipt_handle.as_deref(),
            "body": record.body.as_deref(),
            "attributes": attributes,
            "messageAttributes": record.message_attributes,
            "eventSource": "aws:sqs",
            "eventSourceARN": queue_arn,
            "awsRegion": region,
        }]
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use redrive::SqsEvent;

    use super::*;

    #[test]
    fn a_probes_event_is_the_record_as_lambdas_mapping_shapes_it() {
        let event = r#"{"Records":[{"messageId":"m-1","receiptHandle":"rh-1","body":"{\"orderId\":\"o-1\"}",
            "attributes":{"ApproximateReceiveCount":"3","SentTimestamp":"1763790000000","MessageGroupId":"t-13"},
            "messageAttributes":{"redrive":{"stringValue":"{}","dataType":"String"}},
            "eventSource":"aws:sqs","eventSourceARN":"arn:aws:sqs:eu-west-1:123456789012:orders"}]}"#;
        let received = SqsEvent::parse(event).unwrap();
        let sent = lambda_event(
            &received.records[0],
            "arn:aws:sqs:eu-west-1:123456789012:orders",
        );
        let again = SqsEvent::parse(&sent).unwrap();
        assert_eq!(again.records, received.records, "{sent}");
        let json: serde_json::Value = serde_json::from_str(&sent).unwrap();
        assert_eq!(json["Records"][0]["awsRegion"], "eu-west-1");
    }

    #[test]
    fn a_consumers_answer_without_a_verdict_is_refused_and_a_config_names_what_is_missing() {
        let up: ProbeAnswer =
            serde_json::from_str(r#"{"batchItemFailures":[],"probe":"up"}"#).unwrap();
        assert_eq!(up.probe, ProbeVerdict::Up);
        assert!(serde_json::from_str::<ProbeAnswer>(r#"{"batchItemFailures":[]}"#).is_err());

        let env = |missing: &str, ramp: &str| {
            let ramp = ramp.to_owned();
            let missing = missing.to_owned();
            Config::from_lookup(move |name| match name {
                _ if name == missing => None,
                "INTAKE_MAPPINGS" => {
                    Some(r#"[{"uuid":"u","queueUrl":"q","queueArn":"a","function":"f"}]"#.into())
                }
                "INTAKE_RAMP" => Some(ramp.clone()),
                "INTAKE_SWITCH_AFTER" => Some("15m".into()),
                other => Some(format!("{other}-value")),
            })
        };
        let config = env("", "2,20").unwrap();
        assert_eq!(config.settings.ramp, [2, 20]);
        assert_eq!(config.mappings[0].max_concurrency, None);
        assert!(env("INTAKE_SWITCH_ROLE_ARN", "2")
            .unwrap_err()
            .contains("INTAKE_SWITCH_ROLE_ARN"));
        assert!(env("", "1").unwrap_err().contains("INTAKE_RAMP"));
    }
}

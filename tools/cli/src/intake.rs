//! `dlq pause` and `dlq resume`: an operator's hold on a function's SQS mappings, and where the
//! intake controller holds one (its switch: a one-time schedule `switch-<uuid>`, whose description
//! says why).
use aws_sdk_lambda::Client as Lambda;
use aws_sdk_scheduler::Client as Scheduler;
use serde::Serialize;

/// A mapping an operator paused or resumed.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Changed {
    pub uuid: String,
    pub queue_arn: String,
    pub enabled: bool,
    /// The controller's switch taken away (`dlq pause`: the hold is the operator's now).
    pub switch_removed: bool,
}

/// The controller's switch of mapping `uuid`: its group, description and when it fires.
#[derive(Debug, Clone)]
pub struct Switch {
    pub group: String,
    pub description: String,
    pub expression: String,
}

/// The switch the intake controller armed for mapping `uuid`, in whichever group.
pub async fn switch(scheduler: &Scheduler, uuid: &str) -> Result<Option<Switch>, String> {
    let name = format!("switch-{uuid}");
    let listed = scheduler
        .list_schedules()
        .name_prefix(&name)
        .send()
        .await
        .map_err(|error| {
            format!(
                "ListSchedules: {}",
                aws_sdk_scheduler::error::DisplayErrorContext(error)
            )
        })?;
    let Some(found) = listed
        .schedules()
        .iter()
        .find(|s| s.name() == Some(name.as_str()))
    else {
        return Ok(None);
    };
    let group = found.group_name().unwrap_or("default").to_owned();
    let schedule = scheduler
        .get_schedule()
        .name(&name)
        .group_name(&group)
        .send()
        .await
        .map_err(|error| {
            format!(
                "GetSchedule: {}",
                aws_sdk_scheduler::error::DisplayErrorContext(error)
            )
        })?;
    Ok(Some(Switch {
        group,
        description: schedule.description().unwrap_or_default().to_owned(),
        expression: schedule
            .schedule_expression()
            .unwrap_or_default()
            .to_owned(),
    }))
}

/// Enables (`resume`) or disables (`pause`) every SQS mapping of `function`. A pause takes the
/// controller's switch away, so the controller leaves the mapping alone and nothing enables it
/// but `dlq resume`; a resume leaves a switch where it is (a ramp goes on to full).
pub async fn set(
    config: &aws_types::SdkConfig,
    function: &str,
    enabled: bool,
) -> Result<Vec<Changed>, String> {
    let (lambda, scheduler) = (Lambda::new(config), Scheduler::new(config));
    let (lambda, scheduler) = (&lambda, &scheduler);
    let mut changed = Vec::new();
    let mut pages = lambda
        .list_event_source_mappings()
        .function_name(function)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|error| {
            format!(
                "ListEventSourceMappings: {}",
                aws_sdk_lambda::error::DisplayErrorContext(error)
            )
        })?;
        for mapping in page.event_source_mappings() {
            let queue_arn = mapping.event_source_arn().unwrap_or_default();
            if !queue_arn.contains(":sqs:") {
                continue;
            }
            let uuid = mapping.uuid().unwrap_or_default();
            let switch_removed = match (enabled, switch(scheduler, uuid).await?) {
                (false, Some(armed)) => {
                    scheduler
                        .delete_schedule()
                        .name(format!("switch-{uuid}"))
                        .group_name(&armed.group)
                        .send()
                        .await
                        .map_err(|error| {
                            format!(
                                "DeleteSchedule: {}",
                                aws_sdk_scheduler::error::DisplayErrorContext(error)
                            )
                        })?;
                    true
                }
                _ => false,
            };
            lambda
                .update_event_source_mapping()
                .uuid(uuid)
                .enabled(enabled)
                .send()
                .await
                .map_err(|error| {
                    format!(
                        "UpdateEventSourceMapping: {}",
                        aws_sdk_lambda::error::DisplayErrorContext(error)
                    )
                })?;
            changed.push(Changed {
                uuid: uuid.to_owned(),
                queue_arn: queue_arn.to_owned(),
                enabled,
                switch_removed,
            });
        }
    }
    if changed.is_empty() {
        return Err(format!("{function} has no SQS event source mapping"));
    }
    Ok(changed)
}

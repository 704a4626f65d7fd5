//! Issue 56 on moto: the intake controller's own calls (Lambda's mappings, Scheduler's switches),
//! `dlq pause` and `dlq resume`, and what `dlq doctor` says of a paused mapping.
use intake_controller::{AwsIntake, Config};
use redrive::intake::{IntakeController, Tick};
use redrive::port::{Clock, SystemClock};

use super::{deploy, dlq, moto_role, stdout, Consumer};

/// The doctor's findings about `function`, as JSON.
fn findings(function: &str) -> Vec<serde_json::Value> {
    let output = dlq(&["doctor", "--function", function, "--json"], &[]);
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test]
async fn the_controller_pauses_and_resumes_and_leaves_an_operators_pause_alone() {
    let name = format!("t{}-intake", std::process::id());
    let role = moto_role(&format!("{name}-role"));
    deploy(&name, &role, &Consumer::default()).await;
    let config = redrive::aws::sdk_config_from_env();
    let lambda = aws_sdk_lambda::Client::new(&config);
    let scheduler = aws_sdk_scheduler::Client::new(&config);
    let group = format!("{name}-intake");
    scheduler
        .create_schedule_group()
        .name(&group)
        .send()
        .await
        .unwrap();
    let listed = lambda
        .list_event_source_mappings()
        .function_name(&name)
        .send()
        .await
        .unwrap();
    let mapping = &listed.event_source_mappings()[0];
    let uuid = mapping.uuid().unwrap().to_owned();
    let entries = serde_json::json!([{
        "uuid": uuid,
        "queueUrl": format!("{}/123456789012/{name}", std::env::var("AWS_ENDPOINT_URL").unwrap()),
        "queueArn": mapping.event_source_arn().unwrap(),
        "function": name,
        "maxConcurrency": 10,
    }]);
    let intake_config = Config::from_lookup(|variable| match variable {
        "INTAKE_MAPPINGS" => Some(entries.to_string()),
        "INTAKE_REQUESTS_QUEUE_URL" => Some("unused".into()),
        "INTAKE_SWITCH_GROUP" => Some(group.clone()),
        "INTAKE_SWITCH_ROLE_ARN" => Some(role.clone()),
        _ => None,
    })
    .unwrap();
    let controller = IntakeController::new(
        AwsIntake::new(&intake_config),
        intake_config.settings.clone(),
    );
    let m = &intake_config.mappings[0];
    let state = || async {
        let got = lambda
            .get_event_source_mapping()
            .uuid(&uuid)
            .send()
            .await
            .unwrap();
        let max = got.scaling_config().and_then(|s| s.maximum_concurrency());
        (got.state().unwrap().to_owned(), max)
    };
    let switch = || async {
        scheduler
            .get_schedule()
            .name(format!("switch-{uuid}"))
            .group_name(&group)
            .send()
            .await
            .ok()
    };
    let now = SystemClock.now_ms();

    // Asked: the switch first, then the mapping disabled.
    assert_eq!(controller.tick(m, true, now).await.unwrap(), Tick::Paused);
    assert_eq!(state().await, ("Disabled".to_owned(), Some(10)));
    let armed = switch().await.expect("the switch is armed");
    assert_eq!(
        armed.target().unwrap().arn(),
        "arn:aws:scheduler:::aws-sdk:lambda:updateEventSourceMapping"
    );
    let input: serde_json::Value =
        serde_json::from_str(armed.target().unwrap().input().unwrap()).unwrap();
    assert_eq!(
        input,
        serde_json::json!({ "UUID": uuid, "Enabled": true, "ScalingConfig": { "MaximumConcurrency": 10 } })
    );
    let disabled = findings(&name);
    assert_eq!(disabled[0]["code"], "mapping-disabled");
    assert!(
        disabled[0]["what"]
            .as_str()
            .unwrap()
            .contains("by the intake controller"),
        "{disabled:?}"
    );

    // Nothing queued to probe with: resumed at the ramp's first step, then at full, the switch gone.
    assert_eq!(
        controller.tick(m, false, now + 60_000).await.unwrap(),
        Tick::Resumed(2)
    );
    assert_eq!(state().await, ("Enabled".to_owned(), Some(2)));
    assert!(switch().await.is_some(), "armed through the ramp");
    assert_eq!(
        controller.tick(m, false, now + 120_000).await.unwrap(),
        Tick::Full
    );
    assert_eq!(state().await, ("Enabled".to_owned(), Some(10)));
    assert!(switch().await.is_none());

    // An operator's pause: no switch, and the controller leaves it, asked or not.
    let paused: serde_json::Value =
        serde_json::from_str(&stdout(&dlq(&["pause", &name], &[]))).unwrap();
    assert_eq!(paused[0]["enabled"], false);
    assert_eq!(
        controller.tick(m, true, now + 180_000).await.unwrap(),
        Tick::NotOurs
    );
    assert_eq!(state().await.0, "Disabled");
    let by_hand = findings(&name);
    assert!(
        by_hand[0]["what"].as_str().unwrap().contains("by hand"),
        "{by_hand:?}"
    );
    stdout(&dlq(&["resume", &name], &[]));
    assert_eq!(state().await.0, "Enabled");
    assert_eq!(
        controller.tick(m, false, now + 240_000).await.unwrap(),
        Tick::Running
    );
}

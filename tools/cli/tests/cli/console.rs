//! `dlq console` in a real browser: Debian's Chromium driven through ChromeDriver. On moto, an
//! operator finds the group whose cause was fixed and redrives exactly it in three clicks (dead
//! letters of the same group that arrive after the job was made stay in the DLQ), reads a message
//! and reveals its body, and releases a held FIFO head; every change is an EventBridge event. The
//! console refuses requests without its token, its form value, its own Host or its own Origin. On
//! LocalStack, an incident of 10,000 dead letters.
use std::collections::BTreeMap;

use serde_json::Value;

use super::browser::{http, Browser, Console};
use redrive_local::incident::{self, failure_of};

use super::held::{held_head, receive_now};
use super::{dead_letters, deploy, dlq, moto_role, new_queue, origin_and_dlq, stdout, Consumer};

/// The bodies `queue` holds, sorted (`dlq export`, with `env`).
fn bodies(queue: &str, env: &[(&str, &str)]) -> Vec<String> {
    let mut bodies: Vec<String> = stdout(&dlq(&["export", queue, "--max", "20000"], env))
        .lines()
        .map(|line| {
            let line: Value = serde_json::from_str(line).unwrap();
            line["body"].as_str().unwrap().to_owned()
        })
        .collect();
    bodies.sort();
    bodies
}

fn orders(range: impl IntoIterator<Item = usize>) -> Vec<String> {
    let mut bodies: Vec<String> = range.into_iter().map(incident::body).collect();
    bodies.sort();
    bodies
}

/// A queue receiving every `redrive.console` event of the default bus (a rule and its target).
async fn audit_queue(client: &aws_sdk_sqs::Client, prefix: &str) -> String {
    let url = new_queue(client, &format!("{prefix}-audit")).await;
    let arn = redrive_local::provision::queue_arn(client, &url)
        .await
        .unwrap();
    let events = aws_sdk_eventbridge::Client::new(&redrive::aws::sdk_config_from_env());
    let rule = format!("{prefix}-audit");
    events
        .put_rule()
        .name(&rule)
        .event_pattern(r#"{"source":["redrive.console"]}"#)
        .send()
        .await
        .unwrap();
    let target = aws_sdk_eventbridge::types::Target::builder()
        .id("audit")
        .arn(arn)
        .build()
        .unwrap();
    events
        .put_targets()
        .rule(&rule)
        .targets(target)
        .send()
        .await
        .unwrap();
    url
}

/// The events the audit queue received: detail-type and detail.
async fn audit_events(client: &aws_sdk_sqs::Client, url: &str) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    loop {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap()
            .messages
            .unwrap_or_default();
        if received.is_empty() {
            return events;
        }
        for message in received {
            let event: Value = serde_json::from_str(message.body().unwrap()).unwrap();
            assert_eq!(event["source"], "redrive.console");
            let kind = event["detail-type"].as_str().unwrap().to_owned();
            events.push((kind, event["detail"].clone()));
            client
                .delete_message()
                .queue_url(url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_an_operator_redrives_the_fixed_group_and_nothing_else() {
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-console", std::process::id());
    let (origin_url, dlq_url, origin_arn) = origin_and_dlq(&client, &prefix).await;
    let audit = audit_queue(&client, &prefix).await;
    let (fifo_url, table, head) = held_head(&client, &prefix).await;
    // The incident: invalid orders on version 7 (fixed in 8), invalid orders on 8, timeouts on 8.
    let fixed = ("permanent", "invalid_order", "7");
    dead_letters(&client, &dlq_url, fixed, &origin_arn, 0..4).await;
    let invalid = ("permanent", "invalid_order", "8");
    dead_letters(&client, &dlq_url, invalid, &origin_arn, 4..6).await;
    let timeout = ("transient", "payment_timeout", "8");
    dead_letters(&client, &dlq_url, timeout, &origin_arn, 6..9).await;
    // A consumer whose intake an operator paused: the queues page says who holds it.
    let paused = format!("{prefix}-paused");
    let role = moto_role(&format!("{paused}-role"));
    deploy(&paused, &role, &Consumer::default()).await;
    stdout(&dlq(&["pause", &paused], &[]));
    let (_console, port, token) = Console::start(&[&dlq_url, "--table", &table], &[]);

    // What a page of another site, or a request without the token, cannot do.
    let home = format!("/?token={token}");
    assert_eq!(http(port, "GET", &home, &[], "").0, 200);
    assert_eq!(
        http(port, "GET", "/?token=0123", &[], "").0,
        403,
        "a wrong token"
    );
    assert_eq!(
        http(
            port,
            "GET",
            &home,
            &[("Host", &format!("evil.example:{port}"))],
            ""
        )
        .0,
        403,
        "another Host (DNS rebinding)"
    );
    let groups_path = format!(
        "/groups?queue={}&token={token}",
        dlq_url.replace(':', "%3A").replace('/', "%2F")
    );
    let (status, page) = http(port, "GET", &groups_path, &[], "");
    assert_eq!(status, 200, "{page}");
    let csrf = page
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap();
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let post = |csrf: &str, origin: &str| {
        let body = format!(
            "csrf={csrf}&queue={}&group=0&action=redrive",
            dlq_url.replace(':', "%3A").replace('/', "%2F")
        );
        let headers = [form[0], ("Origin", origin)];
        http(
            port,
            "POST",
            &format!("/jobs?token={token}"),
            &headers,
            &body,
        )
        .0
    };
    let own = format!("http://127.0.0.1:{port}");
    assert_eq!(post("not-it", &own), 403, "a change without the form value");
    assert_eq!(
        post(csrf, "http://evil.example"),
        403,
        "a change from another site"
    );
    assert_eq!(
        post(csrf, &own),
        404,
        "the form value and the origin pass (no such group)"
    );

    let browser = Browser::start();
    browser.open(&format!("http://127.0.0.1:{port}/?token={token}"));
    let intake = browser.text(&format!(r#"#paused-intakes tr[data-function="{paused}"]"#));
    assert!(intake.contains("by hand"), "{intake}");
    browser.screenshot("1-queues");
    browser.click("a.queue"); // 1
    assert_eq!(browser.count("tr.group"), 3, "three groups");
    browser.screenshot("2-failure-groups");
    browser.click(r#"tr.group[data-kind="invalid_order"][data-version="7"] button[id^=redrive-]"#); // 2
    assert_eq!(browser.text("#selected"), "4");
    assert_eq!(browser.text("#state"), "ready");
    browser.screenshot("3-job-dry-run");

    // Two more failures of the fixed group arrive after the job was made.
    dead_letters(&client, &dlq_url, fixed, &origin_arn, 9..11).await;
    browser.click("#run"); // 3
    browser.wait_for("#state", "done");
    browser.screenshot("4-job-done");

    // A message: its failure, its request's logs, its body only when asked.
    browser.click("#groups");
    browser.click(r#"tr.group[data-kind="payment_timeout"] a.messages"#);
    assert_eq!(browser.count("a.message"), 3);
    browser.screenshot("5-group-messages");
    browser.click("a.message");
    let logs = browser.attribute("#logs", "href");
    assert!(
        logs.contains("logs-insights") && logs.contains("*2Faws*2Flambda*2Forders"),
        "{logs}"
    );
    assert_eq!(browser.count("#reveal"), 1);
    assert!(!browser.source().contains("orderId"), "the body is hidden");
    browser.screenshot("6-message");
    browser.click("#reveal");
    let revealed = browser.text("#body");
    assert!(orders(6..9).contains(&revealed), "{revealed}");
    browser.screenshot("7-message-revealed");

    // A held FIFO group, released to try its head again.
    browser.click("#held");
    assert_eq!(browser.count("tr.held"), 1);
    browser.screenshot("8-held-groups");
    browser.click(&format!("#retry-{head}"));
    assert_eq!(browser.count("#released"), 1);
    assert_eq!(
        receive_now(&client, &fifo_url).await,
        [head.as_str()],
        "visible again at once"
    );

    // A job on a filter across groups: every payment timeout, archived.
    let archive_url = new_queue(&client, &format!("{prefix}-archive")).await;
    browser.click("#home");
    browser.click("a.queue");
    browser.click(r#"#filter-kind option[value="payment_timeout"]"#);
    browser.click(r#"#filter-action option[value="archive"]"#);
    browser.type_into("#filter-target", &archive_url);
    browser.click("#filter-job");
    assert_eq!(browser.text("#selected"), "3");
    browser.screenshot("9-filter-job-dry-run");
    browser.click("#run");
    browser.wait_for("#state", "done");

    assert_eq!(
        bodies(&origin_url, &[]),
        orders(0..4),
        "exactly the group's selection went home"
    );
    assert_eq!(
        bodies(&archive_url, &[]),
        orders(6..9),
        "exactly the filter's selection was archived"
    );
    assert_eq!(
        bodies(&dlq_url, &[]),
        orders((4..6).chain(9..11)),
        "the other group and the later failures stay"
    );

    // Every change, as an event naming who made it.
    let events = audit_events(&client, &audit).await;
    let mut kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "FIFO head released",
            "Job ended",
            "Job ended",
            "Job started",
            "Job started",
            "Message body revealed"
        ],
        "one event per change: {events:?}"
    );
    for (_, detail) in &events {
        assert!(
            detail["caller"]
                .as_str()
                .is_some_and(|arn| arn.starts_with("arn:aws")),
            "{detail}"
        );
    }
    let of = |kind: &str, action: &str| {
        events
            .iter()
            .find(|(k, detail)| k == kind && detail["action"]["kind"] == action)
            .map(|(_, detail)| detail.clone())
            .unwrap_or_else(|| panic!("no {kind} of a {action} job: {events:?}"))
    };
    let (started, ended) = (of("Job started", "redrive"), of("Job ended", "redrive"));
    assert_eq!(
        (
            started["selected"].as_u64(),
            started["selectionHash"].as_str().map(str::len)
        ),
        (Some(4), Some(16))
    );
    assert_eq!(
        (
            ended["state"].as_str(),
            ended["summary"]["reprocessed"].as_u64()
        ),
        (Some("done"), Some(4))
    );
    let archived = of("Job ended", "archive");
    assert_eq!(archived["selectedBy"], "error kind payment_timeout");
    assert_eq!(archived["summary"]["discarded"].as_u64(), Some(3));
    let released = events
        .iter()
        .find(|(kind, _)| kind == "FIFO head released")
        .unwrap();
    assert_eq!(released.1["messageId"], head.as_str());
}

/// Issue 55: 10,000 dead letters across 6 error kinds and 3 function versions. The two groups
/// whose cause was fixed are found and redriven in three actions each; afterwards no order is
/// lost or held twice across the origin and the DLQ, the origin holds exactly the two groups and
/// the DLQ exactly the other 16. On LocalStack: moto 5.2.5 computes every queue attribute for each
/// message it receives (1.6 s per ReceiveMessage at 2,000 messages), too slow for 10,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_two_fixed_groups_of_ten_thousand_dead_letters_are_redriven_exactly() {
    const TOTAL: usize = 10_000;
    let Some(endpoint) = redrive_local::localstack_endpoint() else {
        return;
    };
    let client = redrive_local::sqs_client_at(&endpoint);
    let prefix = format!("t{}-incident", std::process::id());
    let (origin_url, dlq_url, origin_arn) = origin_and_dlq(&client, &prefix).await;
    incident::seed(&client, &dlq_url, &origin_arn, 0..TOTAL)
        .await
        .unwrap();
    let env = [("AWS_ENDPOINT_URL", endpoint.as_str())];
    let (_console, port, token) =
        Console::start(&[&dlq_url, "--max", "20000", "--rate", "3000"], &env);

    let fixed = [("invalid_order", "6"), ("payment_timeout", "7")];
    let browser = Browser::start();
    browser.open(&format!("http://127.0.0.1:{port}/?token={token}"));
    browser.click("a.queue"); // the first group's action 1
    assert_eq!(browser.text("#read"), TOTAL.to_string());
    assert_eq!(browser.count("tr.group"), 18, "6 kinds on 3 versions");
    browser.screenshot("10-incident-groups");
    for (index, (kind, version)) in fixed.iter().enumerate() {
        if index > 0 {
            browser.click("#groups"); // action 1: back from the last job
        }
        let group = format!(r#"tr.group[data-kind="{kind}"][data-version="{version}"]"#);
        browser.click(&format!("{group} button[id^=redrive-]")); // 2
        let selected = (0..TOTAL)
            .filter(|&n| failure_of(n) == (*kind, version.to_string()))
            .count();
        assert_eq!(browser.text("#selected"), selected.to_string());
        browser.click("#run"); // 3
        browser.wait_for("#state", "done");
        assert_eq!(browser.text(".reprocessed"), selected.to_string());
    }
    browser.screenshot("11-incident-second-job-done");

    let home = bodies(&origin_url, &env);
    let left = bodies(&dlq_url, &env);
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for body in home.iter().chain(&left) {
        *held.entry(body.as_str()).or_default() += 1;
    }
    let everything = orders(0..TOTAL);
    let lost = everything
        .iter()
        .filter(|order| !held.contains_key(order.as_str()))
        .count();
    let twice = held.values().filter(|&&count| count > 1).count();
    assert_eq!((lost, twice), (0, 0), "lost, held twice");
    let is_fixed = |n: &usize| {
        let (kind, version) = failure_of(*n);
        fixed.contains(&(kind, version.as_str()))
    };
    assert_eq!(
        home,
        orders((0..TOTAL).filter(is_fixed)),
        "exactly the two groups went home"
    );
    assert_eq!(
        left,
        orders((0..TOTAL).filter(|n| !is_fixed(n))),
        "the other 16 stay"
    );

    // The soaks after this test share LocalStack: it is left without the incident's 10,000.
    for url in [&origin_url, &dlq_url] {
        client.delete_queue().queue_url(url).send().await.unwrap();
    }
}

/// A change whose audit event EventBridge does not confirm is not made: with an audit bus that
/// does not exist, a job's run and a body's reveal are refused, and the DLQ is untouched.
#[tokio::test]
async fn a_change_whose_audit_event_is_not_recorded_is_not_made() {
    let client = redrive_local::sqs_client();
    let prefix = format!("t{}-console-audit", std::process::id());
    let (origin_url, dlq_url, origin_arn) = origin_and_dlq(&client, &prefix).await;
    dead_letters(
        &client,
        &dlq_url,
        ("permanent", "invalid_order", "7"),
        &origin_arn,
        0..2,
    )
    .await;
    let (_console, port, token) = Console::start(&[&dlq_url, "--audit-bus", "no-such-bus"], &[]);
    let queue = dlq_url.replace(':', "%3A").replace('/', "%2F");
    let (status, page) = http(
        port,
        "GET",
        &format!("/groups?queue={queue}&token={token}"),
        &[],
        "",
    );
    assert_eq!(status, 200, "{page}");
    let value_after = |marker: &str| {
        let rest = page.split(marker).nth(1).unwrap();
        rest.split('"').next().unwrap().to_owned()
    };
    let (csrf, group) = (
        value_after(r#"name="csrf" value=""#),
        value_after(r#"data-key=""#),
    );
    let origin = format!("http://127.0.0.1:{port}");
    let headers = [
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Origin", origin.as_str()),
    ];
    let change = |path: &str, body: String| {
        http(
            port,
            "POST",
            &format!("{path}?token={token}"),
            &headers,
            &body,
        )
    };

    let made = change(
        "/jobs",
        format!("csrf={csrf}&queue={queue}&group={group}&action=redrive"),
    );
    assert_eq!(made.0, 303, "making a job changes nothing: {}", made.1);
    let run = change("/jobs/0/run", format!("csrf={csrf}"));
    assert_eq!(run.0, 502);
    assert!(
        run.1
            .contains("the audit event was not recorded, so nothing was changed"),
        "{}",
        run.1
    );
    let id = stdout(&dlq(&["peek", &dlq_url, "-n", "1"], &[]));
    let id: Value = serde_json::from_str(&id).unwrap();
    let reveal = change(
        "/message/reveal",
        format!(
            "csrf={csrf}&queue={queue}&id={}",
            id["messageId"].as_str().unwrap()
        ),
    );
    assert_eq!(reveal.0, 502);
    assert!(
        !reveal.1.contains("orderId"),
        "the body stays hidden: {}",
        reveal.1
    );

    assert_eq!(bodies(&origin_url, &[]), orders(0..0));
    assert_eq!(bodies(&dlq_url, &[]), orders(0..2), "the DLQ is untouched");
}

//! `dlq doctor` against consumers deployed on moto.
use super::{browser, deploy, dlq, moto_role, on_moto, Consumer};
/// Issue 43, item 10: `dlq doctor` on moto names each broken setting of a consumer, one finding
/// per broken consumer, exits 1 on a finding, and finds nothing on a sound one.
#[tokio::test]
async fn the_doctor_names_each_setting_that_loses_or_stalls_messages() {
    on_moto();
    let prefix = format!("t{}-doctor", std::process::id());
    let role = moto_role(&format!("{prefix}-role"));
    let cases: Vec<(&str, Consumer, Option<&str>)> = vec![
        ("sound", Consumer::default(), None),
        (
            "whole-batches",
            Consumer {
                partial_batch_response: false,
                ..Consumer::default()
            },
            Some("no-partial-batch-response"),
        ),
        (
            "short-visibility",
            Consumer {
                visibility_timeout: 60,
                ..Consumer::default()
            },
            Some("visibility-timeout-short"),
        ),
        (
            "no-dlq",
            Consumer {
                max_receive_count: None,
                ..Consumer::default()
            },
            Some("no-redrive-policy"),
        ),
        (
            "few-receives",
            Consumer {
                max_receive_count: Some(3),
                ..Consumer::default()
            },
            Some("max-receive-count-low"),
        ),
        (
            "short-dlq",
            Consumer {
                dlq_retention: 345_600,
                ..Consumer::default()
            },
            Some("dlq-retention-short"),
        ),
        (
            "fifo-unledgered",
            Consumer {
                fifo: true,
                max_receive_count: Some(100),
                ..Consumer::default()
            },
            Some("fifo-batch-without-ledger"),
        ),
        (
            "throttled",
            Consumer {
                reserved: Some(2),
                ..Consumer::default()
            },
            Some("reserved-below-maximum-concurrency"),
        ),
        (
            "typo",
            Consumer {
                environment: vec![("REDRIVE_MAX_ATTEMPS", "5")],
                ..Consumer::default()
            },
            Some("settings-refused"),
        ),
    ];
    for (case, consumer, _) in &cases {
        deploy(&format!("{prefix}-{case}"), &role, consumer).await;
    }
    for (case, _, expected) in &cases {
        let function = format!("{prefix}-{case}");
        let output = dlq(&["doctor", "--function", &function, "--json"], &[]);
        let findings: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("{case}: {e}: {}", String::from_utf8_lossy(&output.stdout)));
        let codes: Vec<&str> = findings
            .as_array()
            .unwrap()
            .iter()
            .map(|finding| finding["code"].as_str().unwrap())
            .collect();
        assert_eq!(
            codes,
            expected.iter().copied().collect::<Vec<_>>(),
            "{case}: {findings:#}"
        );
        assert_eq!(
            output.status.code(),
            Some(if expected.is_some() { 1 } else { 0 }),
            "{case}"
        );
    }

    // The console named no queue finds the same DLQs: every one a mapping's queue leads to.
    let (_console, port, token) = browser::Console::start(&[], &[]);
    let (status, page) = browser::http(port, "GET", &format!("/?token={token}"), &[], "");
    assert_eq!(status, 200, "{page}");
    for (case, consumer, _) in &cases {
        let suffix = if consumer.fifo { ".fifo" } else { "" };
        let listed = page.contains(&format!(r#"data-queue="{prefix}-{case}-dlq{suffix}""#));
        assert_eq!(
            listed,
            consumer.max_receive_count.is_some(),
            "{case}: {page}"
        );
    }
}

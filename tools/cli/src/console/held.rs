//! Held FIFO groups (`REDRIVE_FIFO_ON_DEAD_LETTER=hold`): each held head with the failure that
//! held it, released to be tried again or to the DLQ, as `dlq held` and `dlq release` do.
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Form, Query, State};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;

use redrive::ledger::{release_head, AttemptLedger, Release};
use redrive::port::{Clock, SystemClock};

use super::{escape, failed, not_found, queue_name, refused, when, Answer, Console};

#[derive(Deserialize)]
pub(super) struct Shown {
    #[serde(default)]
    released: Option<String>,
}

pub(super) async fn page(
    State(console): State<Arc<Console>>,
    Query(shown): Query<Shown>,
) -> Answer {
    let Some((table, ledger)) = &console.ledger else {
        return Err(not_found("no ledger table: start the console with --table"));
    };
    let held = ledger.held().await.map_err(failed)?;
    let now = SystemClock.now_ms();
    let mut rows = String::new();
    for (message_id, hold) in &held {
        let held_for = Duration::from_secs(now.saturating_sub(hold.since_ms) / 60_000 * 60);
        let decided = hold.release.map_or("", |release| release.as_str());
        let fields = [("message_id", message_id.as_str())];
        let _ = write!(
            rows,
            r#"<tr class="held" data-message="{id}"><td><code>{id}</code></td><td>{queue}</td><td>{since} ({held_for})</td><td>{receives}</td><td>{kind}</td><td><code>{error}</code></td><td>{decided}</td><td>{retry}{dead_letter}</td></tr>"#,
            id = escape(message_id),
            queue = escape(queue_name(&hold.queue_arn)),
            since = when(Some(hold.since_ms)),
            held_for = humantime::format_duration(held_for),
            receives = hold.receive_count,
            kind = escape(&hold.error_kind),
            error = escape(&hold.error_message),
            decided = escape(decided),
            retry = console.form(
                "/held/release",
                &[fields[0], ("release", Release::Retry.as_str())],
                "Try again",
                &format!("retry-{message_id}"),
            ),
            dead_letter = console.form(
                "/held/release",
                &[fields[0], ("release", Release::DeadLetter.as_str())],
                "Dead-letter it",
                &format!("dead_letter-{message_id}"),
            ),
        );
    }
    let note = shown.released.map_or_else(String::new, |id| {
        format!(
            r#"<p id="released">Released {}: its group goes on.</p>"#,
            escape(&id)
        )
    });
    let body = format!(
        "{note}<p>{} groups held on their head in ledger table {}. Try again once the cause is fixed (a fresh set of attempts); dead-letter it to let its group go on without it.</p>\
         <table><tr><th>head</th><th>queue</th><th>held since</th><th>receives</th><th>kind</th><th>error</th><th>decided</th><th></th></tr>{rows}</table>",
        held.len(),
        escape(table),
    );
    Ok(console
        .page("Held FIFO groups", false, &body)
        .into_response())
}

#[derive(Deserialize)]
pub(super) struct ReleaseForm {
    csrf: String,
    message_id: String,
    release: String,
}

/// Releases a held head: an audit event first, then the release (`dlq release`).
pub(super) async fn release(
    State(console): State<Arc<Console>>,
    Form(form): Form<ReleaseForm>,
) -> Answer {
    console.check_change(&form.csrf)?;
    let Some((table, ledger)) = &console.ledger else {
        return Err(not_found("no ledger table: start the console with --table"));
    };
    let Some(release) = Release::parse(&form.release) else {
        return Err(refused("a release is retry or dead_letter"));
    };
    let detail = json!({
        "table": table,
        "messageId": form.message_id,
        "release": release.as_str(),
    });
    console
        .audit
        .record("FIFO head released", detail)
        .await
        .map_err(failed)?;
    match release_head(ledger, &console.sqs(), &form.message_id, release).await {
        Ok(Some(_)) => Ok(console.redirect(&format!(
            "/held?released={}",
            super::encode(&form.message_id)
        ))),
        Ok(None) => Err(not_found("that head holds no group (any more)")),
        Err(error) => Err(failed(error)),
    }
}

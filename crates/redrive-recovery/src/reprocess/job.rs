//! A bulk action on a failure group as a job: its selection is the exact set of message ids read
//! when it was made, so a dead letter that arrives while it runs is never taken (the bug of
//! ServiceControl #660, where a group retry also took later failures). Run again, a job resumes:
//! what it moved is gone from the DLQ, and the rest is still selected.
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{FailureGroup, Filter, Fingerprint, Plan, ReprocessCommand};
use crate::settings::{ReprocessSettings, MOST_MESSAGES};
use redrive_core::error::ConfigError;
use redrive_core::idempotency::fingerprint;
use redrive_event::SqsRecord;

/// A bulk action on an exact selection of one DLQ's messages, as `dlq job new` writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[non_exhaustive]
pub struct Job {
    /// The DLQ's URL.
    pub queue_url: String,
    /// The failure group the selection was made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<Fingerprint>,
    /// The filter the selection was made with, in words, when it was not one group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_by: Option<String>,
    /// What happens to each selected message.
    #[serde(default)]
    pub action: JobAction,
    /// The selection: SQS message ids.
    pub message_ids: Vec<String>,
    /// [`Job::selection_hash_of`] the selection: two jobs with one hash take the same messages,
    /// and the audit trail names a selection by it.
    pub selection_hash: String,
    /// When the selection was made (ms since the epoch).
    pub created_at_ms: u64,
}

/// What a [`Job`] does with each message of its selection. Whatever it does, a message leaves
/// the DLQ only once SQS has confirmed its copy (none for a discard).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
#[non_exhaustive]
pub enum JobAction {
    /// Sent back with a fresh set of attempts to the queue it failed in.
    #[default]
    Redrive,
    /// Sent with a fresh set of attempts to another queue (its ARN) than the one it failed in.
    Redirect {
        /// The queue's ARN.
        destination: String,
    },
    /// Copied as it is, failure context included, to an archive queue (its URL), then deleted.
    Archive {
        /// The archive queue's URL.
        queue_url: String,
    },
    /// Deleted from the DLQ; nothing is kept.
    Discard,
}

impl JobAction {
    /// The action in a few words, for a page or a log line.
    pub fn describe(&self) -> String {
        match self {
            Self::Redrive => "redrive each to the queue it failed in".into(),
            Self::Redirect { destination } => format!("redirect to {destination}"),
            Self::Archive { queue_url } => format!("archive to {queue_url}, then delete"),
            Self::Discard => "discard (delete, keep nothing)".into(),
        }
    }
}

impl Job {
    /// A job doing `action` with every message `group` was read with.
    pub fn of_group(queue_url: &str, group: &FailureGroup, action: JobAction, now_ms: u64) -> Self {
        Self {
            queue_url: queue_url.to_owned(),
            group: Some(group.fingerprint.clone()),
            selected_by: None,
            action,
            selection_hash: Self::selection_hash_of(&group.message_ids),
            message_ids: group.message_ids.clone(),
            created_at_ms: now_ms,
        }
    }

    /// A job doing `action` with every message of `records` that `filter` takes (ages counted at
    /// `now_ms`); `selected_by` says which, in words.
    pub fn of_filter(
        queue_url: &str,
        records: &[SqsRecord<'_>],
        filter: &Filter,
        selected_by: String,
        action: JobAction,
        now_ms: u64,
    ) -> Self {
        let message_ids: Vec<String> = records
            .iter()
            .filter(|record| filter.takes(record, now_ms))
            .filter_map(|record| record.message_id.as_deref().map(str::to_owned))
            .collect();
        Self {
            queue_url: queue_url.to_owned(),
            group: None,
            selected_by: Some(selected_by),
            action,
            selection_hash: Self::selection_hash_of(&message_ids),
            message_ids,
            created_at_ms: now_ms,
        }
    }

    /// A hash of a selection that does not depend on its order (FNV-1a over the sorted ids, 16
    /// hex digits): it names a selection, it is no digest against tampering.
    pub fn selection_hash_of(message_ids: &[String]) -> String {
        let sorted: BTreeSet<&str> = message_ids.iter().map(String::as_str).collect();
        let text = sorted.into_iter().collect::<Vec<_>>().join("\n");
        format!("{:016x}", fingerprint(&text))
    }

    /// Whether the selection is the one its hash names (a job file edited by hand is refused).
    pub fn is_intact(&self) -> bool {
        Self::selection_hash_of(&self.message_ids) == self.selection_hash
    }

    /// The reprocessor's plan for this job under `settings` (the redrive cap, the rate). The
    /// operator chose the group because its cause is fixed: the policy's wait and its review of
    /// permanent errors do not hold a redrive back (`force`); the redrive cap still does.
    pub fn plan(
        &self,
        settings: &ReprocessSettings,
        dry_run: bool,
        rate_per_second: Option<f64>,
    ) -> Result<Plan, ConfigError> {
        let (destination, discard, archive) = match &self.action {
            JobAction::Redrive => (None, false, None),
            JobAction::Redirect { destination } => (Some(destination.clone()), false, None),
            JobAction::Archive { queue_url } => (None, true, Some(queue_url.clone())),
            JobAction::Discard => (None, true, None),
        };
        let mut plan = ReprocessCommand {
            source: Some(self.queue_url.clone()),
            destination,
            // The run ends once it has seen the whole selection; the rest of the DLQ is read
            // past (left untouched) on the way.
            max_messages: Some(MOST_MESSAGES),
            dry_run,
            rate_per_second,
            force: true,
            message_ids: self.message_ids.clone(),
            discard,
            archive,
            ..ReprocessCommand::default()
        }
        .plan(settings)?;
        if self.action == JobAction::Discard {
            // A discard keeps nothing, even where the settings name an archive queue.
            plan.archive_url = None;
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reprocess::tests::{dead_letter, released, reprocessor, settings, DLQ, NOW, ORIGIN};
    use crate::reprocess::{failure_groups, ReprocessCommand};
    use redrive_core::error::ErrorClass;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn bodies_sent(queue: &redrive_core::port::RecordingQueue) -> Vec<String> {
        let mut bodies: Vec<String> = queue
            .sent_to(ORIGIN)
            .iter()
            .map(|message| message.body.to_string())
            .collect();
        bodies.sort();
        bodies
    }

    fn body(id: &str) -> String {
        format!("{{\"id\":\"{id}\"}}")
    }

    /// Issue 55: a dead letter of the same group that arrives while the job runs is read past and
    /// made visible again, never sent (ServiceControl #660).
    #[tokio::test]
    async fn dead_letters_arriving_while_a_groups_job_runs_are_never_touched() {
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        let selected: Vec<String> = (0..15).map(|n| format!("before-{n:02}")).collect();
        let records: Vec<_> = selected
            .iter()
            .map(|id| dead_letter(id, Some(ErrorClass::Permanent), 0))
            .collect();
        let groups = failure_groups(&records);
        assert_eq!(groups.len(), 1);
        let job = Job::of_group(DLQ, &groups[0], JobAction::Redrive, NOW);
        assert!(job.is_intact());
        queue.stock(DLQ, records);

        let plan = job.plan(&settings(), false, None).unwrap();
        let mut arrived = false;
        let summary = reprocessor
            .run(&plan, None, |_| {
                if !arrived {
                    arrived = true;
                    let late = (0..3)
                        .map(|n| dead_letter(&format!("late-{n}"), Some(ErrorClass::Permanent), 0));
                    queue.stock(DLQ, late);
                }
            })
            .await
            .unwrap();

        assert!(arrived, "the late dead letters came while the job ran");
        let mut expected: Vec<String> = selected.iter().map(|id| body(id)).collect();
        expected.sort();
        assert_eq!(
            bodies_sent(queue),
            expected,
            "the selection went home, whole"
        );
        let mut deleted = queue.deleted_from(DLQ);
        deleted.sort();
        let mut handles: Vec<String> = selected.iter().map(|id| format!("rh-{id}")).collect();
        handles.sort();
        assert_eq!(deleted, handles, "only the selection left the DLQ");
        assert_eq!(released(queue), ["rh-late-0", "rh-late-1", "rh-late-2"]);
        assert_eq!(
            (
                summary.reprocessed,
                summary.filtered_out,
                summary.selection_not_found
            ),
            (15, 3, Some(0))
        );
    }

    /// An interrupted job resumes: run again, it takes what its selection still has in the DLQ
    /// and counts the rest as not found.
    #[tokio::test]
    async fn a_job_run_again_takes_only_what_its_selection_still_has_in_the_dlq() {
        let records: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|id| dead_letter(id, Some(ErrorClass::Transient), 0))
            .collect();
        let job = Job::of_group(DLQ, &failure_groups(&records)[0], JobAction::Redrive, NOW);
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        // "a" and "b" went home in the first run; "c" and a later arrival are left.
        queue.stock(
            DLQ,
            [
                records[2].clone(),
                dead_letter("later", Some(ErrorClass::Transient), 0),
            ],
        );
        let plan = job.plan(&settings(), false, None).unwrap();
        let summary = reprocessor.run(&plan, None, |_| {}).await.unwrap();
        assert_eq!(bodies_sent(queue), [body("c")]);
        assert_eq!(queue.deleted_from(DLQ), ["rh-c"]);
        assert_eq!(released(queue), ["rh-later"]);
        assert_eq!(summary.selection_not_found, Some(2));
    }

    fn sorted(mut texts: Vec<String>) -> Vec<String> {
        texts.sort();
        texts
    }

    /// Issue 55: redirect, archive and discard take exactly the selection too; a discard keeps
    /// nothing even where the settings name an archive queue, and sends nothing home.
    #[tokio::test]
    async fn each_action_takes_exactly_the_selection_where_it_says() {
        const ARCHIVE: &str = "https://sqs.local/123456789012/incident-archive";
        const FIXED: &str = "https://sqs.local/123456789012/orders-fixed";
        let mut with_archive = settings();
        with_archive.archive_url = Some("https://sqs.local/123456789012/settings-archive".into());
        let actions = [
            (
                JobAction::Redirect {
                    destination: "arn:aws:sqs:us-east-1:123456789012:orders-fixed".into(),
                },
                Some(FIXED),
            ),
            (
                JobAction::Archive {
                    queue_url: ARCHIVE.into(),
                },
                Some(ARCHIVE),
            ),
            (JobAction::Discard, None),
        ];
        for (action, goes_to) in actions {
            let records: Vec<_> = ["a", "b"]
                .iter()
                .map(|id| dead_letter(id, Some(ErrorClass::Permanent), 0))
                .collect();
            let job = Job::of_group(DLQ, &failure_groups(&records)[0], action.clone(), NOW);
            let reprocessor = reprocessor(&with_archive);
            let queue = reprocessor.queue();
            queue.stock(DLQ, records);
            queue.stock(DLQ, [dead_letter("later", Some(ErrorClass::Permanent), 0)]);
            let plan = job.plan(&with_archive, false, None).unwrap();
            let summary = reprocessor.run(&plan, None, |_| {}).await.unwrap();

            let sent: Vec<String> = [
                ORIGIN,
                FIXED,
                ARCHIVE,
                with_archive.archive_url.as_deref().unwrap(),
            ]
            .iter()
            .flat_map(|url| queue.sent_to(url))
            .map(|message| message.body.to_string())
            .collect();
            let expected_sent = match goes_to {
                Some(url) => queue
                    .sent_to(url)
                    .iter()
                    .map(|message| message.body.to_string())
                    .collect(),
                None => Vec::new(),
            };
            assert_eq!(sent, expected_sent, "{action:?}: sent only where it says");
            let wanted = if goes_to.is_some() {
                vec![body("a"), body("b")]
            } else {
                Vec::new()
            };
            assert_eq!(sorted(sent), wanted, "{action:?}: the selection, whole");
            assert_eq!(
                sorted(queue.deleted_from(DLQ)),
                ["rh-a", "rh-b"],
                "{action:?}"
            );
            assert_eq!(released(queue), ["rh-later"], "{action:?}");
            let moved = match action {
                JobAction::Redirect { .. } => summary.reprocessed,
                _ => summary.discarded,
            };
            assert_eq!(moved, 2, "{action:?}");
        }
    }

    /// Issue 55: a job on a filter selects what the filter takes when it is made, across groups,
    /// and a later arrival the filter would take is not in it.
    #[tokio::test]
    async fn a_job_on_a_filter_takes_what_the_filter_took_when_it_was_made() {
        let mut records: Vec<_> = ["a", "b"]
            .iter()
            .map(|id| dead_letter(id, Some(ErrorClass::Permanent), 0))
            .collect();
        records.push(dead_letter("transient", Some(ErrorClass::Transient), 0));
        let command = ReprocessCommand {
            source: Some(DLQ.into()),
            error_classes: vec![ErrorClass::Permanent],
            ..ReprocessCommand::default()
        };
        let filter = command.plan(&settings()).unwrap().filter;
        let job = Job::of_filter(
            DLQ,
            &records,
            &filter,
            "permanent".into(),
            JobAction::Discard,
            NOW,
        );
        assert_eq!(job.message_ids, ["a", "b"]);
        let reprocessor = reprocessor(&settings());
        let queue = reprocessor.queue();
        queue.stock(DLQ, records);
        queue.stock(DLQ, [dead_letter("later", Some(ErrorClass::Permanent), 0)]);
        let summary = reprocessor
            .run(&job.plan(&settings(), false, None).unwrap(), None, |_| {})
            .await
            .unwrap();
        assert_eq!(summary.discarded, 2);
        assert_eq!(sorted(queue.deleted_from(DLQ)), ["rh-a", "rh-b"]);
        assert_eq!(sorted(released(queue)), ["rh-later", "rh-transient"]);
    }

    /// An aborted job stops at its next batch: what it sent is deleted, the rest is made visible
    /// again untouched, and run again it finishes the selection.
    #[tokio::test]
    async fn an_aborted_job_stops_between_batches_and_resumes() {
        let records: Vec<_> = (0..25)
            .map(|n| dead_letter(&format!("m-{n:02}"), Some(ErrorClass::Transient), 0))
            .collect();
        let job = Job::of_group(DLQ, &failure_groups(&records)[0], JobAction::Redrive, NOW);
        let abort = Arc::new(AtomicBool::new(false));
        let reprocessor = reprocessor(&settings()).with_abort(abort.clone());
        let queue = reprocessor.queue();
        queue.stock(DLQ, records);
        let plan = job.plan(&settings(), false, None).unwrap();
        let summary = reprocessor
            .run(&plan, None, |_| abort.store(true, Ordering::Relaxed))
            .await
            .unwrap();
        assert!(summary.stopped_early);
        assert_eq!(summary.reprocessed, 10, "one batch, then the abort");
        assert_eq!(queue.deleted_from(DLQ).len(), 10);

        abort.store(false, Ordering::Relaxed);
        let rest = reprocessor.run(&plan, None, |_| {}).await.unwrap();
        assert_eq!((rest.reprocessed, rest.selection_not_found), (15, Some(10)));
        assert_eq!(bodies_sent(queue).len(), 25, "each sent once");
        assert_eq!(queue.deleted_from(DLQ).len(), 25);
    }

    #[test]
    fn a_selection_has_one_hash_in_any_order_and_an_edited_job_is_refused() {
        let ids = |ids: &[&str]| ids.iter().map(|id| (*id).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            Job::selection_hash_of(&ids(&["a", "b"])),
            Job::selection_hash_of(&ids(&["b", "a"]))
        );
        assert_ne!(
            Job::selection_hash_of(&ids(&["a", "b"])),
            Job::selection_hash_of(&ids(&["a", "b", "c"]))
        );
        let records = [dead_letter("a", Some(ErrorClass::Transient), 0)];
        let mut job = Job::of_group(DLQ, &failure_groups(&records)[0], JobAction::Redrive, NOW);
        let text = serde_json::to_string(&job).unwrap();
        assert_eq!(serde_json::from_str::<Job>(&text).unwrap(), job);
        job.message_ids.push("swept-in".into());
        assert!(!job.is_intact());
    }
}

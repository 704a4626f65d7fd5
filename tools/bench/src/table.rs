//! The results table, a row per measure.
use crate::*;

/// The results table, a row per measure.
#[derive(Default)]
pub(crate) struct Table(pub(crate) String);

impl Table {
    pub(crate) fn row(&mut self, measure: &str, value: String, target: &str, met: bool) {
        let verdict = match (target, met) {
            ("-", _) => "",
            (_, true) => "yes",
            (_, false) => "**no**",
        };
        self.0
            .push_str(&format!("| {measure} | {value} | {target} | {verdict} |\n"));
    }

    pub(crate) fn throughput(
        &mut self,
        throughput: &Throughput,
        (naive_ms, raw_value_ms): (f64, f64),
    ) {
        let Throughput {
            ours_ms,
            scheduled_ms,
            python: (python_name, python_ms, python_ratio),
            node_modes,
            node: (node_name, _, node_ratio),
            ..
        } = throughput;
        let (ours_ms, scheduled_ms, python_ms, python_ratio, node_ratio) = (
            *ours_ms,
            *scheduled_ms,
            *python_ms,
            *python_ratio,
            *node_ratio,
        );
        let mut row = |measure: &str, value: String, target: &str, met: bool| {
            self.row(measure, value, target, met)
        };
        row(
            "redrive, 10,000 records, report-only (median)",
            format!("{ours_ms:.2} ms"),
            "-",
            true,
        );
        row(
            &format!("{python_name} (median)"),
            format!("{python_ms:.1} ms"),
            "-",
            true,
        );
        for (name, ms, _) in node_modes {
            row(
                &format!("{name} (median)"),
                format!("{ms:.1} ms"),
                "-",
                true,
            );
        }
        row(
        &format!("speed-up over Powertools Python (median of {SAMPLES} runs' ratios to ours around each)"),
        format!("{python_ratio:.1}x"),
        "-",
        true,
    );
        row(
        &format!(
            "speed-up over {node_name} (faster mode; median of {SAMPLES} runs' ratios to ours around each)"
        ),
        format!("{node_ratio:.1}x"),
        ">= 8x",
        node_ratio >= 8.0,
    );
        row(
            "redrive with the retry scheduler on (100 re-sends, in-memory SQS)",
            format!("{scheduled_ms:.2} ms"),
            "-",
            true,
        );
        row(
            "naive Rust loop: serde_json into aws_lambda_events (reference)",
            format!("{naive_ms:.2} ms ({:.1}x ours)", naive_ms / ours_ms),
            "-",
            true,
        );
        row(
            "lambda_runtime's parse into a RawValue, which the functions skip (reference)",
            format!("{raw_value_ms:.2} ms"),
            "-",
            true,
        );
    }

    pub(crate) fn io_bound(&mut self, io_measured: &[(&io_bound::Scenario, io_bound::Measured)]) {
        let mut row = |measure: &str, value: String, target: &str, met: bool| {
            self.row(measure, value, target, met)
        };
        for (scenario, measured) in io_measured {
            let floor = measured.floor_ms(scenario);
            let ours = measured.ours_ms;
            row(
            &format!(
                "I/O {}: redrive, REDRIVE_CONCURRENCY={} (median)",
                scenario.label, scenario.concurrency
            ),
            format!(
                "{ours:.1} ms = {:.2}x the floor {floor:.1} ms (waits + {:.2} ms CPU; a lone downstream call of {} ms takes {:.2} ms)",
                ours / floor,
                measured.cpu_ms,
                scenario.latency.as_millis(),
                measured.lone_call_ms
            ),
            // FIFO's target is against the peers alone.
            if scenario.fifo_groups.is_some() { "-" } else { "<= 1.1x floor" },
            ours <= 1.1 * floor,
        );
            for (name, peer_ms) in &measured.peers {
                let (target, met) = match scenario.fifo_groups {
                    Some(_) => (">= 8x", peer_ms / ours >= 8.0),
                    None if name.contains("TypeScript") => ("redrive no slower", ours <= *peer_ms),
                    None => ("-", true),
                };
                row(
                    &format!("I/O {}: {name} (median)", scenario.label),
                    format!("{peer_ms:.1} ms ({:.2}x redrive)", peer_ms / ours),
                    target,
                    met,
                );
            }
        }
    }

    pub(crate) fn kafka(&mut self, cpu: &kafka::Cpu, io: &kafka::Io, drain: &kafka::Drain) {
        let (python_name, python_ms, python_ratio) = &cpu.python;
        self.row(
            "Kafka, 10,000 records in 4 partitions: redrive, 1% to the retry lane (median)",
            format!("{:.2} ms", cpu.ours_ms),
            "-",
            true,
        );
        self.row(
            &format!("Kafka: {python_name}, 1% reported (median)"),
            format!("{python_ms:.1} ms"),
            "-",
            true,
        );
        self.row(
            "Kafka: speed-up over Powertools Python (median of runs' ratios to ours around each)",
            format!("{python_ratio:.1}x"),
            "-",
            true,
        );
        let floor = io.floor_ms();
        self.row(
            &format!("I/O {}: redrive, partitions side by side (median)", kafka::Io::label()),
            format!(
                "{:.1} ms = {:.2}x the floor {floor:.1} ms (a partition's waits in turn + {:.2} ms CPU)",
                io.ours_ms,
                io.ours_ms / floor,
                io.cpu_ms
            ),
            "-",
            true,
        );
        for (name, peer_ms) in &io.peers {
            let kept = if name.contains("Async") {
                "order not kept"
            } else {
                "in turn"
            };
            self.row(
                &format!("I/O {}: {name}, {kept} (median)", kafka::Io::label()),
                format!("{peer_ms:.1} ms ({:.2}x redrive)", peer_ms / io.ours_ms),
                "-",
                true,
            );
        }
        self.row(
            &kafka::Drain::label(),
            format!(
                "{:.0} with the retry lane ({} invocations, {} records to the lane) / {:.0} without, the partition given back and retried ({} invocations): {:.1}x",
                drain.with_lane,
                drain.invocations.0,
                drain.to_lane,
                drain.without_lane,
                drain.invocations.1,
                drain.with_lane / drain.without_lane
            ),
            "-",
            true,
        );
    }

    pub(crate) fn managed_instances(&mut self, managed: &Managed) {
        let measure = format!(
            "Managed Instances: invocations/s through one bootstrap, {MANAGED_INVOCATIONS} 10-record batches, payment calls of {MANAGED_LATENCY}"
        );
        self.row(
            &format!("{measure}, one at a time"),
            format!("{:.1}/s", managed.sequential),
            "-",
            true,
        );
        let ratio = managed.concurrent / managed.sequential;
        self.row(
            &format!("{measure}, AWS_LAMBDA_MAX_CONCURRENCY={MANAGED_CONCURRENCY}"),
            format!(
                "{:.1}/s = {ratio:.2}x one at a time ({} in flight at most)",
                managed.concurrent, managed.max_in_flight
            ),
            &format!(
                ">= {}x, {MANAGED_CONCURRENCY} in flight",
                MANAGED_CONCURRENCY / 2
            ),
            ratio >= (MANAGED_CONCURRENCY / 2) as f64
                && managed.max_in_flight == MANAGED_CONCURRENCY,
        );
    }

    pub(crate) fn managed_cpu(&mut self, cpu: &ManagedCpu) {
        let measure = format!(
            "Managed Instances: invocations/s through one bootstrap, {CPU_RECORDS}-record batches whose payment calls spend {CPU_WORK} of CPU each, AWS_LAMBDA_MAX_CONCURRENCY={MANAGED_CONCURRENCY}, median of {CPU_TURNS} alternated turns of {CPU_INVOCATIONS}"
        );
        self.row(
            &format!("{measure}, one thread (REDRIVE_WORKER_THREADS=1, the runtime before)"),
            format!("{:.1}/s", cpu.one_thread),
            "-",
            true,
        );
        let ratio = cpu.every_core / cpu.one_thread;
        let goal = if cpu.cores >= 2 { 1.7 } else { 0.95 };
        self.row(
            &format!("{measure}, a worker per core ({} here)", cpu.cores),
            format!("{:.1}/s = {ratio:.2}x one thread", cpu.every_core),
            &format!(">= {goal}x on {} cores", cpu.cores),
            ratio >= goal,
        );
    }

    pub(crate) fn large_messages(&mut self, large: &claim_check::Measured) {
        let measure = format!(
            "large messages: a batch of {} Extended Client pointers to orders of {} KiB in S3 (moto on loopback, the real S3 client) against {} ordinary orders, one processor with a payload bucket",
            claim_check::RECORDS,
            claim_check::BODY_BYTES / 1024,
            claim_check::RECORDS
        );
        self.row(
            &format!("{measure}: S3 calls per batch"),
            format!(
                "{:.1} for the pointers ({:.2} per body), {:.1} for the ordinary batch",
                large.calls_large,
                large.calls_large / claim_check::RECORDS as f64,
                large.calls_ordinary
            ),
            "one GET per body, none for ordinary records",
            large.calls_large == claim_check::RECORDS as f64 && large.calls_ordinary == 0.0,
        );
        self.row(
            &format!("{measure}: time per batch"),
            format!(
                "{:.2} ms against {:.3} ms: the reads add {:.2} ms ({:.2} ms per body, fetched {} at once)",
                large.large_ms,
                large.ordinary_ms,
                large.large_ms - large.ordinary_ms,
                (large.large_ms - large.ordinary_ms) / claim_check::RECORDS as f64,
                claim_check::RECORDS
            ),
            "-",
            true,
        );
    }

    pub(crate) fn console_groups(&mut self, grouping: Option<&console_groups::Measured>) {
        let measure = format!(
            "the DLQ console's failure groups: {} dead letters (6 kinds on 3 versions) in a DLQ on LocalStack read and grouped (`dlq groups`), beside a boto3 loop that only reads them",
            console_groups::MESSAGES
        );
        match grouping {
            None => self.row(
                &measure,
                "not measured: LocalStack is not installed (make localstack)".into(),
                "<= 5 s",
                false,
            ),
            Some(grouping) => self.row(
                &measure,
                format!(
                    "{:.2} s for {} groups against {:.2} s for boto3's read alone ({:.2}x)",
                    grouping.ours_s,
                    grouping.groups,
                    grouping.boto3_s,
                    grouping.ours_s / grouping.boto3_s
                ),
                "<= 5 s",
                grouping.ours_s <= 5.0,
            ),
        }
    }

    pub(crate) fn fifo_as_deployed(
        &mut self,
        (one, deployed): &(fifo_cycle::Drained, fifo_cycle::Drained),
    ) {
        let measure = |drained: &fifo_cycle::Drained| {
            format!(
                "FIFO as deployed: one group of {} messages through receive -> invoke -> delete cycles of {:?} fixed cost, payment calls of {:?}, batch size {}",
                fifo_cycle::MESSAGES,
                fifo_cycle::CYCLE,
                fifo_cycle::HANDLER,
                drained.batch_size
            )
        };
        let value = |drained: &fifo_cycle::Drained| {
            format!(
                "{:.1} messages/s; {:.2} invocations and {:.2} SQS requests per message; {} ledger calls",
                drained.messages_per_second,
                drained.invocations_per_message,
                drained.requests_per_message,
                drained.ledger_calls
            )
        };
        self.row(&measure(one), value(one), "-", true);
        let speedup = deployed.messages_per_second / one.messages_per_second;
        self.row(
            &format!("{} (the tfvars')", measure(deployed)),
            format!("{} = {speedup:.2}x batch size 1", value(deployed)),
            "<= 0.15 invocations/message, no ledger call",
            deployed.invocations_per_message <= 0.15 && deployed.ledger_calls == 0,
        );
    }

    pub(crate) fn function(
        &mut self,
        throughput: &Throughput,
        startup_ms: f64,
        function: &FunctionRun,
        zips: &[(String, u64)],
    ) {
        let requests_per_resend = throughput.requests_per_resend;
        let FunctionRun {
            ms: bootstrap_ms,
            peak_kib,
            growth_kib,
        } = *function;
        let mut row = |measure: &str, value: String, target: &str, met: bool| {
            self.row(measure, value, target, met)
        };
        row(
        &format!("the sqs-consumer bootstrap through a local runtime API, event served to answer received (median of {BOOTSTRAP_INVOCATIONS})"),
        format!("{bootstrap_ms:.2} ms"),
        "-",
        true,
    );
        row(
            "SQS requests per re-sent message",
            format!("{requests_per_resend:.2}"),
            "<= 0.1, no deletes",
            requests_per_resend <= 0.1,
        );
        row(
            "start-up: exec to first runtime API request (median of 21)",
            format!("{startup_ms:.2} ms"),
            "<= 10 ms",
            startup_ms <= 10.0,
        );
        row(
            "peak memory of the bootstrap on the 10,000-record event",
            format!("{:.1} MB", peak_kib as f64 / 1024.0),
            "<= 64 MB",
            peak_kib <= 64 * 1024,
        );
        row(
            &format!(
                "growth of that peak over {} more invocations",
                BOOTSTRAP_INVOCATIONS - 1
            ),
            format!("{:.1} MB", growth_kib as f64 / 1024.0),
            "-",
            true,
        );
        for (name, size) in zips {
            // The SQS consumer carries the DynamoDB client (the idempotency store and the FIFO
            // attempt ledger) and the S3 client (large messages): docs/performance.md.
            let (target, limit) = match name.as_str() {
                "sqs-consumer" => ("<= 3.5 MB (with the DynamoDB and S3 clients)", 3_500_000),
                _ => ("<= 2.5 MB", 2_500_000),
            };
            row(
                &format!("release arm64 zip: {name}"),
                format!("{:.2} MB", *size as f64 / 1e6),
                target,
                *size <= limit,
            );
        }
    }
}

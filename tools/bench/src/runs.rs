//! The release bootstrap as Lambda runs it: start-up, one event, Lambda Managed Instances.
use crate::*;

/// Start-up: exec of the release bootstrap until its first runtime API request, median of 21.
pub(crate) fn startup_ms(bootstrap: &str) -> Result<f64, String> {
    let mut startups = Vec::new();
    for _ in 0..21 {
        let api = RuntimeApi::bind().map_err(|e| e.to_string())?;
        let started = Instant::now();
        let mut child = api
            .spawn(bootstrap, &[], false)
            .map_err(|e| e.to_string())?;
        let elapsed = api
            .time_to_first_request(started)
            .map_err(|e| e.to_string())?;
        let _ = child.kill();
        let _ = child.wait();
        startups.push(elapsed.as_secs_f64() * 1000.0);
    }
    Ok(median(startups))
}

/// The real function on the 10,000-record event, through the runtime API as Lambda drives it.
pub(crate) struct FunctionRun {
    /// Median time from serving the event to receiving the answer.
    pub(crate) ms: f64,
    /// Peak memory after the first invocation, and its growth over the others.
    pub(crate) peak_kib: u64,
    pub(crate) growth_kib: u64,
}

/// Runs the function on the event (report-only: no SQS endpoint) `BOOTSTRAP_INVOCATIONS` times;
/// a warm container must not grow.
pub(crate) fn function_on_event(bootstrap: &str, event: &[u8]) -> Result<FunctionRun, String> {
    let api = RuntimeApi::bind().map_err(|e| e.to_string())?;
    let mut child = api
        .spawn(bootstrap, &[], false)
        .map_err(|e| e.to_string())?;
    let pid = child.id();
    let mut peaks_kib = Vec::new();
    let served = api
        .serve(invocations_of(event, BOOTSTRAP_INVOCATIONS), |_| {
            peaks_kib.push(
                peak_rss_kib(pid)
                    .ok_or_else(|| std::io::Error::other(format!("cannot read VmHWM of {pid}")))?,
            );
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    let ms = median(
        served
            .answers
            .iter()
            .map(|answer| answer.took.as_secs_f64() * 1000.0)
            .collect(),
    );
    let peak_kib = peaks_kib[0];
    let growth_kib = peaks_kib[BOOTSTRAP_INVOCATIONS - 1] - peak_kib;
    let response = served.answers[BOOTSTRAP_INVOCATIONS - 1].body.clone();
    let _ = child.kill();
    let _ = child.wait();
    // The function's own orders handler accepts every generated order.
    let answered: serde_json::Value =
        serde_json::from_slice(&response).map_err(|e| format!("function answer: {e}"))?;
    if answered != serde_json::json!({ "batchItemFailures": [] }) {
        return Err(format!(
            "the bootstrap did not handle the event: {answered}"
        ));
    }
    Ok(FunctionRun {
        ms,
        peak_kib,
        growth_kib,
    })
}

/// Invocations per second through one bootstrap, one at a time and with Lambda Managed Instances'
/// concurrency, in the same run.
pub(crate) struct Managed {
    pub(crate) sequential: f64,
    pub(crate) concurrent: f64,
    /// The most invocations the runtime API saw in flight at once in the concurrent mode.
    pub(crate) max_in_flight: usize,
}

/// `AWS_LAMBDA_MAX_CONCURRENCY` of the concurrent mode.
pub(crate) const MANAGED_CONCURRENCY: usize = 8;
/// Invocations per mode: 10-record batches whose payment calls each wait `MANAGED_LATENCY`.
pub(crate) const MANAGED_INVOCATIONS: usize = 160;
pub(crate) const MANAGED_LATENCY: &str = "20ms";

/// The FIFO consumer's cycle at batch size 1 and at the tfvars' batch size, in one run.
pub(crate) fn fifo_as_deployed(
    runtime: &tokio::runtime::Runtime,
) -> Result<(fifo_cycle::Drained, fifo_cycle::Drained), String> {
    let topology =
        redrive_local::topology::Topology::load(&redrive_local::topology::default_path())
            .map_err(|e| e.to_string())?;
    let deployed = topology
        .consumers
        .values()
        .find(|consumer| consumer.fifo)
        .ok_or("the tfvars have no FIFO consumer")?
        .batch_size;
    eprintln!(
        "FIFO: one group of {} messages, batch 1 and {deployed}",
        fifo_cycle::MESSAGES
    );
    Ok((
        runtime.block_on(fifo_cycle::drain(1))?,
        runtime.block_on(fifo_cycle::drain(deployed))?,
    ))
}

pub(crate) fn managed_instances(bootstrap: &str) -> Result<Managed, String> {
    let event = generate_event(10, None);
    let concurrency = MANAGED_CONCURRENCY.to_string();
    let latency = ("PAYMENTS_LATENCY", MANAGED_LATENCY);
    let all_done = |body: &[u8]| body == br#"{"batchItemFailures":[]}"#;
    let (sequential, _) = served_rate(
        bootstrap,
        event.as_bytes(),
        MANAGED_INVOCATIONS,
        &[latency],
        all_done,
    )?;
    let (concurrent, max_in_flight) = served_rate(
        bootstrap,
        event.as_bytes(),
        MANAGED_INVOCATIONS,
        &[
            latency,
            ("AWS_LAMBDA_MAX_CONCURRENCY", concurrency.as_str()),
        ],
        all_done,
    )?;
    Ok(Managed {
        sequential,
        concurrent,
        max_in_flight,
    })
}

/// CPU-bound batches on Managed Instances, `MANAGED_CONCURRENCY` in flight: on one thread (the
/// runtime before issue 43) and on `redrive::lambda::runtime`'s default, a worker per core of this
/// machine; invocations per second of each, taken in turns, and the cores.
pub(crate) struct ManagedCpu {
    pub(crate) one_thread: f64,
    pub(crate) every_core: f64,
    pub(crate) cores: usize,
}

/// Each CPU-bound batch: records, each of whose payment calls spends `CPU_WORK` busy; batches
/// per turn.
pub(crate) const CPU_RECORDS: usize = 10;
pub(crate) const CPU_WORK: &str = "4ms";
pub(crate) const CPU_INVOCATIONS: usize = 48;
/// Turns of each mode, alternated; the medians are compared.
pub(crate) const CPU_TURNS: usize = 5;

pub(crate) fn managed_cpu(bootstrap: &str) -> Result<ManagedCpu, String> {
    let event = generate_event(CPU_RECORDS, None);
    let concurrency = MANAGED_CONCURRENCY.to_string();
    let all_done = |body: &[u8]| body == br#"{"batchItemFailures":[]}"#;
    let turn = |threads: Option<&str>| -> Result<f64, String> {
        let env: Vec<(&str, &str)> = [
            ("AWS_LAMBDA_MAX_CONCURRENCY", concurrency.as_str()),
            ("PAYMENTS_WORK", CPU_WORK),
        ]
        .into_iter()
        .chain(threads.map(|threads| ("REDRIVE_WORKER_THREADS", threads)))
        .collect();
        served_rate(bootstrap, event.as_bytes(), CPU_INVOCATIONS, &env, all_done)
            .map(|(rate, _)| rate)
    };
    let (mut one, mut every) = (Vec::new(), Vec::new());
    for _ in 0..CPU_TURNS {
        one.push(turn(Some("1"))?);
        every.push(turn(None)?);
    }
    Ok(ManagedCpu {
        one_thread: median(one),
        every_core: median(every),
        cores: std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
    })
}

/// Invocations per second of `invocations` copies of `event` through one bootstrap run with `env`,
/// and the most the runtime API saw in flight at once; `answered` checks every answer's body.
pub(crate) fn served_rate(
    bootstrap: &str,
    event: &[u8],
    invocations: usize,
    env: &[(&str, &str)],
    answered: impl Fn(&[u8]) -> bool,
) -> Result<(f64, usize), String> {
    let api = RuntimeApi::bind().map_err(|e| e.to_string())?;
    let mut child = api
        .spawn(bootstrap, env, false)
        .map_err(|e| e.to_string())?;
    let served = api.serve(invocations_of(event, invocations), |answer| {
        if answered(&answer.body) {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "{} was not handled: {}",
                answer.request_id,
                String::from_utf8_lossy(&answer.body)
            )))
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    let served = served.map_err(|e| e.to_string())?;
    Ok((
        invocations as f64 / served.elapsed.as_secs_f64(),
        served.max_in_flight,
    ))
}

/// `count` invocations of `event`, each with a request id of its own.
pub(crate) fn invocations_of(event: &[u8], count: usize) -> Vec<Invocation> {
    (1..=count)
        .map(|n| Invocation {
            request_id: format!("bench-{n}"),
            trace_id: format!("Root=1-00000000-{n:024x}"),
            event: event.to_vec(),
        })
        .collect()
}

//! A Lambda runtime API on loopback, enough to start a function, hand it invocations and read its
//! answers: the bench and the Managed Instances test run the real `bootstrap` against it.
//!
//! Every `GET /next` takes the next queued invocation; when none is left the request is held, as
//! Lambda holds it. A function that polls with several connections at once (`lambda_runtime`'s
//! concurrent mode) so gets several invocations in flight, and [`Served::max_in_flight`] counts
//! them.
use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the function may stay silent before the API gives up on it.
const SILENCE: Duration = Duration::from_secs(60);

/// The runtime API, bound to a free loopback port.
pub struct RuntimeApi {
    listener: TcpListener,
}

/// One invocation to hand out.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// `Lambda-Runtime-Aws-Request-Id`.
    pub request_id: String,
    /// `Lambda-Runtime-Trace-Id`.
    pub trace_id: String,
    /// The event, as the payload.
    pub event: Vec<u8>,
}

/// A function's answer to one invocation.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The invocation's request id.
    pub request_id: String,
    /// The response (or error) payload.
    pub body: Vec<u8>,
    /// Whether it came to `/error` rather than `/response`.
    pub error: bool,
    /// From handing the invocation out to receiving the answer.
    pub took: Duration,
}

/// What [`RuntimeApi::serve`] saw.
#[derive(Debug)]
pub struct Served {
    /// Every answer, in arrival order.
    pub answers: Vec<Answer>,
    /// The most invocations handed out and not yet answered at one time.
    pub max_in_flight: usize,
    /// From the first invocation handed out to the last answer.
    pub elapsed: Duration,
}

/// One HTTP request as the runtime client sends it.
struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

impl RuntimeApi {
    /// Binds to a free port on 127.0.0.1.
    pub fn bind() -> std::io::Result<Self> {
        Ok(Self {
            listener: TcpListener::bind("127.0.0.1:0")?,
        })
    }

    /// Starts `bootstrap` pointed at this API, with `env` on top of the variables Lambda sets; its
    /// stdout (the EMF lines and JSON logs) is piped when `capture` is set, else dropped, as is
    /// its stderr.
    pub fn spawn(
        &self,
        bootstrap: &str,
        env: &[(&str, &str)],
        capture: bool,
    ) -> std::io::Result<Child> {
        let address = self.listener.local_addr()?;
        Command::new(bootstrap)
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
            .env("AWS_LAMBDA_FUNCTION_NAME", "bench")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
            .envs(env.iter().copied())
            .stdout(if capture {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::null())
            .spawn()
    }

    /// Time from `started` until the function's first request reaches the API.
    pub fn time_to_first_request(&self, started: Instant) -> std::io::Result<Duration> {
        let (mut stream, _) = self.listener.accept()?;
        let mut first = [0u8; 1];
        stream.read_exact(&mut first)?;
        Ok(started.elapsed())
    }

    /// Hands `invocations` out, one per `GET /next` in the order they come, until every one is
    /// answered; `on_answer` sees each answer as it arrives (to read the function's memory, say).
    /// The function's HTTP client may open a new connection at any time, so every connection is
    /// read (a thread each) and its requests are answered here in arrival order.
    pub fn serve(
        &self,
        invocations: impl IntoIterator<Item = Invocation>,
        mut on_answer: impl FnMut(&Answer) -> std::io::Result<()>,
    ) -> std::io::Result<Served> {
        let mut queued: VecDeque<Invocation> = invocations.into_iter().collect();
        let total = queued.len();
        let requests = self.requests()?;
        let mut handed_out: HashMap<String, Instant> = HashMap::new();
        let mut held: Vec<TcpStream> = Vec::new();
        let mut served = Served {
            answers: Vec::with_capacity(total),
            max_in_flight: 0,
            elapsed: Duration::ZERO,
        };
        let mut first_handed_out = None;
        while served.answers.len() < total {
            let (request, mut writer) = requests.recv_timeout(SILENCE).map_err(|_| {
                std::io::Error::other(format!("no request from the function for {SILENCE:?}"))
            })?;
            match (request.method.as_str(), request.path.as_str()) {
                ("GET", path) if path.ends_with("/invocation/next") => {
                    let Some(invocation) = queued.pop_front() else {
                        // Held open, as Lambda holds a poll when nothing is waiting.
                        held.push(writer);
                        continue;
                    };
                    let deadline = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis()
                        + 60_000;
                    let headers = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nLambda-Runtime-Aws-Request-Id: {}\r\n\
                         Lambda-Runtime-Deadline-Ms: {deadline}\r\nLambda-Runtime-Invoked-Function-Arn: arn:aws:lambda:us-east-1:123456789012:function:bench\r\n\
                         Lambda-Runtime-Trace-Id: {}\r\nContent-Length: {}\r\n\r\n",
                        invocation.request_id,
                        invocation.trace_id,
                        invocation.event.len()
                    );
                    let now = Instant::now();
                    first_handed_out.get_or_insert(now);
                    handed_out.insert(invocation.request_id, now);
                    served.max_in_flight = served.max_in_flight.max(handed_out.len());
                    writer.write_all(headers.as_bytes())?;
                    writer.write_all(&invocation.event)?;
                }
                ("POST", path) if path.ends_with("/response") || path.ends_with("/error") => {
                    let request_id = path.rsplit('/').nth(1).unwrap_or_default().to_owned();
                    let Some(handed) = handed_out.remove(&request_id) else {
                        return Err(std::io::Error::other(format!(
                            "an answer for {request_id}, which is not in flight"
                        )));
                    };
                    let answer = Answer {
                        request_id,
                        body: request.body,
                        error: path.ends_with("/error"),
                        took: handed.elapsed(),
                    };
                    on_answer(&answer)?;
                    served.answers.push(answer);
                    writer.write_all(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")?;
                }
                (method, path) => {
                    return Err(std::io::Error::other(format!(
                        "unexpected request {method} {path}"
                    )))
                }
            }
        }
        served.elapsed = first_handed_out.map_or(Duration::ZERO, |first| first.elapsed());
        Ok(served)
    }

    /// Every request on every connection, with a handle to answer it on its connection.
    fn requests(&self) -> std::io::Result<Receiver<(Request, TcpStream)>> {
        let listener = self.listener.try_clone()?;
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let sender = sender.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone()?);
                    // Until the function closes the connection (an empty request line).
                    loop {
                        let request = read_request(&mut reader)?;
                        if request.method.is_empty() {
                            return Ok::<_, std::io::Error>(());
                        }
                        if sender.send((request, stream.try_clone()?)).is_err() {
                            return Ok(());
                        }
                    }
                });
            }
        });
        Ok(receiver)
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> std::io::Result<Request> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or_default().to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    );
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header)?;
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(Request { method, path, body })
}

/// Peak resident memory of a running process, in KiB (`VmHWM`).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

//! redrive's local stack: the topology from the Terraform tfvars, provisioning on an SQS emulator
//! (moto server), and a poller that does what Lambda's SQS event source mapping does.
pub mod conformance;
pub mod incident;
mod intake_sim;
pub mod intake_soak;
pub mod kafka_poller;
pub mod kafka_soak;
pub mod mapping;
pub mod memory;
pub mod observe;
pub mod poller;
pub mod provision;
pub mod soak;
pub mod stream_poller;
pub mod stream_soak;
pub mod tenant_soak;
pub mod topology;

use aws_sdk_sqs::Client;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("SQS call failed: {0}")]
    Sqs(String),
    #[error("{0}")]
    Emulator(String),
}

impl Error {
    pub fn sdk<E: std::error::Error + Send + Sync + 'static>(error: E) -> Self {
        Self::Sqs(aws_sdk_sqs::error::DisplayErrorContext(error).to_string())
    }
}

/// A soak that runs one scenario several ways on one seed (`tenant_soak`, `intake_soak`): its
/// table, and each promise of the design the runs broke.
pub trait Comparison: std::fmt::Display {
    /// Each promise the runs broke, in a line; none when they hold.
    fn broken(&self) -> Vec<String>;
}

/// An SQS client for the endpoint in `AWS_ENDPOINT_URL` (the emulator) or AWS.
pub fn sqs_client() -> Client {
    Client::new(&redrive::aws::sdk_config_from_env())
}

/// An SQS client for the local server at `endpoint` (LocalStack beside moto), with the dummy
/// credentials the local stack takes.
pub fn sqs_client_at(endpoint: &str) -> Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .http_client(redrive::aws::https_client())
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "local",
        ))
        .build();
    Client::from_conf(config)
}

/// LocalStack's endpoint (`tools/with-local-aws` starts it when `make localstack` installed it).
/// CI always has it; elsewhere a machine without Python 3.13 skips what needs it, saying so.
pub fn localstack_endpoint() -> Option<String> {
    match std::env::var("LOCALSTACK_ENDPOINT_URL") {
        Ok(endpoint) => Some(endpoint),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("CI runs the LocalStack leg: run with `make test` (make localstack installs it)")
        }
        Err(_) => {
            eprintln!("LocalStack is not installed (needs Python 3.13): its run is skipped");
            None
        }
    }
}

/// Waits until a process started on the side (`what`) listens on loopback `port`, for at most
/// `limit`; panics, naming it, past that (for tests).
pub fn wait_until_listening(port: u16, limit: std::time::Duration, what: &str) {
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < limit,
            "{what} did not listen on port {port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A loopback port free now, for a process started on the side to listen on (for tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

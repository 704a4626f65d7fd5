//! The Lambda side of the EventBridge redrive: the [`InvokePort`] on the AWS SDK.
use std::time::Duration;

use aws_sdk_lambda::config::retry::RetryConfig;
use aws_sdk_lambda::config::timeout::TimeoutConfig;
use aws_sdk_lambda::operation::invoke::InvokeError;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use aws_sdk_lambda::Client;
use base64::Engine as _;
use redrive::aws::sdk_config_from_env;
use redrive::eventbridge::{InvokePort, Reply};
use redrive::PortError;
use serde::Deserialize;
use tokio::sync::OnceCell;

/// Synchronous invokes through the SDK; the client is created on first use.
#[derive(Default)]
pub struct LambdaInvoker {
    client: OnceCell<Client>,
}

/// How long an invoke may wait for its answer: Lambda's longest function timeout (15 min), its
/// Init (up to 10 s) and a margin. The SDK sets no read timeout; a shorter one would give up on
/// a target that is still running and send it the event again.
pub const INVOKE_READ_TIMEOUT: Duration = Duration::from_secs(15 * 60 + 30);

impl LambdaInvoker {
    pub fn lazy() -> Self {
        Self::default()
    }

    /// The client's configuration: no SDK retry (an invoke whose answer was lost, a dropped
    /// connection or a 5xx, may have run the function, and a retry would run it again; a
    /// throttle is the redrive's to wait out), and a read timeout that covers any target's run.
    pub fn client_config() -> aws_sdk_lambda::Config {
        aws_sdk_lambda::config::Builder::from(&sdk_config_from_env())
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(3))
                    .read_timeout(INVOKE_READ_TIMEOUT)
                    .build(),
            )
            .build()
    }
}

/// The error payload of a function that failed (the runtime API's `Diagnostic`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct FunctionError {
    error_type: Option<String>,
    error_message: Option<String>,
}

impl InvokePort for LambdaInvoker {
    async fn invoke(
        &self,
        function_arn: &str,
        payload: &str,
        client_context: &str,
        trace_header: Option<&str>,
    ) -> Result<Reply, PortError> {
        const OPERATION: &str = "Invoke";
        let client = self
            .client
            .get_or_init(|| async { Client::from_conf(Self::client_config()) })
            .await;
        let answer = client
            .invoke()
            .function_name(function_arn)
            .invocation_type(InvocationType::RequestResponse)
            .client_context(base64::engine::general_purpose::STANDARD.encode(client_context))
            .payload(Blob::new(payload.as_bytes()))
            .customize()
            // Set before the SDK's recursion-detection interceptor, which then leaves it: the
            // header is the event's trace, not the redrive invocation's.
            .mutate_request({
                let trace_header = trace_header.map(str::to_owned);
                move |request| {
                    if let Some(header) = &trace_header {
                        let _ = request
                            .headers_mut()
                            .try_insert("x-amzn-trace-id", header.clone());
                    }
                }
            })
            .send()
            .await;
        let output = match answer {
            Ok(output) => output,
            // A 429: Lambda did not run the function (Invoke API reference, Errors).
            Err(error) => {
                if let Some(InvokeError::TooManyRequestsException(throttled)) =
                    error.as_service_error()
                {
                    let retry_after = throttled
                        .retry_after_seconds()
                        .and_then(|seconds| seconds.parse().ok())
                        .map(Duration::from_secs);
                    return Ok(Reply::Throttled { retry_after });
                }
                return Err(PortError::new(
                    OPERATION,
                    aws_sdk_lambda::error::DisplayErrorContext(error),
                ));
            }
        };
        if output.function_error.is_none() {
            return Ok(Reply::Succeeded);
        }
        let error: FunctionError = output
            .payload
            .as_ref()
            .and_then(|payload| serde_json::from_slice(payload.as_ref()).ok())
            .unwrap_or_default();
        Ok(Reply::Failed {
            error_type: error.error_type,
            error_message: error.error_message,
        })
    }
}

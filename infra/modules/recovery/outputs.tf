output "reprocessor_function_names" {
  description = "The DLQ reprocessor of each DLQ, by the DLQ's key: invoke it by hand with a command for that DLQ (docs/redrive.md); it may only send to that DLQ's origin."
  value       = { for key, reprocessor in module.reprocessor : key => reprocessor.function_name }
}

output "event_redrive_function_name" {
  description = "Name of the EventBridge redrive (null without event sources)."
  value       = one(module.event_redrive[*].function_name)
}

output "archive_queue_url" {
  description = "Queue with the copies of discarded messages."
  value       = aws_sqs_queue.archive.url
}

output "parked_queue_url" {
  description = "Queue with the EventBridge events the redrive parked (null without event sources)."
  value       = one(aws_sqs_queue.parked_dlq[*].url)
}

output "console_audit_archive_arn" {
  description = "The EventBridge archive of the DLQ console's audit events (null unless console_audit.archive)."
  value       = one(aws_cloudwatch_event_archive.console_audit[*].arn)
}

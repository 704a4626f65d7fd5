output "reprocessor_function_name" {
  description = "Name of the DLQ reprocessor: invoke it by hand with a command (docs/redrive.md)."
  value       = module.reprocessor.function_name
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

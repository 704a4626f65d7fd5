output "reprocessor_function_name" {
  description = "The DLQ reprocessor: invoke it with a command for a manual redrive (docs/redrive.md)."
  value       = module.recovery.reprocessor_function_name
}

output "archive_queue_url" {
  description = "Where discarded dead letters are copied before they are deleted."
  value       = module.recovery.archive_queue_url
}

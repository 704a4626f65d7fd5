output "reprocessor_function_names" {
  description = "The DLQ reprocessor of each queue, by key: invoke it with a command for a manual redrive of that queue's DLQ (docs/redrive.md)."
  value       = module.recovery.reprocessor_function_names
}

output "archive_queue_url" {
  description = "Where discarded dead letters are copied before they are deleted."
  value       = module.recovery.archive_queue_url
}

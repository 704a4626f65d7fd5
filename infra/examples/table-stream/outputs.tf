output "dlq_url" {
  description = "Where the changes the function refused (and Lambda's on-failure records) are."
  value       = module.orders_changes.dlq_url
}

output "function_name" {
  description = "The consumer function."
  value       = module.orders_changes.function_name
}

output "queue_url" {
  description = "Where producers send reservations."
  value       = module.reserve.queue_url
}

output "dlq_url" {
  description = "The consumer's DLQ (for `dlq stats`, `dlq redrive`)."
  value       = module.reserve.dlq_url
}

output "role_name" {
  description = "The function's role, for policies the team attaches itself."
  value       = module.reserve.role_name
}

output "function_arn" {
  description = "The consumer function."
  value       = module.reserve.function_arn
}

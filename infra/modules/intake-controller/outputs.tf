output "requests_queue_url" {
  description = "The queue consumers send their pause requests to (REDRIVE_PAUSE_QUEUE_URL)."
  value       = aws_sqs_queue.requests.url
}

output "requests_queue_arn" {
  description = "Its ARN, for the consumers' sqs:SendMessage."
  value       = aws_sqs_queue.requests.arn
}

output "function_name" {
  description = "The controller function."
  value       = module.controller.function_name
}

output "schedule_group_name" {
  description = "The group of the mappings' switches (one-time schedules named after each mapping's UUID)."
  value       = aws_scheduler_schedule_group.switches.name
}

output "topic_arn" {
  description = "ARN of the alarm topic."
  value       = aws_sns_topic.alarms.arn
}

output "dashboard_name" {
  description = "Name of the CloudWatch dashboard."
  value       = aws_cloudwatch_dashboard.redrive.dashboard_name
}

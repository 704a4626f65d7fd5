output "alarm_name" {
  description = "Name of the DLQ depth alarm."
  value       = aws_cloudwatch_metric_alarm.dlq_depth.alarm_name
}

output "age_alarm_name" {
  description = "Name of the DLQ's oldest-message-age alarm."
  value       = aws_cloudwatch_metric_alarm.oldest_message_age.alarm_name
}

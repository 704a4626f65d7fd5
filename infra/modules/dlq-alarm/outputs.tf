output "alarm_name" {
  description = "Name of the DLQ depth alarm."
  value       = aws_cloudwatch_metric_alarm.dlq_depth.alarm_name
}

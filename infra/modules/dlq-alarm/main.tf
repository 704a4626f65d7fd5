# The two alarms every DLQ gets: any visible message is an incident (zero threshold, one minute,
# missing data is fine), and a message left too long is about to expire unseen (retention drops
# it). A DLQ a function drains at once gets a third, on arrivals. Notifications on ALARM and on OK.

resource "aws_cloudwatch_metric_alarm" "dlq_depth" {
  alarm_name          = "${var.name}-not-empty"
  alarm_description   = "Messages in ${var.queue_name}. ${var.runbook}"
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateNumberOfMessagesVisible"
  dimensions          = { QueueName = var.queue_name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}

resource "aws_cloudwatch_metric_alarm" "oldest_message_age" {
  alarm_name          = "${var.name}-oldest-message-age"
  alarm_description   = "A message has waited in ${var.queue_name} for over ${var.oldest_message_age_seconds} s: redrive or review it before the queue's retention drops it. Runbook: docs/runbook.md, 'DLQ message ageing'."
  namespace           = "AWS/SQS"
  metric_name         = "ApproximateAgeOfOldestMessage"
  dimensions          = { QueueName = var.queue_name }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  threshold           = var.oldest_message_age_seconds
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}

# Any message sent to a DLQ that a function empties within seconds: the depth alarm, sampled each
# minute, would rarely see it.
resource "aws_cloudwatch_metric_alarm" "arrivals" {
  count = var.drained ? 1 : 0

  alarm_name          = "${var.name}-arrivals"
  alarm_description   = "Messages arrived in ${var.queue_name} (a function drains it, so its depth rarely shows them). ${var.runbook}"
  namespace           = "AWS/SQS"
  metric_name         = "NumberOfMessagesSent"
  dimensions          = { QueueName = var.queue_name }
  statistic           = "Sum"
  period              = 60
  evaluation_periods  = 1
  threshold           = 0
  comparison_operator = "GreaterThanThreshold"
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]
  tags                = var.tags
}

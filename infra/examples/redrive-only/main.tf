# Recovery for queues that already exist: the scheduled DLQ reprocessor, which sends transient
# failures home under the redrive policy, and the two alarms every DLQ gets. Nothing here touches
# the queues themselves or their consumers.

module "recovery" {
  source = "../../modules/recovery"

  name            = "billing"
  reprocessor_zip = startswith(var.reprocessor_zip, "/") ? var.reprocessor_zip : "${path.root}/${var.reprocessor_zip}"
  dlqs = { for key, queue in var.queues : key => {
    url        = queue.dlq_url
    arn        = queue.dlq_arn
    origin_arn = queue.source_arn
  } }
  schedule_expression = "rate(30 minutes)"
  policy = {
    max_reprocess          = 3
    eligible_after_seconds = 600
    discard_kinds          = ["malformed_body"]
    max_messages           = 1000
    rate_per_second        = 20
  }
  alarm_topic_arn = var.alarm_topic_arn
}

module "dlq_alarm" {
  source   = "../../modules/dlq-alarm"
  for_each = var.queues

  name            = "billing-${each.key}-dlq"
  queue_name      = each.value.dlq_name
  alarm_topic_arn = var.alarm_topic_arn
}

# Every DLQ that carries the team's tag, in one CloudWatch Metrics Insights alarm: a DLQ added later
# is watched from its first message, before anyone adds it to var.queues. Tag queries need the
# account's resource tags on telemetry turned on (CloudWatch settings); a queue is matched only
# while it carries the tag.
resource "aws_cloudwatch_metric_alarm" "tagged_dlqs" {
  count = var.dlq_tag == null ? 0 : 1

  alarm_name          = "billing-tagged-dlqs-not-empty"
  alarm_description   = "A queue tagged ${var.dlq_tag.key}=${var.dlq_tag.value} holds messages. Runbook: docs/runbook.md, 'DLQ not empty'."
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  evaluation_periods  = 1
  treat_missing_data  = "notBreaching"
  alarm_actions       = [var.alarm_topic_arn]
  ok_actions          = [var.alarm_topic_arn]

  metric_query {
    id          = "tagged"
    expression  = "SELECT MAX(ApproximateNumberOfMessagesVisible) FROM \"AWS/SQS\" WHERE tag.${var.dlq_tag.key} = '${var.dlq_tag.value}'"
    period      = 60
    return_data = true
  }
}

# Called "redrive" before 0.2: its resources keep their state under the new name.
moved {
  from = module.redrive
  to   = module.recovery
}
